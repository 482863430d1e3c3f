//! The monitoring tools users run on a GPU host, unchanged, on simgpu:
//! `nvitop` and `gpustat` (both nvidia-ml-py clients), the NVML queries they
//! make checked one by one through nvidia-ml-py, and `cuMemHostRegister`
//! through cuda-bindings. Each tool also runs under the shim with a memory
//! cap, where it must show the tenant's view and still exit cleanly.

use gpuslice_tests::{cu, python, Output, Running, Sim, GIB, MIB};
use serde_json::Value;

/// Device memory each simulated context costs in these tests.
const CONTEXT_BYTES: u64 = 300 * MIB;

/// Starts a process that creates a context, allocates `alloc` (a memctl
/// size) and holds both until its stdin closes. Returns it and its pid.
fn holder(sim: &Sim, alloc: &str) -> (Running, u32) {
    let mut running = sim.spawn(sim.c("memctl").args(["init", "ctx", &format!("alloc:a:{alloc}"), "pid", "hold"]));
    let pid = running.wait_for("pid").parse().expect("memctl prints its pid");
    running.wait_for("ready");
    (running, pid)
}

/// Runs a Python module from the test virtualenv (`python -m <module> args`)
/// in the test's directory, where anything a tool writes (nvitop's debug
/// log, say) is cleaned up with it.
fn run_module(sim: &Sim, module: &str, args: &[&str]) -> Output {
    let mut cmd = sim.command(python());
    cmd.arg("-m").arg(module).args(args).current_dir(sim.dir());
    sim.run(&mut cmd)
}

/// Asserts a tool ended well and printed no Python traceback anywhere.
fn assert_clean(out: &Output) {
    out.assert_success();
    assert!(!out.stdout.contains("Traceback") && !out.stderr.contains("Traceback"), "a traceback was printed\n{out}");
}

/// `text` with every run of whitespace made one space, so an assertion does
/// not depend on how a tool pads its columns.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn gpustat_json(sim: &Sim) -> Value {
    let out = run_module(sim, "gpustat", &["--json"]);
    assert_clean(&out);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("gpustat --json printed no JSON ({e})\n{out}"))
}

#[test]
fn nvitop_shows_the_device_its_memory_and_the_process_using_it() {
    let sim = Sim::new().memory("8GiB").context_memory("300MiB");
    let (mut running, pid) = holder(&sim, "1G");
    let out = run_module(&sim, "nvitop", &["-1"]);
    running.close_stdin();
    running.wait().assert_success();
    assert_clean(&out);
    assert!(out.stdout.contains("simgpu H200"), "{out}");
    assert!(out.stdout.contains("1324MiB / 8192MiB"), "used (1 GiB + the context) and total memory\n{out}");
    assert!(out.stdout.contains("00000000:18:00.0"), "the PCI bus id\n{out}");
    assert!(out.stdout.contains(" 75W / 700W"), "idle power draw and the board's limit\n{out}");
    let process_line =
        out.stdout.lines().find(|l| l.contains(&format!(" {pid} "))).unwrap_or_else(|| panic!("pid {pid} is not listed\n{out}"));
    assert!(process_line.contains("1324MiB"), "the process's memory\n{out}");
}

#[test]
fn gpustat_lists_every_device_in_text_and_json() {
    let sim = Sim::new().devices(2).memory("8GiB").context_memory("300MiB");
    let (mut running, pid) = holder(&sim, "1G");
    let text = run_module(&sim, "gpustat", &[]);
    let json = gpustat_json(&sim);
    running.close_stdin();
    running.wait().assert_success();

    assert_clean(&text);
    assert!(text.stdout.contains("[0] simgpu H200"), "{text}");
    assert!(text.stdout.contains("[1] simgpu H200"), "{text}");
    assert!(squeezed(&text.stdout).contains("1324 / 8192 MB"), "{text}");

    let gpus = json["gpus"].as_array().unwrap_or_else(|| panic!("no gpus array: {json}"));
    assert_eq!(gpus.len(), 2, "{json}");
    for gpu in gpus {
        assert_eq!(gpu["memory.total"], 8192, "{json}");
        assert_eq!(gpu["enforced.power.limit"], 700, "{json}");
    }
    assert_eq!(gpus[0]["memory.used"], 1324, "{json}");
    assert_eq!(gpus[1]["memory.used"], 0, "{json}");
    let processes = gpus[0]["processes"].as_array().unwrap_or_else(|| panic!("no processes: {json}"));
    assert_eq!(processes.len(), 1, "{json}");
    assert_eq!(processes[0]["pid"], pid, "{json}");
    assert_eq!(processes[0]["gpu_memory_usage"], 1324, "{json}");
}

