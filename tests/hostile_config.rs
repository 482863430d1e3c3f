//! Hostile tenants: a tenant controls its own environment and files, so
//! every typo or trick in a value must fail closed (the process gets no GPU:
//! `cuInit` returns `CUDA_ERROR_NOT_PERMITTED` and one stderr line names the
//! variable, the value and what is accepted), never turn into "no cap".
//! Each attack runs the real binaries on simgpu, and where it is made
//! against a tenant that already runs, that tenant's process holds memory
//! through it and loses nothing: its cap, its usage and its allocations are
//! as they were.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, cu, Output, Running, Sim, GIB, MIB};
use ledger::units::TENANT_FORMAT;
use monitor_support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const TENANT: &str = "hostile";

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").shim().tenant(TENANT)
}

/// The attack: a process of the tenant with `envs` on top of `sim`'s, that
/// initialises, allocates (`a`) and asks for its view of memory.
fn attack(sim: &Sim, envs: &[(&str, &str)]) -> Output {
    let mut cmd = sim.c("memctl");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.args(["init", "ctx", "alloc:a:1M", "info"]);
    let out = sim.run(&mut cmd);
    out.assert_success();
    out
}

/// A process of `TENANT` running under a well-formed 1 GiB cap on its
/// device 0, holding 100 MiB, while an attack runs beside it.
struct Holder {
    running: Running,
    /// (cap, usage) of the tenant's ledger device 0 before the attack.
    before: (u64, u64),
}

fn holder(sim: &Sim) -> Holder {
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_MEMORY_LIMIT", "1GiB").args(["init", "ctx", "alloc:a:100M", "hold", "alloc:b:100M", "free:a", "free:b"]);
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("ready");
    let dir = sim.ledger_dir();
    let before = (ledger_view::memory_limit_bytes(&dir, TENANT, 0), ledger_view::used_bytes(&dir, TENANT, 0));
    assert_eq!(before, (GIB, (64 + 100) * MIB), "the holder runs under its cap");
    Holder { running, before }
}

impl Holder {
    /// Nothing was lost: the tenant's cap and usage are as before the
    /// attack, the holder can still allocate and free, and the ledger ends
    /// at zero.
    fn assert_nothing_lost(mut self, sim: &Sim, attack: &Output) {
        let dir = sim.ledger_dir();
        let after = (ledger_view::memory_limit_bytes(&dir, TENANT, 0), ledger_view::used_bytes(&dir, TENANT, 0));
        assert_eq!(after, self.before, "the attack changed the tenant's cap or usage\n{attack}");
        self.running.send_line("go");
        let out = self.running.wait();
        out.assert_success().assert_rc("b", cu::SUCCESS).assert_rc("free.a", cu::SUCCESS).assert_rc("free.b", cu::SUCCESS);
        assert_eq!(ledger_view::used_bytes(&dir, TENANT, 0), 0, "{out}");
    }
}

/// The ledger files in `dir` (none when it does not exist).
fn ledger_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

// --- Item 8: a typo must never mean "no cap" --------------------------------

#[test]
fn a_cap_for_a_device_the_process_cannot_see_fails_closed() {
    // Two devices; the process sees only physical device 1, as its ordinal
    // 0, which these caps would leave uncapped.
    let cases: &[(&str, &str, &str)] = &[
        ("GPUSLICE_MEMORY_LIMIT", "1=1GiB", "device 1 is not a device this process sees"),
        ("GPUSLICE_MEMORY_LIMIT", "1=1GiB,2=1GiB", "its device 0 would have no cap"),
        ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g", "device 1 is not a device this process sees"),
        // No ledger holds a device 99, whatever the host.
        ("GPUSLICE_MEMORY_LIMIT", "99=1GiB", "0 to 15"),
        ("CUDA_DEVICE_MEMORY_LIMIT_99", "1g", "0 to 15"),
    ];
    for &(var, value, why) in cases {
        let sim = sim().devices(2).env("CUDA_VISIBLE_DEVICES", "1");
        let holder = holder(&sim);
        let out = attack(&sim, &[(var, value)]);
        out.assert_fails_closed("a", &[var, value, why]);
        holder.assert_nothing_lost(&sim, &out);
    }
}

