//! Shares for training loops that synchronise every step (`loss.item()`,
//! logging, metrics), on simgpu under the shim with the monitor: NVIDIA's
//! cuda-bindings clients (`tests/python/fairness_load.py steps`) with steps
//! of 1, 2, 10 and 40 ms of device work, one or both tenants stepping,
//! with and without host work between steps, shares 25 / 75; and loops
//! whose steps end in a synchronous copy to the host (`cudaMemcpy`) instead.
//!
//! Before the owed rule (`monitor/src/daemon/arbiter/sched.rs`), such
//! loops alternated one step for one whatever their shares.

#[path = "compute_support/mod.rs"]
mod compute_support;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use compute_support::{busy_bins, busy_ratio, percentile, priority_loop, serial, sim, PriorityLoop};
use gpuslice_tests::{Running, Sim};
use monitor_support::{Monitor, MonitorOptions};

/// Kernels of every client, µs.
const KERNEL_US: u64 = 500;
const SECONDS: &str = "6";

/// What a tenant runs: a loop of `per_step` kernels synchronised every step
/// with `host_us` of host work after it, or kernels back to back (`None`);
/// with `copy`, each step ends in a synchronous `cuMemcpyDtoH` instead of a
/// `cuStreamSynchronize`.
#[derive(Clone, Copy)]
struct Load {
    per_step: Option<u32>,
    host_us: u32,
    copy: bool,
}

fn start(sim: &Sim, tenant: &str, share: &str, load: Load) -> Running {
    let mut cmd = sim.py("fairness_load.py");
    cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_COMPUTE_SHARE", share).env("FAIRNESS_EPOCH", epoch_s());
    match load.per_step {
        Some(n) => cmd.args([
            "steps",
            &KERNEL_US.to_string(),
            &n.to_string(),
            &load.host_us.to_string(),
            SECONDS,
            if load.copy { "copy" } else { "sync" },
        ]),
        None => cmd.args(["saturate", &KERNEL_US.to_string(), SECONDS]),
    };
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("started");
    running
}

fn epoch_s() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    format!("{:.3}", now.as_secs_f64() + 1.0)
}

/// Runs `small` (share 25) beside `large` (share 75) and returns the part
/// of the device each got over the same seconds 2 to 5.5, and how busy it was.
fn split(small: Load, large: Load) -> (f64, f64) {
    let sim = sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let (s, l) = (start(&sim, "small", "25", small), start(&sim, "large", "75", large));
    let (s, l) = (s.wait(), l.wait());
    s.assert_success();
    l.assert_success();
    let (a, b) = (busy_ratio(&busy_bins(&s, KERNEL_US as f64), 2.0, 5.5), busy_ratio(&busy_bins(&l, KERNEL_US as f64), 2.0, 5.5));
    (a / (a + b), a + b)
}

fn check(what: &str, small: Load, large: Load) {
    check_within(what, small, large, 0.03);
}

/// [`check`] with its own tolerance: the aim is 2 points; the test allows
/// one more for a loaded two-core machine (the benchmark quotes figures).
///
/// How busy the device stays is a speed figure, and the fairness benchmark
/// measures it on a release build (`cargo bench --bench fairness`, "device
/// busy"; docs/compute.md). Here, in the unoptimised build on two cores,
/// it is mostly the build and the machine: the 1 ms loop gave 43 % to 76 %
/// busy in nine runs of one day (62 % in a CI run), the release build 50 %
/// to 84 % in this test and 88 % to 91 % by hand; the lowest of both came
/// in slow spells of the machine (a pipe round trip between two cores of
/// 28 µs instead of 13). So the test holds it only to [`MIN_BUSY`].
fn check_within(what: &str, small: Load, large: Load, within: f64) {
    let (part, busy) = split(small, large);
    eprintln!("{what}: shares 25 / 75 got {:.1} / {:.1}, device busy {:.1} %", 100.0 * part, 100.0 * (1.0 - part), 100.0 * busy);
    assert!((part - 0.25).abs() <= within, "{what}: 25 / 75 got {:.3} / {:.3}", part, 1.0 - part);
    assert!(busy > MIN_BUSY, "{what}: the device was busy only {busy:.3} of the time");
}

/// The least part of the time the device must be busy in
/// [`check_within`]'s loops: below every run of them measured (0.43, in a
/// slow spell), so that it catches turns that stall, not a slow machine.
const MIN_BUSY: f64 = 0.4;

const fn steps(per_step: u32, host_us: u32) -> Load {
    Load { per_step: Some(per_step), host_us, copy: false }
}
const fn steps_ending_in_a_copy(per_step: u32, host_us: u32) -> Load {
    Load { per_step: Some(per_step), host_us, copy: true }
}
const BACK_TO_BACK: Load = Load { per_step: None, host_us: 0, copy: false };

#[test]
fn both_tenants_synchronise_every_step_of_1_2_10_and_40_ms() {
    let _serial = serial();
    for (ms, per_step) in [(1, 2), (2, 4), (10, 20), (40, 80)] {
        check(&format!("both synchronise every {ms} ms step"), steps(per_step, 0), steps(per_step, 0));
    }
}

#[test]
fn one_tenant_synchronises_every_step_beside_back_to_back_kernels() {
    let _serial = serial();
    check("the 25 steps of 2 ms, the 75 back to back", steps(4, 0), BACK_TO_BACK);
    check("the 75 steps of 2 ms, the 25 back to back", BACK_TO_BACK, steps(4, 0));
}

