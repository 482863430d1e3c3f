//! `gpuslice monitor`: the host daemon.
//!
//! Every round (a quarter of a second) it:
//! 1. reloads the configuration if SIGHUP arrived or the file changed
//!    (a bad file keeps the previous configuration);
//! 2. finds the tenants' ledgers, including new ones ([`ledgers`]);
//! 3. writes the configured caps into them ([`policy`]);
//! 4. reclaims the slots of dead processes: alive in the ledger but no longer
//!    holding their kernel lock, so within one round of a death;
//! 5. reads NVML (unless in ledger-only mode), builds one [`Snapshot`],
//!    checks it for bypass ([`violations`]), publishes context overheads the
//!    shims could not measure ([`overhead`]), audits usage that no process
//!    holds ([`audit`]), decides the admission queue from what it holds
//!    and publishes what is committed per device ([`queue`]), and renders `/metrics` ([`http`]),
//!    which counts the round in `gpuslice_monitor_rounds_total` (so that
//!    whoever reads the page can tell when a round has run after something
//!    they did).
//!
//! Beside the rounds, its arbiter thread ([`arbiter`]) owns every device's
//! grant page and decides, continuously, which tenant may launch where; the
//! rounds hand it NVML's devices, the configuration's compute settings and
//! the tenants' directories, and read back what it charged each tenant.
//!
//! All state that matters for memory lives in the ledger files, so a
//! restarted monitor rebuilds its view from them and loses nothing. The
//! arbiter's state lives in its memory: a restarted monitor starts every
//! tenant's virtual time afresh, and processes join it within a second.

mod allocations;
pub(crate) mod arbiter;
mod audit;
mod check;
pub(crate) mod compute;
mod history;
mod http;
mod ledgers;
pub mod log;
mod notify;
mod overhead;
mod policy;
mod queue;
mod team_memory;
mod violations;

use crate::config::{self, Config};
use crate::discovery;
use crate::error::Error;
use crate::metrics::{self, MonitorCounters};
use crate::nvml::GpuReader;
use crate::snapshot::{self, Snapshot, ROUND};
use clap::Args;
use ledger::Ledger;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The shortest round when a job file appeared or went (see the loop).
const QUEUE_ROUND_MIN: Duration = Duration::from_millis(2);
/// The most rounds a second that job files may start early: a flood of
/// them costs the monitor at most this many extra rounds.
const EARLY_ROUNDS_PER_S: u32 = 40;
/// How long the arbiter's loop may not go round before `/healthz` fails.
const ARBITER_STALL: Duration = Duration::from_secs(5);

#[derive(Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub host: discovery::HostArgs,
    /// Only members of this Unix group (a name or a gid) may create
    /// ledgers: the ledger directory becomes root:GROUP, mode 1770. Without
    /// it the directory is root's, mode 1777: any local user may.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// TOML configuration: tenants' memory caps, compute limits, shares and priorities, priority ceilings and what to do about violations; reloaded on SIGHUP and when it changes.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address for /metrics and /healthz: HOST:PORT, or :PORT for every address.
    #[arg(long, value_name = "ADDR", default_value = http::DEFAULT_LISTEN)]
    pub listen: String,
    /// Check --config against this host's devices, print what the monitor
    /// would warn about, and exit (0 when the monitor would run with it, 2
    /// when it would refuse it).
    #[arg(long)]
    pub check: bool,
    /// Let the monitor give a ledger directory named by --dir or GPUSLICE_DIR
    /// the owner and mode it needs (root's, 1777; root:GROUP 1770 with
    /// --group). Without it, only the default directory (/run/gpuslice) or
    /// one the monitor creates is changed; any other that needs a change is
    /// refused.
    #[arg(long)]
    pub fix_mode: bool,
    /// Ledger files of one owner (uid) watched at most; root's files and the
    /// configured tenants' are not held to it.
    #[arg(long, value_name = "N", default_value_t = ledgers::DEFAULT_MAX_LEDGERS_PER_UID)]
    pub max_ledgers_per_uid: usize,
    /// Ledger files watched at most (the configured tenants' always are).
    #[arg(long, value_name = "N", default_value_t = ledgers::DEFAULT_MAX_LEDGERS)]
    pub max_ledgers: usize,
    /// Where the history of tenants' use is kept (default
    /// <dir>/.monitor/history.sqlite, which is lost with a tmpfs <dir> at
    /// reboot): a file in a directory only the monitor's user may write,
    /// created 0700 if missing. The shipped unit uses
    /// /var/lib/gpuslice/history.sqlite.
    #[arg(long, value_name = "FILE")]
    pub history_file: Option<std::path::PathBuf>,
    /// How long the history of tenants' use (read by `gpuslice report`) is
    /// kept: one row per tenant and device a minute.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = history::parse_retention)]
    pub history_retention: std::time::Duration,
    /// Keep no history.
    #[arg(long)]
    pub no_history: bool,
    /// How long one history row covers (for tests).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = history::parse_interval, hide = true)]
    pub history_interval: std::time::Duration,
    /// How the log on stderr is written: text (timestamp, level, message) or
    /// json (one object a line). RUST_LOG filters it (default: info).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = log::Format::Text)]
    pub log_format: log::Format,
}

