//! The arbiter's wire: how a process gets a device's grant page from the
//! monitor and says what is its own.
//!
//! A process connects to `<dir>/.arbiter.sock` once per device it uses and
//! keeps the connection for its life. The connection is its own: no other
//! process can write on it, and the monitor learns the peer's pid and uid
//! from the kernel (`SO_PEERCRED`), never from the process.
//!
//! 1. The process sends a [`Hello`] ([`HELLO_BYTES`]): its tenant, the
//!    index and generation of its ledger slot, the device's UUID, and the
//!    memory cap its environment asked for there (which the monitor pins
//!    for a tenant its configuration does not name).
//!    With the hello comes (`SCM_RIGHTS`) the descriptor of the tenant's
//!    ledger through which the process holds its slot's lock.
//! 2. The monitor checks that the device is one NVML lists, and that the
//!    descriptor is that tenant's ledger and holds that slot's lock (the
//!    kernel's word, asked in two `F_OFD_GETLK`, whatever else the process
//!    holds); it answers [`ANSWER_BYTES`], with the page's descriptor
//!    (`SCM_RIGHTS`) and the tenant's member index when it accepts, or a
//!    [`Refusal`] when it does not. When the tenant is a member of a team
//!    with a memory quota on the device, the team's page
//!    ([`crate::team_usage`]) comes as a second descriptor, and the
//!    answer's second byte says so ([`WITH_TEAM_PAGE`]).
//! 3. Then [`MESSAGE_BYTES`] messages, each an [`Op`] and a sequence number
//!    (the process's own count, so that the monitor can drop one that was
//!    overtaken): the process sends `Want`, `Busy`, `Idle` and `Done`, the
//!    monitor sends `Revoke`.
//!
//! The socket is the same in both layouts: in `tenant-dirs` each tenant's
//! directory has its own, and the directory names the tenant.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::grants::Grants;
use crate::team_usage::TeamUsage;

/// How long a process waits for the monitor's answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_millis(1000);
/// `b"GSH1"`.
const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"GSH1");
/// The hello's size.
pub const HELLO_BYTES: usize = 104;
/// The hello's version: 2 added the asked cap; 3 sends the process's
/// ledger descriptor with it.
const HELLO_VERSION: u32 = 3;
/// The answer's size.
pub const ANSWER_BYTES: usize = 8;
/// Every later message's size.
pub const MESSAGE_BYTES: usize = 8;
/// The longest tenant name (`[A-Za-z0-9._-]{1,63}`).
const TENANT_BYTES: usize = 64;

/// `<dir>/.arbiter.sock`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(".arbiter.sock")
}

/// The longest path a Unix socket address holds, less its NUL.
const SUN_PATH_MAX: usize = 107;

/// Runs `f` with a path to `<dir>/.arbiter.sock` short enough for a socket
/// address: the path itself, or, in a directory whose path is too long,
/// the same file through `/proc/self/fd/<N>` of a descriptor of `dir`.
pub fn with_socket_path<T>(dir: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    with_short_socket_path(dir, ".arbiter.sock", f)
}

/// Runs `f` with a path to socket `<dir>/<name>` short enough for a
/// socket address (see [`with_socket_path`]).
pub fn with_short_socket_path<T>(dir: &Path, name: &str, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    let path = dir.join(name);
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(&path);
    }
    let dir_fd = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}/{name}", dir_fd.as_raw_fd()));
    let result = f(&short);
    drop(dir_fd);
    result
}