#[test]
fn loops_with_host_work_between_steps_and_back_to_back_kernels_still_hold() {
    let _serial = serial();
    check("both steps of 10 ms with 500 us of host work", steps(20, 500), steps(20, 500));
    // Not yet within the aim: while the 75 does its host work the 25 fills
    // in keeping two launches in flight, and gives way the moment the 75 is
    // back; each such short turn costs the 25 a wake-up and a drain. Here
    // 23.4 and 24.2 measured (debug build), 22.1 to 22.9 in the fairness
    // benchmark's row (release build; with one launch in flight, 20.0 to
    // 20.9 there and 21.1 to 22.1 here; before the owed rule, 48.8).
    check_within("both steps of 10 ms with 2 ms of host work", steps(20, 2000), steps(20, 2000), 0.03);
    check("both back to back", BACK_TO_BACK, BACK_TO_BACK);
}

/// A synchronous copy to the host waits for the step like a
/// synchronisation, and the shim takes it for one (`hooks::sync`).
#[test]
fn loops_whose_steps_end_in_a_synchronous_copy_hold() {
    let _serial = serial();
    check("both copy back after every 2 ms step", steps_ending_in_a_copy(4, 0), steps_ending_in_a_copy(4, 0));
    check(
        "both copy back after every 10 ms step, then 500 us of host work",
        steps_ending_in_a_copy(20, 500),
        steps_ending_in_a_copy(20, 500),
    );
}

/// A training loop that synchronises every step (priority 0) beside an
/// inference tenant's bursts (priority 1), in cycles of bursts on and off
/// ([`priority_loop`]: the two halves of a cycle share the host's spell,
/// and this machine's slow spells take a third of its speed for minutes).
///
/// It holds the line against what was fixed: the training loop lost 51 %
/// of its steps to bursts that use 8 % while it waited for its stream to
/// empty before each of its 50 µs launches; now it keeps up to 0.6 ms of
/// short launches queued. It must lose at most what the bursts use plus
/// 12 points in the median cycle (the aim is 5; `cargo bench --bench
/// fairness -- --only priority_loop` gives the figures against a release
/// build), and the bursts' median latency must stay within twice what it is
/// alone (a guard: `tests/compute_shares.rs` holds priority against long
/// kernels; the p99 is in the benchmark, as one slow wake-up on this 2-core
/// machine moves it by milliseconds).
#[test]
fn priority_bursts_cost_a_training_loop_only_what_they_use() {
    let _serial = serial();
    let sim = sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let run = priority_loop(&sim, 5, 1.5);
    eprintln!("{}", run.summary());
    let (lost, used) = (run.median_lost(), PriorityLoop::USED);
    assert!(
        lost <= used + 0.12,
        "the training loop lost {:.1} % of its steps to bursts that use {:.0} %\n{}",
        100.0 * lost,
        100.0 * used,
        run.summary()
    );
    let (alone, shared) = (percentile(&run.alone_us, 0.5), percentile(&run.shared_us, 0.5));
    assert!(shared <= 2.0 * alone, "burst median {shared:.0} us beside training, {alone:.0} us alone");
}

/// Shares with no monitor running are not enforced (the processes share
/// the device as the hardware does), and everything people look at says
/// so: the shim's one line, `gpuslice status` (the TARGET cell and a
/// note) and `gpuslice top --once`.
///
/// Before: the pair split about 50 / 50 while `status` showed targets of
/// 25 % and 75 %, and the shim's line said only that the process "runs
/// without them".
#[test]
fn shares_without_a_monitor_are_shown_as_not_enforced() {
    let _serial = serial();
    let sim = sim();
    let (small, large) = (start(&sim, "small", "25", BACK_TO_BACK), start(&sim, "large", "75", BACK_TO_BACK));
    let with_nvml = |args: &[&str]| {
        let mut cmd = monitor_support::gpuslice_command(&sim);
        cmd.args(args).arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(gpuslice_tests::simgpu_lib());
        sim.run(&mut cmd)
    };
    let status = with_nvml(&["status"]);
    let top = with_nvml(&["top", "--once"]);
    let (small, large) = (small.wait(), large.wait());
    status.assert_success();
    top.assert_success();
    let (a, b) = (busy_ratio(&busy_bins(&small, KERNEL_US as f64), 2.0, 5.5), busy_ratio(&busy_bins(&large, KERNEL_US as f64), 2.0, 5.5));
    eprintln!("shares 25 / 75 with no monitor: {:.1} / {:.1}\n{status}", 100.0 * a / (a + b), 100.0 * b / (a + b));
    // The TENANTS table's rows (the PROCESSES table names tenants too).
    let rows: Vec<&str> =
        status.stdout.lines().filter(|l| (l.starts_with("small ") || l.starts_with("large ")) && l.contains('%')).collect();
    assert!(rows.len() == 2 && rows.iter().all(|r| r.contains("not enforced")), "status did not say the shares are not enforced\n{status}");
    assert!(status.stderr.contains("NOT enforced"), "status did not explain it\n{status}");
    assert!(top.stdout.contains("not enforced") && top.stderr.contains("NOT enforced"), "top did not say it\n{top}");
    for out in [&small, &large] {
        assert!(out.shim_log_lines().iter().any(|l| l.contains("NOT enforced")), "the shim's line did not say it\n{out}");
    }
}
