//! Helpers for the monitor's end-to-end tests: start `gpuslice monitor` on a
//! test's simulated GPU, fetch its pages over HTTP, parse the Prometheus text
//! format, and read `gpuslice status --json`.

#![allow(dead_code)]

use gpuslice_tests::{poll, simgpu_lib, Running, Sim};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A running monitor.
pub struct Monitor {
    pub running: Running,
    pub addr: String,
}

/// How a test starts the monitor.
pub struct MonitorOptions {
    /// NVML from simgpu (`--nvml-lib`); `false` leaves NVML out of reach.
    pub nvml: bool,
    pub config: Option<PathBuf>,
    /// More arguments for `gpuslice monitor`.
    pub args: Vec<String>,
    /// `--fix-mode`: the test made the ledger directory (mode 0755), and
    /// the monitor gives it the mode it needs (1777, or 1770 with `--group`).
    pub fix_mode: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions { nvml: true, config: None, args: Vec::new(), fix_mode: true }
    }
}

/// `gpuslice` with this test's simulated GPU, never under the shim itself
/// (the monitor and status are not tenants).
pub fn gpuslice_command(sim: &Sim) -> Command {
    let mut cmd = sim.gpuslice();
    cmd.env_remove("LD_PRELOAD");
    cmd
}

/// The `gpuslice monitor` command for this test's ledger directory.
pub fn monitor_command(sim: &Sim, options: &MonitorOptions) -> Command {
    let mut cmd = gpuslice_command(sim);
    cmd.arg("monitor").arg("--dir").arg(sim.ledger_dir()).args(["--listen", "127.0.0.1:0"]);
    // The tests read the log at its default level, whatever the caller's.
    cmd.env_remove("RUST_LOG");
    if options.nvml {
        cmd.arg("--nvml-lib").arg(simgpu_lib());
    } else {
        // Nothing NVML-like on the library path: simgpu's directory goes.
        cmd.env_remove("LD_LIBRARY_PATH");
    }
    if let Some(config) = &options.config {
        cmd.arg("--config").arg(config);
    }
    if options.fix_mode {
        cmd.arg("--fix-mode");
    }
    cmd.args(&options.args);
    cmd
}

impl Monitor {
    pub fn start(sim: &Sim, options: MonitorOptions) -> Monitor {
        let mut running = sim.spawn(&mut monitor_command(sim, &options));
        let addr = running.wait_for("listen");
        running.wait_for("ready");
        Monitor { running, addr }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.addr, path)
    }

    pub fn metrics(&self) -> Metrics {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        Metrics::parse(&body)
    }

    /// Fetches `/metrics` until `done` accepts it; fails the test with
    /// `what` and the last page if that never happens.
    #[track_caller]
    pub fn metrics_until(&self, what: &str, done: impl FnMut(&Metrics) -> bool) -> Metrics {
        poll::fetch_until(what, || self.metrics(), done)
    }

    /// Rounds the monitor has completed (`gpuslice_monitor_rounds_total`).
    pub fn rounds(&self) -> u64 {
        let metrics = self.metrics();
        metrics.value("gpuslice_monitor_rounds_total", &[]).unwrap_or_else(|| panic!("no round count:\n{metrics:#?}")) as u64
    }

    /// Waits until `n` whole rounds have run since the call: each of them
    /// started after it and has done all its work. What the monitor would
    /// do about the state at the call, it has done by the return; a test
    /// checks that something did *not* happen after this, never after a
    /// sleep that a starved monitor may not have used.
    #[track_caller]
    pub fn wait_rounds(&self, n: u64) {
        // The page showed `now`, so round `now + 1` may already have begun
        // before the call; rounds `now + 2` on began after it.
        let now = self.rounds();
        let target = now + 1 + n;
        poll::until(&format!("{n} monitor round(s) after round {now}"), || self.rounds() >= target);
    }

    /// The page of the round in progress at the call, or a later one. A
    /// round acts (kills a process, reclaims a slot) before it publishes
    /// its page, so a test that saw what a round did from outside reads its
    /// counters with this, never with [`Self::metrics`] at once.
    #[track_caller]
    pub fn metrics_after_this_round(&self) -> Metrics {
        self.wait_rounds(0);
        self.metrics()
    }

    /// Stops it with SIGTERM and returns what it printed (stderr has the log).
    pub fn stop(self) -> gpuslice_tests::Output {
        self.running.signal("TERM");
        self.running.wait()
    }
}

/// A plain HTTP/1.1 GET; returns (status code, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {response:?}"));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length: Option<usize> = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).and_then(|v| v.trim().parse().ok());
    assert_eq!(length, Some(body.len()), "Content-Length disagrees with the body");
    (status, body.to_string())
}

