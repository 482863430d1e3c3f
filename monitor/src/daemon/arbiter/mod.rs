//! The arbiter: the monitor's thread that owns every device's grant page
//! and decides, from what it observes itself, which tenant runs where
//! ([`sched`]).
//!
//! It listens on `<dir>/.arbiter.sock` and, in the `tenant-dirs` layout,
//! on `.arbiter.sock` in each tenant's directory too (a pod sees only its
//! own), and serves every connection at once from one `poll` loop: no
//! connection can hold up another. A connection must say its hello within
//! [`HELLO_DEADLINE`]; a user has at most [`MAX_CONNS_PER_UID`] open and
//! the monitor [`MAX_CONNS`], and a process [`MAX_PENDING_PER_PID`] that
//! have not said their hello. A process holds at most one joined
//! connection per device. A hello is accepted only when:
//! - the device is one NVML lists (or, without NVML, one the tenant's
//!   ledger registered, up to [`MAX_DEVICES`] in all);
//! - the descriptor sent with the hello (`SCM_RIGHTS`) is an open of the
//!   ledger of the tenant it names and holds the lock of the slot it names
//!   (the kernel's word, two `F_OFD_GETLK`:
//!   `Ledger::passed_descriptor_holds`), so no process can speak for another
//!   tenant, and what the process holds besides costs the check nothing;
//! - in a tenant's directory, it names that directory's tenant.
//!
//! A tenant's settings come from the configuration when it names the
//! tenant, else from the tenant's policy page when its first process on
//! the device joins, and are then kept (pinned) for as long as the tenant
//! has a process there: rewriting the page later changes nothing.
//!
//! The main loop hands the arbiter what it learns each round ([`Shared`])
//! and reads back each device's members for `/metrics` and `status`.

pub mod sched;
pub mod teams;

use super::log;
use crate::compute::{Claim, DeviceReport};
use crate::discovery::{self, Layout};
use crate::host;
use ledger::broker::{self, Hello, Op, Refusal, HELLO_BYTES, MESSAGE_BYTES};
use ledger::grants::{tenant_key, Grants};
use sched::{ConnId, DeviceSched};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a new connection has to say its hello.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(1);
/// Connections one process may have open that have not said their hello
/// yet. A process holds one joined connection per device (a second is
/// refused), so what it opens can never crowd out its own shim's join for
/// longer than [`HELLO_DEADLINE`].
pub const MAX_PENDING_PER_PID: usize = 16;
/// Connections one user may hold open. In Kubernetes most pods run as
/// root, so this is generous; the per-process bound is the one that bites.
pub const MAX_CONNS_PER_UID: usize = 4096;
/// Connections the monitor holds open.
pub const MAX_CONNS: usize = 16_384;
/// Hellos of one user checked in one round of the loop: a user that sends
/// thousands a second waits its turn, round by round, and delays no other
/// user's hello nor anybody's turns by more than this many checks (each a
/// few `fstat`, `fcntl` and a mapping of the ledger).
pub const HELLOS_PER_ROUND_PER_UID: usize = 8;
/// Devices the monitor arbitrates without NVML to list them.
pub const MAX_DEVICES: usize = 64;
/// The longest the loop sleeps with nothing due.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// What the main loop and the arbiter tell each other.
#[derive(Default)]
pub struct Shared {
    /// The devices NVML lists; `None` without NVML.
    pub nvml_uuids: Mutex<Option<HashSet<[u8; 16]>>>,
    /// The configuration's settings, by tenant and device.
    pub configured: Mutex<HashMap<String, HashMap<[u8; 16], Claim>>>,
    /// The tenants' directories to listen in (`tenant-dirs` layout).
    pub tenant_dirs: Mutex<Vec<(String, PathBuf)>>,
    /// Each device's members, by tenant name, for metrics and `status`.
    pub views: Mutex<HashMap<[u8; 16], DeviceReport>>,
    /// When the arbiter's loop last went round (monotonic ns; 0 before it
    /// started): `/healthz` fails when it stops.
    pub heartbeat_ns: std::sync::atomic::AtomicU64,
    /// The longest time between two of its rounds since the main loop last
    /// looked (ns).
    pub longest_gap_ns: std::sync::atomic::AtomicU64,
    /// The least memory cap the processes of each tenant asked for in
    /// their hellos, by device: what the policy pins for a tenant the
    /// configuration does not name, whatever its page says by then.
    pub asked_caps: Mutex<HashMap<String, HashMap<[u8; 16], u64>>>,
    /// Who may ask for which compute priority (`[priority_ceilings]`):
    /// a tenant the configuration does not name runs at most at its
    /// process's user's ceiling, whatever its page says.
    pub priority_ceilings: Mutex<crate::config::PriorityCeilings>,
    /// How much share each user's self-declared tenants hold together
    /// (`[share_ceilings]`, ratio × 10 000; see `sched::effective_claims`);
    /// `None` before the configuration is read (a whole device each).
    pub share_ceilings: Mutex<Option<crate::config::PriorityCeilings>>,
    /// The configuration's teams, with their compute settings by device.
    pub teams: Mutex<Vec<ArbiterTeam>>,
    /// Each team's memory page and quota by device, where it has a quota
    /// (the main loop's [`super::team_memory`]).
    pub team_pages: Mutex<super::team_memory::TeamPages>,
}

