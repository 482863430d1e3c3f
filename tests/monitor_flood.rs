//! Floods against the monitor, which runs as root: files, names and log
//! lines that a tenant or another local user can make in any number. Each
//! test runs the real monitor over real processes on simgpu, makes the
//! flood as the user who could (`setpriv`), and asserts that the flood
//! gains nothing: every honest tenant stays watched and capped, a process
//! that skips the shim is still killed, and the log stays readable.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, cu, Output, Running, Sim, MIB};
use monitor_support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A monitor in kill mode with `extra` configuration, run with the soft
/// descriptor limit systemd gives a service (1024; the hard limit above it).
fn kill_mode_monitor(sim: &Sim, extra: &str, args: &[&str]) -> Monitor {
    let config = sim.dir().join("gpuslice.toml");
    std::fs::write(&config, format!("on_violation = \"kill\"\nviolation_grace = \"0ms\"\n{extra}")).unwrap();
    let options = MonitorOptions { config: Some(config), args: args.iter().map(|a| a.to_string()).collect(), ..Default::default() };
    let inner = monitor_command(sim, &options);
    let mut cmd = sim.command("prlimit");
    cmd.arg("--nofile=1024:16384").arg("--").arg(inner.get_program()).args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let mut running = sim.spawn(&mut cmd);
    let addr = running.wait_for("listen");
    running.wait_for("ready");
    Monitor { running, addr }
}

/// A process of `tenant` under the shim, run as `uid`, capped at `limit`:
/// it takes `alloc` and holds it until told to go on.
fn tenant_as(sim: &Sim, uid: u32, tenant: &str, limit: &str, alloc: &str) -> Running {
    let mut cmd = sim.as_user(uid, uid, &[], compile_c("memctl"));
    cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_MEMORY_LIMIT", limit).args(["init", "ctx", &format!("alloc:a:{alloc}"), "hold"]);
    let mut process = sim.spawn(&mut cmd);
    process.wait_for("ready");
    process
}

/// A process run as `uid` that skips the shim and takes `size` straight
/// from the driver; returns once it holds it.
fn bypass_as(sim: &Sim, uid: u32, size: &str) -> Running {
    let mut cmd = sim.as_user(uid, uid, &[], compile_c("memctl"));
    cmd.env_remove("LD_PRELOAD").args(["init", "ctx", &format!("alloc:big:{size}"), "hold"]);
    let mut process = sim.spawn(&mut cmd);
    assert_eq!(process.wait_for("big"), cu::SUCCESS.to_string(), "the driver alone gave it {size}");
    process
}

/// `count` valid ledgers named `<prefix>-<n>`, each naming itself, made as
/// `uid` would make them and moved into the ledger directory by `uid` in
/// one go (one `mv`, well under a second).
fn flood_ledgers(sim: &Sim, uid: u32, prefix: &str, count: usize) {
    let staging = sim.dir().join(format!("staging-{prefix}"));
    std::fs::create_dir(&staging).unwrap();
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let template = {
        let name = format!("{prefix}-template");
        drop(ledger::Ledger::open_or_create_with(&staging, &name, ledger::FileAccess::Tenant).unwrap());
        let path = ledger::tenant_path(&staging, &name);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    };
    for n in 0..count {
        let name = format!("{prefix}-{n}");
        let path = ledger::tenant_path(&staging, &name);
        std::fs::write(&path, ledger_view::renamed_copy(&template, &name)).unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
    let mut mv = sim.as_user(uid, uid, &[], "sh");
    mv.arg("-c").arg("mv \"$0\"/*.ledger \"$1\"/").arg(&staging).arg(sim.ledger_dir());
    let out = mv.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The monitor's resident memory, KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// The `gpuslice monitor` process under `prlimit` (its only child).
fn monitor_pid(monitor: &Monitor) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", monitor.running.pid())).unwrap_or_default();
    children.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(monitor.running.pid())
}

fn lines_with<'a>(log: &'a Output, text: &str) -> Vec<&'a str> {
    log.stderr.lines().filter(|l| l.contains(text)).collect()
}

