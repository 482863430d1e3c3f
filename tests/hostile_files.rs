//! Hostile tenants: whatever a tenant (or another local user) can write is
//! input to the monitor, which runs as root. Each test attacks the real
//! binaries on simgpu, as the tenant or as a second Unix user (`setpriv`),
//! and asserts that the attack fails and that nothing is lost.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, cu, Output, Running, Sim, MIB};
use monitor_support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("victim")
}

/// `memctl` as another user.
fn memctl_as(sim: &Sim, uid: u32, groups: &[u32]) -> Command {
    sim.as_user(uid, uid, groups, compile_c("memctl"))
}

/// A file's permission bits, in octal as `ls` and `chmod` write them.
fn mode(path: &Path) -> String {
    let bits = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777;
    format!("{bits:04o}")
}

fn owner(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (meta.uid(), meta.gid())
}

/// The monitor's error lines that mention `text`.
fn error_lines<'a>(log: &'a Output, text: &str) -> Vec<&'a str> {
    log.stderr.lines().filter(|l| l.contains(" ERROR ") && l.contains(text)).collect()
}

/// Runs a shell command line; returns whether it succeeded and what it said.
fn shell(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Polls `condition` every 20 ms until it holds or `limit` passes; returns
/// how long it took, or `None`. (A latency is what some tests assert.)
fn within(limit: Duration, mut condition: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if condition() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn monitor_alive(monitor: &Monitor) -> bool {
    pid_alive(monitor.running.pid()) && std::net::TcpStream::connect(&monitor.addr).is_ok()
}

/// Whether the monitor's metrics show `tenant`; `None` when it does not answer.
fn watched(monitor: &Monitor, tenant: &str) -> Option<bool> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(&monitor.addr).ok()?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", monitor.addr).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some(Metrics::parse(body).value("gpuslice_tenant_memory_limit_bytes", &[("tenant", tenant)]).is_some())
}

/// Item 1 (a): `truncate -s 0` on a watched ledger used to kill the monitor
/// with SIGBUS, 5 times out of 5. Now each truncated ledger is dropped with
/// one error line, the monitor goes on, and other tenants lose nothing.
#[test]
fn a_ledger_truncated_under_the_monitor_is_dropped_with_one_error_line() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut victim = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:256M", "hold", "alloc:b:128M", "hold"]));
    victim.wait_for("ready");
    let mallory = ledger::tenant_path(&sim.ledger_dir(), "mallory");
    for attempt in 1..=5 {
        let _ = std::fs::remove_file(&mallory);
        let mut create = sim.c("memctl");
        create.env("GPUSLICE_TENANT", "mallory").args(["init", "ctx", "alloc:m:64M"]);
        sim.run(&mut create).assert_success();
        assert!(within(Duration::from_secs(5), || watched(&monitor, "mallory") == Some(true)).is_some(), "attempt {attempt}");
        let (ok, said) = shell(Command::new("truncate").args(["-s", "0"]).arg(&mallory));
        assert!(ok, "{said}");
        let dropped = within(Duration::from_secs(5), || watched(&monitor, "mallory") != Some(true));
        assert!(dropped.is_some(), "attempt {attempt}: the truncated ledger is still watched");
        if !monitor_alive(&monitor) {
            panic!("attempt {attempt}: the monitor died when a ledger was truncated\n{}", monitor.stop());
        }
    }
    // The monitor still does its work for the others.
    assert_eq!(tenant_used_bytes(&sim, "victim"), Some((256 + 64) * MIB));
    victim.send_line("go");
    assert_eq!(victim.wait_for("b"), cu::SUCCESS.to_string());
    let pid = victim.pid();
    victim.kill9();
    let took = within(Duration::from_secs(5), || tenant_used_bytes(&sim, "victim") == Some(0));
    assert!(took.is_some_and(|t| t < Duration::from_secs(1)), "reclaim after the storm took {took:?}");
    let log = monitor.stop();
    assert_eq!(error_lines(&log, "mallory.ledger").len(), 5, "one error line per truncation\n{log}");
    assert!(log.stderr.contains(&format!("dead pid {pid}")), "{log}");
}

