//! The admission queue's one decider (see [`crate::queue`] for the model).
//!
//! Each round the monitor
//! 1. reads the job files it has not seen ([`QueueState::scan`]), each on
//!    a descriptor it keeps: the owner is the file's (the kernel's word,
//!    not the file's `uid`), and the request is checked, the priority
//!    against the owner's ceiling ([`Config::priority_ceiling`]); a job that
//!    fails is refused with one line, which its submitter prints;
//! 2. lets go of the jobs that ended ([`QueueState::expire`]): a waiting
//!    job when its holder's lock is gone, an admitted job when its lock is
//!    gone *and* its tenant has no live process (so removing or unlocking
//!    its own file does not free a job's room while it runs), and then
//!    removes the tenant ledger it made for it, so that no `queue-<n>`
//!    outlives its job in `gpuslice status`;
//! 3. counts what is committed per device from what it holds itself: what
//!    it gave each admitted job, the cap it holds for every other tenant
//!    with a live process ([`PolicyState::cap_for`]), and memory NVML sees
//!    used by processes outside every tenant; and per team and device
//!    ([`QueueState::team_rooms`], below);
//! 4. admits what fits ([`policy::look`]), first making each admitted
//!    job's tenant ledger, for its owner, with the job's cap on its devices
//!    and 0 on the others, and notes why each other job waits ("GPU 0:
//!    1.0 GiB free of 2.0 GiB asked", "behind job 3 (priority 5)"), from
//!    its own figures: the board carries it as each waiting job's `reason`;
//! 5. publishes the board, when it changed, and keeps its admitted jobs in
//!    `<dir>/.monitor/queue.json`, so a restarted monitor keeps counting
//!    them.
//!
//! **Teams.** A job's team is the one whose `users` names its owner (the
//! job file's owner as the kernel says: [`Config::team_of_user`]); nothing
//! the job writes names it. While the monitor holds the job, its tenant is
//! that team's member ([`QueueState::join_teams`], which the main loop
//! applies to its effective configuration each round), and when a round
//! admits such a job, the caller is handed the configuration with the new
//! member *before* the board says the job may run, so that the arbiter
//! knows the team when the job's first process joins a device and hands it
//! the team's memory page. A job larger than its team's quota on every
//! device is refused like one larger than every device.
//!
//! What a team has committed on a device, for the policy's team check, is
//! the sum of: what the monitor gave each admitted job of the team there
//! (its cap, or the whole device), and for every other member with a live
//! process, the largest of the cap the monitor holds for it there (where
//! it holds something, as for a device's commitment), what its ledger says
//! it holds, and what NVML sees its processes use there. The cap and NVML's
//! figure are the monitor's own; the ledger is the member's. A member that
//! writes less in its ledger than it holds is still counted at its cap and
//! at what the driver reports; one that writes more only holds back its own
//! team's jobs. Neither moves another team's jobs or any device's room,
//! which are counted as above without teams; and the team's quota itself is
//! held at allocation by its page, whatever the queue counted.
//!
//! Before the policy of each round, [`QueueState::enforce_caps`] writes
//! each admitted job's caps back over any higher value its tenant put in
//! its page, so the cap the policy pins for the tenant is the job's.
//!
//! Job files are their owners': whatever they hold is bounded (a file is
//! at most 64 KiB, at most [`MAX_NEW_JOBS_PER_ROUND`] are read a round, a
//! wait is at least 0 and at most a day, priorities are within the
//! ceiling) and a file that is not a job is logged once and skipped.

use super::log;
use super::policy::PolicyState;
use crate::config::Config;
use crate::error::Error;
use crate::metrics::QueueFigures;
use crate::nvml::{any_uuid_bytes, uuid_string, GpuInfo};
use crate::queue::policy::{self, Ask, DeviceRoom, Request, TeamDevice, TeamRoom};
use crate::queue::store::{self, Board, Job, JobState, Queue, Refusal};
use crate::snapshot::Snapshot;
use ledger::{FileAccess, Ledger, PolicySource, UNLIMITED};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The longest wait counted; a longer one is counted at this.
const MAX_WAIT_SECONDS: f64 = 86_400.0;
/// Most distinct priorities with a histogram of their own; jobs of others
/// are counted under the nearest one kept.
const MAX_PRIORITIES: usize = 32;
/// Most job files read for the first time in one round; the rest wait for
/// the next (a user who makes thousands slows only their own).
pub const MAX_NEW_JOBS_PER_ROUND: usize = 4096;
/// Most GPUs one job may ask for (as `run --gpus` accepts).
const MAX_GPUS: u32 = 64;
/// The monitor's record of the jobs it admitted, in its own directory.
const STATE_FILE: &str = "queue.json";

/// A job is known by its id and its file's inode: an id can be reused.
type JobKey = (u64, u64);

/// A waiting (or refused) job, on the monitor's own descriptor of its file.
struct Tracked {
    file: File,
    job: Job,
    /// Order of first sight: first come, first served within a priority.
    arrival: u64,
    refused: Option<String>,
    /// Why it waits, as the last look found (see [`policy::Wait`]).
    reason: Option<String>,
}

/// A job the monitor admitted: what it gave it.
#[derive(Serialize, Deserialize)]
struct Admitted {
    job: Job,
    /// Bytes it commits on each of its devices (UUID), as given at admission.
    committed_bytes: BTreeMap<String, u64>,
    /// The inode of the tenant ledger the monitor made for it, which it
    /// removes when the job ends (0: not known, after an older monitor).
    #[serde(default)]
    ledger_inode: u64,
    /// The monitor's descriptor of its file (none after a restart, if the
    /// file had gone).
    #[serde(skip)]
    file: Option<File>,
}

/// What the monitor keeps across restarts.
#[derive(Serialize, Deserialize, Default)]
struct Kept {
    highest_id: u64,
    admitted: Vec<Admitted>,
}