/// One sample of the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed Prometheus text exposition (format 0.0.4). Parsing checks the
/// format: every sample belongs to a family declared by `# TYPE` before it,
/// families are not split, names and labels are well-formed, label values
/// are unescaped, values are numbers.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub types: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        let mut finished_families: Vec<String> = Vec::new();
        let mut current: Option<String> = None;
        for (number, line) in text.lines().enumerate() {
            let at = || format!("line {}: {line:?}", number + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (keyword, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                assert!(valid_name(name), "bad metric name, {}", at());
                if keyword == "TYPE" {
                    let kind = parts.next().unwrap_or("");
                    assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "bad type, {}", at());
                    assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "family declared twice, {}", at());
                    if let Some(previous) = current.replace(name.to_string()) {
                        finished_families.push(previous);
                    }
                }
                continue;
            }
            let (name, rest) = match line.find(['{', ' ']) {
                Some(i) => line.split_at(i),
                None => panic!("no value, {}", at()),
            };
            assert!(valid_name(name), "bad sample name, {}", at());
            // A histogram's samples are its name with `_bucket`, `_sum` or `_count`.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_prefix(current.as_deref().unwrap_or("")).filter(|rest| rest == suffix))
                .filter(|_| current.as_ref().and_then(|c| types.get(c)).is_some_and(|t| t == "histogram"))
                .map_or(name, |_| current.as_deref().unwrap_or(name));
            assert_eq!(current.as_deref(), Some(family), "sample outside its family's block, {}", at());
            assert!(!finished_families.contains(&family.to_string()), "family split, {}", at());
            let mut labels = BTreeMap::new();
            let mut rest = rest;
            if let Some(body) = rest.strip_prefix('{') {
                let mut chars = body.char_indices().peekable();
                let end;
                loop {
                    // label name
                    let start = chars.peek().map(|(i, _)| *i).unwrap_or(body.len());
                    let mut label = String::new();
                    while let Some((_, c)) = chars.peek().copied() {
                        if c == '=' || c == '}' {
                            break;
                        }
                        label.push(c);
                        chars.next();
                    }
                    if let Some((i, '}')) = chars.peek().copied() {
                        assert!(label.is_empty(), "bad labels, {}", at());
                        end = Some(i);
                        break;
                    }
                    assert!(valid_name(&label) && start < body.len(), "bad label name {label:?}, {}", at());
                    assert_eq!(chars.next().map(|(_, c)| c), Some('='), "{}", at());
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{}", at());
                    let mut value = String::new();
                    loop {
                        match chars.next().map(|(_, c)| c) {
                            Some('\\') => match chars.next().map(|(_, c)| c) {
                                Some('\\') => value.push('\\'),
                                Some('"') => value.push('"'),
                                Some('n') => value.push('\n'),
                                other => panic!("bad escape {other:?}, {}", at()),
                            },
                            Some('"') => break,
                            Some(c) => value.push(c),
                            None => panic!("unterminated label value, {}", at()),
                        }
                    }
                    assert!(labels.insert(label, value).is_none(), "label given twice, {}", at());
                    match chars.next() {
                        Some((_, ',')) => continue,
                        Some((i, '}')) => {
                            end = Some(i);
                            break;
                        }
                        other => panic!("expected , or }} but found {other:?}, {}", at()),
                    }
                }
                rest = &body[end.unwrap() + 1..];
            }
            let value_text = rest.trim();
            let value: f64 = match value_text {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                "NaN" => f64::NAN,
                other => other.parse().unwrap_or_else(|_| panic!("bad value, {}", at())),
            };
            samples.push(Sample { name: name.to_string(), labels, value });
        }
        Metrics { types, samples }
    }

    /// The samples of `name` whose labels include every pair in `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
            .collect()
    }

    /// The value of the one sample matching, or `None`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.find(name, labels);
        assert!(found.len() <= 1, "{name} {labels:?} matches {} samples", found.len());
        found.first().map(|s| s.value)
    }
}

/// `gpuslice status --json` for this test's ledger directory (with simgpu's NVML).
pub fn status_json(sim: &Sim) -> serde_json::Value {
    let out =
        sim.run(gpuslice_command(sim).arg("status").arg("--dir").arg(sim.ledger_dir()).arg("--json").arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{out}"))
}

/// The tenant object named `name` in a status document.
pub fn tenant<'a>(status: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    status["tenants"].as_array()?.iter().find(|t| t["name"] == name)
}

/// A tenant's ledger usage on device index 0, from `status --json`.
pub fn tenant_used_bytes(sim: &Sim, name: &str) -> Option<u64> {
    let status = status_json(sim);
    tenant(&status, name)?["devices"].as_array()?.iter().find(|d| d["index"] == 0)?["memory_used_bytes"].as_u64()
}

/// Writes a file atomically (a new inode), as editors and ConfigMaps do.
pub fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Sends SIGKILL to a pid (a process the test does not hold a handle to).
pub fn kill9(pid: u32) {
    // SAFETY: kill(2) on a pid the test found as its own child's descendant.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}