/// Descriptors kept for everything but the ledgers: HTTP connections, NVML,
/// `/proc`, the configuration, the arbiter's pages.
const DESCRIPTORS_BESIDE_LEDGERS: u64 = http::MAX_CONNECTIONS as u64 + 256;

/// Raises the soft limit on open descriptors to the hard one (systemd gives
/// a service 1024 of 524288), and returns the soft limit in force.
fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into a valid local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        log::warn(&format!("cannot read the descriptor limit: {}", std::io::Error::last_os_error()));
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads a valid local struct; raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            log::info(&format!("descriptor limit raised from {} to {}", limit.rlim_cur, limit.rlim_max));
            return Some(limit.rlim_max);
        }
        log::warn(&format!(
            "cannot raise the descriptor limit from {} to {}: {}",
            limit.rlim_cur,
            limit.rlim_max,
            std::io::Error::last_os_error()
        ));
    }
    Some(limit.rlim_cur)
}

/// The bounds of `args`, the total cut to what the descriptor limit allows
/// (each watched ledger is open for the length of a round).
fn ledger_bounds(args: &MonitorArgs, descriptor_limit: Option<u64>) -> ledgers::Bounds {
    let mut bounds = ledgers::Bounds { per_uid: args.max_ledgers_per_uid, total: args.max_ledgers };
    if let Some(limit) = descriptor_limit {
        let room = usize::try_from(limit.saturating_sub(DESCRIPTORS_BESIDE_LEDGERS)).unwrap_or(usize::MAX).max(1);
        if bounds.total > room {
            log::warn(&format!(
                "--max-ledgers {} is more than the descriptor limit of {limit} allows: watching at most {room} ledgers",
                bounds.total
            ));
            bounds.total = room;
        }
    }
    bounds
}

/// Whether the monitor may change the ledger directory's owner and mode:
/// the default directory, or one it creates now, or with `--fix-mode`.
fn dir_changes(args: &MonitorArgs, dir: &Path, created_now: bool) -> ledgers::DirChanges {
    let named = args.host.dir.is_some() || std::env::var_os("GPUSLICE_DIR").is_some_and(|v| !v.is_empty());
    if args.fix_mode || created_now || !named || dir == Path::new(ledgers::DEFAULT_DIR) {
        ledgers::DirChanges::Allowed
    } else {
        ledgers::DirChanges::Refused
    }
}

/// What identifies a version of the configuration file on disk.
fn file_stamp(path: &Path) -> Option<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

struct ConfigSource {
    path: Option<PathBuf>,
    stamp: Option<(SystemTime, u64, u64)>,
    text: Option<String>,
}

