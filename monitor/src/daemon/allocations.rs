//! The monitor's side of the one local path ([`crate::allocation`]): the
//! control socket, and the tenants admitted through it.
//!
//! The socket lives in the monitor's own 0700 directory and answers root or
//! the monitor's own uid only (checked from the kernel's peer credentials,
//! not from anything the client says). Its thread reads one request per
//! connection and hands it to the rounds, which decide it where the
//! configuration is decided: an admission is checked against the devices
//! NVML shows (a cap above a device's memory, shares or caps that would add
//! up past a device, a tenant the configuration file names, a partitioned
//! GPU are refused), kept, and governed from then on as a configured
//! tenant is: the policy writes its caps and compute settings, and every
//! device it was not given has a cap of 0 bytes. Its answer is sent after
//! the policy has run, so the tenant's ledger exists with its caps written.
//!
//! A released tenant is governed as before while any of its processes
//! lives (they keep the caps they ran under); once none does, its ledger
//! (and in the `tenant-dirs` layout its directory) is removed and it is
//! forgotten.
//!
//! The allocations are kept in `<dir>/.monitor/allocations.json`, written
//! by the monitor alone, so a restarted monitor governs them as before.

use super::ledgers::LedgerSet;
use super::log;
use crate::allocation::{self, Admission, Answer, DeviceSlice, GrantedDevice, Request};
use crate::config::{Config, DeviceKey, TenantConfig};
use crate::discovery::{self, Layout};
use crate::nvml::{any_uuid_bytes, GpuInfo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// The file the allocations are kept in, in the monitor's directory.
const STATE_FILE: &str = "allocations.json";
/// Allocations held at most (admitted and released together).
pub const MAX_ALLOCATIONS: usize = 4096;
/// How long a client may take to send its request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long a client's connection waits for the rounds to decide.
const DECISION_DEADLINE: Duration = Duration::from_secs(30);

/// A request waiting for the rounds, and where its answer goes.
pub struct Pending {
    pub request: Request,
    reply: SyncSender<Answer>,
}

impl Pending {
    /// Sends the answer; a client that went away is not waited for.
    pub fn answer(self, answer: Answer) {
        let _ = self.reply.try_send(answer);
    }
}

/// The control socket: its thread queues requests for the rounds.
pub struct Control {
    requests: Receiver<Pending>,
    waiting: Arc<AtomicUsize>,
}

impl Control {
    /// Listens on `<dir>/.monitor/control.sock` (the directory exists: the
    /// policy made it).
    pub fn start(dir: &Path) -> Result<Control, String> {
        let path = allocation::socket_path(dir);
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(format!("{} is {} and not the monitor's socket; remove it", path.display(), ledger::FileKind::of(&meta)));
            }
            std::fs::remove_file(&path).map_err(|e| format!("cannot remove the old socket {}: {e}", path.display()))?;
        }
        let listener =
            ledger::broker::with_short_socket_path(&allocation::state_dir(dir), allocation::SOCKET_NAME, |p| UnixListener::bind(p))
                .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(|e| format!("{}: {e}", path.display()))?;
        let (sender, requests) = mpsc::sync_channel(64);
        let waiting = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&waiting);
        std::thread::Builder::new()
            .name("gpuslice-control".into())
            .spawn(move || accept_loop(listener, sender, counter))
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        Ok(Control { requests, waiting })
    }

    /// Whether a request waits for the rounds.
    pub fn has_pending(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// The requests waiting now.
    pub fn take(&self) -> Vec<Pending> {
        let taken: Vec<Pending> = self.requests.try_iter().collect();
        self.waiting.fetch_sub(taken.len(), Ordering::AcqRel);
        taken
    }
}

fn accept_loop(listener: UnixListener, sender: SyncSender<Pending>, waiting: Arc<AtomicUsize>) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        // One connection at a time: only root reaches the socket, and each
        // is bounded by the deadlines below.
        serve(stream, me, &sender, &waiting);
    }
}

/// The uid of the process at the other end of `stream`, as the kernel says.
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into the valid local `cred`.
    let rc = unsafe { libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len) };
    (rc == 0).then_some(cred.uid)
}