/// Connects to `<dir>/.arbiter.sock` without ever waiting for the monitor
/// to accept: a listener whose backlog is full (a monitor that is stuck, or
/// flooded) answers at once with an error, and the caller asks again later.
fn connect(dir: &Path) -> io::Result<UnixStream> {
    with_socket_path(dir, |path| {
        use std::os::unix::ffi::OsStrExt;
        let bytes = path.as_os_str().as_bytes();
        // SAFETY: an all-zero sockaddr_un is valid.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        if bytes.len() >= address.sun_path.len() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        for (to, from) in address.sun_path.iter_mut().zip(bytes) {
            *to = *from as libc::c_char;
        }
        // SAFETY: a new socket; its descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just made and own.
        let stream = unsafe { UnixStream::from_raw_fd(raw) };
        let length = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
        // SAFETY: connect with a valid address of `length` bytes.
        let r = unsafe { libc::connect(raw, (&address as *const libc::sockaddr_un).cast(), length as libc::socklen_t) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        stream.set_nonblocking(false)?;
        Ok(stream)
    })
}

/// What a process says when it connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub tenant: String,
    pub slot: u32,
    pub generation: u32,
    pub uuid: [u8; 16],
    /// The memory cap the process's environment asked for on the device,
    /// bytes; [`UNLIMITED`](crate::UNLIMITED) when none.
    pub asked_cap_bytes: u64,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = [0u8; HELLO_BYTES];
        out[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        out[8..12].copy_from_slice(&self.slot.to_le_bytes());
        out[12..16].copy_from_slice(&self.generation.to_le_bytes());
        out[16..32].copy_from_slice(&self.uuid);
        let name = self.tenant.as_bytes();
        let n = name.len().min(TENANT_BYTES - 1);
        out[32..32 + n].copy_from_slice(&name[..n]);
        out[96..104].copy_from_slice(&self.asked_cap_bytes.to_le_bytes());
        out
    }

    /// Reads a hello; `None` for anything malformed (wrong magic or
    /// version, a tenant name that is not `[A-Za-z0-9._-]{1,63}`).
    pub fn decode(bytes: &[u8; HELLO_BYTES]) -> Option<Hello> {
        let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        if word(0) != HELLO_MAGIC || word(4) != HELLO_VERSION {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[16..32]);
        let name = &bytes[32..32 + TENANT_BYTES];
        let len = name.iter().position(|&b| b == 0)?;
        let tenant = std::str::from_utf8(&name[..len]).ok()?;
        let valid = !tenant.is_empty() && tenant.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        let mut asked = [0u8; 8];
        asked.copy_from_slice(&bytes[96..104]);
        let asked_cap_bytes = u64::from_le_bytes(asked);
        valid.then(|| Hello { tenant: tenant.to_string(), slot: word(8), generation: word(12), uuid, asked_cap_bytes })
    }
}

/// Why the monitor refused a hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    Malformed = 1,
    /// No device NVML lists has that UUID.
    UnknownDevice = 2,
    /// The peer does not hold that slot's lock in that tenant's ledger.
    NotYourSlot = 3,
    /// The device has [`crate::grants::MAX_MEMBERS`] tenants already.
    Full = 4,
    /// Too many connections from the peer's user.
    TooMany = 5,
    /// The monitor could not make the page.
    Internal = 6,
    /// The process already holds a place on the device (one connection).
    Duplicate = 7,
}

impl Refusal {
    pub fn from_u8(value: u8) -> Refusal {
        match value {
            1 => Refusal::Malformed,
            2 => Refusal::UnknownDevice,
            3 => Refusal::NotYourSlot,
            4 => Refusal::Full,
            5 => Refusal::TooMany,
            7 => Refusal::Duplicate,
            _ => Refusal::Internal,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Refusal::Malformed => "the request was malformed",
            Refusal::UnknownDevice => "the monitor does not know the device",
            Refusal::NotYourSlot => "the monitor could not tie this process to its ledger slot",
            Refusal::Full => "the device has the most tenants it can arbitrate",
            Refusal::TooMany => "this process or its user has the most connections the monitor allows",
            Refusal::Internal => "the monitor could not make the device's grant page",
            Refusal::Duplicate => "this process already holds a place on the device",
        }
    }
}

