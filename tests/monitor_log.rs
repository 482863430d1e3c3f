//! The monitor's log on stderr: text lines with an RFC 3339 timestamp, a
//! level and the target by default, one JSON object a line with
//! `--log-format json`, filtered by `RUST_LOG` (default `info`). Each test
//! runs the real monitor on simgpu and reads what it wrote.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{Output, Sim};
use monitor_support::*;

/// The target of every line the monitor logs.
const TARGET: &str = "gpuslice::monitor";

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB")
}

/// A configuration with a cap for device 1, which the one simulated
/// device's host lacks: a warning at every (re)load.
fn config_with_a_warning(sim: &Sim) -> std::path::PathBuf {
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = { 0 = \"1GiB\", 1 = \"2GiB\" }\n").unwrap();
    config
}

/// Starts the monitor with `RUST_LOG` set to `rust_log` (unset for `None`)
/// and more arguments; runs `during` while it runs; stops it and returns
/// what it printed.
fn run_monitor(sim: &Sim, rust_log: Option<&str>, args: &[&str], during: impl FnOnce(&Monitor)) -> Output {
    let options = MonitorOptions {
        config: Some(config_with_a_warning(sim)),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    let mut cmd = monitor_command(sim, &options);
    if let Some(rust_log) = rust_log {
        cmd.env("RUST_LOG", rust_log);
    }
    let mut running = sim.spawn(&mut cmd);
    let addr = running.wait_for("listen");
    running.wait_for("ready");
    let monitor = Monitor { running, addr };
    during(&monitor);
    monitor.wait_rounds(2);
    monitor.stop()
}

/// Whether `text` is an RFC 3339 time in UTC with a fraction of a second,
/// as `2026-12-01T21:54:05.161234Z`.
fn is_rfc3339_utc(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| b.get(range).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() > 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..b.len() - 1)
        && b[b.len() - 1] == b'Z'
}

/// The parts of a text line: timestamp, level, message.
fn text_parts(line: &str) -> Option<(&str, &str, &str)> {
    let (timestamp, rest) = line.split_once(' ')?;
    let (level, rest) = rest.trim_start().split_once(' ')?;
    let message = rest.strip_prefix(TARGET)?.strip_prefix(": ")?;
    Some((timestamp, level, message))
}

/// Every line of `out`'s stderr as (level, message), checking that each is
/// one JSON object with a timestamp, a level, the target and a message.
fn json_lines(out: &Output) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for line in out.stderr.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{out}"));
        let object = value.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
        let field = |name: &str| object.get(name).and_then(|v| v.as_str()).unwrap_or_else(|| panic!("no string {name:?} in {line}"));
        assert!(is_rfc3339_utc(field("timestamp")), "timestamp {:?} in {line}", field("timestamp"));
        assert!(["ERROR", "WARN", "INFO"].contains(&field("level")), "level in {line}");
        assert_eq!(field("target"), TARGET, "{line}");
        assert!(!field("message").is_empty(), "{line}");
        lines.push((field("level").to_string(), field("message").to_string()));
    }
    lines
}