fn serve(stream: UnixStream, me: u32, sender: &SyncSender<Pending>, waiting: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(REQUEST_DEADLINE));
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let reply = |answer: &Answer| {
        if let Ok(mut line) = serde_json::to_vec(answer) {
            line.push(b'\n');
            let _ = (&stream).write_all(&line);
        }
    };
    match peer_uid(&stream) {
        Some(uid) if uid == 0 || uid == me => {}
        uid => {
            let who = uid.map_or_else(|| "an unknown user".to_string(), |u| format!("uid {u}"));
            return reply(&Answer::refused(format!("{who} may not admit or release tenants: only root or the monitor's user may")));
        }
    }
    let mut line = String::new();
    let read = BufReader::new(std::io::Read::take(&stream, allocation::MAX_LINE_BYTES as u64)).read_line(&mut line);
    if read.is_err() || !line.ends_with('\n') {
        return reply(&Answer::refused(format!(
            "expected one JSON request on one line of at most {} bytes, sent within {} s",
            allocation::MAX_LINE_BYTES,
            REQUEST_DEADLINE.as_secs()
        )));
    }
    let request: Request = match serde_json::from_str(&line) {
        Ok(request) => request,
        Err(e) => {
            return reply(&Answer::refused(format!(
                "the request is not understood ({e}); expected {{\"op\":\"admit\",…}}, {{\"op\":\"release\",\"tenant\":…}} or {{\"op\":\"list\"}}"
            )))
        }
    };
    let (answer_to, answer) = mpsc::sync_channel(1);
    waiting.fetch_add(1, Ordering::AcqRel);
    if sender.send(Pending { request, reply: answer_to }).is_err() {
        waiting.fetch_sub(1, Ordering::AcqRel);
        return reply(&Answer::refused("the monitor is stopping"));
    }
    match answer.recv_timeout(DECISION_DEADLINE) {
        Ok(answer) => reply(&answer),
        Err(_) => reply(&Answer::refused(format!("the monitor did not decide within {} s", DECISION_DEADLINE.as_secs()))),
    }
}

/// One tenant admitted through the socket, its devices by NVML's UUID.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Held {
    admission: Admission,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Kept {
    #[serde(default)]
    admitted: BTreeMap<String, Held>,
    #[serde(default)]
    released: BTreeMap<String, Held>,
}

/// The admitted tenants, and the released ones whose processes still live.
pub struct Allocations {
    kept: Kept,
    path: PathBuf,
    dir: PathBuf,
    layout: Layout,
}

/// What the rounds do with a request once decided: answer it at once, or
/// after the policy has run (when the tenant's ledger is in place).
pub enum Decided {
    Now(Box<Answer>),
    AfterPolicy(String),
    List,
}

