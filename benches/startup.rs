//! Start-up cost of the shim per process: the median wall time of a process
//! that initialises CUDA, takes its context, allocates and frees once and
//! exits, bare on simgpu and under the shim, in one run. The difference is
//! what the shim adds to a process's start (target ≤ 5 ms): parsing the
//! environment, opening the real driver, mapping the tenant's ledger,
//! registering devices, claiming a process slot, measuring context overhead.
//!
//! It is measured twice: with the tenant otherwise idle, and with
//! `BUSY_PROCESSES` other live processes of the same tenant holding slots
//! and memory, since start-up that slows under load is a known failure of
//! other tools.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench startup`.
//! Prints a table; timings are wall-clock on a possibly busy machine, so
//! compare the two columns of one run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 60;
const BUSY_PROCESSES: usize = 32;

fn compile(dir: &Path) -> PathBuf {
    let root = gpuslice_tests::repo_root();
    let out = dir.join("startup");
    let status = Command::new("gcc")
        .args(["-O2", "-I"])
        .arg(root.join(".deps/include"))
        .arg(root.join("benches/c/startup.c"))
        .arg("-L")
        .arg(gpuslice_tests::sim_lib_dir())
        .args(["-lcuda", "-o"])
        .arg(&out)
        .status()
        .expect("cannot run gcc");
    assert!(status.success(), "compiling benches/c/startup.c failed (run scripts/setup.sh for cuda.h)");
    out
}

fn command(program: &Path, dir: &Path, shim: bool) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", gpuslice_tests::sim_lib_dir())
        .env("SIMGPU_STATE", dir.join("simgpu.state"))
        .env("SIMGPU_MEMORY", "80GiB")
        .env("GPUSLICE_DIR", dir.join("ledger"))
        .env("GPUSLICE_TENANT", "startup")
        .env("GPUSLICE_MEMORY_LIMIT", "40GiB")
        .stdin(Stdio::null());
    if shim {
        cmd.env("LD_PRELOAD", gpuslice_tests::shim_lib());
    }
    cmd
}

fn median_run(program: &Path, dir: &Path, shim: bool) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let status = command(program, dir, shim).status().expect("cannot start the startup program");
            let elapsed = start.elapsed();
            assert!(status.success(), "the startup program failed (shim: {shim})");
            elapsed
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

/// Starts `count` processes of the tenant that hold a context and memory
/// until their stdin closes.
fn busy_tenant(dir: &Path, count: usize) -> Vec<Child> {
    let python = gpuslice_tests::python();
    let holder = "import sys\nfrom cuda.bindings import driver as d\n\
                  d.cuInit(0); _, dev = d.cuDeviceGet(0); _, ctx = d.cuDevicePrimaryCtxRetain(dev)\n\
                  d.cuCtxSetCurrent(ctx); _, p = d.cuMemAlloc(64 << 20)\n\
                  print('ready', flush=True); sys.stdin.read()\n";
    let mut children: Vec<Child> = (0..count)
        .map(|_| {
            command(&python, dir, true)
                .args(["-c", holder])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("cannot start a busy tenant process")
        })
        .collect();
    for child in &mut children {
        use std::io::Read;
        let mut byte = [0u8; 5];
        child.stdout.as_mut().map(|out| out.read_exact(&mut byte));
    }
    children
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cannot create the benchmark directory");
    let program = compile(&dir);

    println!("start-up of one CUDA process, median of {RUNS} runs");
    println!("{:<34} {:>10} {:>10} {:>12}", "tenant load", "bare", "shim", "shim adds");
    for busy in [0, BUSY_PROCESSES] {
        let holders = busy_tenant(&dir, busy);
        let bare = median_run(&program, &dir, false);
        let shim = median_run(&program, &dir, true);
        println!(
            "{:<34} {:>8.2}ms {:>8.2}ms {:>10.2}ms",
            format!("{busy} other live processes"),
            bare.as_secs_f64() * 1e3,
            shim.as_secs_f64() * 1e3,
            (shim.as_secs_f64() - bare.as_secs_f64()) * 1e3
        );
        for mut child in holders {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