/// One list for workers that each see one of the devices (launchers set
/// `CUDA_VISIBLE_DEVICES` per worker): every device a worker sees has its
/// cap, so the entries for the others are no typo.
#[test]
fn a_list_that_caps_every_device_the_process_sees_may_name_more() {
    let sim = sim().devices(2).env("CUDA_VISIBLE_DEVICES", "1");
    let out = sim.run(
        sim.c("memctl").env("CUDA_DEVICE_MEMORY_LIMIT_0", "512m").env("CUDA_DEVICE_MEMORY_LIMIT_1", "1g").args(["init", "ctx", "info"]),
    );
    out.assert_success().assert_rc("init", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
}

/// What the environment cannot show (no `CUDA_VISIBLE_DEVICES`), the
/// driver's device count does, at registration.
#[test]
fn a_cap_for_a_device_beyond_the_drivers_count_fails_closed() {
    for (var, value) in
        [("GPUSLICE_MEMORY_LIMIT", "1=1GiB"), ("GPUSLICE_MEMORY_LIMIT", "2=1GiB,3=1GiB"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")]
    {
        let sim = sim().devices(1);
        let holder = holder(&sim);
        let out = attack(&sim, &[(var, value)]);
        out.assert_fails_closed(
            "a",
            &[var, value, "is not a device this process sees (it sees 1 device, index 0", "device 0 would have no cap"],
        );
        holder.assert_nothing_lost(&sim, &out);
    }
}

#[test]
fn gpuslice_run_refuses_a_cap_for_a_device_the_command_cannot_see() {
    let sim = Sim::new().devices(2).memory("4GiB").context_memory("64MiB").env("CUDA_VISIBLE_DEVICES", "1");
    let out = sim.run(
        sim.gpuslice()
            .args(["run", "--sim", "--memory", "1=1GiB", "--tenant", TENANT, "--dir"])
            .arg(sim.ledger_dir())
            .arg("--")
            .arg(compile_c("memctl"))
            .args(["init", "ctx", "info"]),
    );
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--memory \"1=1GiB\"") && out.stderr.contains("device 1 is not a device the command will see"), "{out}");
    assert_eq!(out.find("init"), None, "the command must not start\n{out}");
    assert!(ledger_files(&sim.ledger_dir()).is_empty(), "{out}");
}

#[test]
fn a_relative_ledger_directory_fails_closed() {
    // Two working directories of one tenant with GPUSLICE_DIR=ledger would
    // be two ledgers, and two caps.
    let sim = sim();
    let holder = holder(&sim);
    let mut last = None;
    for cwd in ["a", "b"] {
        let cwd = sim.dir().join(cwd);
        std::fs::create_dir_all(&cwd).unwrap();
        let mut cmd = sim.c("memctl");
        cmd.current_dir(&cwd).env("GPUSLICE_DIR", "ledger").env("GPUSLICE_MEMORY_LIMIT", "1GiB").args([
            "init",
            "ctx",
            "alloc:a:900M",
            "info",
        ]);
        let out = sim.run(&mut cmd);
        out.assert_success().assert_fails_closed("a", &["GPUSLICE_DIR", "\"ledger\"", "absolute"]);
        assert!(!cwd.join("ledger").exists(), "no ledger may appear in the working directory\n{out}");
        last = Some(out);
    }
    holder.assert_nothing_lost(&sim, &last.expect("two attacks ran"));
}

#[test]
fn gpuslice_run_makes_a_relative_dir_absolute() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB");
    let mut cmd = sim.gpuslice();
    cmd.current_dir(sim.dir()).args(["run", "--sim", "--memory", "512MiB", "--tenant", TENANT, "--dir", "ledger", "--"]);
    let out = sim.run(cmd.arg(compile_c("memctl")).args(["init", "ctx", "info"]));
    out.assert_success().assert_rc("init", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
    assert!(ledger::tenant_path(&sim.ledger_dir(), TENANT).is_file(), "{out}");
}

#[test]
fn sizes_read_differently_by_two_readers_fail_closed() {
    let cases: &[(&str, &str, &str)] = &[
        // HAMi-core reads 010 as octal: 8 GiB, not 10.
        ("GPUSLICE_MEMORY_LIMIT", "010G", "leading zero"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "010g", "leading zero"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "0100m", "leading zero"),
        ("GPUSLICE_MEMORY_LIMIT", "0=010G", "leading zero"),
        // A no-break space copied from a document.
        ("GPUSLICE_MEMORY_LIMIT", "1GiB\u{a0}", "U+00A0"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "1g\u{a0}", "U+00A0"),
        ("GPUSLICE_MEMORY_LIMIT", "\u{a0}1GiB", "U+00A0"),
    ];
    for &(var, value, why) in cases {
        let sim = sim();
        let holder = holder(&sim);
        let out = attack(&sim, &[(var, value)]);
        out.assert_fails_closed("a", &[var, why]);
        holder.assert_nothing_lost(&sim, &out);
    }
}

#[test]
fn one_device_written_two_ways_fails_closed() {
    let sim = sim();
    let holder = holder(&sim);
    let out = attack(&sim, &[("CUDA_DEVICE_MEMORY_LIMIT_0", "512m"), ("CUDA_DEVICE_MEMORY_LIMIT_00", "3g")]);
    out.assert_fails_closed("a", &["CUDA_DEVICE_MEMORY_LIMIT_00", "\"3g\"", "leading zeros"]);
    holder.assert_nothing_lost(&sim, &out);
    let sim = self::sim();
    let holder = self::holder(&sim);
    let out = attack(&sim, &[("GPUSLICE_MEMORY_LIMIT", "0=512MiB,00=3GiB")]);
    out.assert_fails_closed("a", &["GPUSLICE_MEMORY_LIMIT", "0=512MiB,00=3GiB", "leading zeros"]);
    holder.assert_nothing_lost(&sim, &out);
}

fn config_refused(config_text: &str, place: (usize, usize), says: &[&str]) {
    // A monitor that accepts the file runs until killed: do not wait long.
    let sim = sim().timeout(Duration::from_secs(10));
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, config_text).unwrap();
    let out = sim.run(&mut monitor_command(&sim, &MonitorOptions { config: Some(config.clone()), ..Default::default() }));
    assert_eq!(out.code(), Some(2), "the monitor must refuse to start\n{out}");
    let expected = format!("{}:{}:{}:", config.display(), place.0, place.1);
    assert!(out.stderr.contains(&expected), "expected {expected} in:\n{out}");
    for text in says {
        assert!(out.stderr.contains(text), "expected {text:?} in:\n{out}");
    }
}