/// Item 1 (b): ledgers were 0666, so any local user could truncate another
/// user's ledger and kill its jobs (and the monitor). Now a ledger is its
/// creator's alone (0600): another user can neither truncate it, nor open
/// it as that tenant, nor remove it (the directory is sticky).
#[test]
fn another_user_can_neither_change_nor_remove_a_tenants_ledger() {
    let (victim_uid, attacker_uid) = (2101, 2102);
    let sim = sim();
    sim.share_the_gpu();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut victim = sim.spawn(memctl_as(&sim, victim_uid, &[]).args(["init", "ctx", "alloc:a:256M", "hold", "alloc:b:128M", "hold"]));
    victim.wait_for("ready");
    let path = ledger::tenant_path(&sim.ledger_dir(), "victim");
    let (truncated, said) = shell(sim.as_user(attacker_uid, attacker_uid, &[], "truncate").args(["-s", "0"]).arg(&path));
    assert!(!truncated && said.contains("Permission denied"), "another user truncated the ledger: {said}");
    let (removed, said) = shell(sim.as_user(attacker_uid, attacker_uid, &[], "rm").arg("-f").arg(&path));
    assert!(!removed && path.is_file(), "another user removed the ledger: {said}");
    // Posing as the tenant: refused, the victim's cap and usage untouched.
    let out = sim.run(memctl_as(&sim, attacker_uid, &[]).args(["init", "ctx", "alloc:x:64M"]));
    out.assert_fails_closed("x", &["Permission denied"]);

    assert!(monitor_alive(&monitor));
    assert_eq!((owner(&path).0, mode(&path)), (victim_uid, "0600".to_string()), "a ledger is its creator's alone");
    assert_eq!(tenant_used_bytes(&sim, "victim"), Some((256 + 64) * MIB), "nothing was lost");
    victim.send_line("go");
    assert_eq!(victim.wait_for("b"), cu::SUCCESS.to_string(), "the victim's process lives on");
    victim.wait().assert_success();
    assert_eq!(tenant_used_bytes(&sim, "victim"), Some(0));
}

/// Item 11: a monitor started by hand made the ledger directory 0755, so
/// tenants of other users fell back to `/tmp/gpuslice-<uid>`, which the
/// monitor never reads, and their honest processes showed as untracked.
/// Now it makes the directory root's, 1777: every user's ledger is watched.
#[test]
fn the_directory_a_monitor_makes_takes_every_users_ledger() {
    let tenant_uid = 2111;
    let sim = sim();
    sim.share_the_gpu();
    std::fs::remove_dir(sim.ledger_dir()).unwrap();
    // SAFETY: umask has no preconditions; a hand-started monitor's usual one.
    let old_umask = unsafe { libc::umask(0o022) };
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    // SAFETY: as above.
    unsafe { libc::umask(old_umask) };
    let dir = sim.ledger_dir();
    assert_eq!((owner(&dir).0, mode(&dir)), (0, "1777".to_string()), "root's, sticky and open to every user");

    let mut process = sim.spawn(memctl_as(&sim, tenant_uid, &[]).args(["init", "ctx", "alloc:a:128M", "hold"]));
    process.wait_for("ready");
    let path = ledger::tenant_path(&dir, "victim");
    assert_eq!((owner(&path).0, mode(&path)), (tenant_uid, "0600".to_string()));
    let mut metrics = monitor.metrics();
    let tracked = within(Duration::from_secs(5), || {
        metrics = monitor.metrics();
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "victim")]) == Some(((128 + 64) * MIB) as f64)
    });
    assert!(tracked.is_some(), "the tenant's ledger was never watched: {metrics:#?}");
    // Rounds that saw the tracked process had their chance to call it untracked.
    monitor.wait_rounds(2);
    assert!(monitor.metrics().find("gpuslice_untracked_process_memory_bytes", &[]).is_empty(), "an honest process shows as untracked");
    let status = status_json(&sim);
    assert_eq!(tenant(&status, "victim").unwrap()["processes"][0]["pid"].as_u64(), Some(process.pid() as u64), "{status:#}");
    process.wait().assert_success();
}

