//! Hostile tenants against the arbiter, part 3: what a tenant writes never
//! stands in for what the monitor observes, every hello is answered in
//! bounded time, and nobody gains by inventing tenants. Each attack runs
//! against the real binaries on simgpu (`tests/c/crowd_join.c` is the
//! hostile process, under the shim), as the tenant and, where it says so,
//! as another Unix user.

#[path = "compute_support/mod.rs"]
mod compute_support;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use compute_support::{busy_bins, busy_ratio, saturate, serial, sim};
use gpuslice_tests::{compile_c, Sim};
use ledger::broker;
use monitor_support::{Monitor, MonitorOptions};
use std::time::{Duration, Instant};

fn config(sim: &Sim, text: &str) -> std::path::PathBuf {
    let path = sim.dir().join("monitor.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `crowd_join` as a process of `tenant`: it holds `connections` arbiter
/// connections of its own before and while its shim joins device 0 (idle
/// ones, or with `join_device`, joins of that device with its own slot),
/// then launches 1 ms kernels for `seconds`, through the shim (`gate`) or
/// around it (`raw`), or only holds its connections (`hold`).
fn crowd(sim: &Sim, tenant: &str, connections: u32, seconds: &str, mode: &str, join_device: Option<u32>) -> gpuslice_tests::Running {
    let socket = broker::socket_path(&sim.ledger_dir());
    let mut cmd = sim.command(compile_c("crowd_join"));
    cmd.env("GPUSLICE_TENANT", tenant).arg(&socket).arg(connections.to_string()).args(["1000", seconds, mode]);
    if let Some(device) = join_device {
        let (base, stride) = (ledger::slot_lock_offset(0), ledger::slot_lock_offset(1) - ledger::slot_lock_offset(0));
        cmd.args([tenant.to_string(), base.to_string(), stride.to_string(), device.to_string()]);
    }
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("started");
    running
}

/// Makes `tenant`'s own ledger say that it ran `ratio` of device 0 for
/// `seconds`, as any process of the tenant can (the ledger is the tenant's).
fn inflate_busy_counter(sim: &Sim, tenant: &str, ratio: f64, seconds: f64) -> std::thread::JoinHandle<()> {
    let path = ledger::tenant_path(&sim.ledger_dir(), tenant);
    std::thread::spawn(move || {
        let ledger = ledger::Ledger::open(&path).expect("the tenant's ledger");
        let index = ledger.devices().first().expect("a device").index;
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let mut last = Instant::now();
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            let grown_ns = last.elapsed().as_nanos() as f64 * ratio;
            last = Instant::now();
            if let Some(bucket) = ledger.compute_bucket(index) {
                bucket.count_busy(grown_ns as u64);
            }
        }
    })
}

/// A process of tenant `att` (share 10) crowds its shim's join out with
/// connections of its own and launches around the shim's gate, while the
/// tenant's ledger claims the device time NVML shows. Whatever the ledger
/// says, a process that holds no turn on an arbitrated device runs outside
/// its turns: counted, and killed in kill mode, and `vic` keeps its 90.
///
/// Before: `att` took 50.3 % and `vic` 49.7 %, with no violation.
#[test]
fn a_process_without_a_turn_is_outside_its_turns_whatever_its_ledger_says() {
    let _serial = serial();
    let sim = sim().devices(2);
    let config = config(&sim, "on_violation = \"kill\"\nviolation_grace = \"1s\"\n[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "7");
    let att = crowd(&sim, "att", 80, "6", "raw", Some(1));
    let writer = inflate_busy_counter(&sim, "att", 1.0, 6.0);
    let (att, vic) = (att.wait(), vic.wait());
    writer.join().unwrap();
    vic.assert_success();
    let v = busy_ratio(&busy_bins(&vic, 1000.0), 3.0, 6.0);
    let metrics = monitor.metrics_after_this_round();
    let outside = metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]).unwrap_or(0.0);
    eprintln!("share 90 beside a process without a turn and a ledger that lies: vic {v:.3}, outside_turns {outside}\n{att}");
    assert!(outside >= 1.0, "the process that held no turn was not counted outside its turns\n{att}\n{metrics:#?}");
    assert!(!att.success() && !att.stdout.contains("kernels="), "the process that held no turn was not stopped\n{att}");
    assert!(v > 0.75, "vic kept {v:.3} of the device beside a process without a turn\n{vic}\n{att}");
}

