//! The kill -9 storm: tenants' processes under the shim allocate and free as
//! fast as they can while they are killed at random and restarted, the
//! monitor is killed and restarted, and hostile files (empty, garbage,
//! half-initialised and cut-short ledgers, links, FIFOs, directories, and a
//! watched ledger truncated under the monitor) are dropped into the ledger
//! directory, beside a standing flood: [`FLOOD_FILES`] valid ledgers of
//! one other user and a `tenants` file in the flat directory, made before
//! the first monitor starts. Throughout, it samples every tenant's usage as its ledger
//! counts it and as the driver (simgpu's NVML) reports it, and times how
//! long each killed process's memory takes to come back.
//!
//! It prints the samples taken, the peak over each cap (ledger and driver),
//! the bytes lost once everything has stopped (still counted in a ledger or
//! on the device), and the reclaim latency (p50, p99, max), and fails
//! (exit 1) unless nothing went over, nothing was lost, every killed
//! process was reclaimed and the monitor never died by itself.
//!
//! Beside them, the admission queue is stormed by two other Unix users
//! ([`queue_storm`]): one (uid 1001) holds every queue file it can open
//! locked, all along, and queues jobs that rewrite their own job file to
//! claim almost nothing once they run; the other (uid 1002) queues short
//! jobs with `--timeout 2s`. Every submission must end by itself (started
//! or timed out, never hung), the monitor's committed memory must never
//! pass the device's, and nothing may be left on the board at the end.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench storm -- --duration 60`
//! (default 60 s; `--seed N` repeats a storm; `STORM_DEBUG=1` shows why
//! workers could not start). On a debug build:
//! `cargo build --workspace && GS_TEST_TARGET_DIR=target/debug cargo bench --bench storm -- --duration 10`.

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, shim_lib, simgpu_lib, Running, Sim, GIB, MIB};
use ledger::Ledger;
use libloading::Library;
use monitor_support::{Monitor, MonitorOptions};
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Tenants and their caps.
/// alpha's workers want more than its cap (the cap is hit all the time),
/// beta's fit under its cap.
const TENANTS: [(&str, u64); 2] = [("alpha", 512 * MIB), ("beta", 2 * GIB)];
/// Worker processes per tenant, and threads per worker.
const WORKERS_PER_TENANT: usize = 3;
const THREADS_PER_WORKER: &str = "2";
/// Largest single allocation. A worker holds up to eight per thread, and
/// memory freed on a stream stays charged until the stream gets there, so
/// alpha's workers reach its cap all the time; beta's mostly stay under.
const MAX_ALLOCATION: u64 = 16 * MIB;
/// How often things happen.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
const KILL_EVERY_MS: (u64, u64) = (40, 160);
const MONITOR_KILL_EVERY: Duration = Duration::from_secs(4);
const HOSTILE_EVERY: Duration = Duration::from_millis(500);
/// Valid ledgers of one other user (`FLOOD_UID`) lying in the directory
/// for the whole storm: the monitor watches its per-uid bound of them and
/// must lose nothing of the real tenants.
const FLOOD_FILES: usize = 1100;
const FLOOD_UID: u32 = 2999;
/// A killed process not reclaimed within this counts as lost.
const RECLAIM_LIMIT: Duration = Duration::from_secs(10);

struct Args {
    duration: Duration,
    seed: u64,
}

fn args() -> Args {
    let mut args = Args { duration: Duration::from_secs(60), seed: u64::from(std::process::id()) * 0x9E37_79B9 + 1 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--duration" => args.duration = Duration::from_secs(it.next().and_then(|v| v.parse().ok()).expect("--duration SECONDS")),
            "--seed" => args.seed = it.next().and_then(|v| v.parse().ok()).expect("--seed N"),
            _ => {} // `cargo bench` passes --bench
        }
    }
    args
}

/// xorshift64: the storm's only source of chance, so a seed repeats it.
struct Chance(u64);