#[test]
fn nvidia_ml_py_answers_what_the_monitoring_tools_ask() {
    let sim = Sim::new().devices(2).memory("8GiB").context_memory("300MiB");
    let (mut running, pid) = holder(&sim, "1G");
    let out = sim.run(&mut sim.py("sim_tools_nvml.py"));
    running.close_stdin();
    running.wait().assert_success();
    out.assert_success();
    let used = GIB + CONTEXT_BYTES;

    // Identity: PCI addresses are unique per device and find the device back.
    assert_eq!(out.get("pci.busId"), "00000000:18:00.0", "{out}");
    assert_eq!(out.get("pci.busIdLegacy"), "0000:18:00.0", "{out}");
    assert_eq!(out.u64("pci.pciDeviceId"), 0x2335_10DE, "{out}");
    assert_eq!(out.get("bus_id.1"), "00000000:19:00.0", "{out}");
    assert_eq!(out.u64("index_by_bus_id.0"), 0, "{out}");
    assert_eq!(out.u64("index_by_bus_id.1"), 1, "{out}");
    assert_eq!(out.get("cc"), "9.0", "{out}");
    assert_eq!(out.get("serial").len(), 13, "{out}");

    // Modes: MIG disabled now and after a reset; ECC and persistence on.
    for key in ["mig.current", "mig.pending", "is_mig", "max_mig", "compute_mode", "ecc.uncorrected"] {
        assert_eq!(out.u64(key), 0, "{key}\n{out}");
    }
    for key in ["persistence", "ecc.current", "ecc.pending"] {
        assert_eq!(out.u64(key), 1, "{key}\n{out}");
    }
    assert_eq!(out.u64("driver_model.error"), 3, "NOT_SUPPORTED: a Windows-only query\n{out}");

    // Memory: BAR1 is the next power of two of the framebuffer.
    assert_eq!(out.u64("bar1.total"), 8 * GIB, "{out}");
    assert_eq!(out.u64("bar1.used") + out.u64("bar1.free"), 8 * GIB, "{out}");
    assert_eq!(out.u64("mem.used"), used, "{out}");

    // Telemetry of an idle H200 SXM board.
    assert_eq!(out.u64("temperature"), 30, "{out}");
    assert_eq!(out.u64("threshold.slowdown"), 89, "{out}");
    assert_eq!(out.u64("threshold.acoustic_min.error"), 3, "{out}");
    assert_eq!(out.u64("power.usage"), 75_000, "{out}");
    for key in ["power.limit", "power.enforced", "power.max"] {
        assert_eq!(out.u64(key), 700_000, "{key}\n{out}");
    }
    assert_eq!(out.u64("power.min"), 200_000, "{out}");
    assert_eq!(out.u64("fan.error"), 3, "a passively cooled board has no fan\n{out}");
    assert_eq!(out.u64("clock_max.sm"), 1980, "{out}");
    assert_eq!(out.u64("clock.sm"), 345, "idle\n{out}");
    assert_eq!(out.u64("clock_max.mem"), 2619, "{out}");
    assert_eq!(out.u64("pstate"), 0, "{out}");
    assert_eq!(out.u64("nvlink.rc"), 0, "{out}");
    assert_eq!(out.u64("nvlink.count"), 0, "{out}");

    // Process lists, each version: the holder with its memory, in the
    // compute list only.
    for suffix in ["", "_v2", "_v3"] {
        assert_eq!(out.u64(&format!("procs.Compute{suffix}.count")), 1, "{out}");
        assert_eq!(out.u64(&format!("procs.Compute{suffix}.pid.{pid}")), used, "{out}");
        assert_eq!(out.u64(&format!("procs.Graphics{suffix}.count")), 0, "{out}");
        assert_eq!(out.u64(&format!("procs.MPSCompute{suffix}.count")), 0, "{out}");
    }

    // What C callers rely on: the sizing call, and null pointers.
    assert_eq!(out.u64("sizing.rc"), 7, "NVML_ERROR_INSUFFICIENT_SIZE\n{out}");
    assert_eq!(out.u64("sizing.count"), 1, "the needed count\n{out}");
    for key in ["null.power", "null.mig", "null.pci", "null.count", "bad_handle.temperature"] {
        assert_eq!(out.u64(key), 2, "NVML_ERROR_INVALID_ARGUMENT for {key}\n{out}");
    }
}