#[test]
fn a_monitor_configuration_naming_no_possible_device_is_refused_at_its_line_and_column() {
    config_refused("[tenants.team-a]\nmemory = { 0 = \"1GiB\", 99 = \"1G\" }\n", (2, 24), &["tenant team-a", "\"99\"", "0 to 15"]);
    // A UUID without its dashes matched no device.
    config_refused(
        "[tenants.team-a]\nmemory = \"2GiB\"\n[tenants.team-b]\nmemory = { \"GPU-00112233445566778899aabbccddeeff\" = \"1G\" }\n",
        (4, 12),
        &["tenant team-b", "not a UUID", "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"],
    );
    config_refused("[tenants.team-a]\nmemory = { 0 = \"1G\", 00 = \"1G\" }\n", (2, 22), &["\"00\"", "leading zeros"]);
    config_refused("[tenants.team-a]\nmemory = \"010G\"\n", (2, 10), &["leading zero"]);
    config_refused("[tenants.\".team-a\"]\nmemory = \"1G\"\n", (1, 1), &[TENANT_FORMAT]);
}

/// An index that is well formed but beyond this host's devices: the file
/// may serve other hosts, so it is accepted, its other caps enforced, and
/// the cap that applies to nothing named once per (re)load.
#[test]
fn a_monitor_cap_for_a_device_this_host_lacks_is_named_once_per_reload() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = { 0 = \"1GiB\", 1 = \"2GiB\" }\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let status = status_json(&sim);
    assert_eq!(tenant(&status, "team-a").expect("team-a")["devices"][0]["memory_limit_bytes"].as_u64(), Some(GIB));
    monitor.wait_rounds(2);
    monitor.running.signal("HUP");
    monitor.metrics_until("the reload", |m| m.value("gpuslice_config_reloads_total", &[("result", "ok")]) == Some(1.0));
    monitor.wait_rounds(2);
    let log = monitor.stop();
    let warnings: Vec<&str> = log.stderr.lines().filter(|l| l.contains("applies to nothing")).collect();
    assert_eq!(warnings.len(), 2, "once at start, once after the reload\n{log}");
    assert!(warnings.iter().all(|l| l.contains(" WARN ") && l.contains("tenant team-a") && l.contains("device 1 ")), "{log}");
}

