//! The monitor's history and `gpuslice report`, on a history made by real
//! processes under the shim on simgpu.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{Sim, MIB};
use monitor_support::*;
use std::os::unix::fs::MetadataExt;

fn report(sim: &Sim, extra: &[&str]) -> gpuslice_tests::Output {
    sim.run(gpuslice_command(sim).arg("report").arg("--dir").arg(sim.ledger_dir()).args(extra))
}

#[test]
fn a_report_of_real_runs_shows_the_peak_the_ledger_counted_and_the_cap() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a");
    // One row a second, so that the run spans several intervals.
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() });
    // 300 MiB held at the peak (the rounds sample four times a second),
    // then 100 MiB held, and one allocation over the cap refused.
    let mut a = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:a:100M",
        "alloc:b:200M",
        "mark:peak",
        "wait",
        "free:b",
        "alloc:denied:2G",
        "hold",
    ]));
    a.wait_for("peak");
    monitor.wait_rounds(6);
    a.send_line("go");
    a.wait_for("ready");
    // Past two whole intervals with the process alive.
    monitor.wait_rounds(6);
    // Read while the monitor writes: the intervals written so far are there.
    let live = report(&sim, &["--json"]);
    live.assert_success();
    assert!(live.stdout.contains("\"tenant\": \"team-a\""), "{live}");
    a.close_stdin();
    a.wait().assert_success();
    monitor.wait_rounds(2);
    let log = monitor.stop();
    assert!(log.stderr.contains("history:"), "the monitor names its history:\n{}", log.stderr);

    // The monitor's own file, in its own directory, that no tenant can write.
    let file = sim.ledger_dir().join(".monitor/history.sqlite");
    let meta = std::fs::metadata(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(sim.ledger_dir().join(".monitor")).unwrap().mode() & 0o777, 0o700);

    let out = report(&sim, &["--json", "--since", "1h"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    let tenants = json["tenants"].as_array().unwrap();
    let a_row = tenants.iter().find(|t| t["tenant"] == "team-a").unwrap_or_else(|| panic!("no team-a in {json:#}"));
    // The peak is the ledger's: 100 + 200 MiB and the 64 MiB context.
    assert_eq!(a_row["memory_peak_bytes"].as_u64(), Some((300 + 64) * MIB), "{a_row:#}");
    assert_eq!(a_row["memory_cap_bytes"].as_u64(), Some(1024 * MIB), "{a_row:#}");
    assert_eq!(a_row["alloc_denied_total"].as_u64(), Some(1), "{a_row:#}");
    assert_eq!(a_row["processes_peak"].as_u64(), Some(1), "{a_row:#}");
    assert!(a_row["active_s"].as_u64().unwrap() >= 2, "{a_row:#}");
    // A refusal at the cap: it is not lowered.
    assert_eq!(a_row["memory_advice"]["verdict"], "keep", "{a_row:#}");
    assert!(a_row["device_uuid"].as_str().unwrap().starts_with("GPU-"), "{a_row:#}");
    assert_eq!(json["devices"][0]["memory_total_bytes"].as_u64(), Some(4096 * MIB), "{json:#}");

    // The tables say the same to people.
    let out = report(&sim, &["--since", "1h"]);
    out.assert_success();
    let row = out.stdout.lines().find(|l| l.starts_with("team-a") && l.contains("GiB")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("1.0 GiB") && row.contains("364.0 MiB"), "{row}");
    assert!(out.stdout.contains("memory: cap 1.0 GiB, p99 "), "{out}");
    assert!(out.stdout.contains("1 allocation(s) refused at the cap: keep it"), "{out}");
}

#[test]
fn a_tenant_under_its_cap_is_told_what_would_do_and_others_cannot_read_the_history() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("2GiB").tenant("team-b");
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() });
    let mut b = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:200M", "hold"]));
    b.wait_for("ready");
    monitor.wait_rounds(8);
    b.close_stdin();
    b.wait().assert_success();
    monitor.stop();

    let out = report(&sim, &["--json"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let row = json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team-b").unwrap().clone();
    assert_eq!(row["memory_peak_bytes"].as_u64(), Some((200 + 64) * MIB), "{row:#}");
    // p99 of 264 MiB + 10 % is under one 512 MiB step.
    assert_eq!(row["memory_p99_bytes"].as_u64(), Some(264 * MIB), "{row:#}");
    assert_eq!(row["memory_advice"]["verdict"], "lower", "{row:#}");
    assert_eq!(row["memory_advice"]["recommended"].as_u64(), Some(512 * MIB), "{row:#}");

    // Another user is told why not, and what to do.
    let mut cmd = gpuslice_command(&sim);
    cmd.arg("report").arg("--dir").arg(sim.ledger_dir());
    let out = sim.run(&mut gpuslice_tests::wrap_as_user(65534, &cmd));
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains("mode 0700") && out.stderr.contains("as root"), "{out}");

    // A directory with no history, and a bad window, are said plainly.
    let empty = sim.dir().join("no-monitor-here");
    std::fs::create_dir_all(&empty).unwrap();
    let out = sim.run(gpuslice_command(&sim).arg("report").arg("--dir").arg(&empty));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("no history at"), "{out}");
    let out = report(&sim, &["--since", "7 fortnights"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("expected a duration like"), "{out}");
}