impl Chance {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// simgpu's NVML, loaded into this process: the driver's view.
struct Nvml {
    _lib: Library,
    device: *mut c_void,
    processes: unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int,
    memory: unsafe extern "C" fn(*mut c_void, *mut MemoryInfo) -> c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct MemoryInfo {
    total: u64,
    free: u64,
    used: u64,
}

impl Nvml {
    fn load() -> Nvml {
        // SAFETY: loading simgpu, whose initialisers only read the environment.
        let lib = unsafe { Library::new(simgpu_lib()) }.expect("cannot load libsimgpu.so");
        // SAFETY: the signatures are nvml.h's.
        unsafe {
            let init = *lib.get::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2\0").unwrap();
            assert_eq!(init(), 0, "nvmlInit_v2");
            let handle = *lib.get::<unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int>(b"nvmlDeviceGetHandleByIndex_v2\0").unwrap();
            let mut device = std::ptr::null_mut();
            assert_eq!(handle(0, &mut device), 0, "nvmlDeviceGetHandleByIndex_v2");
            let processes = *lib.get(b"nvmlDeviceGetComputeRunningProcesses_v3\0").unwrap();
            let memory = *lib.get(b"nvmlDeviceGetMemoryInfo\0").unwrap();
            Nvml { _lib: lib, device, processes, memory }
        }
    }

    /// Device memory by host pid.
    fn per_process(&self) -> HashMap<u32, u64> {
        let mut infos = [ProcessInfo::default(); 256];
        let mut count = infos.len() as c_uint;
        // SAFETY: room for `count` entries.
        let rc = unsafe { (self.processes)(self.device, &mut count, infos.as_mut_ptr()) };
        assert_eq!(rc, 0, "nvmlDeviceGetComputeRunningProcesses_v3");
        infos[..count as usize].iter().map(|p| (p.pid, p.used_gpu_memory)).collect()
    }