// --- Item 9: a tenant the monitor would never see ----------------------------

#[test]
fn a_tenant_name_starting_with_a_dot_fails_closed() {
    let sim = sim();
    let holder = holder(&sim);
    let out = attack(&sim, &[("GPUSLICE_TENANT", ".hostile"), ("GPUSLICE_MEMORY_LIMIT", "1GiB")]);
    out.assert_fails_closed("a", &["GPUSLICE_TENANT", "\".hostile\"", "starts with '.'", TENANT_FORMAT]);
    assert_eq!(ledger_files(&sim.ledger_dir()), [format!("{TENANT}.ledger")], "no hidden ledger\n{out}");
    holder.assert_nothing_lost(&sim, &out);

    let out = sim.run(sim.gpuslice().args(["run", "--sim", "--tenant", ".hostile", "--", "true"]));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("starts with '.'") && out.stderr.contains(TENANT_FORMAT), "{out}");
}

// --- Item 10: the default tenant ---------------------------------------------

/// The tenant the shim must derive from this test's own cgroup, computed
/// here the simple way: the last component of the first path that is not
/// the root, v2's first, then the memory controller's, then any other's.
fn expected_default_tenant() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let entries: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next()?;
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect();
    let v2 = entries.iter().filter(|(c, _)| c.is_empty());
    let memory = entries.iter().filter(|(c, _)| c.split(',').any(|c| c == "memory"));
    let others = entries.iter().filter(|(c, _)| !c.is_empty() && !c.split(',').any(|c| c == "memory"));
    let path = v2.chain(memory).chain(others).map(|(_, p)| p.trim_end_matches('/')).find(|p| {
        let last = p.rsplit('/').next().unwrap_or("");
        !matches!(last, "" | "." | "..")
    })?;
    let last: String =
        path.rsplit('/').next()?.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    let mut name: String = last.chars().skip(last.chars().count().saturating_sub(63)).collect();
    if name.starts_with('.') {
        name.replace_range(..1, "_");
    }
    Some(name)
}

#[test]
fn the_default_tenant_comes_from_the_most_specific_cgroup_path() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("768MiB").env_remove("GPUSLICE_TENANT");
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:a:1M", "info"]));
    out.assert_success();
    match expected_default_tenant() {
        Some(name) => {
            out.assert_rc("init", cu::SUCCESS).assert_rc("a", cu::SUCCESS);
            assert_eq!(ledger_files(&sim.ledger_dir()), [format!("{name}.ledger")], "{out}");
            assert_eq!(ledger_view::memory_limit_bytes(&sim.ledger_dir(), &name, 0), 768 * MIB);
        }
        None => {
            out.assert_fails_closed("a", &["GPUSLICE_TENANT is unset"]);
            assert!(ledger_files(&sim.ledger_dir()).is_empty(), "{out}");
        }
    }
}

/// Fails the calling test with a clear message unless this machine lets us
/// start a process in a cgroup namespace of its own (root, or
/// CAP_SYS_ADMIN, and `unshare` from util-linux).
fn require_cgroup_namespaces() {
    match Command::new("unshare").args(["--cgroup", "true"]).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "this test needs a new cgroup namespace, and `unshare --cgroup true` failed ({}): {}\
             run the tests as root or with CAP_SYS_ADMIN",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("this test needs `unshare` (util-linux) to make a cgroup namespace ({e}): `bash scripts/setup.sh` installs it"),
    }
}