#[test]
fn a_share_and_the_compute_used_under_it_are_recorded() {
    let sim = Sim::new().shim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.svc]\nshare = 40\n").unwrap();
    let monitor = Monitor::start(
        &sim,
        MonitorOptions { config: Some(config), args: vec!["--history-interval".into(), "1s".into()], ..Default::default() },
    );
    let mut cmd = sim.py("compute_load.py");
    cmd.env("GPUSLICE_TENANT", "svc").args(["1000", "3"]);
    let load = sim.spawn(&mut cmd);
    let out = load.wait();
    out.assert_success();
    monitor.wait_rounds(2);
    monitor.stop();

    let out = report(&sim, &["--json"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let row = json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "svc").unwrap_or_else(|| panic!("{json:#}")).clone();
    assert_eq!(row["compute_share_ratio"].as_f64(), Some(0.4), "{row:#}");
    assert!(row["compute_limit_ratio"].is_null(), "{row:#}");
    // The monitor's arbiter charged it device time, and gave it a target.
    let used = row["compute_used_p99_ratio"].as_f64().unwrap_or_else(|| panic!("no compute used: {row:#}"));
    assert!(used > 0.0 && used <= 1.0, "{row:#}");
    assert!(row["compute_target_mean_ratio"].as_f64().is_some_and(|t| t >= 0.4), "{row:#}");
    let advice = row["share_advice"]["text"].as_str().unwrap_or_else(|| panic!("no share advice: {row:#}"));
    assert!(advice.starts_with("share 40 %, p99 used "), "{advice}");
    assert!(row["limit_advice"].is_null(), "{row:#}");
}

/// A restarted monitor goes on with the same history, and a refusal it
/// had recorded before is not counted again.
#[test]
fn a_restarted_monitor_goes_on_with_its_history_and_counts_nothing_twice() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-r");
    let options = || MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() };
    let monitor = Monitor::start(&sim, options());
    let mut r =
        sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "alloc:denied:2G", "mark:first", "wait", "alloc:b:100M", "hold"]));
    r.wait_for("first");
    monitor.wait_rounds(6);
    monitor.stop();
    let denied = |out: &gpuslice_tests::Output| {
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
        let row =
            json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team-r").unwrap_or_else(|| panic!("{json:#}")).clone();
        (row["alloc_denied_total"].as_u64(), row["memory_peak_bytes"].as_u64())
    };
    let before = report(&sim, &["--json"]);
    before.assert_success();
    assert_eq!(denied(&before), (Some(1), Some((100 + 64) * MIB)));

    // The ledger still counts the refusal; the new monitor starts from it.
    let monitor = Monitor::start(&sim, options());
    r.send_line("go");
    r.wait_for("ready");
    monitor.wait_rounds(6);
    r.close_stdin();
    r.wait().assert_success();
    monitor.stop();
    let after = report(&sim, &["--json"]);
    after.assert_success();
    assert_eq!(denied(&after), (Some(1), Some((200 + 64) * MIB)));
}