/// A team as the arbiter needs it: who is in it (by the configuration's
/// patterns, and its accounts as the monitor's admissions resolved them)
/// and its settings on each device.
#[derive(Debug, Clone, PartialEq)]
pub struct ArbiterTeam {
    pub name: String,
    pub config: crate::teams::TeamConfig,
    pub claims: HashMap<[u8; 16], Claim>,
}

impl Shared {
    /// `tenant`'s team on `uuid` (numbered from 1 in the configuration's
    /// order), by the configuration and the monitor's admissions alone.
    pub fn team_claim(&self, tenant: &str, uuid: &[u8; 16]) -> Option<teams::TeamClaim> {
        // Only a tenant the configuration governs is in a team (see
        // `Config::team_of`): a name a process gave itself is anyone's.
        if !self.configured.lock().unwrap_or_else(|e| e.into_inner()).contains_key(tenant) {
            return None;
        }
        let teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        let (index, team) = teams.iter().enumerate().find(|(_, t)| t.config.has(tenant))?;
        // A device the round has not listed yet (NVML not read yet): the
        // team's setting for it by UUID or for all devices.
        let claim = team.claims.get(uuid).copied().or_else(|| {
            let p = team.config.settings.compute_for(&crate::nvml::uuid_string(uuid), None)?;
            Some(Claim { share_e4: p.share_ratio_e4, limit_e4: p.limit_ratio_e4, priority: p.priority })
        });
        Some(teams::TeamClaim { id: index as u32 + 1, claim: claim.unwrap_or_default() })
    }
}

impl Shared {
    /// `tenant`'s team's memory page and quota on `uuid`, if its team has
    /// a quota there; membership as for [`Shared::team_claim`].
    pub fn team_page(&self, tenant: &str, uuid: &[u8; 16]) -> Option<super::team_memory::TeamPage> {
        if !self.configured.lock().unwrap_or_else(|e| e.into_inner()).contains_key(tenant) {
            return None;
        }
        let team = self.teams.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|t| t.config.has(tenant))?.name.clone();
        self.team_pages.lock().unwrap_or_else(|e| e.into_inner()).get(&(team, *uuid)).cloned()
    }

    /// The least cap `tenant`'s processes asked for on `uuid`, if any did.
    pub fn asked_cap(&self, tenant: &str, uuid: &[u8; 16]) -> Option<u64> {
        self.asked_caps.lock().unwrap_or_else(|e| e.into_inner()).get(tenant).and_then(|caps| caps.get(uuid)).copied()
    }

    /// Forgets what `tenant`'s processes asked for (its last one is gone).
    pub fn forget_asked(&self, tenant: &str) {
        self.asked_caps.lock().unwrap_or_else(|e| e.into_inner()).remove(tenant);
    }

    fn note_asked(&self, hello: &Hello) {
        if hello.asked_cap_bytes == ledger::UNLIMITED {
            return;
        }
        let mut asked = self.asked_caps.lock().unwrap_or_else(|e| e.into_inner());
        let cap = asked.entry(hello.tenant.clone()).or_default().entry(hello.uuid).or_insert(hello.asked_cap_bytes);
        *cap = (*cap).min(hello.asked_cap_bytes);
    }
}

/// A loop of the arbiter's that takes longer than this is a stall: turns
/// froze meanwhile.
pub const STALL: Duration = Duration::from_millis(250);

impl Shared {
    /// Whether the arbiter's loop stalled (went round more than `longer_than`
    /// apart, or has not gone round for that long) since the last call.
    pub fn stalled_since_last_look(&self, longer_than: Duration) -> bool {
        let longest = self.longest_gap_ns.swap(0, std::sync::atomic::Ordering::Relaxed);
        Duration::from_nanos(longest) > longer_than || self.stalled_for().is_some_and(|d| d > longer_than)
    }