impl ConfigSource {
    /// Reloads if forced or if the file changed; `None` when nothing changed.
    fn reload(&mut self, forced: bool, counters: &mut MonitorCounters) -> Option<Config> {
        let path = self.path.as_ref()?;
        let stamp = file_stamp(path);
        if !forced && stamp == self.stamp {
            return None;
        }
        self.stamp = stamp;
        let text = std::fs::read_to_string(path).ok();
        if !forced && text.is_some() && text == self.text {
            return None;
        }
        match config::load(path) {
            Ok(config) => {
                self.text = text;
                *counters.config_reloads_total.entry("ok").or_default() += 1;
                counters.config_reload_refused = false;
                log::info(&format!("configuration {} loaded: {} tenant(s)", path.display(), config.tenants.len()));
                Some(config)
            }
            Err(e) => {
                self.text = text;
                *counters.config_reloads_total.entry("error").or_default() += 1;
                counters.config_reload_refused = true;
                log::error(&format!("configuration refused, keeping the previous one: {e}"));
                None
            }
        }
    }
}

pub fn main(args: MonitorArgs) -> Result<ExitCode, Error> {
    log::init(args.log_format);
    let format = args.log_format;
    match run(args) {
        // In JSON the error the monitor stops with is a line of its log, so
        // that every line on stderr parses.
        Err(e) if format == log::Format::Json => {
            log::error(&e.to_string());
            Ok(e.exit_code())
        }
        result => result,
    }
}