/// With `--log-format json` every line of stderr is one JSON object with a
/// timestamp, a level, the target and the message, including a line that
/// echoes a value written to look like a line of its own, and the error
/// the monitor stops with.
#[test]
fn json_log_is_one_object_a_line_even_for_a_hostile_value() {
    let sim = sim();
    let forged = r#"[tenants.team-a]
memory = "1\"}\n{\"level\":\"INFO\",\"message\":\"forged\",\"target\":\"gpuslice::monitor\"}\n"
"#;
    let mut config = None;
    let out = run_monitor(&sim, None, &["--log-format", "json"], |monitor| {
        let path = sim.dir().join("monitor.toml");
        write_atomically(&path, forged);
        monitor.metrics_until("the reload is refused", |m| m.value("gpuslice_config_reloads_total", &[("result", "error")]) == Some(1.0));
        config = Some(path);
    });
    assert!(out.success(), "{out}");
    let lines = json_lines(&out);
    // What the monitor always says, and the warning of the configuration.
    assert!(lines.iter().any(|(l, m)| l == "INFO" && m.starts_with("watching ")), "{out}");
    assert!(lines.iter().any(|(l, m)| l == "INFO" && m == "stopping"), "{out}");
    assert!(lines.iter().any(|(l, m)| l == "WARN" && m.contains("applies to nothing")), "{out}");
    // The refused reload: one error line, whose message holds the value
    // with its quotes and newlines escaped; nothing forged a line.
    let about: Vec<&(String, String)> = lines.iter().filter(|(_, m)| m.contains("forged")).collect();
    assert_eq!(about.len(), 1, "one line names the value\n{out}");
    assert_eq!(about[0].0, "ERROR", "{out}");
    assert!(about[0].1.starts_with("configuration refused") && about[0].1.contains(r#"1\"}\n{\"level\""#), "{:?}", about[0].1);
    assert!(!lines.iter().any(|(_, m)| m == "forged"), "{out}");

    // The same file at start: the monitor refuses to start (exit 2) with
    // one error line, in JSON too.
    let options = MonitorOptions { config, args: vec!["--log-format".into(), "json".into()], ..Default::default() };
    let refused = sim.run(&mut monitor_command(&sim, &options));
    assert_eq!(refused.status.and_then(|s| s.code()), Some(2), "{refused}");
    let lines = json_lines(&refused);
    assert_eq!(lines.len(), 1, "{refused}");
    assert_eq!(lines[0].0, "ERROR", "{refused}");
    assert!(lines[0].1.starts_with("bad configuration: ") && lines[0].1.contains("forged"), "{refused}");
}

/// The default is text: timestamp, level, target, message; `RUST_LOG=warn`
/// keeps the warnings and drops every info line; a `RUST_LOG` the monitor
/// cannot read is named, and the log stays at info.
#[test]
fn text_log_has_timestamps_and_levels_and_rust_log_filters_it() {
    let sim = sim();
    let out = run_monitor(&sim, None, &[], |_| {});
    assert!(out.success(), "{out}");
    let lines: Vec<(&str, &str, &str)> = out
        .stderr
        .lines()
        .map(|l| text_parts(l).unwrap_or_else(|| panic!("not timestamp, level, target, message: {l:?}\n{out}")))
        .collect();
    for (timestamp, level, _) in &lines {
        assert!(is_rfc3339_utc(timestamp) && ["ERROR", "WARN", "INFO"].contains(level), "{out}");
    }
    assert!(lines.iter().any(|(_, level, message)| *level == "INFO" && message.starts_with("watching ")), "{out}");
    assert!(lines.iter().any(|(_, level, message)| *level == "WARN" && message.contains("applies to nothing")), "{out}");
    // The configured cap on the ledger the monitor made: nothing set it before.
    assert!(
        lines
            .iter()
            .any(|(_, _, message)| message.starts_with("tenant team-a device ") && message.contains("memory cap 1.0 GiB (none before)")),
        "{out}"
    );
    assert!(!out.stderr.contains("set by unset"), "{out}");
    assert!(lines.iter().any(|(_, level, message)| *level == "INFO" && *message == "ready: the first round is done"), "{out}");

    let warn_only = run_monitor(&sim, Some("warn"), &[], |_| {});
    assert!(warn_only.success(), "{warn_only}");
    let levels: Vec<&str> = warn_only.stderr.lines().filter_map(text_parts).map(|(_, level, _)| level).collect();
    assert_eq!(levels.len(), warn_only.stderr.lines().count(), "every line has the text format\n{warn_only}");
    assert!(!levels.contains(&"INFO"), "RUST_LOG=warn drops info lines\n{warn_only}");
    assert!(!warn_only.stderr.contains("watching ") && !warn_only.stderr.contains("stopping"), "{warn_only}");
    assert_eq!(warn_only.stderr.matches("applies to nothing").count(), 1, "the warning stays\n{warn_only}");

    let errors_only = run_monitor(&sim, Some("gpuslice=error"), &["--log-format", "json"], |_| {});
    assert!(errors_only.success() && errors_only.stderr.is_empty(), "nothing at error level\n{errors_only}");

    let unreadable = run_monitor(&sim, Some("gpuslice=loud"), &[], |_| {});
    assert!(unreadable.success(), "{unreadable}");
    let complaint = unreadable.stderr.lines().filter_map(text_parts).find(|(_, _, m)| m.starts_with("RUST_LOG gpuslice=loud:"));
    let (_, level, message) = complaint.unwrap_or_else(|| panic!("the bad RUST_LOG is named\n{unreadable}"));
    assert_eq!(level, "WARN");
    assert!(message.contains("logging at info") && message.contains("TARGET=LEVEL"), "{message}");
    assert!(unreadable.stderr.lines().filter_map(text_parts).any(|(_, level, _)| level == "INFO"), "{unreadable}");
}