    /// How long the arbiter's loop has not gone round, if it ever started.
    pub fn stalled_for(&self) -> Option<Duration> {
        let beat = self.heartbeat_ns.load(std::sync::atomic::Ordering::Relaxed);
        (beat != 0).then(|| Duration::from_nanos(now_ns().saturating_sub(beat)))
    }
}

impl Shared {
    /// Each tenant's members, for one device.
    pub fn report(&self, uuid: &[u8; 16]) -> Option<DeviceReport> {
        self.views.lock().unwrap_or_else(|e| e.into_inner()).get(uuid).cloned()
    }
}

/// Binds the sockets and starts the arbiter's thread.
pub fn start(dir: &Path, layout: Layout, shared: Arc<Shared>) -> Result<(), String> {
    let root = bind(dir)?;
    let mut arbiter = Arbiter {
        dir: dir.to_path_buf(),
        layout,
        shared,
        listeners: vec![Listening { listener: root, tenant: None, bound: None }],
        bound_dirs: HashSet::new(),
        conns: HashMap::new(),
        devices: HashMap::new(),
        names: HashMap::new(),
        next_id: 1,
        started: Instant::now(),
        ceilings: HashMap::new(),
        lowered: HashSet::new(),
        hellos_this_round: HashMap::new(),
        deferred: std::collections::VecDeque::new(),
        scratch: Scratch::default(),
    };
    std::thread::Builder::new()
        .name("arbiter".into())
        .spawn(move || arbiter.run())
        .map_err(|e| format!("cannot start the arbiter's thread: {e}"))?;
    Ok(())
}

/// Binds `<dir>/.arbiter.sock`, open to every user of the directory. What
/// stands at that path and is not a socket of this monitor's user (a file
/// or socket a tenant planted) is moved aside first.
fn bind(dir: &Path) -> Result<UnixListener, String> {
    let path = broker::socket_path(dir);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if meta.file_type().is_socket() && meta.uid() == me {
            let _ = std::fs::remove_file(&path);
        } else {
            // A name nobody can guess ahead; if even that fails (a planted
            // name), the planted file goes: the directory is the monitor's.
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
            let aside = dir.join(format!(".arbiter.sock.untrusted-{}-{nanos:09}", std::process::id()));
            match std::fs::rename(&path, &aside) {
                Ok(()) => log::warn(&format!(
                    "{} was not the monitor's socket (uid {}); moved to {}",
                    path.display(),
                    meta.uid(),
                    aside.display()
                )),
                Err(_) => {
                    std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
                    log::warn(&format!("{} was not the monitor's socket (uid {}); removed", path.display(), meta.uid()));
                }
            }
        }
    }
    let listener =
        broker::with_socket_path(dir, |p| UnixListener::bind(p)).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot open {} to tenants: {e}", path.display()))?;
    listener.set_nonblocking(true).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(listener)
}

struct Listening {
    listener: UnixListener,
    /// The tenant whose directory it is in (`tenant-dirs`).
    tenant: Option<String>,
    /// That directory, and the inode of the socket bound in it: a
    /// directory removed (a released tenant) or made anew loses its
    /// listener, and a new one is bound where it is made anew.
    bound: Option<(PathBuf, u64)>,
}

enum ConnState {
    /// Waiting for the hello, and the ledger descriptor sent with it.
    Hello {
        buf: Vec<u8>,
        deadline: Instant,
        ledger_fd: Option<std::os::fd::OwnedFd>,
        /// Whole, and waiting in `Arbiter::deferred` for its user's budget.
        deferred: bool,
    },
    Joined {
        uuid: [u8; 16],
        tenant: String,
        buf: Vec<u8>,
    },
}

struct Conn {
    stream: UnixStream,
    peer: broker::Peer,
    /// The tenant of the directory it connected in, if any.
    dir_tenant: Option<String>,
    state: ConnState,
}