/// The queue, as the monitor holds it.
pub struct QueueState {
    dir: PathBuf,
    queue: Queue,
    overcommit: f64,
    state_path: PathBuf,
    tracked: BTreeMap<JobKey, Tracked>,
    admitted: BTreeMap<JobKey, Admitted>,
    /// Ledgers of admitted jobs' tenants, open while the jobs live.
    ledgers: HashMap<String, Ledger>,
    next_arrival: u64,
    highest_id: u64,
    reported: HashSet<String>,
    figures: QueueFigures,
    last_board: Option<Board>,
    /// Job files appearing or going in the queue directory (`None` where
    /// inotify cannot watch it: rounds alone then).
    jobs_watch: Option<std::os::fd::OwnedFd>,
    /// Admitted jobs whose end `jobs_changed` told already.
    told_ended: HashSet<JobKey>,
}

impl QueueState {
    /// Makes the queue directory root's (mode 1777) and reads what a
    /// previous monitor admitted from `<dir>/.monitor/queue.json`.
    /// `GPUSLICE_QUEUE_OVERCOMMIT` out of range is a usage mistake; the rest
    /// are failures of the host.
    pub fn new(dir: &Path) -> Result<QueueState, Error> {
        let queue = Queue::at(dir);
        if let Some(done) = queue.prepare().map_err(Error::Failed)? {
            log::warn(&done);
        }
        let overcommit = crate::queue::overcommit_ratio().map_err(Error::Usage)?;
        let state_path = super::policy::state_dir(dir).join(STATE_FILE);
        let kept: Kept = match std::fs::read(&state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Failed(format!("{}: {e}", state_path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Kept::default(),
            Err(e) => return Err(Error::Failed(format!("{}: {e}", state_path.display()))),
        };
        let mut admitted = BTreeMap::new();
        for mut record in kept.admitted {
            record.file = reopen(&queue, &record.job);
            admitted.insert((record.job.id, record.job.inode), record);
        }
        Ok(QueueState {
            dir: dir.to_path_buf(),
            queue,
            overcommit,
            state_path,
            tracked: BTreeMap::new(),
            admitted,
            ledgers: HashMap::new(),
            next_arrival: 0,
            highest_id: kept.highest_id,
            reported: HashSet::new(),
            figures: QueueFigures::default(),
            last_board: None,
            jobs_watch: crate::queue::wait::watch_dir(Queue::at(dir).dir(), libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_TO)
                .map_err(|e| log::warn(&format!("{e}; jobs are admitted at the monitor's rounds only")))
                .ok(),
            told_ended: HashSet::new(),
        })
    }

    /// Whether a job file appeared or went, or an admitted job's holder
    /// let its file go, since last asked: a job that fits then starts, and
    /// a job that ended makes room, at once rather than at the next round.
    /// An admitted job's end is told once (its tenant's processes may
    /// outlive it for a while).
    pub fn jobs_changed(&mut self) -> bool {
        let files = self
            .jobs_watch
            .as_ref()
            .is_some_and(|fd| crate::queue::wait::drain_events(fd, |name| name.ends_with(crate::queue::store::JOB_SUFFIX.as_bytes())));
        let mut ended = false;
        for (key, record) in &self.admitted {
            let gone = record.file.as_ref().is_some_and(|f| matches!(crate::queue::store::is_held(f), Ok(false)));
            if gone && self.told_ended.insert(*key) {
                ended = true;
            }
        }
        files || ended
    }

    fn warn_once(&mut self, message: String) {
        if self.reported.insert(message.clone()) {
            log::warn(&message);
        }
    }

    /// Holds every admitted job's tenant to the job's caps: a page above
    /// them, or not set by the monitor, is written back.
    /// The caps of admitted jobs' tenants, by tenant, then device UUID
    /// (none on a device the job was not given): the monitor's own, as a
    /// configured tenant's are.
    pub fn caps(&self) -> HashMap<String, BTreeMap<String, u64>> {
        self.admitted.values().map(|record| (record.job.tenant.clone(), record.committed_bytes.clone())).collect()
    }

    /// Puts each admitted job's tenant in the team whose `users` names
    /// the job's owner (see the module docs).
    pub fn join_teams(&self, config: &mut Config) {
        config.join_queue_tenants(self.admitted.values().map(|r| (r.job.tenant.as_str(), r.job.uid)));
    }

    pub fn enforce_caps(&mut self) {
        for record in self.admitted.values() {
            let tenant = &record.job.tenant;
            if !self.ledgers.contains_key(tenant) {
                match Ledger::open(&ledger::tenant_path(&self.dir, tenant)) {
                    Ok(ledger) if ledger.tenant() == *tenant => {
                        self.ledgers.insert(tenant.clone(), ledger);
                    }
                    _ => continue,
                }
            }
            let Some(ledger) = self.ledgers.get(tenant) else { continue };
            for entry in ledger.devices() {
                let cap = record.committed_bytes.iter().find(|(uuid, _)| any_uuid_bytes(uuid) == Some(entry.uuid)).map_or(0, |(_, b)| *b);
                let (page, source) = (ledger.memory_limit_bytes(entry.index), ledger.policy_source(entry.index));
                if page > cap || source != PolicySource::Monitor {
                    ledger.set_memory_limit_bytes(entry.index, cap, PolicySource::Monitor);
                    log::warn(&format!(
                        "queue job {} (tenant {tenant}) device {}: its ledger said {} ({}); the job's cap of {} stays",
                        record.job.id,
                        uuid_string(&entry.uuid),
                        show(page),
                        source.name(),
                        show(cap)
                    ));
                }
            }
        }
    }

    /// One round: see the module docs. Returns the figures for `/metrics`
    /// and the memory committed per device UUID.
    /// `joined` is called with `config` and the queued jobs' tenants in
    /// their teams ([`QueueState::join_teams`]) when a job of a team was
    /// admitted, before the board that lets it run is written.
    pub fn round(
        &mut self,
        config: &Config,
        policy: &PolicyState,
        snapshot: &Snapshot,
        gpus: Option<&[GpuInfo]>,
        joined: impl FnOnce(&Config),
    ) -> (QueueFigures, HashMap<String, u64>) {
        self.scan(config, gpus);
        let mut changed = self.expire(snapshot);
        let committed = self.committed(config, policy, snapshot, gpus);
        if let Some(gpus) = gpus {
            let started = self.admit(config, policy, gpus, &committed, snapshot);
            if started.iter().any(|key| self.admitted.get(key).is_some_and(|r| r.job.team.is_some())) {
                let mut with_members = config.clone();
                self.join_teams(&mut with_members);
                joined(&with_members);
            }
            changed |= !started.is_empty();
        }
        if changed {
            self.keep();
        }
        let committed = if changed { self.committed(config, policy, snapshot, gpus) } else { committed };
        self.publish(gpus.is_none(), &committed);
        self.figures.waiting = self.tracked.values().filter(|t| t.refused.is_none()).count() as u64;
        self.figures.running = self.admitted.len() as u64;
        (self.figures.clone(), committed)
    }

    /// Reads the job files not seen yet.
    fn scan(&mut self, config: &Config, gpus: Option<&[GpuInfo]>) {
        let mut ids = self.queue.job_ids();
        ids.sort_unstable();
        let mut read = 0;
        for id in ids {
            let path = self.queue.job_path(id);
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let key = (id, meta.ino());
            if self.tracked.contains_key(&key) || self.admitted.contains_key(&key) {
                continue;
            }
            if read == MAX_NEW_JOBS_PER_ROUND {
                break;
            }
            read += 1;
            match self.read_new(&path, id) {
                Ok(Some(tracked)) => {
                    let key = (id, tracked.job.inode);
                    self.highest_id = self.highest_id.max(id);
                    self.tracked.insert(key, tracked);
                }
                Ok(None) => {}
                Err(e) => self.warn_once(format!("queue file {}: {e}; skipped", path.display())),
            }
        }
        // The team of each admitted job's owner, by this configuration.
        for record in self.admitted.values_mut() {
            record.job.team = config.team_of_user(record.job.uid).map(str::to_string);
        }
        // Checked against this configuration; a job refused stays refused.
        // Each owner's groups are looked up once a round.
        let mut groups: HashMap<u32, Vec<u32>> = HashMap::new();
        for tracked in self.tracked.values_mut().filter(|t| t.refused.is_none()) {
            tracked.job.team = config.team_of_user(tracked.job.uid).map(str::to_string);
            let gids = groups.entry(tracked.job.uid).or_insert_with(|| crate::host::groups_of(tracked.job.uid));
            if let Err(why) = check_request(&tracked.job, gids, config, gpus, self.overcommit) {
                log::info(&format!("queue job {} (uid {}) refused: {why}", tracked.job.id, tracked.job.uid));
                tracked.refused = Some(why);
            }
        }
    }

    /// A job file seen for the first time: `None` if its holder is gone
    /// (the stale file is removed).
    fn read_new(&mut self, path: &Path, id: u64) -> Result<Option<Tracked>, String> {
        let mut file = store::open_plain(path).map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        if !store::is_held(&file).map_err(|e| format!("cannot test its lock: {e}"))? {
            remove_if_same(path, meta.ino());
            return Ok(None);
        }
        let request = store::read_job(&mut file, id)?;
        let job = Job {
            id,
            name: request.name,
            priority: request.priority,
            gpus: request.gpus,
            memory_bytes: request.memory_bytes,
            placement: request.placement,
            tenant: String::new(),
            uid: meta.uid(),
            pid: request.pid,
            submitted_unix_ms: store::unix_ms(),
            state: JobState::Waiting,
            devices: Vec::new(),
            started_unix_ms: None,
            command: store::shown_command(&request.command),
            inode: meta.ino(),
            reason: None,
            team: None,
        };
        self.next_arrival += 1;
        Ok(Some(Tracked { file, job, arrival: self.next_arrival, refused: None, reason: None }))
    }

    /// Lets go of the jobs that ended; whether an admitted one did.
    fn expire(&mut self, snapshot: &Snapshot) -> bool {
        let queue = &self.queue;
        self.tracked.retain(|_, t| {
            let held = store::is_held(&t.file).unwrap_or(false);
            if !held {
                remove_if_same(&queue.job_path(t.job.id), t.job.inode);
            }
            held
        });
        let live_tenants: HashSet<&str> =
            snapshot.tenants.iter().filter(|t| t.processes.iter().any(|p| p.alive)).map(|t| t.name.as_str()).collect();
        let mut ended = Vec::new();
        for (key, record) in &self.admitted {
            let held = record.file.as_ref().is_some_and(|f| store::is_held(f).unwrap_or(false));
            if !held && !live_tenants.contains(record.job.tenant.as_str()) {
                ended.push(*key);
            }
        }
        for key in &ended {
            self.told_ended.remove(key);
            if let Some(record) = self.admitted.remove(key) {
                remove_if_same(&self.queue.job_path(record.job.id), record.job.inode);
                self.ledgers.remove(&record.job.tenant);
                // The tenant was the job's alone, and none of its processes
                // lives: its ledger goes with it, so no `queue-<n>` is left
                // in `gpuslice status`.
                let ledger = ledger::tenant_path(&self.dir, &record.job.tenant);
                if record.ledger_inode == 0 {
                    let _ = std::fs::remove_file(&ledger);
                } else {
                    remove_if_same(&ledger, record.ledger_inode);
                }
                log::info(&format!(
                    "queue job {} (uid {}, tenant {}) ended: its room is free and its tenant is gone",
                    record.job.id, record.job.uid, record.job.tenant
                ));
            }
        }
        !ended.is_empty()
    }

    /// Memory committed per device UUID (NVML's spelling), from what the
    /// monitor holds: see the module docs.
    fn committed(&self, config: &Config, policy: &PolicyState, snapshot: &Snapshot, gpus: Option<&[GpuInfo]>) -> HashMap<String, u64> {
        let mut by_raw: HashMap<[u8; 16], u64> = HashMap::new();
        let mut add = |uuid: &str, bytes: u64| {
            if let Some(raw) = any_uuid_bytes(uuid) {
                let entry = by_raw.entry(raw).or_default();
                *entry = entry.saturating_add(bytes);
            }
        };
        for record in self.admitted.values() {
            for (uuid, bytes) in &record.committed_bytes {
                add(uuid, *bytes);
            }
        }
        let admitted_tenants: HashSet<&str> = self.admitted.values().map(|r| r.job.tenant.as_str()).collect();
        for tenant in snapshot.tenants.iter().filter(|t| t.processes.iter().any(|p| p.alive) && !admitted_tenants.contains(t.name.as_str()))
        {
            for device in tenant.devices.iter().filter(|d| crate::queue::commits_on(d)) {
                let Some(raw) = any_uuid_bytes(&device.uuid) else { continue };
                let host_index = gpus.and_then(|g| g.iter().find(|g| any_uuid_bytes(&g.uuid) == Some(raw))).map(|g| g.index);
                let cap = policy
                    .cap_for(config, &tenant.name, &device.uuid, host_index)
                    .or_else(|| policy.cap_for(config, &tenant.name, &uuid_string(&raw), host_index));
                if let Some(cap) = cap.filter(|c| *c != UNLIMITED) {
                    add(&device.uuid, cap);
                }
            }
        }
        for process in &snapshot.untracked_processes {
            add(&process.uuid, process.memory_used_bytes);
        }
        let names: Vec<(String, [u8; 16])> = match gpus {
            Some(gpus) => gpus.iter().filter_map(|g| any_uuid_bytes(&g.uuid).map(|raw| (g.uuid.clone(), raw))).collect(),
            None => snapshot.devices.iter().filter_map(|d| any_uuid_bytes(&d.uuid).map(|raw| (d.uuid.clone(), raw))).collect(),
        };
        names.into_iter().filter_map(|(uuid, raw)| by_raw.get(&raw).map(|b| (uuid, *b))).collect()
    }

    /// The waiting jobs, in admission order, as the policy sees them.
    fn requests(&self) -> Vec<(Request, JobKey)> {
        let mut requests: Vec<(Request, JobKey)> =
            self.tracked.iter().filter(|(_, t)| t.refused.is_none()).map(|(key, t)| (request_of(&t.job, t.arrival), *key)).collect();
        requests.sort_by_key(|(r, _)| (std::cmp::Reverse(r.priority), r.id));
        requests
    }

    /// Starts what fits, and notes why each other job waits; the jobs
    /// that started.
    fn admit(
        &mut self,
        config: &Config,
        policy: &PolicyState,
        gpus: &[GpuInfo],
        committed: &HashMap<String, u64>,
        snapshot: &Snapshot,
    ) -> Vec<JobKey> {
        let rooms = crate::queue::rooms(gpus, self.overcommit, committed);
        let teams = self.team_rooms(config, policy, snapshot, gpus, &rooms);
        let mut requests = self.requests();
        for (request, key) in &mut requests {
            let team = self.tracked.get(key).and_then(|t| t.job.team.as_deref());
            request.team = team.and_then(|name| teams.iter().position(|t| t.name == name));
        }
        let by_arrival: HashMap<u64, JobKey> = requests.iter().map(|(r, key)| (r.id, *key)).collect();
        let plain: Vec<Request> = requests.into_iter().map(|(r, _)| r).collect();
        let look = policy::look(&rooms, &teams, &plain);
        for (arrival, wait) in &look.waiting {
            let reason = self.describe(wait, &rooms, &teams, gpus, &by_arrival);
            if let Some(tracked) = by_arrival.get(arrival).and_then(|key| self.tracked.get_mut(key)) {
                tracked.reason = Some(reason);
            }
        }
        let mut started = Vec::new();
        for admission in look.admitted {
            let Some(key) = by_arrival.get(&admission.id).copied() else { continue };
            if self.start(key, admission.devices, &rooms, gpus, snapshot) {
                started.push(key);
            }
        }
        started
    }

    /// Each team of `config` on each of `rooms`' devices: its quota there
    /// and what it has committed there (see the module docs), by the
    /// monitor's own figures.
    fn team_rooms(
        &self,
        config: &Config,
        policy: &PolicyState,
        snapshot: &Snapshot,
        gpus: &[GpuInfo],
        rooms: &[DeviceRoom],
    ) -> Vec<TeamRoom> {
        if config.teams.is_empty() {
            return Vec::new();
        }
        let raw: Vec<Option<[u8; 16]>> = rooms.iter().map(|r| any_uuid_bytes(&r.uuid)).collect();
        let device_of = |uuid: &str| any_uuid_bytes(uuid).and_then(|u| raw.iter().position(|r| *r == Some(u)));
        let host_index = |uuid: &str| gpus.iter().find(|g| g.uuid == uuid).map(|g| g.index);
        let mut teams: Vec<TeamRoom> = config
            .teams
            .iter()
            .map(|(name, team)| TeamRoom {
                name: name.clone(),
                devices: rooms
                    .iter()
                    .map(|r| TeamDevice { quota_bytes: team.settings.memory_for(&r.uuid, host_index(&r.uuid)), committed_bytes: 0 })
                    .collect(),
            })
            .collect();
        let mut add = |team: &str, uuid: &str, bytes: u64| {
            let (Some(team), Some(device)) = (teams.iter_mut().find(|t| t.name == team), device_of(uuid)) else { return };
            let entry = &mut team.devices[device].committed_bytes;
            *entry = entry.saturating_add(bytes);
        };
        for record in self.admitted.values() {
            let Some(team) = config.team_of_user(record.job.uid) else { continue };
            for (uuid, bytes) in &record.committed_bytes {
                add(team, uuid, *bytes);
            }
        }
        let admitted_tenants: HashSet<&str> = self.admitted.values().map(|r| r.job.tenant.as_str()).collect();
        let members = snapshot
            .tenants
            .iter()
            .filter(|t| t.processes.iter().any(|p| p.alive) && !admitted_tenants.contains(t.name.as_str()))
            .filter_map(|t| Some((t, config.team_of(&t.name)?.0)));
        for (tenant, team) in members {
            for device in &tenant.devices {
                let Some(uuid_raw) = any_uuid_bytes(&device.uuid) else { continue };
                let index = gpus.iter().find(|g| any_uuid_bytes(&g.uuid) == Some(uuid_raw)).map(|g| g.index);
                let cap = crate::queue::commits_on(device)
                    .then(|| policy.cap_for(config, &tenant.name, &device.uuid, index))
                    .flatten()
                    .filter(|c| *c != UNLIMITED)
                    .unwrap_or(0);
                let held = cap.max(device.memory_used_bytes).max(device.driver_memory_used_bytes.unwrap_or(0));
                add(team, &device.uuid, held);
            }
        }
        teams
    }

    /// Why a job waits, for people: "GPU 0: 1.0 GiB free of 2.0 GiB
    /// asked", "behind job 3 (priority 5)".
    fn describe(
        &self,
        wait: &policy::Wait,
        rooms: &[DeviceRoom],
        teams: &[TeamRoom],
        gpus: &[GpuInfo],
        by_arrival: &HashMap<u64, JobKey>,
    ) -> String {
        let name = |index: usize| rooms.get(index).map_or_else(|| "a GPU".to_string(), |r| device_label(&r.uuid, gpus));
        let size = crate::text::human_bytes;
        match wait {
            policy::Wait::Team { team, devices, gpus: wanted, ask } => {
                let team = teams.get(*team).map_or("?", |t| t.name.as_str());
                let asked = |short: &policy::TeamShort| match ask {
                    Ask::Bytes(bytes) => format!("{} asked", size(*bytes)),
                    Ask::WholeDevice => format!("the whole GPU ({}) asked, no --memory", size(short.asked_bytes)),
                };
                match (&devices[..], *wanted) {
                    ([short], 1) => format!(
                        "team {team}: {} of its {} quota committed on {}, {}",
                        size(short.committed_bytes),
                        size(short.quota_bytes),
                        name(short.device),
                        asked(short)
                    ),
                    _ => {
                        let each: Vec<String> = devices
                            .iter()
                            .map(|s| {
                                format!("{}: {} of its {} quota committed", name(s.device), size(s.committed_bytes), size(s.quota_bytes))
                            })
                            .collect();
                        let have = wanted.saturating_sub(devices.len() as u32);
                        let verb = if have == 1 { "has" } else { "have" };
                        let per = match ask {
                            Ask::Bytes(bytes) => size(*bytes),
                            Ask::WholeDevice => "a whole GPU".to_string(),
                        };
                        format!("team {team} needs room for {per} on {wanted} GPUs, {have} {verb} it; {}", each.join("; "))
                    }
                }
            }
            policy::Wait::Behind(arrival) => match by_arrival.get(arrival).and_then(|key| self.tracked.get(key)) {
                Some(ahead) => format!("behind job {} (priority {})", ahead.job.id, ahead.job.priority),
                None => "behind an earlier job".to_string(),
            },
            policy::Wait::Short { devices, gpus: wanted, ask } => {
                let each: Vec<String> = devices
                    .iter()
                    .map(|short| match ask {
                        Ask::Bytes(bytes) => format!(
                            "{}: {} free of {} asked",
                            name(short.device),
                            crate::text::human_bytes(short.room_bytes),
                            crate::text::human_bytes(*bytes)
                        ),
                        Ask::WholeDevice => format!(
                            "{}: {} committed, and a job without --memory needs a GPU with nothing committed",
                            name(short.device),
                            crate::text::human_bytes(short.committed_bytes)
                        ),
                    })
                    .collect();
                if *wanted > 1 {
                    let asked = match ask {
                        Ask::Bytes(bytes) => format!("{} free", crate::text::human_bytes(*bytes)),
                        Ask::WholeDevice => "nothing committed".to_string(),
                    };
                    let have = wanted.saturating_sub(devices.len() as u32);
                    let verb = if have == 1 { "has" } else { "have" };
                    format!("needs {wanted} GPUs with {asked}, {have} {verb} it; {}", each.join("; "))
                } else {
                    each.join("; ")
                }
            }
        }
    }

    /// Makes job `key`'s tenant and moves it to the admitted; a job whose
    /// tenant cannot be made is refused, saying why.
    fn start(&mut self, key: JobKey, devices: Vec<String>, rooms: &[DeviceRoom], gpus: &[GpuInfo], snapshot: &Snapshot) -> bool {
        let Some(tracked) = self.tracked.remove(&key) else { return false };
        let committed_bytes: BTreeMap<String, u64> = devices
            .iter()
            .map(|uuid| {
                let whole = rooms.iter().find(|r| r.uuid == *uuid).map_or(0, |r| r.capacity_bytes);
                (uuid.clone(), tracked.job.memory_bytes.unwrap_or(whole))
            })
            .collect();
        let tenant = self.free_tenant(tracked.job.id, snapshot);
        let mut job = tracked.job;
        let ledger_inode = match make_tenant_ledger(&self.dir, &tenant, job.uid, &committed_bytes, gpus) {
            Ok(ledger) => {
                let inode = std::fs::symlink_metadata(ledger.path()).map_or(0, |m| m.ino());
                self.ledgers.insert(tenant.clone(), ledger);
                inode
            }
            Err(e) => {
                let why = format!("the monitor cannot make the job's tenant ledger {tenant}: {e}");
                log::error(&format!("queue job {}: {why}", job.id));
                self.tracked.insert(key, Tracked { refused: Some(why), job, ..tracked });
                return false;
            }
        };
        job.tenant = tenant;
        job.state = JobState::Running;
        job.devices = devices;
        let now = store::unix_ms();
        job.started_unix_ms = Some(now);
        self.observe(&job);
        log::info(&format!(
            "queue job {} (uid {}) admitted as tenant {} on {}: {} each",
            job.id,
            job.uid,
            job.tenant,
            job.devices.join(","),
            job.memory_bytes.map_or("the whole device".to_string(), crate::text::human_bytes)
        ));
        self.admitted.insert(key, Admitted { job, committed_bytes, ledger_inode, file: Some(tracked.file) });
        true
    }

    /// `queue-<id>`, named after job `id`, or when that name is taken (a
    /// process outside the queue runs as it) `queue-<id>-<n>`, the lowest
    /// `n` that no admitted job uses and no live process runs as.
    fn free_tenant(&self, id: u64, snapshot: &Snapshot) -> String {
        let used: HashSet<&str> = self
            .admitted
            .values()
            .map(|r| r.job.tenant.as_str())
            .chain(snapshot.tenants.iter().filter(|t| t.processes.iter().any(|p| p.alive)).map(|t| t.name.as_str()))
            .collect();
        std::iter::once(format!("queue-{id}"))
            .chain((1..).map(|n| format!("queue-{id}-{n}")))
            .find(|t| !used.contains(t.as_str()))
            .unwrap_or_default()
    }

    /// Keeps the admitted jobs where a restarted monitor finds them.
    fn keep(&mut self) {
        #[derive(Serialize)]
        struct KeptRef<'a> {
            highest_id: u64,
            admitted: Vec<&'a Admitted>,
        }
        let kept = KeptRef { highest_id: self.highest_id, admitted: self.admitted.values().collect() };
        let result = serde_json::to_vec(&kept).map_err(|e| e.to_string()).and_then(|bytes| {
            let tmp = self.state_path.with_extension("json.tmp");
            std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, &self.state_path)).map_err(|e| e.to_string())
        });
        if let Err(e) = result {
            self.warn_once(format!("cannot keep the admitted queue jobs in {}: {e}", self.state_path.display()));
        }
    }

    /// Writes the board if it changed.
    fn publish(&mut self, no_nvml: bool, committed: &HashMap<String, u64>) {
        let mut running: Vec<Job> = self.admitted.values().map(|r| r.job.clone()).collect();
        running.sort_by_key(|j| (j.started_unix_ms, j.id));
        let not_admitting =
            no_nvml.then(|| "the monitor has no NVML, so it cannot see the GPUs and admits nothing until it has".to_string());
        let waiting: Vec<Job> = self
            .requests()
            .into_iter()
            .filter_map(|(_, key)| {
                self.tracked.get(&key).map(|t| Job { reason: not_admitting.clone().or_else(|| t.reason.clone()), ..t.job.clone() })
            })
            .collect();
        let refused = self
            .tracked
            .values()
            .filter_map(|t| {
                t.refused.as_ref().map(|reason| Refusal { id: t.job.id, inode: t.job.inode, uid: t.job.uid, reason: reason.clone() })
            })
            .collect();
        let board = Board {
            monitor_pid: std::process::id(),
            not_admitting,
            highest_id: self.highest_id,
            jobs: running.into_iter().chain(waiting).collect(),
            refused,
            committed_bytes: committed.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        };
        if self.last_board.as_ref() == Some(&board) {
            return;
        }
        match self.queue.write_board(&board) {
            Ok(()) => self.last_board = Some(board),
            Err(e) => self.warn_once(e),
        }
    }

    fn observe(&mut self, job: &Job) {
        let Some(started) = job.started_unix_ms else { return };
        let seconds = (started.saturating_sub(job.submitted_unix_ms) as f64 / 1e3).min(MAX_WAIT_SECONDS);
        let histograms = &mut self.figures.wait_seconds;
        let priority = if histograms.contains_key(&job.priority) || histograms.len() < MAX_PRIORITIES {
            job.priority
        } else {
            // The nearest priority already kept.
            *histograms.keys().min_by_key(|p| (i64::from(**p) - i64::from(job.priority)).abs()).unwrap_or(&job.priority)
        };
        histograms.entry(priority).or_default().observe(seconds);
    }
}