/// Item 1: uid F copies a valid ledger under 1,100 names. The monitor used
/// to run out of descriptors: it stopped reading the directory, a tenant
/// started later was never watched, and a process that skipped the shim
/// kept 4 GiB in kill mode. Now F gets at most its per-uid bound watched,
/// the rest is counted and logged once, a tenant watched before the flood
/// stays watched, one of another user started after it is watched and
/// capped, and the bypass is killed.
#[test]
fn a_flood_of_ledgers_from_one_user_blinds_nothing() {
    let (early_uid, flood_uid, late_uid) = (2141, 2142, 2143);
    let sim = Sim::new().memory("16GiB").context_memory("64MiB").shim();
    sim.share_the_gpu();
    let monitor = kill_mode_monitor(&sim, "", &[]);
    let mut early = tenant_as(&sim, early_uid, "early", "1GiB", "256M");
    monitor.metrics_until("the early tenant is watched", |m| {
        m.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "early")]) == Some(((256 + 64) * MIB) as f64)
    });

    flood_ledgers(&sim, flood_uid, "flood", 1100);
    monitor.wait_rounds(4);
    let mut late = tenant_as(&sim, late_uid, "late", "512MiB", "128M");
    let metrics = monitor.metrics_until("the late tenant is watched and capped", |m| {
        m.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "late")]) == Some((512 * MIB) as f64)
            && m.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "late")]) == Some(((128 + 64) * MIB) as f64)
    });
    assert_eq!(
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "early")]),
        Some(((256 + 64) * MIB) as f64),
        "the early tenant is still watched"
    );
    // The early and the late tenant, and the flood's first 32.
    assert_eq!(metrics.value("gpuslice_ledgers_watched", &[]), Some((2 + 32) as f64), "the per-uid bound is 32");
    assert_eq!(
        metrics.value("gpuslice_ledger_files_refused_total", &[("reason", "per_uid_bound")]),
        Some((1100 - 32) as f64),
        "every refused file is counted once"
    );
    // The late tenant is capped by the monitor: past its cap it is refused.
    late.send_line("go");
    late.wait().assert_success();
    let mut over = tenant_as(&sim, late_uid, "late", "512MiB", "1G");
    assert_eq!(over.wait_for("a"), cu::OUT_OF_MEMORY.to_string(), "the late tenant's cap holds");
    over.send_line("go");

    // A process that skips the shim is killed as in a quiet directory.
    let bypass = bypass_as(&sim, flood_uid, "4G");
    let pid = bypass.pid();
    gpuslice_tests::poll::until("the bypass process is killed", || !pid_alive(pid));
    let (status, body) = monitor.get("/healthz");
    assert_eq!(status, 200, "{body}");
    eprintln!("monitor RSS with the flood: {} KiB", rss_kib(monitor_pid(&monitor)));
    early.send_line("go");
    early.wait().assert_success();
    drop(bypass);
    let log = monitor.stop();
    assert!(!log.stderr.contains("Too many open files"), "{log}");
    assert!(!log.stderr.contains("cannot read the ledger directory"), "{log}");
    assert_eq!(
        lines_with(&log, &format!("uid {flood_uid}")).iter().filter(|l| l.contains("per-uid bound")).count(),
        1,
        "the bound is logged once\n{log}"
    );
}