#[test]
fn a_cap_in_a_cgroup_that_tells_no_container_apart_fails_closed() {
    require_cgroup_namespaces();
    // In a cgroup namespace of its own, every path in /proc/self/cgroup is
    // `/`, as in a container with a private cgroup namespace.
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").env_remove("GPUSLICE_TENANT");
    for cap in [("GPUSLICE_MEMORY_LIMIT", "1GiB"), ("CUDA_DEVICE_MEMORY_LIMIT", "1g")] {
        let mut cmd = sim.command("unshare");
        cmd.env_remove("GPUSLICE_MEMORY_LIMIT").env(cap.0, cap.1).arg("--cgroup").arg(compile_c("memctl")).args([
            "init",
            "ctx",
            "alloc:a:1M",
            "info",
        ]);
        let out = sim.run(&mut cmd);
        out.assert_success().assert_fails_closed("a", &["GPUSLICE_TENANT is unset", cap.0, "/proc/self/cgroup", TENANT_FORMAT]);
        assert!(ledger_files(&sim.ledger_dir()).is_empty(), "no shared \"default\" ledger\n{out}");
    }
    // Naming the tenant is the way out.
    let mut cmd = sim.command("unshare");
    cmd.env("GPUSLICE_TENANT", TENANT).arg("--cgroup").arg(compile_c("memctl")).args(["init", "ctx", "info"]);
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("init", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB, "{out}");
}

// --- Item 12: messages that say what is wrong and what to write --------------

#[test]
fn gpuslice_status_on_a_missing_directory_is_an_error_naming_it() {
    let sim = Sim::new();
    let missing = sim.dir().join("no/such/dir");
    for json in [false, true] {
        let mut cmd = gpuslice_command(&sim);
        cmd.arg("status").arg("--dir").arg(&missing).arg("--no-nvml");
        if json {
            cmd.arg("--json");
        }
        let out = sim.run(&mut cmd);
        assert_eq!(out.code(), Some(2), "{out}");
        assert!(out.stderr.contains(&missing.display().to_string()) && out.stderr.contains("does not exist"), "{out}");
        assert!(out.stdout.is_empty(), "no empty tables\n{out}");
    }
}

#[test]
fn a_decimal_unit_is_refused_with_what_to_write_instead() {
    let sim = Sim::new();
    let out = sim.run(sim.gpuslice().args(["run", "--sim", "--memory", "1GB", "--", "true"]));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--memory \"1GB\"") && out.stderr.contains("ambiguous") && out.stderr.contains("write 1GiB"), "{out}");

    let sim = self::sim();
    let holder = self::holder(&sim);
    let out = attack(&sim, &[("GPUSLICE_MEMORY_LIMIT", "1GB")]);
    out.assert_fails_closed("a", &["GPUSLICE_MEMORY_LIMIT", "\"1GB\"", "ambiguous", "1GiB"]);
    holder.assert_nothing_lost(&sim, &out);
}

#[test]
fn a_refused_tenant_name_says_what_is_accepted() {
    let sim = Sim::new();
    for (name, why) in [
        ("a/b", "'/' is not allowed"),
        ("team\u{a0}a", "U+00A0 is not allowed"),
        (&"x".repeat(64) as &str, "64 characters"),
        ("-rf", "starts with '-'"),
        ("-", "starts with '-'"),
    ] {
        let out = sim.run(sim.gpuslice().args(["run", "--sim", &format!("--tenant={name}"), "--", "true"]));
        assert_eq!(out.code(), Some(2), "{out}");
        assert!(out.stderr.contains(why) && out.stderr.contains(TENANT_FORMAT), "{out}");
    }
    // The same name in the environment: the shim refuses it, naming why.
    let sim = self::sim();
    let holder = self::holder(&sim);
    let out = attack(&sim, &[("GPUSLICE_TENANT", "-rf")]);
    out.assert_fails_closed("a", &["GPUSLICE_TENANT", "starts with '-'"]);
    holder.assert_nothing_lost(&sim, &out);
}

// --- A misspelt or unenforced variable -----------------------------------------