/// A device as people name it: `GPU 0`, or `GPU 0 MIG 3g.71gb` for a MIG
/// instance (the parent's index), else its UUID.
fn device_label(uuid: &str, gpus: &[GpuInfo]) -> String {
    match gpus.iter().find(|g| g.uuid == uuid) {
        Some(gpu) => match &gpu.mig_profile {
            Some(profile) => format!("GPU {} MIG {profile}", gpu.index),
            None => format!("GPU {}", gpu.index),
        },
        None => uuid.to_string(),
    }
}

/// `none` or a size.
fn show(bytes: u64) -> String {
    if bytes == UNLIMITED {
        "none".into()
    } else {
        crate::text::human_bytes(bytes)
    }
}

/// A job as admission sees it, ordered by `arrival`.
fn request_of(job: &Job, arrival: u64) -> Request {
    Request {
        id: arrival,
        priority: job.priority,
        gpus: job.gpus,
        ask: job.memory_bytes.map_or(Ask::WholeDevice, Ask::Bytes),
        placement: job.placement,
        // Set by the caller, which knows the teams' order.
        team: None,
    }
}

/// Why the monitor will not queue `job` of a user in groups `gids` (one
/// line, naming what was asked and what is accepted), if it will not.
fn check_request(job: &Job, gids: &[u32], config: &Config, gpus: Option<&[GpuInfo]>, overcommit: f64) -> Result<(), String> {
    if !(1..=MAX_GPUS).contains(&job.gpus) {
        return Err(format!("--gpus {}: expected 1 to {MAX_GPUS}", job.gpus));
    }
    if job.memory_bytes == Some(0) {
        return Err("--memory 0: expected a size above 0".into());
    }
    if let Some(name) = &job.name {
        ledger::units::validate_tenant_name(name).map_err(|e| format!("--name {name:?}: {e}"))?;
    }
    if !ledger::compute::PRIORITY_RANGE.contains(&job.priority) {
        return Err(format!("--priority {}: expected a whole number from -1000 to 1000", job.priority));
    }
    let ceiling = config.priority_ceiling(job.uid, gids);
    if job.priority > ceiling {
        return Err(format!(
            "--priority {} is above uid {}'s ceiling of {ceiling} (set by [priority_ceilings] in the monitor's configuration)",
            job.priority, job.uid
        ));
    }
    if let Some(gpus) = gpus {
        let empty = crate::queue::rooms(gpus, overcommit, &HashMap::new());
        let ask = job.memory_bytes.map_or(Ask::WholeDevice, Ask::Bytes);
        if let Some(why) = policy::never_fits(&empty, job.gpus, ask) {
            return Err(format!("it can never start on this host: {why}"));
        }
        if let Some((name, team)) = config.team_of_user(job.uid).and_then(|name| Some((name, config.teams.get(name)?))) {
            let quotas = TeamRoom {
                name: name.to_string(),
                devices: empty
                    .iter()
                    .map(|r| {
                        let index = gpus.iter().find(|g| g.uuid == r.uuid).map(|g| g.index);
                        TeamDevice { quota_bytes: team.settings.memory_for(&r.uuid, index), committed_bytes: 0 }
                    })
                    .collect(),
            };
            if let Some(why) = policy::never_fits_in_team(&empty, &quotas, job.gpus, ask) {
                return Err(format!("it can never start on this host: {why}"));
            }
        }
    }
    Ok(())
}