struct Arbiter {
    dir: PathBuf,
    layout: Layout,
    shared: Arc<Shared>,
    listeners: Vec<Listening>,
    bound_dirs: HashSet<PathBuf>,
    conns: HashMap<ConnId, Conn>,
    devices: HashMap<[u8; 16], DeviceSched>,
    /// Tenant names by key, for reports.
    names: HashMap<u64, String>,
    next_id: ConnId,
    started: Instant,
    /// Each user's priority and share ceilings and when they were looked
    /// up: the user database is asked once a minute per user, not once per
    /// hello.
    ceilings: HashMap<u32, (i32, u32, Instant)>,
    /// Tenants already told (in the log) that their priority was lowered.
    lowered: HashSet<String>,
    /// Hellos checked this round, by the peer's user.
    hellos_this_round: HashMap<u32, usize>,
    /// Whole hellos waiting for their user's budget, oldest first.
    deferred: std::collections::VecDeque<ConnId>,
    /// The loop's buffers, kept between its wake-ups (a thousand and more a
    /// second while tenants take turns) so that a wake-up allocates nothing.
    scratch: Scratch,
}

/// What one pass of the arbiter's loop fills and empties again.
#[derive(Default)]
struct Scratch {
    /// `poll`'s descriptors and what each one is.
    fds: Vec<libc::pollfd>,
    sources: Vec<Source>,
    /// The sources `poll` found ready, and whether each is readable.
    ready: Vec<(Source, bool)>,
    /// The devices to step.
    uuids: Vec<[u8; 16]>,
}

fn now_ns() -> u64 {
    ledger::compute::monotonic_ns()
}

impl Arbiter {
    fn run(&mut self) {
        let mut last_report = Instant::now() - Duration::from_secs(1);
        let mut last_housekeeping = Instant::now() - Duration::from_secs(1);
        loop {
            let beat = now_ns();
            let last = self.shared.heartbeat_ns.swap(beat, std::sync::atomic::Ordering::Relaxed);
            if last != 0 {
                self.shared.longest_gap_ns.fetch_max(beat.saturating_sub(last), std::sync::atomic::Ordering::Relaxed);
            }
            if last_housekeeping.elapsed() >= Duration::from_millis(100) {
                self.bind_tenant_dirs();
                self.apply_configuration();
                self.expire_hellos();
                last_housekeeping = Instant::now();
            }
            self.hellos_this_round.clear();
            self.run_deferred();
            let timeout = if self.deferred.is_empty() { self.poll_timeout() } else { Duration::ZERO };
            self.poll(timeout);
            let ready = std::mem::take(&mut self.scratch.ready);
            for &(kind, fd_ready) in &ready {
                match kind {
                    Source::Listener(i) => self.accept_all(i),
                    Source::Conn(id) => self.read_conn(id, fd_ready),
                }
            }
            self.scratch.ready = ready;
            let now = now_ns();
            let mut uuids = std::mem::take(&mut self.scratch.uuids);
            uuids.clear();
            uuids.extend(self.devices.keys().copied());
            for &uuid in &uuids {
                self.step(uuid, now);
            }
            self.scratch.uuids = uuids;
            if last_report.elapsed() >= Duration::from_millis(50) {
                self.report();
                last_report = Instant::now();
            }
        }
    }

    /// Until the earliest deadline of any device, at most [`IDLE_POLL`].
    fn poll_timeout(&self) -> Duration {
        let now = now_ns();
        let next = self.devices.values().filter_map(|d| d.next_deadline_ns(now)).min();
        match next {
            Some(at) => Duration::from_nanos(at.saturating_sub(now)).min(IDLE_POLL),
            None => IDLE_POLL,
        }
    }