/// `GPUSLICE_MEMORY_LIMT` (a typo) would mean no cap at all, and a share
/// or a priority that cannot be read no share or priority: each fails
/// closed, naming the variable and what it accepts.
#[test]
fn a_misspelt_variable_or_a_bad_share_or_priority_fails_closed() {
    for (name, value, says) in [
        ("GPUSLICE_MEMORY_LIMT", "1GiB", "not a gpuslice variable"),
        ("GPUSLICE_COMPUTE_SHARE", "300", "from 1 to 100"),
        ("GPUSLICE_PRIORITY", "urgent", "from -1000 to 1000"),
        ("CUDA_TASK_PRIORITY", "5", "HAMi's high priority"),
    ] {
        let sim = sim();
        let holder = holder(&sim);
        let out = attack(&sim, &[(name, value)]);
        out.assert_fails_closed("a", &[name, says]);
        holder.assert_nothing_lost(&sim, &out);
    }
}

// --- Smaller mistakes, each named -----------------------------------------------

/// A per-device priority for a device the process does not see, a ledger
/// directory that does not exist, and a driver library that cannot be
/// loaded: each fails closed with one line naming it, never silently.
#[test]
fn a_missed_priority_a_missing_directory_and_a_bad_driver_library_are_named() {
    let sim = sim();
    let holder = holder(&sim);
    let out = attack(&sim, &[("GPUSLICE_PRIORITY", "1=5")]);
    out.assert_fails_closed("a", &["GPUSLICE_PRIORITY", "\"1=5\"", "device 1 is not a device this process sees"]);
    holder.assert_nothing_lost(&sim, &out);

    let sim = self::sim();
    let missing = sim.dir().join("no-such-dir");
    let out = attack(&sim, &[("GPUSLICE_DIR", missing.to_str().unwrap())]);
    out.assert_fails_closed("a", &["GPUSLICE_DIR", "no such directory"]);
    assert!(!missing.exists(), "the shim made the directory");

    let sim = self::sim();
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_CUDA_LIB", "/nonexistent/libcuda.so.1").args(["init"]);
    let out = sim.run(&mut cmd);
    assert_ne!(out.i64("init"), cu::SUCCESS, "{out}");
    let lines = out.shim_log_lines();
    assert_eq!(lines.len(), 1, "one line says why\n{out}");
    assert!(lines[0].contains("GPUSLICE_CUDA_LIB=\"/nonexistent/libcuda.so.1\" is invalid"), "{out}");

    // The queue's own variable, left in a queued command's environment, is
    // not refused as a misspelt one.
    let sim = self::sim();
    let out = attack(&sim, &[("GPUSLICE_QUEUE_OVERCOMMIT", "1.5")]);
    out.assert_rc("init", cu::SUCCESS).assert_rc("a", cu::SUCCESS);
}

/// Another user took a tenant's ledger name before the tenant's first
/// process (an empty file, a link, a FIFO, in the directory every user
/// writes). The tenant's process, with no setting of its own (its cap may
/// come from the monitor's configuration), is refused with one line naming
/// the file, instead of running uncapped beside it.
#[test]
fn a_ledger_name_taken_by_another_user_is_refused_not_stepped_around() {
    use std::os::unix::fs::PermissionsExt;
    const TENANT_UID: u32 = 1000;
    const SQUATTER_UID: u32 = 1001;
    for kind in ["empty", "link", "fifo"] {
        let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim().tenant("cfg");
        sim.share_the_gpu();
        let dir = sim.ledger_dir();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let path = dir.join("cfg.ledger");
        let squat = match kind {
            "empty" => format!("touch {}", path.display()),
            "link" => format!("ln -s /etc/passwd {}", path.display()),
            _ => format!("mkfifo {}", path.display()),
        };
        let status = sim.as_user(SQUATTER_UID, SQUATTER_UID, &[], "sh").args(["-c", &squat]).status().unwrap();
        assert!(status.success(), "{kind}: the other user could not plant {}", path.display());
        let mut cmd = sim.as_user(TENANT_UID, TENANT_UID, &[], compile_c("memctl"));
        cmd.args(["init", "ctx", "alloc:a:1M"]);
        let out = sim.run(&mut cmd);
        out.assert_fails_closed("a", &[path.to_str().unwrap(), "uid 1001"]);
    }
}