/// Item 1: a file named `tenants` in the flat layout's directory (any user
/// can make one) made every listing of the directory fail, so no tenant
/// started after it was watched, and in kill mode its honest processes were
/// killed as if they skipped the shim. Now it is reported once and skipped.
#[test]
fn a_file_named_tenants_does_not_stop_discovery() {
    let (squatter_uid, late_uid) = (2151, 2152);
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    sim.share_the_gpu();
    let monitor = kill_mode_monitor(&sim, "", &[]);
    let mut touch = sim.as_user(squatter_uid, squatter_uid, &[], "touch");
    touch.arg(sim.ledger_dir().join("tenants"));
    assert!(touch.status().unwrap().success());
    monitor.wait_rounds(2);
    let mut late = tenant_as(&sim, late_uid, "late", "512MiB", "128M");
    monitor.metrics_until("the late tenant is watched", |m| {
        m.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "late")]) == Some(((128 + 64) * MIB) as f64)
    });
    monitor.wait_rounds(4);
    assert!(pid_alive(late.pid()), "an honest process was killed");
    late.send_line("go");
    late.wait().assert_success();
    let bypass = bypass_as(&sim, squatter_uid, "2G");
    let pid = bypass.pid();
    gpuslice_tests::poll::until("the bypass process is killed", || !pid_alive(pid));
    drop(bypass);
    let log = monitor.stop();
    assert_eq!(lines_with(&log, "tenants").iter().filter(|l| l.contains("not a directory")).count(), 1, "{log}");
}

/// Item 3: a tenant writes garbage into its own slots over and over, and
/// every round the monitor logged one line per slot it reset: tens of
/// thousands of lines. Now the complaints about one file are limited, and
/// a line says how many were left out.
#[test]
fn garbage_in_a_tenants_slots_floods_no_log() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim().tenant("noisy");
    sim.run(sim.c("memctl").args(["init", "ctx"])).assert_success();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let own = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "noisy")).unwrap();
    let rounds_before = monitor.rounds();
    // As the tenant: nonsense in 64 slots, written again as soon as reset,
    // for 12 rounds or more.
    while monitor.rounds() < rounds_before + 12 {
        for slot in &own.layout().slots[100..164] {
            slot.state_word.store(ledger::layout::state_word(7, 3), std::sync::atomic::Ordering::SeqCst);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(own);
    let log = monitor.stop();
    let resets = lines_with(&log, "which no writer writes");
    assert!(!resets.is_empty(), "{log}");
    assert!(resets.len() <= 20, "{} lines about one file's slots\n{}", resets.len(), resets.join("\n"));
    let summary: Vec<&str> = lines_with(&log, "suppressed");
    assert!(
        summary.iter().any(|l| l.contains("noisy.ledger") && l.split_whitespace().any(|w| w.parse::<u64>().is_ok_and(|n| n >= 64))),
        "no line says how many were left out\n{log}"
    );
}

/// Item 3: a configuration value of 50 MB was echoed in full in the
/// monitor's log (at start-up and when a reload was refused). Now every
/// line the monitor writes is bounded.
#[test]
fn a_huge_configuration_value_is_not_echoed_in_full() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim();
    let huge = format!("[tenants.big]\nmemory = \"{}\"\n", "9".repeat(50 << 20));
    let config = sim.dir().join("gpuslice.toml");
    std::fs::write(&config, "[tenants.small]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    write_atomically(&config, &huge);
    monitor.metrics_until("the reload is refused", |m| m.value("gpuslice_config_reloads_total", &[("result", "error")]) == Some(1.0));
    let log = monitor.stop();
    assert!(log.stderr.contains("configuration refused"), "{}", &log.stderr[..log.stderr.len().min(4096)]);
    let longest = log.stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= 4096, "a log line of {longest} bytes");

    // At start-up: refused, in a bounded message.
    let out = sim.run(&mut monitor_command(&sim, &MonitorOptions { config: Some(config), ..Default::default() }));
    assert!(!out.success());
    assert!(out.stderr.contains("bad configuration"), "{}", &out.stderr[..out.stderr.len().min(4096)]);
    assert!(out.stderr.len() <= 8192, "{} bytes of error", out.stderr.len());
}