/// A tenant that writes absurd figures into its own ledger (more memory
/// than SQLite's integers hold) changes its own report, which is clamped,
/// and nothing of another tenant's.
#[test]
fn a_tenant_lying_in_its_ledger_changes_only_its_own_report() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim();
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() });
    let mut honest_cmd = sim.c("memctl");
    honest_cmd.env("GPUSLICE_TENANT", "honest").env("GPUSLICE_MEMORY_LIMIT", "1GiB").args(["init", "ctx", "alloc:a:100M", "hold"]);
    let mut honest = sim.spawn(&mut honest_cmd);
    let mut liar_cmd = sim.c("memctl");
    liar_cmd.env("GPUSLICE_TENANT", "liar").args(["init", "ctx", "hold"]);
    let mut liar = sim.spawn(&mut liar_cmd);
    honest.wait_for("ready");
    liar.wait_for("ready");

    // The liar's own ledger: a slot of its own, and more than i64::MAX
    // bytes reserved on an uncapped device.
    let ledger = ledger_view::open(&sim.ledger_dir(), "liar");
    let slot = ledger.claim_slot().expect("a slot in the liar's ledger");
    let huge = (1u64 << 63) + (1 << 62);
    ledger.try_reserve(&slot, 0, huge).expect("an uncapped ledger takes any reservation");
    assert!(ledger.used_bytes(0) > huge);
    monitor.wait_rounds(8);
    honest.close_stdin();
    liar.close_stdin();
    honest.wait().assert_success();
    liar.wait().assert_success();
    drop(ledger);
    monitor.stop();

    let out = report(&sim, &["--json"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    let row = |name: &str| {
        json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == name).unwrap_or_else(|| panic!("no {name}: {json:#}")).clone()
    };
    let honest = row("honest");
    assert_eq!(honest["memory_peak_bytes"].as_u64(), Some((100 + 64) * MIB), "{honest:#}");
    assert_eq!(honest["memory_cap_bytes"].as_u64(), Some(1024 * MIB), "{honest:#}");
    assert_eq!(honest["memory_advice"]["recommended"].as_u64(), Some(512 * MIB), "{honest:#}");
    let liar = row("liar");
    assert_eq!(liar["memory_peak_bytes"].as_u64(), Some(i64::MAX as u64), "clamped to what the store holds: {liar:#}");
}

/// The history kept on its own path, as the shipped unit keeps it on disk
/// (`--history-file /var/lib/gpuslice/history.sqlite`), survives the
/// ledger directory being emptied as a reboot empties tmpfs: a week of it
/// is reported after, and `report` finds the file by itself.
#[test]
fn a_history_on_disk_survives_the_ledger_directory_being_emptied() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-p");
    let file = sim.dir().join("var-lib-gpuslice").join("history.sqlite");
    let options = || MonitorOptions {
        args: vec!["--history-interval".into(), "1s".into(), "--history-file".into(), file.display().to_string()],
        ..Default::default()
    };
    let monitor = Monitor::start(&sim, options());
    let mut held = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "mark:held", "hold"]));
    held.wait_for("held");
    monitor.wait_rounds(8);
    held.close_stdin();
    held.wait().assert_success();
    monitor.stop();
    let mode = std::fs::metadata(file.parent().unwrap()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "the monitor made the history's directory its own");

    // Every interval moved back a week less an hour, as if written then.
    let week_s: i64 = 7 * 86_400 - 3600;
    let shift = std::process::Command::new(gpuslice_tests::python())
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); n=int(sys.argv[2]); c.execute('UPDATE tenant_intervals SET start_s=start_s-?', (n,)); c.execute('UPDATE device_intervals SET start_s=start_s-?', (n,)); c.commit()"])
        .arg(&file)
        .arg(week_s.to_string())
        .status()
        .expect("python3");
    assert!(shift.success());

    // A reboot: the ledger directory (tmpfs) comes back empty.
    let ledgers = sim.ledger_dir();
    let ledger_mode = std::fs::metadata(&ledgers).unwrap().mode() & 0o7777;
    std::fs::remove_dir_all(&ledgers).unwrap();
    std::fs::create_dir(&ledgers).unwrap();
    std::fs::set_permissions(&ledgers, std::os::unix::fs::PermissionsExt::from_mode(ledger_mode)).unwrap();
    let monitor = Monitor::start(&sim, options());
    monitor.wait_rounds(2);
    let out = report(&sim, &["--json", "--since", "8d"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    assert_eq!(json["history"].as_str(), Some(file.to_str().unwrap()), "{json:#}");
    let row = json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team-p").unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(row["memory_peak_bytes"].as_u64(), Some((100 + 64) * MIB), "{row:#}");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let oldest_s = json["oldest_s"].as_i64().unwrap_or_else(|| panic!("{json:#}"));
    assert!((now_s - week_s - 120..=now_s - week_s + 60).contains(&oldest_s), "oldest {oldest_s}, now {now_s}");
    monitor.stop();
}