fn run(args: MonitorArgs) -> Result<ExitCode, Error> {
    if args.check {
        return check::main(&args);
    }
    let descriptor_limit = raise_descriptor_limit();
    let dir = discovery::ledger_dir(args.host.dir.as_deref());
    let created_now = std::fs::symlink_metadata(&dir).is_err();
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(&dir)
        .map_err(|e| Error::Failed(format!("cannot create the ledger directory {}: {e}", dir.display())))?;

    // A bad configuration refuses to start, with line and column.
    let mut config_source = ConfigSource { path: args.config.clone(), stamp: None, text: None };
    let mut config = Config::default();
    if let Some(path) = &args.config {
        config_source.stamp = file_stamp(path);
        config_source.text = std::fs::read_to_string(path).ok();
        config = config::load(path).map_err(|e| Error::Usage(log::bounded_message(&format!("bad configuration: {e}"))))?;
        log::info(&format!("configuration {} loaded: {} tenant(s)", path.display(), config.tenants.len()));
    }

    // What can refuse the directory does so before the monitor says it is
    // listening or puts anything (sockets, history) in it.
    let mut ledgers = ledgers::LedgerSet::new(
        dir.clone(),
        &args.host,
        args.group.as_deref(),
        dir_changes(&args, &dir, created_now),
        ledger_bounds(&args, descriptor_limit),
    )?;
    let mut policy_state = policy::PolicyState::new(&dir).map_err(Error::Failed)?;
    let mut queue_state = queue::QueueState::new(&dir)?;

    let listener = http::bind(&args.listen).map_err(Error::Failed)?;
    let local = listener.local_addr().map_err(|e| Error::Failed(format!("cannot read the listening address: {e}")))?;

    let hangup = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    for (signal, flag) in
        [(signal_hook::consts::SIGHUP, &hangup), (signal_hook::consts::SIGTERM, &stop), (signal_hook::consts::SIGINT, &stop)]
    {
        signal_hook::flag::register(signal, Arc::clone(flag)).map_err(|e| Error::Failed(format!("cannot handle signal {signal}: {e}")))?;
    }

    let mut gpu_reader = if args.host.no_nvml {
        log::warn("NVML disabled (--no-nvml): running in ledger-only mode");
        None
    } else {
        match GpuReader::load(args.host.nvml_lib.as_deref()) {
            Ok(reader) => Some(reader),
            Err(e) => {
                if args.host.nvml_lib.is_some() {
                    return Err(Error::Failed(format!("cannot load NVML from --nvml-lib: {e}")));
                }
                log::warn(&format!(
                    "NVML is not available ({e}); running in ledger-only mode: caps and reclaim work, \
                     device metrics and bypass detection do not"
                ));
                None
            }
        }
    };

    let pages: http::SharedPages = Arc::new(Mutex::new(http::Pages::default()));
    http::serve(listener, Arc::clone(&pages)).map_err(Error::Failed)?;
    log::info(&format!(
        "watching {} ({} layout) ; serving http://{local}/metrics and /healthz ; NVML {}",
        dir.display(),
        args.host.layout.name(),
        if gpu_reader.is_some() { "on" } else { "off" }
    ));
    // For scripts and tests that start a monitor on a pipe: where it
    // listens (`--listen :0` picks a port) and, below, when its first round
    // is done. An operator's terminal gets the log's lines only.
    let for_scripts = !std::io::stdout().is_terminal();
    if for_scripts {
        println!("listen={local}");
        let _ = std::io::stdout().flush();
    }

    // Without the arbiter, caps still hold; compute settings are then kept
    // by the tenants' own processes (limits) or not at all (shares), and
    // each process says so.
    let arbiter_shared = Arc::new(arbiter::Shared::default());
    if let Err(e) = arbiter::start(&dir, args.host.layout, Arc::clone(&arbiter_shared)) {
        log::warn(&format!("{e}; device time is not arbitrated"));
    }
    let settings = history::Settings { retention: args.history_retention, interval: args.history_interval };
    let mut history = if args.no_history {
        history::Recorder::off(&dir)
    } else {
        let file = args.history_file.clone().unwrap_or_else(|| crate::history::path(&dir));
        history::Recorder::start(&dir, &file, settings)
    };
    // The one local path for clusters' node agents: without it, allocations
    // cannot be admitted, and everything else works.
    let control = allocations::Control::start(&dir)
        .map_err(|e| log::warn(&format!("{e}; tenants cannot be admitted through `gpuslice tenant`")))
        .ok();
    let mut allocations = allocations::Allocations::load(&dir, args.host.layout);
    let mut governed = allocations.effective(&config);
    ledgers.set_configured(governed.tenants.keys());
    let mut lock_cache = crate::host::LockCache::default();
    let mut compute_state = crate::compute::ComputeState::default();
    let mut cpu_clock = crate::activity::CpuClock::default();
    let mut violation_state = violations::ViolationState::default();
    let mut overhead_state = overhead::OverheadState::default();
    let mut audit_state = audit::AuditState::default();
    let mut counters = MonitorCounters::default();
    // Teams over their memory quota now, said once per episode.
    let mut teams_over: std::collections::BTreeSet<(String, String)> = std::collections::BTreeSet::new();
    let mut team_memory = team_memory::TeamMemory::default();
    // Who is in which team, as this monitor decides it, for `status` and `top`.
    let mut team_publisher = crate::teams::membership::Publisher::new(&dir);
    let mut nvml_failing = false;
    let mut first_round = true;
    let mut arbiter_stalled = false;
    let started = Instant::now();

    // When the current second of early rounds began, and how many it had.
    let mut early_rounds = (Instant::now(), 0u32);
    while !stop.load(Ordering::Relaxed) {
        let round_start = Instant::now();
        let forced = hangup.swap(false, Ordering::Relaxed);
        if forced {
            log::info("SIGHUP: reloading the configuration");
        }
        if let Some(new_config) = config_source.reload(forced, &mut counters) {
            for gone in config.tenants.keys().filter(|t| !new_config.tenants.contains_key(*t)) {
                log::info(&format!("tenant {gone} is no longer configured; it keeps the caps last set"));
            }
            config = new_config;
            policy_state.configuration_changed();
        }

        ledgers.refresh();
        let gpus = match gpu_reader.as_mut().map(|r| r.read()) {
            Some(Ok(gpus)) => {
                if nvml_failing {
                    log::info("NVML answers again");
                    nvml_failing = false;
                }
                Some(gpus)
            }
            Some(Err(e)) => {
                if !nvml_failing {
                    log::warn(&format!("NVML stopped answering ({e}); using the ledgers alone until it does"));
                    nvml_failing = true;
                }
                None
            }
            None => None,
        };
        // Requests of the control socket are decided where the configuration
        // is: the tenants they admit are governed as the file's are.
        let requests = control.as_ref().map(|c| c.take()).unwrap_or_default();
        let decided: Vec<_> = requests.into_iter().map(|p| (allocations.decide(&p.request, &config, gpus.as_deref()), p)).collect();
        governed = allocations.effective(&config);
        // Queued jobs' tenants in their owners' teams, by the monitor's own records.
        queue_state.join_teams(&mut governed);
        ledgers.set_configured(governed.tenants.keys());
        allocations.guard_names(&mut ledgers);
        let config = &governed;

        // Before the policy pins caps: a queue job's tenant is held to its job's.
        queue_state.enforce_caps();
        policy_state.set_queue_caps(queue_state.caps());
        policy_state.apply(config, &mut ledgers, gpus.as_deref(), &arbiter_shared);
        allocations.hand_over(&ledgers);
        compute::share_with_arbiter(&arbiter_shared, config, &dir, gpus.as_deref(), gpu_reader.is_some());
        team_memory.sync(config, &ledgers.ledgers().collect::<Vec<_>>(), gpus.as_deref(), &arbiter_shared);

        for ledger in ledgers.ledgers() {
            for dead in reclaim(ledger) {
                team_memory.reclaimed(config, ledger, &dead.bytes_per_device, &arbiter_shared);
            }
        }
        team_memory.audit(config, &ledgers.ledgers().collect::<Vec<_>>(), &arbiter_shared);
        // Answered once the tenants' ledgers hold their caps.
        for (decided, pending) in decided {
            let answer = match decided {
                allocations::Decided::Now(answer) => *answer,
                allocations::Decided::AfterPolicy(tenant) => allocations.answer_for(&tenant, &ledgers),
                allocations::Decided::List => allocations.list(&ledgers),
            };
            pending.answer(answer);
        }
        allocations.reap(&ledgers);
        counters.allocations = allocations.info();

        let refs: Vec<&Ledger> = ledgers.ledgers().collect();
        let mut snap: Snapshot = snapshot::collect(&refs, gpus.as_deref(), &mut lock_cache);
        if !ledgers.view_complete() {
            violations::keep_only_lockless_untracked(&mut snap);
        }
        compute::fill_from_arbiter(&mut snap, &arbiter_shared);
        compute_state.fill(&mut snap, Instant::now());
        counters.teams = crate::teams::figures(config, &snap);
        crate::teams::say_over_quota(&counters.teams, &mut teams_over);
        cpu_clock.fill(&mut snap, Instant::now());
        let teams = crate::teams::membership::Membership::decide(config, &snap);
        team_publisher.publish(&teams);
        history.record(&snap, &counters.allocations, &teams);
        violation_state.arbiter_stalled(arbiter_shared.stalled_since_last_look(arbiter::STALL));
        violation_state.check(&snap, config, &policy_state, &overhead_state, Instant::now(), &mut counters);
        overhead_state.publish(&snap, &ledgers);
        counters.unattributed_bytes = audit_state.check(refs.iter().copied());
        (counters.queue, counters.committed_bytes) = queue_state.round(config, &policy_state, &snap, gpus.as_deref(), |joined| {
            // A job of a team was admitted: the arbiter learns its tenant's
            // team before the job may run, so that its processes get the
            // team's page when they join a device.
            compute::share_with_arbiter(&arbiter_shared, joined, &dir, gpus.as_deref(), gpu_reader.is_some())
        });
        if let Some(reader) = gpu_reader.as_ref().filter(|_| snap.nvml) {
            // Names do not change while the host runs: asked once per device.
            for device in &gpus_named(&snap, &counters.device_names) {
                if let Some(name) = device_name(reader, device, &counters.device_names) {
                    counters.device_names.insert(device.uuid.clone(), name);
                }
            }
        }
        // Counted before the page is rendered, so that the page announces the
        // round whose results it shows: everything this round did (caps
        // written, slots reclaimed, processes killed) is done by then.
        counters.rounds_total += 1;
        counters.ledgers_watched = ledgers.watched() as u64;
        counters.ledger_files_refused_total = ledgers.refused_total().clone();
        counters.ledger_files_over_bound = ledgers.over_bound_now();
        // Rendered before the lock is taken, so that the server waits on the
        // main loop for no more than an assignment.
        let page = http::Pages {
            metrics: metrics::render(&snap, &counters).into(),
            health: match arbiter_shared.stalled_for().filter(|d| *d > ARBITER_STALL) {
                None => format!(
                    "ok\nmode: {}\nledgers: {}\nuptime_s: {}\n",
                    if snap.nvml { "nvml" } else { "ledger-only" },
                    snap.tenants.len(),
                    started.elapsed().as_secs()
                ),
                Some(stalled) => {
                    if !arbiter_stalled {
                        log::error(&format!("the arbiter has not run for {} ms: device time is not arbitrated", stalled.as_millis()));
                        arbiter_stalled = true;
                    }
                    format!("arbiter stalled for {} ms\n", stalled.as_millis())
                }
            }
            .into(),
        };
        *pages.lock().unwrap_or_else(|e| e.into_inner()) = page;
        if first_round {
            if for_scripts {
                println!("ready=1");
            }
            log::info("ready: the first round is done");
            notify::notify("READY=1");
            let _ = std::io::stdout().flush();
            first_round = false;
        }
        drop(refs);
        ledgers.release_descriptors();
        log::flush_suppressed();
        // A new or ended job cuts the wait short, so that a job that fits
        // starts, and an ended one makes room, in milliseconds; at most
        // EARLY_ROUNDS_PER_S times a second, so that a flood of job files
        // costs a bounded number of extra rounds.
        if early_rounds.0.elapsed() >= Duration::from_secs(1) {
            early_rounds = (Instant::now(), 0);
        }
        let may_wake = early_rounds.1 < EARLY_ROUNDS_PER_S;
        let asked = || control.as_ref().is_some_and(|c| c.has_pending());
        if sleep_unless_signalled(round_start, &stop, &hangup, || asked() || (may_wake && queue_state.jobs_changed())) {
            early_rounds.1 += 1;
        }
    }
    log::flush_all();
    notify::notify("STOPPING=1");
    log::info("stopping");
    Ok(ExitCode::SUCCESS)
}