    /// Device memory in use, all processes.
    fn used(&self) -> u64 {
        let mut info = MemoryInfo::default();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { (self.memory)(self.device, &mut info) }, 0);
        info.used
    }
}

struct Worker {
    tenant: &'static str,
    running: Running,
}

struct Storm {
    sim: Sim,
    config: PathBuf,
    stress: PathBuf,
    workers: Vec<Worker>,
    monitor: Option<Monitor>,
    chance: Chance,
}

impl Storm {
    /// A worker of `tenant`, started; `None` if it could not start.
    fn worker(&self, tenant: &'static str, cap: u64) -> Option<Worker> {
        let mut cmd = self.sim.command(&self.stress);
        cmd.env("LD_PRELOAD", shim_lib())
            .env("GPUSLICE_DIR", self.sim.ledger_dir())
            .env("GPUSLICE_TENANT", tenant)
            .env("GPUSLICE_MEMORY_LIMIT", format!("{cap}B"))
            .args([THREADS_PER_WORKER, "2000000000", &MAX_ALLOCATION.to_string()]);
        let mut running = self.sim.spawn(&mut cmd);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !running.has_printed("ready") {
            // Refused at start (its context does not fit under a full
            // cap): it exits, and another is tried later.
            if !monitor_support::pid_alive(running.pid()) || Instant::now() > deadline {
                let out = running.kill9();
                if std::env::var_os("STORM_DEBUG").is_some() {
                    if let Ok(l) = Ledger::open(&ledger::tenant_path(&self.sim.ledger_dir(), tenant)) {
                        eprintln!(
                            "{tenant}: a worker could not start with {} of {} in use\n{out}",
                            human(l.used_bytes(0)),
                            human(l.memory_limit_bytes(0))
                        );
                    }
                }
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        running.send_line("go");
        Some(Worker { tenant, running })
    }

    /// Starts workers until each tenant has its number; returns how many
    /// were refused at start.
    fn top_up(&mut self) -> u64 {
        let mut refused = 0;
        for (tenant, cap) in TENANTS {
            while self.workers.iter().filter(|w| w.tenant == tenant).count() < WORKERS_PER_TENANT {
                match self.worker(tenant, cap) {
                    Some(worker) => self.workers.push(worker),
                    None => {
                        refused += 1;
                        break;
                    }
                }
            }
        }
        refused
    }

    fn start_monitor(&mut self) {
        self.monitor = Some(Monitor::start(&self.sim, MonitorOptions { config: Some(self.config.clone()), ..Default::default() }));
    }
}

fn cap_of(tenant: &str) -> u64 {
    TENANTS.iter().find(|(t, _)| *t == tenant).map_or(0, |(_, c)| *c)
}

/// The hostile files, in the order they are dropped.
const HOSTILE_KINDS: [&str; 8] =
    ["empty", "garbage", "half-initialised", "cut-short copy", "link", "fifo", "directory", "truncated while watched"];

fn drop_hostile(storm: &mut Storm, n: usize, made: &mut Vec<PathBuf>) -> &'static str {
    let dir = storm.sim.ledger_dir();
    let kind = HOSTILE_KINDS[n % HOSTILE_KINDS.len()];
    let path = dir.join(format!("hostile-{n}.ledger"));
    let sound = std::fs::read(ledger::tenant_path(&dir, "alpha")).unwrap_or_default();
    match kind {
        "empty" => std::fs::write(&path, b"").unwrap(),
        "garbage" => {
            let bytes: Vec<u8> = (0..ledger::layout::FILE_BYTES).map(|_| storm.chance.next() as u8).collect();
            std::fs::write(&path, bytes).unwrap();
        }
        "half-initialised" => {
            let mut bytes = sound;
            let at = std::mem::offset_of!(ledger::layout::Header, initialised);
            if bytes.len() >= at + 4 {
                bytes[at..at + 4].copy_from_slice(&[0; 4]);
            }
            std::fs::write(&path, bytes).unwrap();
        }
        "cut-short copy" => {
            let len = storm.chance.below(sound.len() as u64) as usize;
            std::fs::write(&path, &sound[..len]).unwrap();
        }
        "link" => std::os::unix::fs::symlink(ledger::tenant_path(&dir, "alpha"), &path).unwrap(),
        "fifo" => {
            let status = Command::new("mkfifo").arg(&path).status().unwrap();
            assert!(status.success());
        }
        "directory" => std::fs::create_dir(&path).unwrap(),
        _ => {
            // A tenant's own, watched ledger, cut to nothing under the monitor.
            let victim = ledger::tenant_path(&dir, "mallory");
            let _ = std::fs::remove_file(&victim);
            let mut create = storm.sim.c("memctl");
            create.env("LD_PRELOAD", shim_lib()).env("GPUSLICE_DIR", &dir).env("GPUSLICE_TENANT", "mallory").args([
                "init",
                "ctx",
                "alloc:m:16M",
            ]);
            let out = storm.sim.run(&mut create);
            assert!(out.success(), "{out}");
            // Let the monitor map it before it is cut.
            std::thread::sleep(Duration::from_millis(300));
            let status = Command::new("truncate").args(["-s", "0"]).arg(&victim).status().unwrap();
            assert!(status.success());
            return kind;
        }
    }
    made.push(path);
    // Keep the directory from growing without end: the oldest go.
    while made.len() > 24 {
        let old = made.remove(0);
        let _ = std::fs::remove_file(&old).or_else(|_| std::fs::remove_dir(&old));
    }
    kind
}

/// The standing flood: [`FLOOD_FILES`] valid ledgers, each naming itself,
/// owned by [`FLOOD_UID`], and a file named `tenants`.
fn flood(dir: &std::path::Path, staging: &std::path::Path) {
    std::fs::create_dir_all(staging).unwrap();
    drop(Ledger::open_or_create_with(staging, "flood-template", ledger::FileAccess::Tenant).expect("a template ledger"));
    let template = std::fs::read(ledger::tenant_path(staging, "flood-template")).unwrap();
    let at = std::mem::offset_of!(ledger::layout::Header, tenant_name);
    for n in 0..FLOOD_FILES {
        let name = format!("flood-{n}");
        let mut bytes = template.clone();
        bytes[at..at + 64].fill(0);
        bytes[at..at + name.len()].copy_from_slice(name.as_bytes());
        let path = ledger::tenant_path(dir, &name);
        std::fs::write(&path, bytes).unwrap();
        std::os::unix::fs::chown(&path, Some(FLOOD_UID), Some(FLOOD_UID)).unwrap();
    }
    let tenants = dir.join("tenants");
    std::fs::write(&tenants, b"").unwrap();
    std::os::unix::fs::chown(&tenants, Some(FLOOD_UID), Some(FLOOD_UID)).unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn human(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} B")
    }
}

/// A killed process whose slot has not come back yet.
struct Pending {
    tenant: &'static str,
    pid: u32,
    start_time_ticks: u64,
    killed_at: Instant,
}

fn main() {
    let args = args();
    let sim = Sim::new().memory("16GiB").context_memory("64MiB").timeout(args.duration + Duration::from_secs(300));
    // This process reads the driver's view through simgpu's NVML.
    std::env::set_var("SIMGPU_STATE", sim.state_file());
    std::env::set_var("SIMGPU_MEMORY", "16GiB");
    std::env::set_var("SIMGPU_CONTEXT_MEMORY", "64MiB");
    let config = sim.dir().join("monitor.toml");
    let text: String = TENANTS.iter().map(|(t, cap)| format!("[tenants.{t}]\nmemory = \"{cap}B\"\n")).collect();
    std::fs::write(&config, text).unwrap();
    let mut storm =
        Storm { stress: compile_c("shim_stress"), sim, config, workers: Vec::new(), monitor: None, chance: Chance(args.seed | 1) };
    let _ = compile_c("memctl");
    flood(&storm.sim.ledger_dir(), &storm.sim.dir().join("staging"));
    storm.start_monitor();
    // A shared machine's GPU: every user may use it.
    std::fs::set_permissions(storm.sim.state_file(), std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let queue_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queue_thread = {
        let (template, stop) = (QueueTemplate::of(&storm.sim), std::sync::Arc::clone(&queue_stop));
        std::thread::spawn(move || queue_storm(&template, &stop))
    };
    let mut refused_starts = storm.top_up();
    let nvml = Nvml::load();
    let ledger_dir = storm.sim.ledger_dir();
    let ledgers: Vec<(&str, Ledger)> =
        TENANTS.iter().map(|(t, _)| (*t, Ledger::open(&ledger::tenant_path(&ledger_dir, t)).expect("a tenant's ledger"))).collect();

    let watched_flood = storm
        .monitor
        .as_ref()
        .and_then(|m| m.metrics().value("gpuslice_ledger_files_refused_total", &[("reason", "per_uid_bound")]))
        .map_or(0, |refused| FLOOD_FILES as u64 - refused as u64);
    println!(
        "ledger flood: {FLOOD_FILES} valid ledgers of uid {FLOOD_UID} and a `tenants` file lie in the directory throughout; \
         the first monitor watches {watched_flood} of them"
    );
    println!(
        "storm: {} s, seed {}, {} workers ({}), monitor killed every {} s, a hostile file every {} ms",
        args.duration.as_secs(),
        args.seed,
        storm.workers.len(),
        TENANTS.iter().map(|(t, c)| format!("{t} cap {}", human(*c))).collect::<Vec<_>>().join(", "),
        MONITOR_KILL_EVERY.as_secs(),
        HOSTILE_EVERY.as_millis()
    );
    let started = Instant::now();
    let (mut samples, mut worker_kills, mut monitor_kills, mut monitor_deaths) = (0u64, 0u64, 0u64, 0u64);
    let (mut peak_ledger_over, mut peak_driver_over, mut peak_committed_over) = (0u64, 0u64, 0u64);
    let mut hostile: HashMap<&str, u64> = HashMap::new();
    let mut hostile_made = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut latencies: Vec<Duration> = Vec::new();
    let mut never_reclaimed = 0u64;
    let mut next_sample = started;
    let mut next_kill = started + Duration::from_millis(KILL_EVERY_MS.0);
    let mut next_monitor_kill = started + MONITOR_KILL_EVERY;
    let mut next_hostile = started + HOSTILE_EVERY;
    let end = started + args.duration;

    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            next_sample = now + SAMPLE_EVERY;
            samples += 1;
            for (tenant, ledger) in &ledgers {
                let over = ledger.used_bytes(0).saturating_sub(ledger.memory_limit_bytes(0).min(cap_of(tenant)));
                peak_ledger_over = peak_ledger_over.max(over);
            }
            let committed = board_committed(&ledger_dir);
            peak_committed_over = peak_committed_over.max(committed.saturating_sub(16 * GIB));
            let per_pid = nvml.per_process();
            for (tenant, _) in TENANTS {
                let driver: u64 = storm.workers.iter().filter(|w| w.tenant == tenant).filter_map(|w| per_pid.get(&w.running.pid())).sum();
                peak_driver_over = peak_driver_over.max(driver.saturating_sub(cap_of(tenant)));
            }
            // Reclaimed: the killed process's slot is gone (or reused).
            pending.retain(|p| {
                let ledger = &ledgers.iter().find(|(t, _)| *t == p.tenant).expect("known tenant").1;
                let held = ledger.slots().iter().any(|s| s.pid == p.pid && s.start_time_ticks == p.start_time_ticks);
                if !held {
                    latencies.push(p.killed_at.elapsed());
                } else if p.killed_at.elapsed() > RECLAIM_LIMIT {
                    never_reclaimed += 1;
                    return false;
                }
                held
            });
        }
        if now >= next_kill {
            next_kill = now + Duration::from_millis(KILL_EVERY_MS.0 + storm.chance.below(KILL_EVERY_MS.1 - KILL_EVERY_MS.0));
            let index = storm.chance.below(storm.workers.len() as u64) as usize;
            let worker = storm.workers.swap_remove(index);
            let pid = worker.running.pid();
            let ledger = &ledgers.iter().find(|(t, _)| *t == worker.tenant).expect("known tenant").1;
            let slot = ledger.slots().into_iter().find(|s| s.pid == pid && s.alive);
            let killed_at = Instant::now();
            let tenant = worker.tenant;
            let _ = worker.running.kill9();
            worker_kills += 1;
            if let Some(slot) = slot {
                pending.push(Pending { tenant, pid, start_time_ticks: slot.start_time_ticks, killed_at });
            }
            refused_starts += storm.top_up();
        }
        if now >= next_monitor_kill {
            next_monitor_kill = now + MONITOR_KILL_EVERY;
            if let Some(monitor) = storm.monitor.take() {
                if !monitor_support::pid_alive(monitor.running.pid()) {
                    monitor_deaths += 1;
                    eprintln!("the monitor died by itself:\n{}", monitor.running.kill9());
                } else {
                    let _ = monitor.running.kill9();
                    monitor_kills += 1;
                }
            }
            storm.start_monitor();
        }
        if now >= next_hostile {
            next_hostile = now + HOSTILE_EVERY;
            let n = hostile.values().sum::<u64>() as usize;
            *hostile.entry(drop_hostile(&mut storm, n, &mut hostile_made)).or_default() += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    // Everything stops; a monitor runs; what is still counted is lost.
    queue_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let queue = queue_thread.join().unwrap_or_default();
    for worker in storm.workers.drain(..) {
        let pid = worker.running.pid();
        let ledger = &ledgers.iter().find(|(t, _)| *t == worker.tenant).expect("known tenant").1;
        let slot = ledger.slots().into_iter().find(|s| s.pid == pid && s.alive);
        let (tenant, killed_at) = (worker.tenant, Instant::now());
        let _ = worker.running.kill9();
        if let Some(slot) = slot {
            pending.push(Pending { tenant, pid, start_time_ticks: slot.start_time_ticks, killed_at });
        }
    }
    if let Some(monitor) = storm.monitor.take() {
        if monitor_support::pid_alive(monitor.running.pid()) {
            storm.monitor = Some(monitor);
        } else {
            monitor_deaths += 1;
            eprintln!("the monitor died by itself:\n{}", monitor.running.kill9());
            storm.start_monitor();
        }
    }
    let settle = Instant::now();
    while !pending.is_empty() && settle.elapsed() < RECLAIM_LIMIT {
        pending.retain(|p| {
            let ledger = &ledgers.iter().find(|(t, _)| *t == p.tenant).expect("known tenant").1;
            let held = ledger.slots().iter().any(|s| s.pid == p.pid && s.start_time_ticks == p.start_time_ticks);
            if !held {
                latencies.push(p.killed_at.elapsed());
            }
            held
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    never_reclaimed += pending.len() as u64;
    // Leaks of processes killed between a reservation's two steps are
    // returned by the monitor's audit after two quiet rounds.
    let quiet = Instant::now();
    let counted = |ledgers: &[(&str, Ledger)]| -> u64 { ledgers.iter().map(|(_, l)| l.used_bytes(0)).sum() };
    while (counted(&ledgers) > 0 || nvml.used() > 0) && quiet.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ledger_lost, device_lost) = (counted(&ledgers), nvml.used());
    let board_left = (0..100)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            board_jobs(&ledger_dir)
        })
        .find(|left| *left == 0)
        .unwrap_or_else(|| board_jobs(&ledger_dir));
    let log = storm.monitor.take().map(|m| m.stop());
    if let Some(log) = &log {
        if !log.success() {
            monitor_deaths += 1;
            eprintln!("the last monitor did not stop cleanly:\n{log}");
        }
    }

    latencies.sort();
    let hostile_total: u64 = hostile.values().sum();
    let mut kinds: Vec<String> = HOSTILE_KINDS.iter().map(|k| format!("{k} {}", hostile.get(k).copied().unwrap_or(0))).collect();
    kinds.retain(|k| !k.ends_with(" 0"));
    println!("samples: {samples} (ledger usage and driver-reported memory per tenant, every {} ms)", SAMPLE_EVERY.as_millis());
    println!(
        "worker kills: {worker_kills} (restarted; {refused_starts} starts refused: a context does not fit under a full cap), \
         monitor kills: {monitor_kills}, monitor deaths on its own: {monitor_deaths}"
    );
    println!("hostile files: {hostile_total} ({})", kinds.join(", "));
    println!("peak over cap: ledger {}, driver {}", human(peak_ledger_over), human(peak_driver_over));
    println!(
        "bytes lost: {} (still counted in a ledger: {}, still used on the device: {})",
        ledger_lost + device_lost,
        human(ledger_lost),
        human(device_lost)
    );
    println!(
        "reclaim latency: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} killed processes holding a slot, {} never reclaimed)",
        percentile(&latencies, 50.0).as_secs_f64() * 1000.0,
        percentile(&latencies, 99.0).as_secs_f64() * 1000.0,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
        latencies.len() as u64 + never_reclaimed,
        never_reclaimed
    );
    println!(
        "queue: {} submissions by two other users beside one holding every queue file it can open locked \
         ({} started, {} timed out, {} refused, {} hung, {} other failures; {} lies about their own size), \
         peak committed over the device: {}, jobs left on the board: {board_left}",
        queue.submitted,
        queue.started,
        queue.timed_out,
        queue.refused,
        queue.hung,
        queue.failed,
        queue.lies,
        human(peak_committed_over)
    );
    let queue_pass = queue.hung == 0 && queue.failed == 0 && peak_committed_over == 0 && board_left == 0 && queue.started > 0;
    let pass = peak_ledger_over == 0
        && peak_driver_over == 0
        && ledger_lost == 0
        && device_lost == 0
        && never_reclaimed == 0
        && monitor_deaths == 0
        && queue_pass;
    println!("result: {}", if pass { "PASS (zero over, zero lost)" } else { "FAIL" });
    drop(ledgers);
    drop(nvml);
    if !pass {
        std::process::exit(1);
    }
}

/// What the queue storm saw.
#[derive(Default, Debug)]
struct QueueTally {
    submitted: u64,
    started: u64,
    timed_out: u64,
    refused: u64,
    hung: u64,
    failed: u64,
    lies: u64,
}

/// `gpuslice` with the storm's environment, to build commands from in
/// another thread.
struct QueueTemplate {
    program: PathBuf,
    envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>,
    ledger_dir: PathBuf,
}

impl QueueTemplate {
    fn of(sim: &Sim) -> QueueTemplate {
        let mut cmd = sim.command(gpuslice_tests::gpuslice_bin());
        cmd.env_remove("LD_PRELOAD");
        let envs = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        QueueTemplate { program: gpuslice_tests::gpuslice_bin(), envs, ledger_dir: sim.ledger_dir() }
    }

    /// `setpriv` as `uid` … `gpuslice run --sim --queue --dir D ARGS -- sh -c SCRIPT`.
    fn submit_as(&self, uid: u32, args: &[&str], script: &str) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}")).args(["--clear-groups", "--"]).arg(&self.program);
        cmd.args(["run", "--sim", "--queue", "--dir"]).arg(&self.ledger_dir).args(args).args(["--", "sh", "-c", script]);
        for (key, value) in &self.envs {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        cmd
    }
}

/// Submissions ended within this are not hung (`--timeout 2s`, one monitor
/// restart, a loaded machine).
const QUEUE_HANG_LIMIT: Duration = Duration::from_secs(30);

/// The queue under two hostile users, until `stop`: see the module docs.
fn queue_storm(template: &QueueTemplate, stop: &std::sync::atomic::AtomicBool) -> QueueTally {
    let mut tally = QueueTally::default();
    let queue_dir = template.ledger_dir.join("queue");
    // uid 1001 holds every queue file it can open, on descriptors 3, 4, …, again each second.
    let locker = "while :; do i=3; for f in \"$1\"/* \"$1\"/.[!.]*; do if (: <\"$f\") 2>/dev/null; then \
                  eval \"exec $i<\\\"\\$f\\\"\"; flock -x -n $i && i=$((i+1)); fi; done; sleep 1; done";
    let mut lock_cmd = Command::new("setpriv");
    lock_cmd.args(["--reuid=1001", "--regid=1001", "--clear-groups", "--", "sh", "-c", locker, "sh"]).arg(&queue_dir);
    let mut locker = lock_cmd.spawn().ok();
    // Once running, a job of uid 1001 rewrites its own file (in place: its
    // lock stays) to claim 1 byte, then runs a little.
    let liar = "f=$(ls \"$0\"/*.job | while read j; do [ -O \"$j\" ] && echo \"$j\"; done | tail -1); \
                [ -n \"$f\" ] && sed 's/\"memory_bytes\":[0-9]*/\"memory_bytes\":1/' \"$f\" > \"$f.new\" && cat \"$f.new\" > \"$f\"; rm -f \"$f.new\"; sleep 0.3";
    let liar = liar.replace("\"$0\"", &format!("'{}'", queue_dir.display()));
    let mut running: Vec<(std::process::Child, Instant)> = Vec::new();
    let mut round = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) || !running.is_empty() {
        if !stop.load(std::sync::atomic::Ordering::Relaxed) && running.len() < 6 {
            round += 1;
            let cmd = if round.is_multiple_of(2) {
                tally.lies += 1;
                template.submit_as(1001, &["--memory", "6GiB", "--timeout", "2s"], &liar)
            } else {
                template.submit_as(1002, &["--memory", "2GiB", "--timeout", "2s"], "sleep 0.2")
            };
            if let Ok(child) = { cmd }.spawn() {
                tally.submitted += 1;
                running.push((child, Instant::now()));
            }
        }
        running.retain_mut(|(child, since)| match child.try_wait() {
            Ok(Some(status)) => {
                match status.code() {
                    Some(0) => tally.started += 1,
                    Some(75) => tally.timed_out += 1,
                    Some(2) => tally.refused += 1,
                    _ => tally.failed += 1,
                }
                false
            }
            Ok(None) if since.elapsed() > QUEUE_HANG_LIMIT => {
                tally.hung += 1;
                let _ = child.kill();
                let _ = child.wait();
                false
            }
            Ok(None) => true,
            Err(_) => {
                tally.failed += 1;
                false
            }
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(locker) = locker.as_mut() {
        let _ = locker.kill();
        let _ = locker.wait();
    }
    tally
}

/// The monitor's board, if any.
fn board(ledger_dir: &std::path::Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(ledger_dir.join("queue").join("board.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Memory the board says is committed, over every device.
fn board_committed(ledger_dir: &std::path::Path) -> u64 {
    board(ledger_dir).and_then(|b| b["committed_bytes"].as_object().map(|m| m.values().filter_map(|v| v.as_u64()).sum())).unwrap_or(0)
}

/// Jobs the board lists.
fn board_jobs(ledger_dir: &std::path::Path) -> usize {
    board(ledger_dir).and_then(|b| b["jobs"].as_array().map(Vec::len)).unwrap_or(0)
}