/// Item 4: uid F takes the ledger name of a tenant the configuration names
/// (`cfg-….ledger` in the flat directory) with an empty file, a link or a
/// FIFO. The monitor left it there, so the tenant never got its ledger.
/// Now it moves the file aside (one line naming it), makes the tenant's
/// ledger, and the tenant's cap holds.
#[test]
fn a_squatted_ledger_name_of_a_configured_tenant_is_moved_aside() {
    let squatter_uid = 2161;
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    sim.share_the_gpu();
    let dir = sim.ledger_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let kinds = ["empty", "link", "fifo"];
    for kind in kinds {
        let path = ledger::tenant_path(&dir, &format!("cfg-{kind}"));
        let mut cmd = match kind {
            "empty" => sim.as_user(squatter_uid, squatter_uid, &[], "touch"),
            "link" => {
                let mut cmd = sim.as_user(squatter_uid, squatter_uid, &[], "ln");
                cmd.args(["-s", "/etc/passwd"]);
                cmd
            }
            _ => sim.as_user(squatter_uid, squatter_uid, &[], "mkfifo"),
        };
        assert!(cmd.arg(&path).status().unwrap().success());
    }
    let config = sim.dir().join("gpuslice.toml");
    let text: String = kinds.iter().map(|k| format!("[tenants.cfg-{k}]\nmemory = \"1GiB\"\n")).collect();
    std::fs::write(&config, text).unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    for kind in kinds {
        let tenant = format!("cfg-{kind}");
        monitor.metrics_until(&format!("tenant {tenant} has its ledger"), |m| {
            m.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", &tenant)]) == Some((1024 * MIB) as f64)
        });
        let path = ledger::tenant_path(&dir, &tenant);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file() && meta.uid() == 0, "{tenant}: the ledger is the monitor's");
        let mut cmd = sim.c("memctl");
        cmd.env("GPUSLICE_TENANT", &tenant).args(["init", "ctx", "alloc:a:512M", "alloc:over:1G"]);
        sim.run(&mut cmd).assert_success().assert_rc("a", cu::SUCCESS).assert_rc("over", cu::OUT_OF_MEMORY);
    }
    let log = monitor.stop();
    for kind in kinds {
        let name = format!("cfg-{kind}.ledger");
        let moved: Vec<&str> = lines_with(&log, &name).into_iter().filter(|l| l.contains("moved it aside")).collect();
        assert_eq!(moved.len(), 1, "one line for {name}\n{log}");
        let aside = std::fs::read_dir(&dir).unwrap().flatten().find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with('.') && n.contains(&name)
        });
        let aside = aside.unwrap_or_else(|| panic!("{name} was not moved aside in {}", dir.display()));
        assert!(moved[0].contains(&aside.file_name().to_string_lossy().into_owned()), "{}", moved[0]);
        assert_eq!(std::fs::symlink_metadata(aside.path()).unwrap().uid(), squatter_uid, "moved, not changed");
    }
}

/// Item 5: the monitor made any `--dir` mode 1777 with one log line, so a
/// typo (`--dir /home/alice`) opened a directory to every user. Now it
/// refuses a directory it would have to change, naming it, its mode and
/// owner and what it needs; `--fix-mode` lets it change it.
#[test]
fn a_given_directory_is_changed_only_with_fix_mode() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB");
    let dir = sim.ledger_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let given = MonitorOptions { fix_mode: false, ..Default::default() };
    let out = sim.run(&mut monitor_command(&sim, &given));
    assert!(!out.success(), "{out}");
    assert_eq!(mode_of(&dir), 0o755, "the directory was changed");
    let said = out.stderr.clone();
    for needed in [dir.display().to_string(), "0755".into(), "owner uid 0".into(), "1777".into(), "--fix-mode".into()] {
        assert!(said.contains(&needed), "the refusal does not say {needed:?}: {said}");
    }
    // It refused before it said it was listening, and left nothing in it.
    assert!(!out.stdout.contains("listen="), "{out}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "the refused directory was written to: {left:?}");

    let monitor = Monitor::start(&sim, MonitorOptions { fix_mode: true, ..Default::default() });
    assert_eq!(mode_of(&dir), 0o1777);
    drop(monitor);
    // A directory already right needs no flag; one the monitor creates is its own.
    drop(Monitor::start(&sim, MonitorOptions { fix_mode: false, ..Default::default() }));
    std::fs::remove_dir_all(&dir).unwrap();
    drop(Monitor::start(&sim, MonitorOptions { fix_mode: false, ..Default::default() }));
    assert_eq!(mode_of(&dir), 0o1777);
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}