/// The devices of `snapshot` whose name is not known yet, GPUs first (a
/// MIG device's name is built from its parent's).
fn gpus_named(snapshot: &Snapshot, names: &std::collections::HashMap<String, String>) -> Vec<snapshot::DeviceView> {
    let mut unnamed: Vec<snapshot::DeviceView> = snapshot.devices.iter().filter(|d| !names.contains_key(&d.uuid)).cloned().collect();
    unnamed.sort_by_key(|d| d.parent_uuid.is_some());
    unnamed
}

/// A device's name as NVML gives it: a GPU's from NVML; a MIG device's as
/// NVML spells it, `<GPU name> MIG <profile>` (its profile was read from
/// that name, see [`crate::nvml::mig_profile`]).
fn device_name(reader: &GpuReader, device: &snapshot::DeviceView, names: &std::collections::HashMap<String, String>) -> Option<String> {
    match (&device.parent_uuid, &device.mig_profile) {
        (Some(parent), Some(profile)) => names.get(parent).map(|gpu| format!("{gpu} MIG {profile}")),
        (Some(_), None) => None,
        (None, _) => reader.describe(device.index).name,
    }
}

/// Sleeps until the round that began at `round_start` is over, a signal
/// came, or (once [`QUEUE_ROUND_MIN`] has passed) `woken` says so;
/// whether `woken` ended it.
fn sleep_unless_signalled(round_start: Instant, stop: &AtomicBool, hangup: &AtomicBool, mut woken: impl FnMut() -> bool) -> bool {
    let end = round_start + ROUND;
    let mut news = false;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) && !hangup.load(Ordering::Relaxed) {
        news |= woken();
        if news && round_start.elapsed() >= QUEUE_ROUND_MIN {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2).min(end.saturating_duration_since(Instant::now())));
    }
    false
}

/// Reclaims the slots of `ledger`'s dead processes, saying so; what it reclaimed.
fn reclaim(ledger: &Ledger) -> Vec<ledger::Reclaimed> {
    let reclaimed = ledger.reclaim_dead();
    for dead in &reclaimed {
        let bytes: Vec<String> =
            dead.bytes_per_device.iter().map(|(dev, b)| format!("{} on device {dev}", crate::text::human_bytes(*b))).collect();
        log::limited(
            &ledgers::file_key(ledger.path(), "reclaims"),
            log::Level::Info,
            &format!(
                "tenant {}: reclaimed slot {} of dead pid {} (pid {} in its namespace): {}",
                ledger.tenant(),
                dead.slot_index,
                dead.pid,
                dead.ns_pid,
                if bytes.is_empty() { "no memory held".into() } else { bytes.join(", ") }
            ),
        );
    }
    reclaimed
}
