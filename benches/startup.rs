//! Start-up cost of the shim per process: the median wall time of a process
//! that initialises CUDA, takes its context, allocates and frees once and
//! exits, bare on simgpu and under the shim, in one run. The difference is
//! what the shim adds to a process's start (target: at most 500 µs wall and
//! 300 µs CPU time, alone and in batches, with and without a monitor): parsing the
//! environment, opening the real driver, mapping the tenant's ledger,
//! registering devices, claiming a process slot, measuring context overhead.
//!
//! It is measured twice: with the tenant otherwise idle, and with
//! `BUSY_PROCESSES` other live processes of the same tenant holding slots
//! and memory, since start-up that slows under load is a known failure of
//! other tools. The busy processes are checked before and after the timing:
//! each must be running and hold a live slot with its memory in the
//! tenant's ledger, or the benchmark fails instead of printing the row.
//!
//! Then, at scale: batches of 32, 128 and 256 processes of one tenant
//! started at once, bare, under the shim, and under the shim with a monitor
//! running (started for the batch, and one process run first so that the
//! device's grant page exists, as on a host whose monitor has been up a
//! while), with the ratio to bare (target ≤ 1.1×): the wall time to all
//! done, and the CPU time per process, which the load of a shared machine
//! moves far less. Beside them, the same for two preloaded libraries with
//! nothing in them, one in C and one in Rust: what preloading anything
//! costs on the machine at hand, the floor under the shim's ratio.
//!
//! Last, what a thread that sleeps costs a short process on the machine
//! (`benches/c/threads.c` with 0, 1 and 2 threads): the shim starts one,
//! its helper, beside the driver's own.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench startup`.
//! Prints a table; timings are wall-clock on a possibly busy machine, so
//! compare the two columns of one run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 60;
const BUSY_PROCESSES: usize = 32;
const TENANT: &str = "startup";
/// What each busy process holds besides its context.
const HOLDER_BYTES: u64 = 64 << 20;

#[path = "../tests/support/ledger_view.rs"]
mod ledger_view;

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

/// What a process of the benchmark runs under.
#[derive(Clone, Copy, Debug)]
enum Preload<'a> {
    Bare,
    Shim,
    /// A preloaded library with nothing in it (`benches/c/empty_preload.c`,
    /// `benches/rust/empty_preload.rs`):
    /// what preloading any library costs here, the floor under the shim.
    Empty(&'a Path),
}

fn command(program: &Path, dir: &Path, preload: Preload) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", gpuslice_tests::sim_lib_dir())
        .env("SIMGPU_STATE", dir.join("simgpu.state"))
        .env("SIMGPU_MEMORY", "80GiB")
        .env("GPUSLICE_DIR", dir.join("ledger"))
        .env("GPUSLICE_TENANT", TENANT)
        .env("GPUSLICE_MEMORY_LIMIT", "40GiB")
        .stdin(Stdio::null());
    match preload {
        Preload::Bare => {}
        Preload::Shim => {
            cmd.env("LD_PRELOAD", gpuslice_tests::shim_lib());
        }
        Preload::Empty(library) => {
            cmd.env("LD_PRELOAD", library);
        }
    }
    cmd
}

fn timed_run(program: &Path, dir: &Path, shim: bool) -> Duration {
    let start = Instant::now();
    let status =
        command(program, dir, if shim { Preload::Shim } else { Preload::Bare }).status().expect("cannot start the startup program");
    let elapsed = start.elapsed();
    assert!(status.success(), "the startup program failed (shim: {shim})");
    elapsed
}

/// The median start-up time bare and under the shim. The two sides take
/// turns, first one then the other, so that a machine whose load changes
/// during the run weighs on both alike.
fn median_runs(program: &Path, dir: &Path) -> (Duration, Duration) {
    let mut bare = Vec::with_capacity(RUNS);
    let mut shim = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        let shim_first = run % 2 == 1;
        for side_is_shim in [shim_first, !shim_first] {
            let elapsed = timed_run(program, dir, side_is_shim);
            if side_is_shim { &mut shim } else { &mut bare }.push(elapsed);
        }
    }
    bare.sort();
    shim.sort();
    (bare[RUNS / 2], shim[RUNS / 2])
}