/// A process may hold one place per device in the turns: the joins of
/// device 1 that `att`'s process makes with its own slot, beyond the first,
/// are refused, and cannot crowd out its shim's join on device 0, so its
/// launches there take turns.
///
/// Before: all 80 were accepted, and the shim's join on device 0 was
/// refused ("this user has the most connections the monitor allows").
#[test]
fn a_process_holds_one_place_per_device_and_cannot_crowd_out_its_shim() {
    let _serial = serial();
    let sim = sim().devices(2);
    let config = config(&sim, "[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "7");
    let att = crowd(&sim, "att", 80, "6", "gate", Some(1));
    let (att, vic) = (att.wait(), vic.wait());
    vic.assert_success();
    eprintln!("{att}");
    assert!(att.stdout.contains("joined=1\n"), "the process held more than one place on device 1\n{att}");
    assert!(att.stdout.contains("kernels="), "the process's launches did not go\n{att}");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]), Some(0.0), "{att}\n{metrics:#?}");
    let v = busy_ratio(&busy_bins(&vic, 1000.0), 3.0, 6.0);
    assert!(v > 0.8, "vic kept {v:.3} of the device\n{vic}\n{att}");
}

/// A process under the shim whose join a running monitor refuses (here
/// every member place of the device is taken) does not launch ungoverned:
/// its launches wait for a place in the turns and, when none comes, fail
/// with CUDA_ERROR_NOT_PERMITTED and a line that says why.
///
/// Before: the process launched without turns and ran to the end.
#[test]
fn a_refused_join_fails_the_launch_rather_than_run_ungoverned() {
    let _serial = serial();
    let sim = sim();
    let config = config(&sim, "[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "9");
    // Every other place of device 0, each held by a process of its own tenant.
    let mut fillers: Vec<_> =
        (1..ledger::grants::MAX_MEMBERS).map(|i| crowd(&sim, &format!("filler{i:02}"), 1, "12", "hold", Some(0))).collect();
    for filler in &mut fillers {
        assert_eq!(filler.wait_for("joined"), "1", "a filler did not get its place");
    }
    let att = crowd(&sim, "att", 0, "5", "gate", None);
    let att = att.wait();
    let vic = vic.wait();
    vic.assert_success();
    drop(fillers);
    eprintln!("{att}");
    assert!(att.stdout.contains("launch_error=800"), "the refused process's launches were not failed with CUDA_ERROR_NOT_PERMITTED\n{att}");
    assert!(att.stderr.contains("no place in the monitor's turns"), "the failure did not say why\n{att}");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]), Some(0.0), "{att}\n{metrics:#?}");
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is unset: this is the attacker, run by the other tests"))
}

/// This test binary run as the staller (`staller`), as `uid`.
fn stall_command(sim: &Sim, uid: u32, uuid: [u8; 16], locks: usize, dups: usize) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = sim.command(exe);
    cmd.env_remove("LD_PRELOAD")
        .env("STALL_DIR", sim.ledger_dir())
        .env("STALL_UUID", uuid.iter().map(|b| format!("{b:02x}")).collect::<String>())
        .env("STALL_LOCKS", locks.to_string())
        .env("STALL_DUPS", dups.to_string())
        .args(["--ignored", "--exact", "staller", "--nocapture", "--test-threads=1"]);
    gpuslice_tests::wrap_as_user(uid, &cmd)
}