    /// Waits up to `timeout` for a listener or a connection; leaves those
    /// ready in `scratch.ready`.
    fn poll(&mut self, timeout: Duration) {
        let Scratch { fds, sources, ready, .. } = &mut self.scratch;
        fds.clear();
        sources.clear();
        ready.clear();
        for (i, l) in self.listeners.iter().enumerate() {
            fds.push(libc::pollfd { fd: l.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            sources.push(Source::Listener(i));
        }
        for (id, c) in &self.conns {
            fds.push(libc::pollfd { fd: c.stream.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            sources.push(Source::Conn(*id));
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // A deadline less than a millisecond away is waited for in full.
        let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
        // SAFETY: `fds` is a live array of `fds.len()` pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n > 0 {
            ready.extend(fds.iter().zip(sources.iter()).filter(|(f, _)| f.revents != 0).map(|(f, s)| (*s, f.revents & libc::POLLIN != 0)));
        }
    }

    fn bind_tenant_dirs(&mut self) {
        if self.layout != Layout::TenantDirs && self.shared.tenant_dirs.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            return;
        }
        let dirs = self.shared.tenant_dirs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let socket_inode = |dir: &Path| std::fs::symlink_metadata(broker::socket_path(dir)).ok().map(|m| m.ino());
        let bound_dirs = &mut self.bound_dirs;
        self.listeners.retain(|l| match &l.bound {
            None => true,
            Some((dir, ino)) => {
                let current = dirs.iter().any(|(_, d)| d == dir) && socket_inode(dir) == Some(*ino);
                if !current {
                    bound_dirs.remove(dir);
                }
                current
            }
        });
        for (tenant, dir) in dirs {
            if self.bound_dirs.contains(&dir) || !dir.is_dir() {
                continue;
            }
            match bind(&dir) {
                Ok(listener) => {
                    let bound = socket_inode(&dir).map(|ino| (dir.clone(), ino));
                    self.listeners.push(Listening { listener, tenant: Some(tenant), bound });
                    self.bound_dirs.insert(dir);
                }
                Err(e) => {
                    log::warn(&format!("tenant {tenant}: {e}; its processes cannot be arbitrated"));
                    self.bound_dirs.insert(dir);
                }
            }
        }
    }

    fn apply_configuration(&mut self) {
        let configured = self.shared.configured.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (tenant, devices) in &configured {
            let key = tenant_key(tenant);
            for (uuid, claim) in devices {
                if let Some(device) = self.devices.get_mut(uuid) {
                    device.set_claim(key, *claim);
                }
            }
        }
        // Teams, for every tenant with a process here (members are all
        // governed, so their own settings are the file's, set above).
        for (key, tenant) in &self.names {
            for (uuid, device) in self.devices.iter_mut() {
                device.set_team(*key, self.shared.team_claim(tenant, uuid));
                device.set_team_quota(*key, self.shared.team_page(tenant, uuid).map_or(ledger::UNLIMITED, |p| p.quota_bytes));
            }
        }
    }

    fn expire_hellos(&mut self) {
        let now = Instant::now();
        let expired: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(&c.state, ConnState::Hello { deadline, .. } if *deadline < now))
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.conns.remove(&id);
        }
    }

    fn accept_all(&mut self, listener: usize) {
        loop {
            let Some(l) = self.listeners.get(listener) else { return };
            let (stream, _) = match l.listener.accept() {
                Ok(s) => s,
                Err(_) => return,
            };
            let dir_tenant = l.tenant.clone();
            let Ok(peer) = broker::peer(stream.as_raw_fd()) else { continue };
            let (mut of_uid, mut pending_of_pid) = (0, 0);
            for c in self.conns.values() {
                of_uid += usize::from(c.peer.uid == peer.uid);
                pending_of_pid += usize::from(c.peer.pid == peer.pid && matches!(c.state, ConnState::Hello { .. }));
            }
            if pending_of_pid >= MAX_PENDING_PER_PID || of_uid >= MAX_CONNS_PER_UID || self.conns.len() >= MAX_CONNS {
                let _ = broker::refuse(stream.as_raw_fd(), Refusal::TooMany);
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            let state = ConnState::Hello {
                buf: Vec::with_capacity(HELLO_BYTES),
                deadline: Instant::now() + HELLO_DEADLINE,
                ledger_fd: None,
                deferred: false,
            };
            self.conns.insert(id, Conn { stream, peer, dir_tenant, state });
        }
    }

    fn read_conn(&mut self, id: ConnId, readable: bool) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        let mut chunk = [0u8; 512];
        // A descriptor comes only with the hello; one sent later is closed.
        let read = if readable { broker::receive_now(conn.stream.as_raw_fd(), &mut chunk) } else { Ok((0, None)) };
        let (n, passed) = match read {
            Ok((0, _)) => return self.drop_conn(id),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => return self.drop_conn(id),
        };
        let bytes = chunk.get(..n).unwrap_or_default();
        match &mut conn.state {
            ConnState::Hello { buf, ledger_fd, deferred, .. } => {
                // Nothing follows a hello before its answer: a peer that
                // sends more while its hello waits is dropped, not buffered.
                if buf.len() + bytes.len() > HELLO_BYTES + MESSAGE_BYTES * 8 {
                    return self.drop_conn(id);
                }
                buf.extend_from_slice(bytes);
                if ledger_fd.is_none() {
                    *ledger_fd = passed;
                }
                let (whole, waiting) = (buf.len() >= HELLO_BYTES, *deferred);
                if whole && !waiting && !self.try_hello(id) {
                    if let Some(Conn { state: ConnState::Hello { deferred, .. }, .. }) = self.conns.get_mut(&id) {
                        *deferred = true;
                    }
                    self.deferred.push_back(id);
                }
            }
            ConnState::Joined { buf, .. } => {
                buf.extend_from_slice(bytes);
                self.messages(id);
            }
        }
    }

    /// Checks connection `id`'s whole hello if its user has budget left
    /// this round ([`HELLOS_PER_ROUND_PER_UID`]); `false` when it must
    /// wait for the next round.
    fn try_hello(&mut self, id: ConnId) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else { return true };
        let uid = conn.peer.uid;
        let ConnState::Hello { buf, ledger_fd, .. } = &mut conn.state else { return true };
        if buf.len() < HELLO_BYTES {
            return true;
        }
        let spent = self.hellos_this_round.entry(uid).or_default();
        if *spent >= HELLOS_PER_ROUND_PER_UID {
            return false;
        }
        *spent += 1;
        let mut hello = [0u8; HELLO_BYTES];
        hello.copy_from_slice(&buf[..HELLO_BYTES]);
        let rest = buf[HELLO_BYTES..].to_vec();
        // The descriptor keeps the process's lock alive while it is open:
        // it is closed as soon as the hello is checked.
        let ledger_fd = ledger_fd.take();
        self.hello(id, &hello, ledger_fd, rest);
        true
    }