impl Allocations {
    /// The allocations a previous run kept in `<dir>/.monitor`.
    pub fn load(dir: &Path, layout: Layout) -> Allocations {
        let path = allocation::state_dir(dir).join(STATE_FILE);
        let kept = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                log::error(&format!("{}: {e}; the allocations in it are not governed until admitted again", path.display()));
                Kept::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Kept::default(),
            Err(e) => {
                log::error(&format!("cannot read {}: {e}; the allocations in it are not governed until admitted again", path.display()));
                Kept::default()
            }
        };
        if !kept.admitted.is_empty() || !kept.released.is_empty() {
            log::info(&format!(
                "allocations from {}: {} admitted, {} released with processes left",
                path.display(),
                kept.admitted.len(),
                kept.released.len()
            ));
        }
        Allocations { kept, path, dir: dir.to_path_buf(), layout }
    }

    fn save(&self) {
        let text = match serde_json::to_string_pretty(&self.kept) {
            Ok(text) => text,
            Err(e) => return log::error(&format!("cannot record the allocations: {e}")),
        };
        let tmp = self.path.with_extension("json.tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &self.path)) {
            log::error(&format!("cannot record the allocations in {}: {e}", self.path.display()));
        }
    }

    /// Decides `request` against the configuration and the devices NVML
    /// shows (`None`: ledger-only mode).
    pub fn decide(&mut self, request: &Request, config: &Config, gpus: Option<&[GpuInfo]>) -> Decided {
        match request {
            Request::List => Decided::List,
            Request::Release { tenant } => {
                if let Some(held) = self.kept.admitted.remove(tenant) {
                    self.kept.released.insert(tenant.clone(), held);
                    self.save();
                    log::info(&format!("tenant {tenant} released"));
                    Decided::AfterPolicy(tenant.clone())
                } else if self.kept.released.contains_key(tenant) {
                    Decided::AfterPolicy(tenant.clone())
                } else {
                    Decided::Now(Box::new(Answer {
                        ok: true,
                        tenant: Some(tenant.clone()),
                        state: Some("gone".into()),
                        message: Some(format!("tenant {tenant} was not admitted: nothing to release")),
                        ..Answer::default()
                    }))
                }
            }
            Request::Admit(admission) => match self.check(admission, config, gpus) {
                Err(e) => Decided::Now(Box::new(Answer::refused(e))),
                Ok(resolved) => {
                    let tenant = resolved.tenant.clone();
                    self.kept.released.remove(&tenant);
                    let held = Held { admission: resolved };
                    if self.kept.admitted.get(&tenant) != Some(&held) {
                        log::info(&format!("tenant {tenant} admitted: {}", describe(&held.admission)));
                        self.kept.admitted.insert(tenant.clone(), held);
                        self.save();
                    }
                    Decided::AfterPolicy(tenant)
                }
            },
        }
    }

    /// `admission` checked, with each device named by NVML's UUID.
    fn check(&self, admission: &Admission, config: &Config, gpus: Option<&[GpuInfo]>) -> Result<Admission, String> {
        let tenant = &admission.tenant;
        ledger::units::validate_tenant_name(tenant).map_err(|e| format!("tenant name {tenant:?}: {e}"))?;
        if config.tenants.contains_key(tenant) {
            return Err(format!("tenant {tenant} is named by the monitor's configuration file, which governs it; choose another name"));
        }
        let known = self.kept.admitted.contains_key(tenant) || self.kept.released.contains_key(tenant);
        if !known && self.kept.admitted.len() + self.kept.released.len() >= MAX_ALLOCATIONS {
            return Err(format!("the monitor holds {MAX_ALLOCATIONS} allocations already; release some first"));
        }
        if admission.devices.is_empty() {
            return Err(format!("tenant {tenant}: no device given; name at least one by host index or UUID"));
        }
        if ledger::compute::priority_in_range(i64::from(admission.priority)).is_none() {
            return Err(format!("tenant {tenant}: priority {} is out of range: expected -1000 to 1000", admission.priority));
        }
        check_labels(&admission.labels).map_err(|e| format!("tenant {tenant}: {e}"))?;
        let mut devices: Vec<DeviceSlice> = Vec::new();
        for slice in &admission.devices {
            let uuid = resolve_device(&slice.device, gpus).map_err(|e| format!("tenant {tenant}: {e}"))?;
            if devices.iter().any(|d| d.device == uuid) {
                return Err(format!("tenant {tenant}: device {} ({uuid}) is given twice", slice.device));
            }
            let gpu = gpus.and_then(|g| g.iter().find(|g| g.uuid == uuid));
            let share = percent(slice.share_percent, "share").map_err(|e| format!("tenant {tenant} device {uuid}: {e}"))?;
            let limit = percent(slice.limit_percent, "limit").map_err(|e| format!("tenant {tenant} device {uuid}: {e}"))?;
            if let (Some(share), Some(limit)) = (share, limit) {
                if share > limit {
                    return Err(format!(
                        "tenant {tenant} device {uuid}: a share of {}% above the limit of {}% cannot be given",
                        allocation::ratio_percent(share),
                        allocation::ratio_percent(limit)
                    ));
                }
            }
            match (slice.memory_bytes, gpu) {
                (Some(0), _) => return Err(format!("tenant {tenant} device {uuid}: a cap of 0 bytes; give at least 1 byte")),
                (Some(bytes), Some(gpu)) if bytes > gpu.total_bytes => {
                    return Err(format!(
                        "tenant {tenant} device {uuid}: a cap of {} is more than the device's {} of memory",
                        crate::text::human_bytes(bytes),
                        crate::text::human_bytes(gpu.total_bytes)
                    ))
                }
                _ => {}
            }
            devices.push(DeviceSlice {
                device: uuid,
                memory_bytes: slice.memory_bytes,
                share_percent: share.map(allocation::ratio_percent),
                limit_percent: limit.map(allocation::ratio_percent),
            });
        }
        // What the other allocations hold on each of these devices: the
        // cluster's scheduler never gives more than a device has, so more
        // means two allocations believe they own the same part.
        for slice in &devices {
            let others = self.kept.admitted.values().chain(self.kept.released.values()).filter(|h| h.admission.tenant != *tenant);
            let mut shares_e4 = slice.share_percent.and_then(allocation::percent_ratio_e4).unwrap_or(0);
            let mut bytes = slice.memory_bytes.unwrap_or(0);
            let mut holders = Vec::new();
            for other in others {
                for theirs in other.admission.devices.iter().filter(|d| d.device == slice.device) {
                    shares_e4 += theirs.share_percent.and_then(allocation::percent_ratio_e4).unwrap_or(0);
                    bytes = bytes.saturating_add(theirs.memory_bytes.unwrap_or(0));
                    holders.push(other.admission.tenant.clone());
                }
            }
            if shares_e4 > 10_000 {
                return Err(format!(
                    "tenant {tenant} device {}: the shares given on it would add up to {}% ({} hold the rest); \
                     shares on a device add up to at most 100%",
                    slice.device,
                    allocation::ratio_percent(shares_e4),
                    holders.join(", ")
                ));
            }
            if let Some(gpu) = gpus.and_then(|g| g.iter().find(|g| g.uuid == slice.device)) {
                if bytes > gpu.total_bytes {
                    return Err(format!(
                        "tenant {tenant} device {}: the caps given on it would add up to {}, more than its {} ({} hold the rest)",
                        slice.device,
                        crate::text::human_bytes(bytes),
                        crate::text::human_bytes(gpu.total_bytes),
                        holders.join(", ")
                    ));
                }
            }
        }
        Ok(Admission { devices, ..admission.clone() })
    }

    /// The allocated tenants as the configuration would name them: admitted
    /// ones and released ones with processes left, each in the team that
    /// names the `account` its admission recorded, if one does.
    pub fn effective(&self, config: &Config) -> Config {
        let mut effective = config.clone();
        let held: Vec<&Held> = self.kept.admitted.values().chain(self.kept.released.values()).collect();
        for held in &held {
            effective.tenants.entry(held.admission.tenant.clone()).or_insert_with(|| tenant_config(&held.admission));
        }
        effective.resolve_accounts(
            held.iter().filter_map(|h| Some((h.admission.tenant.as_str(), h.admission.labels.get(allocation::ACCOUNT_LABEL)?.as_str()))),
        );
        effective
    }

    /// Before the policy runs: in the flat layout, what took an admitted
    /// tenant's ledger name and is neither root's nor its owner's goes aside.
    pub fn guard_names(&self, ledgers: &mut LedgerSet) {
        if self.layout != Layout::Flat {
            return;
        }
        for held in self.kept.admitted.values() {
            if let Some(owner) = held.admission.owner_uid {
                ledgers.keep_name_for(&held.admission.tenant, owner);
            }
        }
    }

    /// After the policy ran: admitted tenants' ledgers are their owners'.
    pub fn hand_over(&self, ledgers: &LedgerSet) {
        if self.layout != Layout::Flat {
            return;
        }
        for held in self.kept.admitted.values() {
            if let Some(owner) = held.admission.owner_uid {
                ledgers.give_to(&held.admission.tenant, owner);
            }
        }
    }

    /// Forgets the released tenants none of whose processes lives, and
    /// removes their ledgers.
    pub fn reap(&mut self, ledgers: &LedgerSet) {
        let mut gone = Vec::new();
        for tenant in self.kept.released.keys() {
            let ledger = ledgers.ledgers().find(|l| l.tenant() == *tenant);
            if ledger.is_some_and(|l| l.slots().iter().any(|s| s.alive)) {
                continue;
            }
            let path = ledger.map(|l| l.path().to_path_buf());
            gone.push((tenant.clone(), path));
        }
        if gone.is_empty() {
            return;
        }
        for (tenant, path) in gone {
            self.kept.released.remove(&tenant);
            let removed = match (self.layout, path) {
                (Layout::TenantDirs, _) => {
                    let dir = discovery::tenant_ledger_dir(&self.dir, &tenant, Layout::TenantDirs);
                    std::fs::remove_dir_all(&dir).map(|_| dir)
                }
                (Layout::Flat, Some(path)) => std::fs::remove_file(&path).map(|_| path),
                (Layout::Flat, None) => Ok(PathBuf::new()),
            };
            match removed {
                Ok(path) if path.as_os_str().is_empty() => log::info(&format!("tenant {tenant} is gone")),
                Ok(path) => log::info(&format!("tenant {tenant} is gone: no process of it lives; removed {}", path.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => log::info(&format!("tenant {tenant} is gone")),
                Err(e) => log::warn(&format!("tenant {tenant} is gone, but its ledger could not be removed: {e}")),
            }
        }
        self.save();
    }

    /// The answer about `tenant` as things stand after the policy ran.
    pub fn answer_for(&self, tenant: &str, ledgers: &LedgerSet) -> Answer {
        let (held, state) = match (self.kept.admitted.get(tenant), self.kept.released.get(tenant)) {
            (Some(held), _) => (held, "admitted"),
            (None, Some(held)) => (held, "released"),
            (None, None) => {
                return Answer {
                    ok: true,
                    tenant: Some(tenant.into()),
                    state: Some("gone".into()),
                    live_processes: Some(0),
                    held_bytes: Some(0),
                    message: Some(format!("tenant {tenant} is released and no process of it lives")),
                    ..Answer::default()
                }
            }
        };
        let ledger = ledgers.ledgers().find(|l| l.tenant() == tenant);
        if state == "admitted" && ledger.is_none() {
            return Answer::refused(format!(
                "the ledger of tenant {tenant} could not be made ready (the monitor's log says why); the tenant stays admitted \
                 and is governed once it can be"
            ));
        }
        let slots = ledger.map(|l| l.slots()).unwrap_or_default();
        let alive: Vec<_> = slots.iter().filter(|s| s.alive).collect();
        let held_bytes = alive.iter().flat_map(|s| s.bytes_per_device.iter().map(|(_, b)| *b)).fold(0u64, u64::saturating_add);
        let devices = held
            .admission
            .devices
            .iter()
            .map(|slice| {
                let page = ledger.and_then(|l| {
                    let wanted = any_uuid_bytes(&slice.device)?;
                    let entry = l.devices().into_iter().find(|e| e.uuid == wanted)?;
                    Some(l.memory_limit_bytes(entry.index))
                });
                GrantedDevice {
                    uuid: slice.device.clone(),
                    memory_bytes: page.or(slice.memory_bytes).filter(|b| *b != ledger::UNLIMITED),
                    share_percent: slice.share_percent,
                    limit_percent: slice.limit_percent,
                }
            })
            .collect();
        let ledger_dir = discovery::tenant_ledger_dir(&self.dir, tenant, self.layout);
        Answer {
            ok: true,
            error: None,
            tenant: Some(tenant.into()),
            state: Some(state.into()),
            ledger: Some(ledger.map_or_else(|| ledger::tenant_path(&ledger_dir, tenant), |l| l.path().to_path_buf())),
            ledger_dir: Some(ledger_dir),
            devices,
            owner_uid: held.admission.owner_uid,
            labels: held.admission.labels.clone(),
            live_processes: Some(alive.len() as u32),
            held_bytes: Some(held_bytes),
            message: (state == "released" && !alive.is_empty()).then(|| {
                format!(
                    "{} process(es) of tenant {tenant} still live, holding {}; they keep its caps until they end",
                    alive.len(),
                    crate::text::human_bytes(held_bytes)
                )
            }),
            tenants: None,
        }
    }

    /// Every allocation, for `/metrics`.
    pub fn info(&self) -> Vec<crate::metrics::AllocationInfo> {
        let of = |held: &Held, state| crate::metrics::AllocationInfo {
            tenant: held.admission.tenant.clone(),
            state,
            labels: held.admission.labels.clone(),
        };
        self.kept.admitted.values().map(|h| of(h, "admitted")).chain(self.kept.released.values().map(|h| of(h, "released"))).collect()
    }

    /// The answer to `list`.
    pub fn list(&self, ledgers: &LedgerSet) -> Answer {
        let tenants = self.kept.admitted.keys().chain(self.kept.released.keys()).map(|t| self.answer_for(t, ledgers)).collect();
        Answer { ok: true, tenants: Some(tenants), ..Answer::default() }
    }
}

/// The configuration entry an admission stands for: its caps and compute
/// settings on its devices, and a cap of 0 bytes on every other.
fn tenant_config(admission: &Admission) -> TenantConfig {
    let mut config = TenantConfig::default();
    config.memory_bytes.all = Some(0);
    for slice in &admission.devices {
        let key = DeviceKey::Uuid(slice.device.to_ascii_lowercase());
        let _ = config.memory_bytes.insert(key.clone(), slice.memory_bytes.unwrap_or(ledger::UNLIMITED));
        if let Some(share) = slice.share_percent.and_then(allocation::percent_ratio_e4) {
            let _ = config.compute_share_ratio_e4.insert(key.clone(), share);
        }
        if let Some(limit) = slice.limit_percent.and_then(allocation::percent_ratio_e4) {
            let _ = config.compute_limit_ratio_e4.insert(key.clone(), limit);
        }
        let _ = config.priority.insert(key, admission.priority);
    }
    config
}

/// A percentage given for `what`, as ratio × 10 000.
fn percent(value: Option<f64>, what: &str) -> Result<Option<u32>, String> {
    match value {
        None => Ok(None),
        Some(p) => allocation::percent_ratio_e4(p).map(Some).ok_or_else(|| format!("{what} {p}: expected a percentage from 0.01 to 100")),
    }
}

/// NVML's UUID of the device `device` names: a host index (a GPU, not a
/// MIG device) or a UUID, any case.
fn resolve_device(device: &str, gpus: Option<&[GpuInfo]>) -> Result<String, String> {
    let device = device.trim_ascii();
    let Some(gpus) = gpus else {
        // Without NVML the monitor cannot know an index's device, or check a
        // cap against the device's memory: a UUID is taken as given.
        return abi::uuid::parse_uuid(device)
            .map(|uuid| uuid.to_string())
            .ok_or_else(|| format!("device {device:?}: without NVML only a UUID (GPU-… or MIG-…) names a device"));
    };
    let shown = gpus.iter().filter(|g| g.parent_uuid.is_none()).map(|g| g.index.to_string()).collect::<Vec<_>>().join(", ");
    let found = if !device.is_empty() && device.bytes().all(|b| b.is_ascii_digit()) {
        let index = ledger::units::parse_device_index(device).map_err(|e| format!("device {device:?}: {e}"))?;
        gpus.iter()
            .find(|g| g.index == index && g.parent_uuid.is_none())
            .ok_or_else(|| format!("device {device}: this host has no device {index} (it has {shown})"))?
    } else {
        gpus.iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(device))
            .ok_or_else(|| format!("device {device:?}: no device of this host has this UUID (expected an index ({shown}) or a UUID)"))?
    };
    if let Some(mig) = gpus.iter().find(|m| m.parent_uuid.as_deref() == Some(found.uuid.as_str())) {
        return Err(format!(
            "device {device} ({}) is partitioned into MIG devices and runs nothing itself; allocate one of them, e.g. {}",
            found.uuid, mig.uuid
        ));
    }
    Ok(found.uuid.clone())
}

fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > allocation::MAX_LABELS {
        return Err(format!("{} labels; at most {} are kept", labels.len(), allocation::MAX_LABELS));
    }
    for (key, value) in labels {
        let key_ok = !key.is_empty()
            && key.len() <= allocation::MAX_LABEL_KEY_BYTES
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !key_ok {
            return Err(format!("label key {key:?}: expected 1 to {} characters from A-Z a-z 0-9 _ - .", allocation::MAX_LABEL_KEY_BYTES));
        }
        if value.len() > allocation::MAX_LABEL_VALUE_BYTES || value.chars().any(|c| c.is_control()) {
            return Err(format!(
                "label {key}: the value must be at most {} bytes with no control characters",
                allocation::MAX_LABEL_VALUE_BYTES
            ));
        }
    }
    Ok(())
}

/// One line about an admission, for the log.
fn describe(admission: &Admission) -> String {
    let devices: Vec<String> = admission
        .devices
        .iter()
        .map(|d| {
            let mut parts = vec![d.memory_bytes.map_or_else(|| "no cap".to_string(), crate::text::human_bytes)];
            parts.extend(d.share_percent.map(|p| format!("share {p}%")));
            parts.extend(d.limit_percent.map(|p| format!("limit {p}%")));
            format!("{} ({})", d.device, parts.join(", "))
        })
        .collect();
    let owner = admission.owner_uid.map(|u| format!(", owner uid {u}")).unwrap_or_default();
    let labels: Vec<String> = admission.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let labels = if labels.is_empty() { String::new() } else { format!(", {}", labels.join(" ")) };
    format!("{}{owner}{labels}", devices.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-11111111-2222-3333-4444-555555555555";
    const B: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

    fn gpu(index: u32, uuid: &str, total_bytes: u64) -> GpuInfo {
        GpuInfo {
            index,
            uuid: uuid.into(),
            parent_uuid: None,
            mig_profile: None,
            total_bytes,
            used_bytes: 0,
            utilization_ratio: None,
            processes: Vec::new(),
            health: None,
        }
    }

    fn admission(tenant: &str, device: &str, memory_bytes: Option<u64>, share_percent: Option<f64>) -> Request {
        Request::Admit(Admission {
            tenant: tenant.into(),
            owner_uid: None,
            devices: vec![DeviceSlice { device: device.into(), memory_bytes, share_percent, limit_percent: None }],
            priority: 0,
            labels: BTreeMap::new(),
        })
    }

    fn fresh() -> (Allocations, tempdir::Dir) {
        let dir = tempdir::Dir::new();
        std::fs::create_dir_all(allocation::state_dir(dir.path())).unwrap();
        (Allocations::load(dir.path(), Layout::Flat), dir)
    }

    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "gpuslice-allocations-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn refused(decided: Decided) -> String {
        match decided {
            Decided::Now(answer) if !answer.ok => answer.error.unwrap_or_default(),
            _ => panic!("not refused"),
        }
    }

    #[test]
    fn an_admission_is_its_devices_slices_and_nothing_elsewhere() {
        let (mut allocations, _dir) = fresh();
        let gpus = [gpu(0, A, 16 << 30), gpu(1, B, 16 << 30)];
        assert!(
            matches!(allocations.decide(&admission("slurm-1", "0", Some(4 << 30), Some(25.0)), &Config::default(), Some(&gpus)), Decided::AfterPolicy(t) if t == "slurm-1")
        );
        let config = allocations.effective(&Config::default());
        let tenant = &config.tenants["slurm-1"];
        assert_eq!(tenant.memory_for(A, Some(0)), Some(4 << 30));
        assert_eq!(tenant.memory_for(B, Some(1)), Some(0), "a device not allocated is capped at 0 bytes");
        assert_eq!(tenant.compute_for(A, Some(0)).map(|c| c.share_ratio_e4), Some(2500));
        assert_eq!(tenant.compute_for(B, Some(1)), None);
        // Kept across a restart.
        let again = Allocations::load(allocations.dir.as_path(), Layout::Flat);
        assert_eq!(again.effective(&Config::default()).tenants["slurm-1"], *tenant);
    }

    #[test]
    fn what_no_device_has_room_for_is_refused() {
        let (mut allocations, _dir) = fresh();
        let gpus = [gpu(0, A, 16 << 30)];
        let none = Config::default();
        assert!(
            refused(allocations.decide(&admission("a", "0", Some(17 << 30), None), &none, Some(&gpus))).contains("more than the device's")
        );
        assert!(refused(allocations.decide(&admission("a", "3", None, None), &none, Some(&gpus))).contains("no device 3"));
        assert!(refused(allocations.decide(&admission("a", "0", None, Some(0.0)), &none, Some(&gpus))).contains("expected a percentage"));
        assert!(refused(allocations.decide(&admission("a/b", "0", None, None), &none, Some(&gpus))).contains("tenant name"));
        assert!(matches!(
            allocations.decide(&admission("a", "0", Some(10 << 30), Some(75.0)), &none, Some(&gpus)),
            Decided::AfterPolicy(_)
        ));
        let over_shares = refused(allocations.decide(&admission("b", A, Some(1 << 30), Some(30.0)), &none, Some(&gpus)));
        assert!(over_shares.contains("105%") && over_shares.contains("a hold"), "{over_shares}");
        let over_bytes = refused(allocations.decide(&admission("b", "0", Some(7 << 30), Some(25.0)), &none, Some(&gpus)));
        assert!(over_bytes.contains("more than its 16.0 GiB"), "{over_bytes}");
        // The same tenant again replaces its own slice rather than adding to it.
        assert!(matches!(
            allocations.decide(&admission("a", "0", Some(16 << 30), Some(100.0)), &none, Some(&gpus)),
            Decided::AfterPolicy(_)
        ));
        let named = crate::config::parse("[tenants.team]\nmemory = \"1GiB\"\n").unwrap();
        assert!(refused(allocations.decide(&admission("team", "0", None, None), &named, Some(&gpus))).contains("configuration file"));
    }

    #[test]
    fn a_released_tenant_stays_governed_until_its_processes_end() {
        let (mut allocations, _dir) = fresh();
        let gpus = [gpu(0, A, 16 << 30)];
        let none = Config::default();
        let _ = allocations.decide(&admission("a", "0", Some(8 << 30), Some(50.0)), &none, Some(&gpus));
        assert!(matches!(allocations.decide(&Request::Release { tenant: "a".into() }, &none, Some(&gpus)), Decided::AfterPolicy(_)));
        assert!(allocations.effective(&none).tenants.contains_key("a"));
        // Its slice still counts until it is gone.
        assert!(refused(allocations.decide(&admission("b", "0", Some(9 << 30), None), &none, Some(&gpus))).contains("more than its"));
        match allocations.decide(&Request::Release { tenant: "never".into() }, &none, Some(&gpus)) {
            Decided::Now(answer) => assert_eq!((answer.ok, answer.state.as_deref()), (true, Some("gone"))),
            _ => panic!("releasing an unknown tenant is answered at once"),
        }
    }

    #[test]
    fn without_nvml_only_uuids_name_devices() {
        let (mut allocations, _dir) = fresh();
        let none = Config::default();
        assert!(refused(allocations.decide(&admission("a", "0", None, None), &none, None)).contains("only a UUID"));
        let lower = A.to_ascii_lowercase();
        assert!(matches!(allocations.decide(&admission("a", &lower, Some(1 << 30), None), &none, None), Decided::AfterPolicy(_)));
        assert_eq!(allocations.effective(&none).tenants["a"].memory_for(A, None), Some(1 << 30));
    }

    #[test]
    fn labels_are_bounded() {
        let mut labels = BTreeMap::new();
        labels.insert("origin".to_string(), "slurm".to_string());
        assert!(check_labels(&labels).is_ok());
        labels.insert("bad key".to_string(), "x".to_string());
        assert!(check_labels(&labels).is_err());
        let many: BTreeMap<String, String> = (0..17).map(|i| (format!("k{i}"), "v".to_string())).collect();
        assert!(check_labels(&many).unwrap_err().contains("at most 16"));
    }
}