/// What flows after the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// The process has work and no grant.
    Want = b'W',
    /// The process launches under its tenant's grant.
    Busy = b'B',
    /// The process launched nothing for a while and its work is done.
    Idle = b'I',
    /// After a revoke: the process's work is done.
    Done = b'D',
    /// Monitor to process: stop launching, finish your work, say `Done`.
    Revoke = b'R',
}

impl Op {
    pub fn from_u8(value: u8) -> Option<Op> {
        [Op::Want, Op::Busy, Op::Idle, Op::Done, Op::Revoke].into_iter().find(|op| *op as u8 == value)
    }
}

/// One message: an op and a sequence number.
pub fn encode(op: Op, seq: u32) -> [u8; MESSAGE_BYTES] {
    let mut out = [0u8; MESSAGE_BYTES];
    out[0] = op as u8;
    out[4..8].copy_from_slice(&seq.to_le_bytes());
    out
}

/// Reads one message; `None` for an unknown op.
pub fn decode(bytes: &[u8; MESSAGE_BYTES]) -> Option<(Op, u32)> {
    Some((Op::from_u8(bytes[0])?, u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]])))
}

/// A process's connection for one device, once the monitor accepted it.
#[derive(Debug)]
pub struct Joined {
    pub stream: UnixStream,
    pub grants: Grants,
    pub member: u32,
    /// The team's page, for a member of a team with a memory quota there.
    pub team: Option<TeamUsage>,
}

/// Connects to the monitor listening in `dir` and asks for `hello.uuid`'s
/// grant page.
///
/// Where nothing is at the socket's path (no monitor has run in `dir`), one
/// `stat` says so: cheaper than making a socket to fail to connect it, and
/// every process of a host without a monitor asks once at its first
/// context and again every second after.
///
/// `ledger_fd` is the descriptor of the tenant's ledger through which this
/// process holds the slot the hello names: the monitor checks the lock
/// through it. Without one, the monitor cannot tie the process to a slot
/// and refuses.
pub fn join(dir: &Path, hello: &Hello, ledger_fd: Option<RawFd>) -> Result<Joined, String> {
    join_or_refusal(dir, hello, ledger_fd).map_err(|e| e.to_string())
}

/// Why [`join_or_refusal`] got no page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// No monitor answered (none runs, or what is at the path is not one).
    NoMonitor(String),
    /// The monitor answered, and refused.
    Refused(Refusal, String),
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::NoMonitor(why) | JoinError::Refused(_, why) => f.write_str(why),
        }
    }
}

/// [`join`], telling a monitor's refusal from the absence of a monitor.
pub fn join_or_refusal(dir: &Path, hello: &Hello, ledger_fd: Option<RawFd>) -> Result<Joined, JoinError> {
    join_inner(dir, hello, ledger_fd).map_err(|e| match e {
        (Some(refusal), why) => JoinError::Refused(refusal, why),
        (None, why) => JoinError::NoMonitor(why),
    })
}

fn join_inner(dir: &Path, hello: &Hello, ledger_fd: Option<RawFd>) -> Result<Joined, (Option<Refusal>, String)> {
    let path = socket_path(dir);
    let no = |why: String| (None, why);
    if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        return Err(no(format!("no monitor at {}: no socket there", path.display())));
    }
    let stream = connect(dir).map_err(|e| no(format!("no monitor at {}: {e}", path.display())))?;
    // Only the monitor may answer: root, or the directory's owner (the
    // monitor made it). Anybody else who bound a socket at that path while
    // no monitor ran could hand out pages that freeze their readers.
    let server = peer(stream.as_raw_fd()).map_err(|e| no(format!("{}: {e}", path.display())))?;
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir).map_err(|e| no(format!("{}: {e}", dir.display())))?);
    if server.uid != 0 && server.uid != owner {
        return Err(no(format!(
            "{} is served by uid {}, neither root nor the directory's owner (uid {owner}): not the monitor's, ignored",
            path.display(),
            server.uid
        )));
    }
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    send_with_fd(stream.as_raw_fd(), &hello.encode(), ledger_fd.as_slice(), false)
        .map_err(|e| no(format!("asking {}: {e}", path.display())))?;
    let (answer, [fd, team_fd]) = receive_fd(stream.as_raw_fd()).map_err(|e| no(format!("reading {}: {e}", path.display())))?;
    let _ = stream.set_read_timeout(None);
    match (answer[0], fd) {
        (OK, Some(fd)) => {
            let grants = Grants::from_fd(fd).map_err(no)?;
            let member = u32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]);
            if member as usize >= crate::grants::MAX_MEMBERS {
                return Err(no(format!("the monitor at {} answered member {member}", path.display())));
            }
            let team = match (answer[1] & WITH_TEAM_PAGE != 0, team_fd) {
                (false, _) => None,
                (true, Some(fd)) => Some(TeamUsage::from_fd(fd).map_err(no)?),
                (true, None) => return Err(no(format!("the monitor at {} said a team page came and none did", path.display()))),
            };
            Ok(Joined { stream, grants, member, team })
        }
        (_, _) => {
            let refusal = Refusal::from_u8(answer[1]);
            Err((Some(refusal), format!("the monitor at {} refused: {}", path.display(), refusal.describe())))
        }
    }
}

