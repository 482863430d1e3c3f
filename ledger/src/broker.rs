//! Handing turn tables out: the monitor owns one sealed table per device
//! ([`crate::turns::Turns`]) and passes its descriptor to any process that
//! asks over a Unix socket in the ledger directory ([`socket_path`]).
//!
//! The request is the device's UUID, 16 bytes; the answer one status byte
//! ([`OK`] or [`REFUSED`]) carrying the memfd (`SCM_RIGHTS`) when it is
//! [`OK`]. A descriptor is the only way to share a memfd across users and
//! containers that share the directory, and a sealed one cannot be cut
//! short under the others by whoever holds it.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::turns::Turns;

/// The answer's status byte when a descriptor comes with it.
pub const OK: u8 = 1;
/// The answer's status byte when the monitor has no table to give.
pub const REFUSED: u8 = 0;
/// How long a client waits for the monitor's answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_millis(500);

/// `<dir>/.turns.sock`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(".turns.sock")
}

/// The longest path a Unix socket address holds, less its NUL.
const SUN_PATH_MAX: usize = 107;

/// Runs `f` with a path to `<dir>/.turns.sock` short enough for a socket
/// address: the path itself, or, in a directory whose path is too long,
/// the same file through `/proc/self/fd/<N>` of a descriptor of `dir`.
pub fn with_socket_path<T>(dir: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    let path = socket_path(dir);
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(&path);
    }
    let dir_fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}/.turns.sock", dir_fd.as_raw_fd()));
    let result = f(&short);
    drop(dir_fd);
    result
}

/// Asks the monitor listening in `dir` for the turn table of `uuid`.
pub fn request(dir: &Path, uuid: &[u8; 16]) -> Result<Turns, String> {
    let path = socket_path(dir);
    let mut stream =
        with_socket_path(dir, |p| UnixStream::connect(p)).map_err(|e| format!("no monitor at {}: {e}", path.display()))?;
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    stream.write_all(uuid).map_err(|e| format!("asking {}: {e}", path.display()))?;
    let (status, fd) = receive_fd(stream.as_raw_fd()).map_err(|e| format!("reading {}: {e}", path.display()))?;
    match (status, fd) {
        (OK, Some(fd)) => Turns::from_fd(fd),
        _ => Err(format!("the monitor at {} has no turn table for this device", path.display())),
    }
}

/// Reads the request of one client: the UUID it asks for.
pub fn read_request(stream: &mut UnixStream) -> io::Result<[u8; 16]> {
    let mut uuid = [0u8; 16];
    stream.read_exact(&mut uuid)?;
    Ok(uuid)
}

/// Answers one client with `fd`, or with a refusal.
pub fn answer(stream: &UnixStream, fd: Option<RawFd>) -> io::Result<()> {
    match fd {
        Some(fd) => send_fd(stream.as_raw_fd(), OK, fd),
        None => {
            let mut s = stream;
            s.write_all(&[REFUSED])
        }
    }
}

const CMSG_SPACE: usize = 64;

fn send_fd(socket: RawFd, status: u8, fd: RawFd) -> io::Result<()> {
    let mut byte = [status];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = [0u8; CMSG_SPACE];
    // SAFETY: an all-zero msghdr is valid; every pointer set below points
    // into live locals that outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: msg_control points at a buffer of at least msg_controllen
    // bytes, so the first header and its data fit.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::from(io::ErrorKind::Other));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: a valid socket and a fully initialised msghdr.
    let sent = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
    if sent == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn receive_fd(socket: RawFd) -> io::Result<(u8, Option<OwnedFd>)> {
    let mut byte = [0u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = [0u8; CMSG_SPACE];
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE;
    // SAFETY: a valid socket and a msghdr whose buffers are live locals.
    let received = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received != 1 {
        return Err(if received == 0 { io::Error::from(io::ErrorKind::UnexpectedEof) } else { io::Error::last_os_error() });
    }
    let mut fd = None;
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed headers; each descriptor it passed is now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                let owned = OwnedFd::from_raw_fd(raw);
                if fd.is_none() {
                    fd = Some(owned);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((byte[0], fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

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
    fn a_table_handed_over_a_socket_is_the_same_table() {
        let dir = std::env::temp_dir().join(format!("gpuslice-broker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(socket_path(&dir)).unwrap();
        let turns = Turns::create_sealed("test").unwrap();
        let fd = turns.fd();
        let server = std::thread::spawn(move || {
            for (i, stream) in listener.incoming().take(2).enumerate() {
                let mut stream = stream.unwrap();
                let uuid = read_request(&mut stream).unwrap();
                assert_eq!(uuid, [7; 16]);
                answer(&stream, (i == 0).then_some(fd)).unwrap();
            }
        });
        let theirs = request(&dir, &[7; 16]).unwrap();
        theirs.table().header.turns_total.store(42, Ordering::Relaxed);
        assert_eq!(turns.table().header.turns_total.load(Ordering::Relaxed), 42);
        assert!(request(&dir, &[7; 16]).unwrap_err().contains("no turn table"));
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