/// The staller's side: a ledger of its own with `STALL_LOCKS` OFD locks on
/// one open of it, that descriptor duplicated `STALL_DUPS` times, and one
/// hello naming a slot of that ledger. Prints how long the answer took.
#[test]
#[ignore = "the attacker of the other tests, run by them as a child process"]
fn staller() {
    use std::os::fd::AsRawFd;
    let dir = std::path::PathBuf::from(env("STALL_DIR"));
    let hex = env("STALL_UUID");
    let mut uuid = [0u8; 16];
    for (i, byte) in uuid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let (locks, dups): (usize, usize) = (env("STALL_LOCKS").parse().unwrap(), env("STALL_DUPS").parse().unwrap());
    // SAFETY: getrlimit/setrlimit into a live local: room for the duplicates.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    let tenant = format!("stall{}", std::process::id());
    let ledger = ledger::Ledger::open_or_create(&dir, &tenant).expect("a ledger of its own");
    let slot = ledger.claim_slot().expect("a slot");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(ledger::tenant_path(&dir, &tenant)).unwrap();
    let base = 1u64 << 24;
    for i in 0..locks as u64 {
        // Every other byte, so that the kernel keeps each lock apart.
        // SAFETY: an all-zero flock is valid; F_OFD_SETLK on a live descriptor.
        let taken = unsafe {
            let mut lock: libc::flock = std::mem::zeroed();
            lock.l_type = libc::F_WRLCK as libc::c_short;
            lock.l_whence = libc::SEEK_SET as libc::c_short;
            lock.l_start = (base + 2 * i) as libc::off_t;
            lock.l_len = 1;
            libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) == 0
        };
        assert!(taken, "lock {i}");
    }
    // SAFETY: dup of a live descriptor; the copies stay open until exit.
    let copies: Vec<i32> = (0..dups).map(|_| unsafe { libc::dup(file.as_raw_fd()) }).collect();
    assert!(copies.iter().all(|&fd| fd >= 0), "the duplicates");
    println!("\narmed=1");
    // A slot it does not hold: every descriptor is worth a look.
    let hello =
        broker::Hello { tenant: tenant.clone(), slot: slot.index() as u32 + 1, generation: 1, uuid, asked_cap_bytes: ledger::UNLIMITED };
    let started = Instant::now();
    let answer = broker::join(&dir, &hello, Some(file.as_raw_fd()));
    println!("answered_after_ms={}", started.elapsed().as_millis());
    println!("refused={}", answer.is_err());
    // Its descriptors and locks stay while the monitor may still look.
    std::thread::sleep(Duration::from_secs(6));
    println!("done=1");
}