#[test]
fn the_tools_show_the_tenant_view_under_the_shim() {
    let sim = Sim::new().memory("8GiB").context_memory("300MiB").memory_limit("1GiB").tenant("tools");
    let (mut running, pid) = holder(&sim, "100M");
    // Another tenant's process on the same device: not the tools' to see.
    let mut other_cmd = sim.c("memctl");
    other_cmd.env("GPUSLICE_TENANT", "others").env("GPUSLICE_MEMORY_LIMIT", "4GiB").args(["init", "ctx", "alloc:a:1G", "pid", "hold"]);
    let mut other = sim.spawn(&mut other_cmd);
    let other_pid: u32 = other.wait_for("pid").parse().expect("memctl prints its pid");
    other.wait_for("ready");
    let nvitop = run_module(&sim, "nvitop", &["-1"]);
    let gpustat_text = run_module(&sim, "gpustat", &[]);
    let json = gpustat_json(&sim);
    for p in [&mut running, &mut other] {
        p.close_stdin();
    }
    running.wait().assert_success();
    other.wait().assert_success();
    let listed: Vec<u64> =
        json["gpus"][0]["processes"].as_array().map(|a| a.iter().filter_map(|p| p["pid"].as_u64()).collect()).unwrap_or_default();
    assert_eq!(listed, vec![u64::from(pid)], "only the tools tenant's process is listed\n{json}");
    // nvitop's process rows: the lines below its process table's header.
    let rows_with = |wanted: u32| {
        nvitop
            .stdout
            .lines()
            .skip_while(|line| !line.contains("COMMAND"))
            .skip(1)
            .any(|line| line.split(|c: char| !c.is_ascii_digit()).any(|number| number == wanted.to_string()))
    };
    assert!(rows_with(pid), "the tenant's own process is shown\n{nvitop}");
    assert!(!rows_with(other_pid), "another tenant's process is not shown\n{nvitop}");

    assert_clean(&nvitop);
    // nvitop prints amounts under 1000 MiB with one decimal.
    assert!(nvitop.stdout.contains("400.0MiB / 1024MiB"), "the tenant's usage against its cap\n{nvitop}");
    assert_clean(&gpustat_text);
    assert!(squeezed(&gpustat_text.stdout).contains("400 / 1024 MB"), "{gpustat_text}");
    assert_eq!(json["gpus"][0]["memory.total"], 1024, "{json}");
    assert_eq!(json["gpus"][0]["memory.used"], 400, "{json}");
}

#[test]
fn cu_mem_host_register_pins_without_charging_device_memory() {
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    let out = sim.run(&mut sim.py("sim_host_register.py"));
    out.assert_success();
    for key in ["init", "register", "device_pointer", "htod", "dtoh", "unregister", "read_only", "unregister_read_only"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(out.u64("device_bytes_charged"), 0, "{out}");
    assert_eq!(out.u64("device_pointer.same"), 1, "{out}");
    assert_eq!(out.u64("copy_ok"), 1, "{out}");
    const ALREADY_REGISTERED: i64 = 712;
    const NOT_REGISTERED: i64 = 713;
    out.assert_rc("again", ALREADY_REGISTERED).assert_rc("overlap", ALREADY_REGISTERED);
    out.assert_rc("register_pinned", ALREADY_REGISTERED);
    out.assert_rc("unregister_inside", NOT_REGISTERED).assert_rc("unregister_twice", NOT_REGISTERED);
    for key in ["bad_flags", "null", "empty", "unmapped"] {
        out.assert_rc(key, cu::INVALID_VALUE);
    }
    out.assert_rc("iomemory", cu::NOT_SUPPORTED);
}