    /// Checks the hellos that waited for their user's budget, oldest first.
    fn run_deferred(&mut self) {
        let waiting = std::mem::take(&mut self.deferred);
        for id in waiting {
            if !self.try_hello(id) {
                self.deferred.push_back(id);
            }
        }
    }

    fn drop_conn(&mut self, id: ConnId) {
        if let Some(Conn { state: ConnState::Joined { uuid, .. }, .. }) = self.conns.remove(&id) {
            let now = now_ns();
            if let Some(device) = self.devices.get_mut(&uuid) {
                device.leave(id, now);
            }
            self.step(uuid, now);
        }
    }

    /// Checks a hello and answers it (see the module docs).
    fn hello(&mut self, id: ConnId, bytes: &[u8; HELLO_BYTES], ledger_fd: Option<std::os::fd::OwnedFd>, rest: Vec<u8>) {
        let Some(conn) = self.conns.get(&id) else { return };
        let verdict = self.verify(conn, bytes, ledger_fd.as_ref().map(std::os::fd::AsFd::as_fd));
        drop(ledger_fd);
        let Some(conn) = self.conns.get(&id) else { return };
        let fd = conn.stream.as_raw_fd();
        let peer_uid = conn.peer.uid;
        if let Ok((hello, _, _)) = &verdict {
            if hello.slot == broker::VIEWER_SLOT {
                if let Some(device) = self.devices.get(&hello.uuid) {
                    let _ = broker::accept(fd, broker::VIEWER, device.fd());
                } else {
                    let _ = broker::refuse(fd, Refusal::UnknownDevice);
                }
                self.conns.remove(&id);
                return;
            }
        }
        let (hello, mut claim, self_declared) = match verdict {
            Ok(v) => v,
            Err(why) => {
                let _ = broker::refuse(fd, why);
                self.conns.remove(&id);
                return;
            }
        };
        // One place per process and device: a second connection of the
        // same process for the same device would only crowd its own shim out.
        let peer_pid = conn.peer.pid;
        let duplicate = self.conns.iter().any(|(other, c)| {
            *other != id && c.peer.pid == peer_pid && matches!(&c.state, ConnState::Joined { uuid, .. } if *uuid == hello.uuid)
        });
        if duplicate {
            let _ = broker::refuse(fd, Refusal::Duplicate);
            self.conns.remove(&id);
            return;
        }
        let declared = self_declared.then(|| {
            let (priority_ceiling, share_ceiling_e4) = self.ceilings_of(peer_uid);
            claim.priority = self.held_to_ceiling(&hello.tenant, peer_uid, claim.priority, priority_ceiling);
            sched::Declared { uid: peer_uid, ceiling_e4: share_ceiling_e4 }
        });
        let now = now_ns();
        if let std::collections::hash_map::Entry::Vacant(vacant) = self.devices.entry(hello.uuid) {
            match Grants::create_sealed(&crate::nvml::uuid_string(&hello.uuid)) {
                Ok(grants) => {
                    vacant.insert(DeviceSched::new(grants));
                }
                Err(e) => {
                    log::warn(&format!("cannot make a grant page: {e}"));
                    let _ = broker::refuse(fd, Refusal::Internal);
                    self.conns.remove(&id);
                    return;
                }
            }
        }
        let Some(device) = self.devices.get_mut(&hello.uuid) else { return };
        let key = tenant_key(&hello.tenant);
        let team = self.shared.team_claim(&hello.tenant, &hello.uuid);
        let Some(member) = device.join_in_team(key, claim, declared, team, id, now) else {
            let _ = broker::refuse(fd, Refusal::Full);
            self.conns.remove(&id);
            return;
        };
        // Its team's memory: the quota in its record before the page (and
        // the record) reach it.
        let team_page = self.shared.team_page(&hello.tenant, &hello.uuid);
        device.set_team_quota(key, team_page.as_ref().map_or(ledger::UNLIMITED, |p| p.quota_bytes));
        // Stepped before the page is handed over: a setting that ends the
        // device's open grant ends it before this process can read it.
        self.step(hello.uuid, now);
        let Some(device) = self.devices.get_mut(&hello.uuid) else { return };
        if broker::accept_in_team(fd, member, device.fd(), team_page.as_ref().map(|p| p.usage.fd())).is_err() {
            device.leave(id, now);
            self.conns.remove(&id);
            return;
        }
        self.names.insert(key, hello.tenant.clone());
        self.shared.note_asked(&hello);
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = ConnState::Joined { uuid: hello.uuid, tenant: hello.tenant, buf: rest };
        }
        self.messages(id);
        self.step(hello.uuid, now);
    }

    /// User `uid`'s priority ceiling and share ceiling (ratio × 10 000).
    fn ceilings_of(&mut self, uid: u32) -> (i32, u32) {
        const LOOKUP_EVERY: Duration = Duration::from_secs(60);
        if let Some((priority, share, _)) = self.ceilings.get(&uid).filter(|(_, _, at)| at.elapsed() < LOOKUP_EVERY) {
            return (*priority, *share);
        }
        let groups = host::groups_of(uid);
        let priority = self.shared.priority_ceilings.lock().unwrap_or_else(|e| e.into_inner()).of(uid, &groups);
        let share = self.shared.share_ceilings.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(i32::MAX, |c| c.of(uid, &groups));
        let share = share.clamp(0, ledger::compute::WHOLE_DEVICE_RATIO_E4 as i32) as u32;
        self.ceilings.insert(uid, (priority, share, Instant::now()));
        (priority, share)
    }

    /// `priority`, or `ceiling` (user `uid`'s) when it is lower (said once
    /// per tenant).
    fn held_to_ceiling(&mut self, tenant: &str, uid: u32, priority: i32, ceiling: i32) -> i32 {
        if priority <= ceiling {
            return priority;
        }
        if self.lowered.len() < 4096 && self.lowered.insert(tenant.to_string()) {
            log::warn(&format!(
                "tenant {tenant}: its process (uid {uid}) asks for compute priority {priority}, above the {ceiling} that \
                 [priority_ceilings] allows uid {uid}; it runs at {ceiling}"
            ));
        }
        ceiling
    }

    fn verify(
        &self,
        conn: &Conn,
        bytes: &[u8; HELLO_BYTES],
        ledger_fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<(Hello, Claim, bool), Refusal> {
        let hello = Hello::decode(bytes).ok_or(Refusal::Malformed)?;
        if conn.dir_tenant.as_ref().is_some_and(|t| *t != hello.tenant) {
            return Err(Refusal::NotYourSlot);
        }
        if hello.slot == broker::VIEWER_SLOT {
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            return if conn.peer.uid == 0 || conn.peer.uid == me {
                Ok((hello, Claim::default(), false))
            } else {
                Err(Refusal::NotYourSlot)
            };
        }
        if hello.slot as usize >= ledger::MAX_SLOTS {
            return Err(Refusal::Malformed);
        }
        let layout = if conn.dir_tenant.is_some() { Layout::TenantDirs } else { Layout::Flat };
        let path = ledger::tenant_path(&discovery::tenant_ledger_dir(&self.dir, &hello.tenant, layout), &hello.tenant);
        let ledger = ledger::Ledger::open(&path).map_err(|_| Refusal::NotYourSlot)?;
        if ledger.tenant() != hello.tenant {
            return Err(Refusal::NotYourSlot);
        }
        // The kernel's word, in bounded time: the descriptor the process
        // sent is that ledger and holds the slot's lock (never a walk of
        // the process's open files, whose cost the process decides).
        let passed = ledger_fd.ok_or(Refusal::NotYourSlot)?;
        if !ledger.passed_descriptor_holds(passed, hello.slot as usize) {
            return Err(Refusal::NotYourSlot);
        }
        let entry = ledger.devices().into_iter().find(|d| d.uuid == hello.uuid);
        let known = match &*self.shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(nvml) => nvml.contains(&hello.uuid),
            None => entry.is_some() && (self.devices.contains_key(&hello.uuid) || self.devices.len() < MAX_DEVICES),
        };
        if !known {
            return Err(Refusal::UnknownDevice);
        }
        let configured =
            self.shared.configured.lock().unwrap_or_else(|e| e.into_inner()).get(&hello.tenant).map(|d| d.get(&hello.uuid).copied());
        // A team's member declares nothing: its team and its settings are
        // the file's alone, whatever its page says.
        let in_team =
            configured.is_some() && self.shared.teams.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|t| t.config.has(&hello.tenant));
        let configured = if in_team { Some(configured.flatten()) } else { configured };
        let self_declared = configured.is_none();
        let claim = match configured {
            // A configured tenant gets what the file says, and nothing
            // where it says nothing.
            Some(on_device) => on_device.unwrap_or_default(),
            None => entry
                .map(|e| {
                    let p = ledger.compute_policy(e.index);
                    Claim { share_e4: p.share_ratio_e4, limit_e4: p.limit_ratio_e4, priority: p.priority }
                })
                .unwrap_or_default(),
        };
        Ok((hello, claim, self_declared))
    }

    fn messages(&mut self, id: ConnId) {
        let now = now_ns();
        let Some(Conn { state: ConnState::Joined { uuid, .. }, .. }) = self.conns.get(&id) else { return };
        let uuid = *uuid;
        // One whole message at a time, taken off the front of the buffer.
        loop {
            let Some(Conn { state: ConnState::Joined { buf, .. }, .. }) = self.conns.get_mut(&id) else { return };
            if buf.len() < MESSAGE_BYTES {
                break;
            }
            let mut message = [0u8; MESSAGE_BYTES];
            message.copy_from_slice(&buf[..MESSAGE_BYTES]);
            buf.drain(..MESSAGE_BYTES);
            match broker::decode(&message) {
                Some((op, seq)) if op != Op::Revoke => {
                    if let Some(device) = self.devices.get_mut(&uuid) {
                        device.message(id, op, seq, now);
                    }
                }
                // Nonsense ends the connection (its process loses its place).
                _ => return self.drop_conn(id),
            }
        }
        self.step(uuid, now);
    }

    fn step(&mut self, uuid: [u8; 16], now: u64) {
        let Some(device) = self.devices.get_mut(&uuid) else { return };
        let effects = device.step(now);
        for id in effects.revoke {
            if let Some(conn) = self.conns.get(&id) {
                // A process whose socket is full is stuck or hostile: it
                // will be late, and the turn moves on without it.
                let _ = (&conn.stream).write(&broker::encode(Op::Revoke, 0));
            }
        }
        for id in effects.late {
            if let Some(Conn { state: ConnState::Joined { tenant, .. }, peer, .. }) = self.conns.get(&id) {
                log::warn(&format!(
                    "tenant {tenant}: process {} did not finish its work within {} ms of the end of its turn on device {}; \
                     the turn moved on without it",
                    peer.pid,
                    sched::DRAIN_LIMIT_NS / 1_000_000,
                    crate::nvml::uuid_string(&uuid)
                ));
                let mut views = self.shared.views.lock().unwrap_or_else(|e| e.into_inner());
                let report = views.entry(uuid).or_default();
                report.late.push((tenant.clone(), peer.pid));
                if report.late.len() > 64 {
                    report.late.remove(0);
                }
            }
        }
    }

    /// Publishes every device's members for the main loop.
    fn report(&mut self) {
        let mut views = self.shared.views.lock().unwrap_or_else(|e| e.into_inner());
        for (uuid, device) in &self.devices {
            let report = views.entry(*uuid).or_default();
            report.arbitrated = device.page().header.arbitrated.load(std::sync::atomic::Ordering::Relaxed) != 0;
            report.members = device.members_view().into_iter().map(|m| (self.names.get(&m.key).cloned().unwrap_or_default(), m)).collect();
            report.late_total = device.late_total;
            report.processes_known = true;
            report.processes = self
                .conns
                .values()
                .filter_map(|c| match &c.state {
                    ConnState::Joined { uuid: u, tenant, .. } if u == uuid => Some((tenant.clone(), c.peer.pid)),
                    _ => None,
                })
                .collect();
        }
        let _ = self.started;
    }
}

#[derive(Clone, Copy)]
enum Source {
    Listener(usize),
    Conn(ConnId),
}