/// A busy process of the tenant: it takes a context and `HOLDER_BYTES`,
/// prints `ready` only when every call succeeded, and holds both until its
/// stdin closes. A failed call exits with the call's name and error.
const HOLDER: &str = r#"
import sys
from cuda.bindings import driver as d

def ok(what, result):
    err, *rest = result
    if err != d.CUresult.CUDA_SUCCESS:
        sys.exit(f"holder: {what} failed: {err!r}")
    return rest[0] if rest else None

ok("cuInit", d.cuInit(0))
dev = ok("cuDeviceGet", d.cuDeviceGet(0))
ctx = ok("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(dev))
ok("cuCtxSetCurrent", d.cuCtxSetCurrent(ctx))
ptr = ok("cuMemAlloc", d.cuMemAlloc(HOLDER_BYTES))
print("ready", flush=True)
sys.stdin.read()
"#;

/// Starts `count` processes of the tenant that hold a context and memory
/// until their stdin closes (dropping a `Child` closes it), and waits until
/// each says it is ready. Fails the benchmark if one does not: a row
/// measured without its busy processes would be a wrong figure.
fn busy_tenant(dir: &Path, count: usize) -> Vec<Child> {
    use std::io::Read;
    let python = gpuslice_tests::python();
    let holder = HOLDER.replace("HOLDER_BYTES", &HOLDER_BYTES.to_string());
    let mut children: Vec<Child> = (0..count)
        .map(|_| {
            command(&python, dir, Preload::Shim)
                .args(["-c", &holder])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("cannot start a busy tenant process")
        })
        .collect();
    let mut failed = None;
    for (index, child) in children.iter_mut().enumerate() {
        let mut line = [0u8; 6];
        let read = child.stdout.as_mut().expect("stdout is piped").read_exact(&mut line);
        if read.is_err() || &line != b"ready\n" {
            failed = Some((index, child.id()));
            break;
        }
    }
    if let Some((index, pid)) = failed {
        let status = children[index].wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        stop(&mut children);
        panic!(
            "busy tenant process {} of {count} (pid {pid}) did not get ready ({status}; its stderr is above): \
             refusing to measure the row without it",
            index + 1
        );
    }
    children
}

/// Fails the benchmark unless every holder is still running and holds a live
/// slot in the tenant's ledger with at least `HOLDER_BYTES` charged: the row
/// is then measured with all of them registered, as its label says.
fn check_holders(dir: &Path, holders: &mut [Child], when: &str) {
    let exited = holders.iter_mut().find_map(|child| Some((child.id(), child.try_wait().ok()??)));
    if let Some((pid, status)) = exited {
        stop(holders);
        panic!("busy tenant process {pid} exited {when} ({status}): the row would not be measured with it");
    }
    if holders.is_empty() {
        return;
    }
    let pids: Vec<u32> = holders.iter().map(Child::id).collect();
    let slots = ledger_view::slots(&dir.join("ledger"), TENANT);
    let registered: Vec<u32> =
        slots.iter().filter(|s| s.alive && s.total_bytes() >= HOLDER_BYTES && pids.contains(&s.pid)).map(|s| s.pid).collect();
    let missing: Vec<u32> = pids.iter().copied().filter(|pid| !registered.contains(pid)).collect();
    if !missing.is_empty() {
        stop(holders);
        let theirs: Vec<String> = slots
            .iter()
            .filter(|s| missing.contains(&s.pid))
            .map(|s| format!("pid {}: alive {}, {} bytes", s.pid, s.alive, s.total_bytes()))
            .collect();
        panic!(
            "{when}: {} of {} busy tenant processes hold no live slot with {} MiB in the ledger \
             (pids {missing:?}; their slots: {theirs:?}): the row would not be measured with them",
            missing.len(),
            pids.len(),
            HOLDER_BYTES >> 20
        );
    }
}

/// Kills every holder and reaps it, so that a failed check ends the
/// benchmark without holders left writing to closed pipes.
fn stop(holders: &mut [Child]) {
    for child in holders {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Closes each holder's stdin and waits for it to exit.
fn release(holders: Vec<Child>) {
    for mut child in holders {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}

/// How many processes start at once in the scale section, and how often
/// each side is timed.
const AT_ONCE: [usize; 4] = [1, 32, 128, 256];
const SCALE_RUNS: usize = 15;

/// What one batch took: the wall time until the last process exited, and
/// the CPU time (user and system) its processes used together.
#[derive(Clone, Copy)]
struct Batch {
    wall: Duration,
    cpu: Duration,
}

/// The CPU time of every child of this process waited for so far.
fn children_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a live out-parameter.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0, "getrusage failed");
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// `n` start-up processes of the tenant started together: the wall time
/// until the last has exited, and the CPU time they used. On a machine
/// whose cores other work shares, the CPU time is the steadier figure: a
/// batch of hundreds of processes on a few cores takes about as long as
/// their CPU time, and what the rest of the machine does moves the wall
/// time far more than it moves the CPU time.
fn timed_batch(program: &Path, dir: &Path, preload: Preload, n: usize) -> Batch {
    let cpu_before = children_cpu();
    let start = Instant::now();
    let children: Vec<Child> = (0..n).map(|_| command(program, dir, preload).spawn().expect("cannot start the startup program")).collect();
    for mut child in children {
        let status = child.wait().expect("cannot wait for the startup program");
        assert!(status.success(), "the startup program failed ({preload:?}, {n} at once)");
    }
    Batch { wall: start.elapsed(), cpu: children_cpu().saturating_sub(cpu_before) }
}

/// `gpuslice monitor` on this benchmark's ledger directory, ready.
fn start_monitor(dir: &Path) -> Child {
    start_monitor_on(dir, &dir.join("simgpu.state"), Some("80GiB"))
}

/// The same, on the simgpu state `state` of devices of `memory`.
fn start_monitor_on(dir: &Path, state: &Path, memory: Option<&str>) -> Child {
    use std::io::{BufRead, BufReader};
    let mut cmd = Command::new(gpuslice_tests::gpuslice_bin());
    if let Some(memory) = memory {
        cmd.env("SIMGPU_MEMORY", memory);
    }
    let mut monitor = cmd
        .args(["monitor", "--fix-mode", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir.join("ledger"))
        .arg("--nvml-lib")
        .arg(gpuslice_tests::simgpu_lib())
        .env("SIMGPU_STATE", state)
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start the monitor");
    let stdout = monitor.stdout.take().expect("the monitor's stdout");
    let ready = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l == "ready=1");
    assert!(ready, "the monitor did not get ready");
    monitor
}

/// The order of the sides in each run: a new permutation each time, from a
/// fixed seed, so that no side always follows the same one (the monitor's
/// teardown, say) and a run of the benchmark is repeatable.
struct Shuffle(u64);

impl Shuffle {
    fn new() -> Self {
        Self(0x9E37_79B9_7F4A_7C15)
    }

    /// `0..sides` in a new order (Fisher-Yates over xorshift64).
    fn next(&mut self, sides: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..sides).collect();
        for i in (1..sides).rev() {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            order.swap(i, (self.0 % (i as u64 + 1)) as usize);
        }
        order
    }
}

/// Many processes of one tenant starting at once (the cost of orchestration
/// on short jobs): medians of SCALE_RUNS, bare, under the shim, under the
/// shim with the monitor running, and under each empty library of
/// `floors`, the sides taking turns. The wall time to all done, then the
/// CPU time per process (the batch's, divided by N), each with its ratio to
/// bare; last, each empty library's two ratios: what preloading it costs on
/// this machine, the floor under the shim's.
fn at_scale(program: &Path, dir: &Path, floors: &[(&str, PathBuf)]) {
    println!(
        "\n{SCALE_RUNS} batches a side of N processes of one tenant started at once (each: init, context, 1 MiB alloc, exit); \
         median wall time to all done, and median CPU time (user + system) per process; last, empty preloaded libraries' \
         ratios to bare, wall / cpu: the floor"
    );
    print!(
        "{:>5} {:>10} {:>10} {:>7} {:>14} {:>7}   {:>9} {:>9} {:>7} {:>14} {:>7}",
        "N", "bare", "shim", "ratio", "shim+monitor", "ratio", "cpu bare", "cpu shim", "ratio", "cpu shim+mon", "ratio"
    );
    for (name, _) in floors {
        print!("   {name:>14}");
    }
    println!();
    let sides = 3 + floors.len();
    let mut order = Shuffle::new();
    let mut adds = Vec::new();
    for n in AT_ONCE {
        let (mut bare, mut shim, mut monitored) = (Vec::new(), Vec::new(), Vec::new());
        let mut floor: Vec<Vec<Batch>> = vec![Vec::new(); floors.len()];
        for _ in 0..SCALE_RUNS {
            for side in order.next(sides) {
                match side {
                    0 => bare.push(timed_batch(program, dir, Preload::Bare, n)),
                    1 => shim.push(timed_batch(program, dir, Preload::Shim, n)),
                    2 => {
                        let mut monitor = start_monitor(dir);
                        // One process first, untimed: a monitor has usually
                        // run for a while when jobs start, and has made the
                        // device's grant page (once, at the device's first
                        // join) and settled after its own start.
                        let _ = timed_batch(program, dir, Preload::Shim, 1);
                        monitored.push(timed_batch(program, dir, Preload::Shim, n));
                        let _ = monitor.kill();
                        let _ = monitor.wait();
                    }
                    f => floor[f - 3].push(timed_batch(program, dir, Preload::Empty(&floors[f - 3].1), n)),
                }
            }
        }
        let median = |batches: &[Batch], of: fn(&Batch) -> Duration| {
            let mut v: Vec<Duration> = batches.iter().map(of).collect();
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e3
        };
        let wall = |b: &Batch| b.wall;
        let cpu = |b: &Batch| b.cpu;
        let (b, s, m) = (median(&bare, wall), median(&shim, wall), median(&monitored, wall));
        let per = n as f64;
        let (cb, cs, cm) = (median(&bare, cpu) / per, median(&shim, cpu) / per, median(&monitored, cpu) / per);
        print!(
            "{n:>5} {b:>8.1}ms {s:>8.1}ms {:>6.2}x {m:>12.1}ms {:>6.2}x   {cb:>7.2}ms {cs:>7.2}ms {:>6.2}x {cm:>12.2}ms {:>6.2}x",
            s / b,
            m / b,
            cs / cb,
            cm / cb
        );
        for batches in &floor {
            print!("   {:>6.2}x {:>5.2}x", median(batches, wall) / b, median(batches, cpu) / per / cb);
        }
        println!();
        adds.push((n, (s - b) / per * 1e3, (m - b) / per * 1e3, (cs - cb) * 1e3, (cm - cb) * 1e3));
    }
    // The targets are absolute: what the shim adds to each process, not a
    // ratio to simgpu's short-lived process (a real driver's start-up takes
    // tens of milliseconds and more).
    println!("\nwhat the shim adds per process (target: wall <= 500 us, cpu <= 300 us), from the medians above");
    println!("{:>5} {:>12} {:>16} {:>12} {:>16}", "N", "wall", "wall +monitor", "cpu", "cpu +monitor");
    for (n, w, wm, c, cm) in adds {
        println!("{n:>5} {w:>10.0}us {wm:>14.0}us {c:>10.0}us {cm:>14.0}us");
    }
}

/// Instructions a start-up process runs (`valgrind --tool=callgrind`),
/// bare, under the shim and under the shim with a monitor running: counts
/// that do not move with the machine's load, beside the times above.
fn instructions(program: &Path, dir: &Path) {
    if Command::new("valgrind").arg("--version").stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
        println!("\ninstructions per process: not measured: no valgrind on this machine (apt-get install valgrind)");
        return;
    }
    let count = |preload: Preload| -> u64 {
        let out_file = dir.join("callgrind.out");
        let program_command = || {
            let mut cmd = command(program, dir, preload);
            // Under valgrind simgpu cannot map a device of 80 GiB: a state of
            // its own, of the default size (the count does not depend on it).
            cmd.env("SIMGPU_STATE", dir.join("callgrind.state")).env_remove("SIMGPU_MEMORY").env_remove("GPUSLICE_MEMORY_LIMIT");
            cmd
        };
        // Once first, untimed: what only the first process ever does (the
        // new simulated device's registration in the ledger, the monitor's
        // page for it) is not counted as every process's.
        let warm = program_command().stdout(Stdio::null()).status().expect("cannot start the startup program");
        assert!(warm.success(), "the startup program failed before counting ({preload:?})");
        // valgrind runs the program with the same environment.
        let mut cmd = Command::new("valgrind");
        let inner = program_command();
        cmd.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", out_file.display())).arg(inner.get_program());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().expect("cannot run valgrind");
        assert!(out.status.success(), "valgrind failed: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stderr);
        text.lines()
            .find_map(|l| l.split_once("Collected :").map(|(_, n)| n.trim().replace(',', "")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no instruction count in valgrind's output:\n{text}"))
    };
    let bare = count(Preload::Bare);
    let shim = count(Preload::Shim);
    let mut monitor = start_monitor_on(dir, &dir.join("callgrind.state"), None);
    let monitored = count(Preload::Shim);
    let _ = monitor.kill();
    let _ = monitor.wait();
    println!("\ninstructions per start-up process (callgrind; the program's threads included)");
    println!("  bare:                {bare:>12}");
    println!("  shim:                {shim:>12}  (+{})", shim.saturating_sub(bare));
    println!("  shim with a monitor: {monitored:>12}  (+{})", monitored.saturating_sub(bare));
}

/// The empty libraries preloaded for the floor, built in `dir`: one in C
/// (`benches/c/empty_preload.c`), and one in Rust (`benches/rust/empty_preload.rs`),
/// which carries the Rust runtime's start-up as the shim does.
fn compile_empty_libraries(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let root = gpuslice_tests::repo_root();
    let source = root.join("benches/c");
    let c = dir.join("libempty_c.so");
    let status = Command::new("gcc").args(["-O2", "-shared", "-fPIC"]).arg(source.join("empty_preload.c")).arg("-o").arg(&c).status();
    assert!(status.expect("cannot run gcc").success(), "compiling benches/c/empty_preload.c failed");
    let rust = dir.join("libempty_rust.so");
    let status = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--edition", "2021", "--crate-type", "cdylib", "-C", "opt-level=3", "-C", "strip=debuginfo"])
        .arg(root.join("benches/rust/empty_preload.rs"))
        .arg("-o")
        .arg(&rust)
        .status();
    assert!(status.expect("cannot run rustc").success(), "compiling benches/rust/empty_preload.rs failed");
    vec![("empty C lib", c), ("empty Rust lib", rust)]
}

/// `benches/c/threads.c` built in `dir`.
fn compile_threads(dir: &Path) -> PathBuf {
    let program = dir.join("threads");
    let status = Command::new("gcc")
        .arg("-O2")
        .arg(gpuslice_tests::repo_root().join("benches/c/threads.c"))
        .args(["-lpthread", "-o"])
        .arg(&program)
        .status();
    assert!(status.expect("cannot run gcc").success(), "compiling benches/c/threads.c failed");
    program
}

/// What a thread that sleeps costs a short process here (the shim's helper
/// is one, and a bare simgpu process already has simgpu's worker):
/// `benches/c/threads.c` with 0, 1 and 2 such threads, the three taking
/// turns in a new order each run; the median CPU time per process, in
/// batches of `THREADS_AT_ONCE` started together and one process at a
/// time, and what each thread adds to the one before.
fn thread_cost(program: &Path) {
    const THREADS_AT_ONCE: usize = 128;
    /// Processes a side per run, one at a time.
    const ONE_AT_A_TIME: usize = 100;
    // CPU time per process, µs, of `count` processes with `threads`
    // threads each, started together or one after another.
    let cpu_us = |threads: usize, count: usize, together: bool| {
        let start = || Command::new(program).arg(threads.to_string()).spawn().expect("cannot start benches/c/threads.c");
        let check = |mut child: Child| {
            assert!(child.wait().expect("cannot wait for benches/c/threads.c").success(), "benches/c/threads.c {threads} failed");
        };
        let cpu_before = children_cpu();
        if together {
            let children: Vec<Child> = (0..count).map(|_| start()).collect();
            children.into_iter().for_each(check);
        } else {
            (0..count).for_each(|_| check(start()));
        }
        children_cpu().saturating_sub(cpu_before).as_secs_f64() * 1e6 / count as f64
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut order = Shuffle::new();
    let mut rows = Vec::new();
    for (count, together) in [(THREADS_AT_ONCE, true), (ONE_AT_A_TIME, false)] {
        let mut samples: [Vec<f64>; 3] = Default::default();
        for _ in 0..SCALE_RUNS {
            for threads in order.next(3) {
                samples[threads].push(cpu_us(threads, count, together));
            }
        }
        rows.push(samples.map(median));
    }
    println!(
        "\nwhat a sleeping thread costs a short process here (benches/c/threads.c, {SCALE_RUNS} runs a side): median CPU time \
         per process, in batches of {THREADS_AT_ONCE} started together and {ONE_AT_A_TIME} one at a time"
    );
    println!("{:>8} {:>10} {:>12}   {:>13} {:>12}", "threads", "together", "this thread", "one at a time", "this thread");
    for threads in 0..3 {
        let (together, alone) = (rows[0][threads], rows[1][threads]);
        if threads == 0 {
            println!("{threads:>8} {together:>8.0}us {:>12}   {alone:>11.0}us {:>12}", "", "");
        } else {
            let (t, a) = (together - rows[0][threads - 1], alone - rows[1][threads - 1]);
            println!("{threads:>8} {together:>8.0}us {t:>10.0}us   {alone:>11.0}us {a:>10.0}us");
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-startup-{}", std::process::id()));
    // The shim refuses a GPUSLICE_DIR that does not exist.
    std::fs::create_dir_all(dir.join("ledger")).expect("cannot create the benchmark directory");
    let program = compile(&dir);
    // Every helper program is built before anything is measured, so a
    // missing compiler fails the benchmark at once.
    let floors = compile_empty_libraries(&dir);
    let threads = compile_threads(&dir);

    println!("start-up of one CUDA process, median of {RUNS} runs a side, the sides taking turns");
    println!("{:<34} {:>10} {:>10} {:>12}", "tenant load", "bare", "shim", "shim adds");
    for busy in [0, BUSY_PROCESSES] {
        let mut holders = busy_tenant(&dir, busy);
        check_holders(&dir, &mut holders, "before timing");
        let (bare, shim) = median_runs(&program, &dir);
        check_holders(&dir, &mut holders, "after timing");
        println!(
            "{:<34} {:>8.2}ms {:>8.2}ms {:>10.2}ms",
            format!("{busy} other live processes"),
            bare.as_secs_f64() * 1e3,
            shim.as_secs_f64() * 1e3,
            (shim.as_secs_f64() - bare.as_secs_f64()) * 1e3
        );
        release(holders);
    }
    at_scale(&program, &dir, &floors);
    instructions(&program, &dir);
    thread_cost(&threads);
    let _ = std::fs::remove_dir_all(&dir);
}