/// The slot a [`Hello`] names to ask for a page only to read it (`gpuslice
/// status`): the monitor answers its own user and root alone, with member
/// [`VIEWER`], and closes the connection.
pub const VIEWER_SLOT: u32 = u32::MAX;
/// The member index a viewer is answered with.
pub const VIEWER: u32 = u32::MAX;

/// Asks the monitor listening in `dir` for `uuid`'s page, to read it.
pub fn view(dir: &Path, uuid: &[u8; 16]) -> Result<Grants, String> {
    let hello = Hello { tenant: "viewer".into(), slot: VIEWER_SLOT, generation: 0, uuid: *uuid, asked_cap_bytes: crate::UNLIMITED };
    let path = socket_path(dir);
    let mut stream = connect(dir).map_err(|e| format!("no monitor at {}: {e}", path.display()))?;
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    stream.write_all(&hello.encode()).map_err(|e| format!("asking {}: {e}", path.display()))?;
    match receive_fd(stream.as_raw_fd()).map_err(|e| format!("reading {}: {e}", path.display()))? {
        (answer, [Some(fd), _]) if answer[0] == OK => Grants::from_fd(fd),
        (answer, _) => Err(format!("the monitor at {} refused: {}", path.display(), Refusal::from_u8(answer[1]).describe())),
    }
}

/// The answer's status when a descriptor comes with it.
pub const OK: u8 = 1;
/// The answer's status for a refusal.
pub const REFUSED: u8 = 0;
/// Set in an accepting answer's second byte when the team's page comes
/// as a second descriptor.
pub const WITH_TEAM_PAGE: u8 = 1;

/// Reads a hello from a blocking stream.
pub fn read_hello(stream: &mut UnixStream) -> io::Result<[u8; HELLO_BYTES]> {
    let mut hello = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello)?;
    Ok(hello)
}

/// Accepts a process: its member index and the page's descriptor.
pub fn accept(socket: RawFd, member: u32, fd: RawFd) -> io::Result<()> {
    accept_in_team(socket, member, fd, None)
}

/// Accepts a process, with its team's page (`team_fd`) when it has one.
pub fn accept_in_team(socket: RawFd, member: u32, fd: RawFd, team_fd: Option<RawFd>) -> io::Result<()> {
    let mut answer = [0u8; ANSWER_BYTES];
    answer[0] = OK;
    answer[4..8].copy_from_slice(&member.to_le_bytes());
    match team_fd {
        Some(team_fd) => {
            answer[1] = WITH_TEAM_PAGE;
            send_with_fd(socket, &answer, &[fd, team_fd], true)
        }
        None => send_with_fd(socket, &answer, &[fd], true),
    }
}