/// The monitor's descriptor of `job`'s file, if it is still that file.
fn reopen(queue: &Queue, job: &Job) -> Option<File> {
    let file = store::open_plain(&queue.job_path(job.id)).ok()?;
    (file.metadata().ok()?.ino() == job.inode).then_some(file)
}

/// Removes `path` if it is still the file with inode `inode`.
fn remove_if_same(path: &Path, inode: u64) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == inode) {
        let _ = std::fs::remove_file(path);
    }
}

/// Makes `tenant`'s ledger afresh for a job of user `uid`: the job's cap
/// on each of its devices (`caps`, by UUID), 0 on every other device, all
/// set by the monitor (a process's environment cannot replace them), and
/// the file given to `uid`. A ledger left under that name (no live process
/// runs as the tenant: see [`QueueState::free_tenant`]) is removed first.
fn make_tenant_ledger(dir: &Path, tenant: &str, uid: u32, caps: &BTreeMap<String, u64>, gpus: &[GpuInfo]) -> Result<Ledger, String> {
    let path = ledger::tenant_path(dir, tenant);
    if std::fs::symlink_metadata(&path).is_ok() {
        std::fs::remove_file(&path).map_err(|e| format!("cannot remove the old {}: {e}", path.display()))?;
    }
    let ledger = Ledger::open_or_create_with(dir, tenant, FileAccess::Creator).map_err(|e| e.to_string())?;
    for gpu in gpus {
        let Some(raw) = any_uuid_bytes(&gpu.uuid) else { continue };
        let cap = caps.get(&gpu.uuid).copied().unwrap_or(0);
        match ledger.device_index(&raw, gpu.total_bytes) {
            Ok(index) => ledger.set_memory_limit_bytes(index, cap, PolicySource::Monitor),
            Err(e) if caps.contains_key(&gpu.uuid) => return Err(format!("cannot enter device {}: {e}", gpu.uuid)),
            Err(e) => log::warn(&format!("tenant {tenant}: cannot enter device {} to cap it at 0: {e}", gpu.uuid)),
        }
    }
    std::os::unix::fs::chown(&path, Some(uid), None).map_err(|e| format!("cannot give {} to uid {uid}: {e}", path.display()))?;
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::WAIT_BUCKETS_SECONDS;

    fn job(id: u64, priority: i32, submitted: u64, started: Option<u64>) -> Job {
        Job {
            id,
            name: None,
            priority,
            gpus: 1,
            memory_bytes: Some(10),
            placement: Default::default(),
            tenant: "queue-1".into(),
            uid: 1001,
            pid: 1,
            submitted_unix_ms: submitted,
            state: JobState::Running,
            devices: vec!["GPU-0".into()],
            started_unix_ms: started,
            command: vec![],
            inode: 0,
            reason: None,
            team: None,
        }
    }

    fn state() -> QueueState {
        let dir = std::env::temp_dir().join(format!("gpuslice-daemon-queue-{}", std::process::id()));
        QueueState {
            queue: Queue::at(&dir),
            dir,
            overcommit: 1.0,
            state_path: PathBuf::new(),
            tracked: BTreeMap::new(),
            admitted: BTreeMap::new(),
            ledgers: HashMap::new(),
            next_arrival: 0,
            highest_id: 0,
            reported: HashSet::new(),
            figures: QueueFigures::default(),
            last_board: None,
            jobs_watch: None,
            told_ended: HashSet::new(),
        }
    }

    #[test]
    fn waits_are_counted_once_bounded_and_by_priority() {
        let mut state = state();
        state.observe(&job(2, 5, 1_000, Some(1_040)));
        state.observe(&job(3, 5, 9_000, Some(1_000)));
        state.observe(&job(4, 0, 0, Some(u64::MAX)));
        let five = &state.figures.wait_seconds[&5];
        assert_eq!(five.count, 2);
        assert_eq!(five.per_bucket[0], 1, "a start before submission counts as no wait");
        assert_eq!(five.per_bucket[1], 1, "40 ms is in the 50 ms bucket");
        let zero = &state.figures.wait_seconds[&0];
        assert_eq!((zero.sum_seconds, zero.per_bucket[WAIT_BUCKETS_SECONDS.len()]), (MAX_WAIT_SECONDS, 1));
        for p in 100..200 {
            state.observe(&job(p as u64, p, 0, Some(0)));
        }
        assert_eq!(state.figures.wait_seconds.len(), MAX_PRIORITIES);
    }

    #[test]
    fn a_priority_above_the_ceiling_is_refused_naming_both() {
        let config = crate::config::parse("[priority_ceilings]\ndefault = 2\n").unwrap();
        let mut asked = job(1, 1000, 0, None);
        let e = check_request(&asked, &[], &config, None, 1.0).unwrap_err();
        assert!(e.contains("--priority 1000") && e.contains("ceiling of 2"), "{e}");
        asked.priority = 2;
        assert_eq!(check_request(&asked, &[], &config, None, 1.0), Ok(()));
        asked.uid = 0;
        asked.priority = 1000;
        assert_eq!(check_request(&asked, &[], &config, None, 1.0), Ok(()), "root may ask for any priority");
        for (bad, says) in
            [(Job { gpus: 0, ..job(1, 0, 0, None) }, "--gpus 0"), (Job { memory_bytes: Some(0), ..job(1, 0, 0, None) }, "--memory 0")]
        {
            assert!(check_request(&bad, &[], &config, None, 1.0).unwrap_err().contains(says));
        }
    }

    /// What team `lab` (a queued job of its user uid 1001, and the
    /// configured tenant `team-a` with a live process) has committed on the
    /// one device, and team `ops` beside it; `team-a` shows `ledger` bytes
    /// in its ledger and `driver` bytes by NVML. Then what the device has
    /// committed, as the queue counts it without teams.
    fn team_commitments(ledger: u64, driver: u64) -> (Vec<(String, u64, Option<u64>)>, u64) {
        const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";
        let gib = 1u64 << 30;
        let config = crate::config::parse(
            "[teams.lab]\nusers = [\"1001\"]\ntenants = [\"team-*\"]\nmemory = \"4GiB\"\n[teams.ops]\nusers = [\"1002\"]\n\
             [tenants.team-a]\n",
        )
        .unwrap();
        let gpus = [GpuInfo { uuid: UUID.into(), index: 0, total_bytes: 8 * gib, ..GpuInfo::default() }];
        let mut state = state();
        let mut queued = job(1, 0, 0, Some(1));
        queued.devices = vec![UUID.into()];
        state
            .admitted
            .insert((1, 1), Admitted { job: queued, committed_bytes: [(UUID.to_string(), gib)].into(), ledger_inode: 0, file: None });
        let live = crate::snapshot::ProcessView {
            pid: 7,
            ns_pid: 7,
            slot: 0,
            alive: true,
            confirmed: true,
            memory_used_bytes: ledger,
            driver_memory_used_bytes: Some(driver),
            sm_utilization_ratio: None,
            start_time_ticks: 1,
            devices: vec![],
        };
        let device =
            crate::snapshot::TenantDeviceView { uuid: UUID.into(), ..crate::snapshot::fixtures::tenant_device(ledger, None, Some(driver)) };
        let snapshot = crate::snapshot::fixtures::one_tenant(true, device, vec![live]);
        let rooms = crate::queue::rooms(&gpus, 1.0, &HashMap::new());
        let teams = state.team_rooms(&config, &PolicyState::default(), &snapshot, &gpus, &rooms);
        let device = state.committed(&config, &PolicyState::default(), &snapshot, Some(&gpus)).get(UUID).copied().unwrap_or(0);
        (teams.into_iter().map(|t| (t.name, t.devices[0].committed_bytes, t.devices[0].quota_bytes)).collect(), device)
    }

    #[test]
    fn a_teams_commitment_is_its_queue_jobs_and_its_members_at_the_monitors_figures() {
        let gib = 1u64 << 30;
        // The queued job's 1 GiB, and the member's 2 GiB as its ledger and NVML agree.
        let honest = team_commitments(2 * gib, 2 * gib);
        assert_eq!(honest.0, [("lab".into(), 3 * gib, Some(4 * gib)), ("ops".into(), 0, None)]);
        // A member that writes less in its ledger than it holds is counted at what NVML sees.
        assert_eq!(team_commitments(0, 2 * gib).0[0].1, 3 * gib);
        // One that writes more holds back its own team's jobs only: team
        // ops, and the device's commitment (the queued job's cap; team-a
        // has none), are unmoved.
        let inflated = team_commitments(6 * gib, 2 * gib);
        assert_eq!(inflated.0, [("lab".into(), 7 * gib, Some(4 * gib)), ("ops".into(), 0, None)]);
        assert_eq!((honest.1, inflated.1), (gib, gib));
    }

    #[test]
    fn first_come_is_the_monitors_order_of_first_sight_not_the_id() {
        let mut state = state();
        let file = || File::open("/dev/null").unwrap();
        // Job 1 was seen after job 9: a low id chosen by its owner does not pass.
        state.tracked.insert((9, 1), Tracked { file: file(), job: job(9, 0, 0, None), arrival: 1, refused: None, reason: None });
        state.tracked.insert((1, 1), Tracked { file: file(), job: job(1, 0, 0, None), arrival: 2, refused: None, reason: None });
        state.tracked.insert((5, 1), Tracked { file: file(), job: job(5, 3, 0, None), arrival: 3, refused: None, reason: None });
        let order: Vec<u64> = state.requests().into_iter().map(|(_, key)| key.0).collect();
        assert_eq!(order, [5, 9, 1]);
    }
}