/// Item 11: with `--group`, only the group's members may create ledgers
/// (root:GROUP 1770); and a tenant whose processes run as several uids
/// shares one ledger through a set-group-ID directory of its group.
#[test]
fn a_group_shares_a_tenant_and_keeps_others_out() {
    let (gpu_users, member, outsider) = (2120, 2121, 2122);
    let (team, first, second) = (2130, 2131, 2132);
    let sim = sim();
    sim.share_the_gpu();
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--group".into(), gpu_users.to_string()], ..Default::default() });
    let dir = sim.ledger_dir();
    assert_eq!((owner(&dir), mode(&dir)), ((0, gpu_users), "1770".to_string()));
    let mut cmd = memctl_as(&sim, member, &[gpu_users]);
    cmd.env("GPUSLICE_TENANT", "member").args(["init", "ctx", "alloc:a:64M"]);
    sim.run(&mut cmd).assert_success().assert_rc("a", cu::SUCCESS);
    let mut cmd = memctl_as(&sim, outsider, &[]);
    cmd.env("GPUSLICE_TENANT", "outsider").args(["init", "ctx", "alloc:a:64M"]);
    sim.run(&mut cmd).assert_fails_closed("a", &["Permission denied"]);

    // An administrator gives team-g a directory of its own group.
    let tenants = dir.join("tenants");
    std::fs::create_dir(&tenants).unwrap();
    std::fs::set_permissions(&tenants, std::fs::Permissions::from_mode(0o711)).unwrap();
    let team_dir = tenants.join("team-g");
    std::fs::create_dir(&team_dir).unwrap();
    std::os::unix::fs::chown(&team_dir, Some(0), Some(team)).unwrap();
    std::fs::set_permissions(&team_dir, std::fs::Permissions::from_mode(0o3770)).unwrap();
    let team_process = |uid: u32, groups: &[u32]| {
        let mut cmd = memctl_as(&sim, uid, groups);
        cmd.env("GPUSLICE_DIR", &team_dir).env("GPUSLICE_TENANT", "team-g");
        cmd
    };
    let mut a = sim.spawn(team_process(first, &[team, gpu_users]).args(["init", "ctx", "alloc:a:100M", "hold"]));
    a.wait_for("ready");
    let mut b = sim.spawn(team_process(second, &[team, gpu_users]).args(["init", "ctx", "alloc:b:100M", "hold"]));
    b.wait_for("ready");
    let ledger_path = ledger::tenant_path(&team_dir, "team-g");
    assert_eq!((owner(&ledger_path), mode(&ledger_path)), ((first, team), "0660".to_string()));
    let out = sim.run(team_process(outsider, &[gpu_users]).args(["init", "ctx", "alloc:x:1M"]));
    out.assert_fails_closed("x", &["Permission denied"]);
    let mut metrics = monitor.metrics();
    let shared = within(Duration::from_secs(5), || {
        metrics = monitor.metrics();
        metrics.value("gpuslice_tenant_processes", &[("tenant", "team-g")]) == Some(2.0)
            && metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-g")]) == Some((2 * (100 + 64) * MIB) as f64)
    });
    assert!(shared.is_some(), "two uids of one tenant do not share its ledger: {metrics:#?}");
    a.wait().assert_success();
    b.wait().assert_success();
}

/// The planted ledger of item 5: a valid ledger with no cap, set by "the monitor".
fn plant_uncapped_ledger(dir: &Path, tenant: &str) {
    let planted = ledger::Ledger::open_or_create_with(dir, tenant, ledger::FileAccess::Tenant).unwrap();
    for dev in 0..ledger::MAX_DEVICES {
        planted.set_memory_limit_bytes(dev, ledger::UNLIMITED, ledger::PolicySource::Monitor);
    }
}

/// Item 5: `/tmp/gpuslice-<uid>` was used whoever owned it. Another user
/// pre-created it (or a link in its place) holding a ledger with no cap
/// "set by the monitor", and the victim's cap was overridden. Now the
/// directory must be the user's own, mode 0700, and no link.
#[test]
fn the_per_user_fallback_directory_is_refused_unless_it_is_the_users_own() {
    // Uids of this test alone: /tmp is shared.
    let victim_uid = 40_000 + std::process::id() % 20_000;
    let attacker_uid = victim_uid + 1;
    let fallback = PathBuf::from(format!("/tmp/gpuslice-{victim_uid}"));
    let attackers = std::env::temp_dir().join(format!("gpuslice-attacker-{}", std::process::id()));
    let clean = || {
        let _ = std::fs::remove_file(&fallback);
        let _ = std::fs::remove_dir_all(&fallback);
        let _ = std::fs::remove_dir_all(&attackers);
    };
    clean();
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("256MiB").tenant("victim");
    sim.share_the_gpu();
    let victim = || {
        let mut cmd = memctl_as(&sim, victim_uid, &[]);
        cmd.env("GPUSLICE_DIR", &fallback).args(["init", "ctx", "alloc:big:512M"]);
        cmd
    };

    // The attacker's own directory, in the victim's fallback's place.
    std::fs::create_dir(&fallback).unwrap();
    plant_uncapped_ledger(&fallback, "victim");
    std::os::unix::fs::chown(&fallback, Some(attacker_uid), Some(attacker_uid)).unwrap();
    std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = sim.run(&mut victim());
    out.assert_fails_closed("big", &[&fallback.display().to_string(), &format!("belongs to uid {attacker_uid}")]);

    // A link to the attacker's directory.
    std::fs::remove_dir_all(&fallback).unwrap();
    std::fs::create_dir(&attackers).unwrap();
    plant_uncapped_ledger(&attackers, "victim");
    std::os::unix::fs::chown(&attackers, Some(attacker_uid), Some(attacker_uid)).unwrap();
    std::os::unix::fs::symlink(&attackers, &fallback).unwrap();
    let out = sim.run(&mut victim());
    out.assert_fails_closed("big", &["symbolic link"]);

    // Its own directory, but readable by all: refused, as ssh-agent would.
    std::fs::remove_file(&fallback).unwrap();
    std::fs::create_dir(&fallback).unwrap();
    std::os::unix::fs::chown(&fallback, Some(victim_uid), Some(victim_uid)).unwrap();
    std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o755)).unwrap();
    sim.run(&mut victim()).assert_fails_closed("big", &["0700"]);

    // None there: the victim makes its own, 0700, and its cap holds.
    std::fs::remove_dir(&fallback).unwrap();
    let out = sim.run(&mut victim());
    out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("big", cu::OUT_OF_MEMORY);
    assert_eq!((owner(&fallback).0, mode(&fallback)), (victim_uid, "0700".to_string()));
    clean();
}