/// Refuses a process.
pub fn refuse(socket: RawFd, why: Refusal) -> io::Result<()> {
    let answer = [REFUSED, why as u8, 0, 0, 0, 0, 0, 0];
    send_with_fd(socket, &answer, &[], true)
}

/// Sends one message on a connection.
pub fn send(stream: &UnixStream, op: Op, seq: u32) -> io::Result<()> {
    let mut s = stream;
    s.write_all(&encode(op, seq))
}

/// The credentials the kernel holds for the other end of a Unix socket:
/// the client's at `connect`, or, asked by a client, the server's at
/// `listen` (pid in the asker's PID namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
}

pub fn peer(socket: RawFd) -> io::Result<Peer> {
    // SAFETY: an all-zero ucred is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred of the size we pass.
    let r = unsafe { libc::getsockopt(socket, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Peer { pid: cred.pid as u32, uid: cred.uid })
}

const CMSG_SPACE: usize = 64;
/// The most descriptors one message carries: the grant page and a team's.
const MAX_FDS: usize = 2;

/// Sends `bytes` in one message, with `fds` (`SCM_RIGHTS`, at most
/// [`MAX_FDS`]) if any; without waiting when `dont_wait` (the monitor's
/// side), else as the socket's timeouts allow.
fn send_with_fd(socket: RawFd, bytes: &[u8], fds: &[RawFd], dont_wait: bool) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut data = bytes.to_vec();
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    let mut control = [0u8; CMSG_SPACE];
    // SAFETY: an all-zero msghdr is valid; every pointer set below points
    // into live locals that outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_bytes = std::mem::size_of_val(fds) as u32;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_bytes) } as usize;
        // SAFETY: msg_control points at a buffer of at least msg_controllen
        // bytes, so the first header and its data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(io::Error::from(io::ErrorKind::Other));
            }
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_bytes) as usize;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>().add(i), *fd);
            }
        }
    }
    // SAFETY: a valid socket and a fully initialised msghdr.
    let flags = libc::MSG_NOSIGNAL | if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: a valid socket and a fully initialised msghdr.
    let sent = unsafe { libc::sendmsg(socket, &msg, flags) };
    if sent == bytes.len() as isize {
        Ok(())
    } else if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Err(io::Error::from(io::ErrorKind::WriteZero))
    }
}

/// Reads what is there (at most `buf.len()` bytes) without waiting, and
/// the first descriptor that came with it (`SCM_RIGHTS`; any other is
/// closed). `Ok((0, _))` at the end of the stream.
pub fn receive_now(socket: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let (received, [first, _]) = receive(socket, buf, libc::MSG_DONTWAIT)?;
    Ok((received, first))
}

/// One `recvmsg` into `buf` with `flags`, and the first [`MAX_FDS`]
/// descriptors that came with it (any other is closed).
fn receive(socket: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, [Option<OwnedFd>; MAX_FDS])> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u8; CMSG_SPACE];
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE;
    // SAFETY: a valid socket and a msghdr whose buffers are live.
    let received = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((received as usize, take_descriptors(&msg)))
}

