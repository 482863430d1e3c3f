//! `gpuslice top`: one frame as plain text for scripts (`--once`, no
//! terminal), and the live view in a pseudo-terminal, driven as a person
//! would: it shows the tenant, survives a resize, and quits on a key with
//! the terminal given back.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{simgpu_lib, Running, Sim};
use monitor_support::*;

/// A tenant `team-top` capped at 1 GiB and limited to 30% of device time,
/// holding 100 MiB plus its 64 MiB context on a 4 GiB simulated device.
fn capped_tenant() -> (Sim, Running) {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-top").env("GPUSLICE_COMPUTE_LIMIT", "30");
    let mut app = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    app.wait_for("ready");
    (sim, app)
}

/// The cells of a plain-text row (columns are two or more spaces apart).
fn cells(row: &str) -> Vec<&str> {
    row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// The rows under `title` in a `--once` frame, header first.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let start = text.find(&format!("\n{title}\n")).unwrap_or_else(|| panic!("no {title} section:\n{text}"));
    text[start + title.len() + 2..].lines().take_while(|l| !l.is_empty()).collect()
}

#[test]
fn once_prints_one_plain_frame_without_a_terminal() {
    let (sim, mut app) = capped_tenant();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let uuid = status_json(&sim)["devices"][0]["uuid"].as_str().expect("a device UUID").to_string();

    // Standard input and output are pipes: no terminal.
    let out = sim.run(gpuslice_command(&sim).args(["top", "--once", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    let text = &out.stdout;
    assert!(!text.contains('\x1b'), "escape codes in a plain frame: {text:?}");
    assert_eq!(text.lines().next(), Some(format!("gpuslice top   ledger directory: {}   NVML: yes", sim.ledger_dir().display()).as_str()));

    let devices = section(text, "DEVICES");
    assert_eq!(cells(devices[0]), ["DEVICE", "UUID", "MEMORY USED / TOTAL", "USE", "UTIL", "TENANTS"]);
    assert_eq!(devices.len(), 2, "{text}");
    let device = cells(devices[1]);
    assert_eq!((device[0], device[1], device[5]), ("0", uuid.as_str(), "1"), "{text}");
    assert!(device[2].ends_with(" / 4.0 GiB"), "{text}");

    let tenants = section(text, "TENANTS");
    assert_eq!(tenants.len(), 2, "{text}");
    // Used: no kernel ran between the two looks.
    assert_eq!(cells(tenants[1]), ["0", "team-top", "164.0 MiB", "1.0 GiB", "16%", "1", "0", "30%", "-", "0", "30%", "0%"], "{text}");

    let processes = section(text, "PROCESSES");
    assert_eq!(processes.len(), 2, "{text}");
    let process = cells(processes[1]);
    assert_eq!(process[0..2], ["team-top", app.pid().to_string().as_str()], "{text}");
    assert_eq!((process[3], process[6]), ("164.0 MiB", "alive"), "{text}");
    assert!(!text.contains("\nQUEUE\n"), "{text}");

    app.send_line("done");
    app.wait().assert_success();
}

#[test]
fn once_with_a_missing_directory_is_a_one_line_error() {
    let sim = Sim::new();
    let missing = sim.dir().join("nowhere");
    let out = sim.run(gpuslice_command(&sim).args(["top", "--once", "--no-nvml", "--dir"]).arg(&missing));
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(out.stderr, format!("gpuslice: the ledger directory {} (--dir) does not exist\n", missing.display()));
    assert_eq!(out.stdout, "");
}

/// `gpuslice top` in a pseudo-terminal (tests/python/pty_top.py), quit with `key`.
fn drive(sim: &Sim, key: &str) -> gpuslice_tests::Output {
    let transcript = sim.dir().join(format!("top-{key}.transcript"));
    let mut cmd = sim.py("pty_top.py");
    // Neither the driver nor `gpuslice top` is a tenant.
    cmd.env_remove("LD_PRELOAD")
        .args(["--expect", "team-top", "--size", "30x160", "--resize", "20x90", "--quit-key", key, "--transcript"])
        .arg(&transcript)
        .arg("--")
        .arg(gpuslice_tests::gpuslice_bin())
        .args(["top", "--interval", "200ms", "--dir"])
        .arg(sim.ledger_dir())
        .arg("--nvml-lib")
        .arg(simgpu_lib());
    let out = sim.run(&mut cmd);
    out.assert_success();
    out
}

#[test]
fn live_view_shows_the_tenant_survives_a_resize_and_quits_on_q() {
    let (sim, mut app) = capped_tenant();
    let out = drive(&sim, "q");
    for (key, expected) in [
        ("rendered", "1"),
        ("redrawn_after_resize", "1"),
        ("alive_after_resize", "1"),
        ("exit_code", "0"),
        ("entered_alternate_screen", "1"),
        ("left_alternate_screen", "1"),
        ("cursor_shown_at_exit", "1"),
    ] {
        assert_eq!(out.get(key), expected, "{key}\n{out}");
    }
    // One input poll (100 ms) and one refresh at most; the rest is room
    // for a machine busy with other tests.
    assert!(out.u64("quit_ms") < 5000, "{out}");
    app.send_line("done");
    app.wait().assert_success();
}

#[test]
fn live_view_quits_on_esc_and_ctrl_c() {
    let (sim, mut app) = capped_tenant();
    for key in ["esc", "ctrl-c"] {
        let out = drive(&sim, key);
        assert_eq!((out.get("rendered"), out.get("exit_code"), out.get("left_alternate_screen")), ("1", "0", "1"), "{key}\n{out}");
    }
    app.send_line("done");
    app.wait().assert_success();
}