/// A copy of a real ledger whose `initialised` word is still zero: what a
/// creator of another kind leaves while it writes.
fn half_initialised(sim: &Sim) -> Vec<u8> {
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", "template").args(["init"]);
    sim.run(&mut cmd).assert_success();
    let path = ledger::tenant_path(&sim.ledger_dir(), "template");
    let mut bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let at = std::mem::offset_of!(ledger::layout::Header, initialised);
    bytes[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
    bytes
}

/// Item 7: each empty or half-initialised `*.ledger` file stalled the
/// monitor's round 500 ms, so with 20 of them a kill -9 was reclaimed after
/// 9 s instead of within a second. Now nothing waits inside a round, and a
/// file that stays uninitialised is refused with one error line.
#[test]
fn empty_and_half_initialised_files_do_not_slow_reclaim() {
    let sim = sim();
    let half = half_initialised(&sim);
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut tenant_process = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:256M", "hold"]));
    tenant_process.wait_for("ready");
    for i in 0..12 {
        std::fs::write(sim.ledger_dir().join(format!("empty-{i}.ledger")), b"").unwrap();
    }
    for i in 0..8 {
        std::fs::write(sim.ledger_dir().join(format!("half-{i}.ledger")), &half).unwrap();
    }
    // Rounds that began after the files were written.
    monitor.wait_rounds(2);
    assert_eq!(tenant_used_bytes(&sim, "victim"), Some((256 + 64) * MIB));
    tenant_process.kill9();
    let took = within(Duration::from_secs(20), || tenant_used_bytes(&sim, "victim") == Some(0));
    let took = took.expect("never reclaimed");
    assert!(took < Duration::from_secs(1), "reclaim took {took:?} with 20 hostile files in the directory");
    // The grace is wall time; then rounds that began after it refuse the files.
    std::thread::sleep(ledger_grace());
    monitor.wait_rounds(3);
    assert!(monitor_alive(&monitor));
    let log = monitor.stop();
    for name in (0..12).map(|i| format!("empty-{i}.ledger")).chain((0..8).map(|i| format!("half-{i}.ledger"))) {
        assert_eq!(error_lines(&log, &name).len(), 1, "one error line for {name}\n{log}");
    }
}

/// How long the monitor gives a file to become a ledger.
fn ledger_grace() -> Duration {
    Duration::from_secs(2)
}

/// Item 12 (a): a device entry left CLAIMING by a process that died in the
/// middle of registering it refused every later process of the tenant, for
/// good. Now the next process finds the claimer gone and takes it over.
#[test]
fn a_device_entry_left_half_written_by_a_dead_process_is_taken_over() {
    let sim = sim();
    {
        let fresh = ledger::Ledger::open_or_create(&sim.ledger_dir(), "victim").unwrap();
        // Its first process died between claiming entry 0 and finishing it.
        fresh.layout().header.devices[0].state.store(ledger::layout::device_state::CLAIMING, Ordering::SeqCst);
    }
    let started = Instant::now();
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:a:256M", "alloc:over:1G"]));
    out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("a", cu::SUCCESS).assert_rc("over", cu::OUT_OF_MEMORY);
    assert!(started.elapsed() < Duration::from_secs(5));
    let taken = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "victim")).unwrap();
    assert_eq!(taken.devices().len(), 1, "the entry was finished, not abandoned");
    assert_eq!(taken.memory_limit_bytes(0), 1024 * MIB, "and the cap applies on it");
}