/// One hello from another user, whose process holds 20,000 OFD locks on a
/// ledger of its own and 1,000 duplicates of that descriptor, is answered
/// at once; turns go on meanwhile, `/healthz` stays 200, and the honest
/// tenant under the shim is not killed for running outside turns.
///
/// Before: the hello took 26–30 s on the arbiter's thread (descriptors ×
/// locks of `/proc/PID/fdinfo`), `/healthz` said 503, and in kill mode the
/// monitor killed the share-90 tenant.
#[test]
fn a_hello_is_answered_in_bounded_time_whatever_its_process_holds() {
    let _serial = serial();
    let sim = sim();
    let config = config(&sim, "on_violation = \"kill\"\nviolation_grace = \"1s\"\n[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "10");
    let att = saturate(&sim, "att", &[], "10");
    let uuid = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "vic")).unwrap().devices()[0].uuid;
    let mut attacker = sim.spawn(&mut stall_command(&sim, 65534, uuid, 20_000, 1_000));
    attacker.wait_for("armed");
    let mut unhealthy = 0;
    while !attacker.has_printed("done") {
        if monitor.get("/healthz").0 != 200 {
            unhealthy += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let attacker = attacker.wait();
    let answered_ms: f64 = attacker.stdout.lines().find_map(|l| l.strip_prefix("answered_after_ms=")).unwrap().parse().unwrap();
    let (vic, att) = (vic.wait(), att.wait());
    eprintln!("hostile hello answered after {answered_ms} ms; /healthz failed {unhealthy} times\n{attacker}");
    assert!(attacker.stdout.contains("refused=true"), "a hello naming a slot its process does not hold was accepted\n{attacker}");
    assert!(answered_ms < 1000.0, "the hostile hello took {answered_ms} ms\n{attacker}");
    assert_eq!(unhealthy, 0, "/healthz failed while the hostile hello was checked");
    assert!(vic.success() && att.success(), "an honest tenant was killed\n{vic}\n{att}");
}

/// Tenants nobody configured, each declaring share 100 in its processes'
/// environment, beside a configured share 90: with 1, 2 and 10 of them (one
/// user), the configured tenant keeps 90 ± 2 of what the device ran.
///
/// Before: one self-declared tenant took 54.9 % against the configured
/// 90's 45.0 %.
#[test]
fn tenants_nobody_configured_divide_only_what_configured_shares_leave() {
    let _serial = serial();
    for n in [1usize, 2, 10] {
        let sim = sim();
        let config = config(&sim, "[tenants.vic]\nshare = 90\n");
        let _monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
        let vic = saturate(&sim, "vic", &[], "7");
        let others: Vec<_> = (0..n).map(|i| saturate(&sim, &format!("made-up{i}"), &[("GPUSLICE_COMPUTE_SHARE", "100")], "6")).collect();
        let others: Vec<_> = others.into_iter().map(|o| o.wait()).collect();
        let vic = vic.wait();
        vic.assert_success();
        let v = busy_ratio(&busy_bins(&vic, 1000.0), 2.0, 5.5);
        let o: f64 = others.iter().map(|out| busy_ratio(&busy_bins(out, 1000.0), 2.0, 5.5)).sum();
        let kept = v / (v + o);
        eprintln!("configured 90 beside {n} self-declared share-100 tenant(s): vic {v:.3}, the others {o:.3}, vic's part {kept:.3}");
        assert!(kept > 0.88, "with {n} self-declared tenants the configured 90 kept {kept:.3} (vic {v:.3}, others {o:.3})");
        assert!(v + o > 0.6, "the device idled: vic {v:.3}, others {o:.3}");
    }
}

/// A process of `att` (share 10) forks while it holds its tenant's turn,
/// with work in flight, and parent and child both go on launching: the
/// child takes turns as a process of its own (the parent's connection is
/// not its to use), nothing runs outside the turns, and `vic` (share 90)
/// keeps its part.
#[test]
fn a_process_that_forks_while_it_holds_a_turn_gains_nothing() {
    let _serial = serial();
    let sim = sim();
    let config = config(&sim, "[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "7");
    let mut cmd = sim.command(compile_c("fork_turn"));
    cmd.env("GPUSLICE_TENANT", "att").args(["1000", "4"]);
    let mut att = sim.spawn(&mut cmd);
    att.wait_for("started");
    let (att, vic) = (att.wait(), vic.wait());
    att.assert_success();
    vic.assert_success();
    let count = |key: &str| att.stdout.lines().find_map(|l| l.strip_prefix(key)).and_then(|n| n.parse::<f64>().ok()).unwrap_or(0.0);
    let (parent, child) = (count("parent.kernels="), count("child.kernels="));
    assert!(att.stdout.contains("child.status=0"), "the child did not end well\n{att}");
    assert!(parent > 0.0 && child > 0.0, "parent {parent}, child {child} kernels\n{att}");
    let v = busy_ratio(&busy_bins(&vic, 1000.0), 2.0, 5.0);
    // att's kernels over the same 4.5 s, as a part of the device.
    let a = (parent + child) * 0.001 / 4.5;
    eprintln!("fork while holding a turn: vic {v:.3}, att's parent {parent} and child {child} kernels (about {a:.3})");
    assert!(v / (v + a) > 0.85, "vic kept {:.3} of what ran beside a forking tenant", v / (v + a));
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]), Some(0.0), "{att}\n{metrics:#?}");
}

/// The bounds on arbiter connections that `deploy/security.md` states
/// hold: 16 without a hello per process, 4,096 per user. One process that
/// opens 20 has 4 refused at once; 260 processes of one user that open 16
/// each (4,160) have at most 64 refused (fewer if the first ones' hello
/// deadline passed before the last ones came), never more.
#[test]
fn connections_are_bounded_per_process_and_per_user() {
    let _serial = serial();
    let sim = sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let socket = broker::socket_path(&sim.ledger_dir());
    let flood = |children: &str, per_child: &str| {
        let out = sim.run(sim.command(compile_c("conn_flood")).arg(&socket).args([children, per_child]));
        out.assert_success();
        let value = |key: &str| out.stdout.lines().find_map(|l| l.strip_prefix(key)).and_then(|n| n.parse::<i64>().ok()).unwrap();
        (value("opened="), value("refused="))
    };
    let (opened, refused) = flood("1", "20");
    assert_eq!((opened, refused), (20, 4), "one process with 20 connections without a hello");
    let (opened, refused) = flood("260", "16");
    eprintln!("260 processes of one user, 16 connections each: {opened} opened, {refused} refused");
    assert_eq!(opened, 4160);
    assert!(refused > 0 && refused <= 64, "{refused} of 4,160 refused: the per-user bound is not 4,096");
}