/// The descriptors a received message carried: the first [`MAX_FDS`], the
/// others closed.
fn take_descriptors(msg: &libc::msghdr) -> [Option<OwnedFd>; MAX_FDS] {
    let mut fds: [Option<OwnedFd>; MAX_FDS] = Default::default();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed headers; each descriptor it passed is now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let owned = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if let Some(free) = fds.iter_mut().find(|f| f.is_none()) {
                        *free = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}

fn receive_fd(socket: RawFd) -> io::Result<([u8; ANSWER_BYTES], [Option<OwnedFd>; MAX_FDS])> {
    let mut data = [0u8; ANSWER_BYTES];
    let (received, fds) = receive(socket, &mut data, libc::MSG_WAITALL)?;
    if received != ANSWER_BYTES {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok((data, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_in_a_directory_with_a_long_path_is_reached_through_its_descriptor() {
        let dir = std::env::temp_dir().join(format!("gpuslice-broker-long-{}-{}", std::process::id(), "x".repeat(120)));
        std::fs::create_dir_all(&dir).unwrap();
        let listener = with_socket_path(&dir, |p| std::os::unix::net::UnixListener::bind(p)).unwrap();
        assert!(socket_path(&dir).exists(), "bound in the directory itself");
        let client = with_socket_path(&dir, |p| UnixStream::connect(p)).unwrap();
        drop((client, listener));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hellos_round_trip_and_malformed_ones_are_refused() {
        let hello = Hello { tenant: "team-a.x_1".into(), slot: 7, generation: 9, uuid: [3; 16], asked_cap_bytes: 1 << 30 };
        assert_eq!(Hello::decode(&hello.encode()), Some(hello.clone()));
        let mut bad = hello.encode();
        bad[32] = b'/';
        assert_eq!(Hello::decode(&bad), None, "a tenant name with a slash");
        let mut unterminated = hello.encode();
        unterminated[32..96].fill(b'a');
        assert_eq!(Hello::decode(&unterminated), None, "a name of 64 bytes");
        let mut empty = hello.encode();
        empty[32] = 0;
        assert_eq!(Hello::decode(&empty), None, "an empty name");
        let mut magic = hello.encode();
        magic[0] ^= 1;
        assert_eq!(Hello::decode(&magic), None);
        assert_eq!(decode(&encode(Op::Busy, 77)), Some((Op::Busy, 77)));
        assert_eq!(decode(&[b'x', 0, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_page_handed_over_a_socket_is_the_same_page_read_only() {
        let dir = std::env::temp_dir().join(format!("gpuslice-broker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(socket_path(&dir)).unwrap();
        let grants = Grants::create_sealed("test").unwrap();
        let fd = grants.fd();
        let server = std::thread::spawn(move || {
            for (i, stream) in listener.incoming().take(2).enumerate() {
                let mut stream = stream.unwrap();
                let hello = Hello::decode(&read_hello(&mut stream).unwrap()).unwrap();
                assert_eq!(hello.uuid, [7; 16]);
                if i == 0 {
                    accept(stream.as_raw_fd(), 5, fd).unwrap();
                    let mut message = [0u8; MESSAGE_BYTES];
                    stream.read_exact(&mut message).unwrap();
                    assert_eq!(decode(&message), Some((Op::Want, 1)));
                } else {
                    refuse(stream.as_raw_fd(), Refusal::NotYourSlot).unwrap();
                }
            }
        });
        let hello = Hello { tenant: "t".into(), slot: 0, generation: 1, uuid: [7; 16], asked_cap_bytes: crate::UNLIMITED };
        let joined = join(&dir, &hello, None).unwrap();
        assert_eq!(joined.member, 5);
        grants.page().header.turns_total.store(42, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(joined.grants.page().header.turns_total.load(std::sync::atomic::Ordering::Relaxed), 42);
        send(&joined.stream, Op::Want, 1).unwrap();
        assert!(join(&dir, &hello, None).unwrap_err().contains("could not tie this process"));
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hello_carries_its_ledger_descriptor_and_only_the_first_is_kept() {
        let (client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let hello = Hello { tenant: "t".into(), slot: 3, generation: 1, uuid: [1; 16], asked_cap_bytes: crate::UNLIMITED };
        send_with_fd(client.as_raw_fd(), &hello.encode(), &[file.as_raw_fd()], false).unwrap();
        let mut buf = [0u8; HELLO_BYTES];
        let (n, fd) = receive_now(server.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(n, HELLO_BYTES);
        assert_eq!(Hello::decode(&buf), Some(hello));
        let ino = |fd: RawFd| {
            // SAFETY: fstat of a live descriptor into a zeroed struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
            (st.st_dev, st.st_ino)
        };
        assert_eq!(ino(fd.expect("the descriptor").as_raw_fd()), ino(file.as_raw_fd()), "the same file");
        // Nothing waiting: an error, not a wait.
        let err = receive_now(server.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}