/// Item 12 (b): the monitor reset slots holding a state no writer writes
/// without a word (the log called them dead processes'). Now it says what
/// it rewrote, one line per slot, and the tenant gets its bytes back.
#[test]
fn a_slot_with_an_invalid_state_is_reset_with_one_line_saying_so() {
    let sim = sim();
    sim.run(sim.c("memctl").args(["init", "ctx"])).assert_success();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    {
        // A process of the tenant writes nonsense into a slot, holding 64 MiB.
        let own = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "victim")).unwrap();
        let slot = &own.layout().slots[5];
        slot.bytes[0].store(64 * MIB, Ordering::SeqCst);
        own.layout().usage.devices[0].used_bytes.fetch_add(64 * MIB, Ordering::SeqCst);
        slot.state_word.store(ledger::layout::state_word(7, 3), Ordering::SeqCst);
    }
    let returned = within(Duration::from_secs(5), || tenant_used_bytes(&sim, "victim") == Some(0));
    assert!(returned.is_some(), "the slot's bytes never came back");
    // Later rounds had their chance to say it again.
    monitor.wait_rounds(2);
    let log = monitor.stop();
    let lines: Vec<&str> = log.stderr.lines().filter(|l| l.contains("slot 5")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("which no writer writes") && lines[0].contains("0x300000007") && lines[0].contains("64.0 MiB"),
        "{}",
        lines[0]
    );
    assert!(!log.stderr.contains("reclaimed slot 5"), "an invalid slot is no dead process\n{log}");
}

/// Item 12 (c): simgpu raised the device's counter before the process's, so
/// a kill -9 between the two lost device memory for good. Processes
/// allocating and freeing as fast as they can, killed at random: once all
/// are gone, the device holds nothing.
#[test]
fn simgpu_loses_nothing_to_a_kill9_storm() {
    let sim = Sim::new().memory("4GiB").context_memory("16MiB");
    let stress = compile_c("shim_stress");
    let start = |sim: &Sim| {
        let mut worker = sim.spawn(sim.command(&stress).args(["2", "100000000", "1048576"]));
        worker.wait_for("ready");
        worker.send_line("go");
        worker
    };
    let mut workers: Vec<Running> = (0..4).map(|_| start(&sim)).collect();
    let until = Instant::now() + Duration::from_secs(6);
    let mut kills = 0u32;
    let mut seed = 0x2545_F491_4F6C_DD1Du64 ^ u64::from(std::process::id());
    while Instant::now() < until {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(5 + seed % 20));
        let victim = workers.swap_remove((seed % workers.len() as u64) as usize);
        victim.kill9();
        kills += 1;
        workers.push(start(&sim));
    }
    for worker in workers {
        worker.kill9();
    }
    let out = sim.run(sim.c("memctl").args(["nvml"]));
    out.assert_success();
    eprintln!("{kills} processes killed");
    assert_eq!(out.u64("nvml.used"), 0, "device memory lost to {kills} kill -9s\n{out}");
}

/// Item 12 (d): a renamed ledger was refused with "tenant_name holds 0x0",
/// and a dangling link as the ledger directory with "File exists".
#[test]
fn refusals_name_what_is_wrong() {
    let sim = sim();
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", "alpha").args(["init"]);
    sim.run(&mut cmd).assert_success();
    let dir = sim.ledger_dir();
    std::fs::rename(ledger::tenant_path(&dir, "alpha"), ledger::tenant_path(&dir, "beta")).unwrap();
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", "beta").args(["init", "ctx", "alloc:a:1M"]);
    let out = sim.run(&mut cmd);
    out.assert_fails_closed("a", &["belongs to tenant \"alpha\", not \"beta\""]);
    assert!(!out.stderr.contains("0x0"), "{out}");

    let link = sim.dir().join("dangling");
    std::os::unix::fs::symlink(sim.dir().join("nowhere"), &link).unwrap();
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_DIR", &link).args(["init", "ctx", "alloc:a:1M"]);
    let out = sim.run(&mut cmd);
    out.assert_fails_closed("a", &["symbolic link to", "which does not exist"]);
    assert!(!out.stderr.contains("File exists"), "{out}");
}
