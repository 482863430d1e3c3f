//! The compute limit's benchmark rows, shared by `benches/shim.rs` (over
//! simgpu) and `benches/shim_overhead.rs` (over the null driver).

#![allow(dead_code)]

use criterion::Criterion;
use gpuslice_tests::driver::{load_library, Driver};
use ledger::{Ledger, PolicySource};
use std::path::Path;

/// The `launch_limited` rows: a second copy of the shim (its own state, as
/// a process of its own would have), initialised with a compute limit of
/// 50 %, launching zero-length kernels (nothing to throttle):
/// - `limit_100`: the device's limit raised to 100 by the monitor after the
///   process started; the launch is looked at and passed on. (A process
///   started with a limit of 100, or none, takes the plain `launch/shim`
///   path: one load.)
/// - `limit_50`: two timing events around each launch and the charge of
///   each completed pair.
pub fn limited_launches(c: &mut Criterion, prefix: &str, shim: &Path, dir: &Path) {
    let copy = dir.join("libgpuslice-limited.so");
    std::fs::copy(shim, &copy).expect("cannot copy the shim");
    // Read by the copy's initialisation, in Driver::resolve.
    std::env::set_var("GPUSLICE_TENANT", "limited");
    std::env::set_var("GPUSLICE_COMPUTE_LIMIT", "50");
    let lib = load_library(&copy);
    let driver = Driver::resolve(&lib, &copy);
    std::env::remove_var("GPUSLICE_COMPUTE_LIMIT");
    let ledger = Ledger::open_or_create(&dir.join("ledger"), "limited").expect("the limited tenant's ledger");
    let mut group = c.benchmark_group(format!("{prefix}launch_limited"));
    for (name, ratio_e4) in [("limit_100", 10_000), ("limit_50", 5_000)] {
        ledger.set_compute_limit(0, ratio_e4, PolicySource::Monitor);
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter_custom(|iters| driver.launch_zero_length(iters))
        });
    }
    group.finish();
    eprintln!(
        "{prefix}launch_limited: {} launches counted, {} ns charged, {} ns throttled",
        ledger.launches_total(0),
        ledger.busy_ns_total(0),
        ledger.throttled_ns_total(0)
    );
}

/// The `launch_granted/share_50` row: a third copy of the shim, whose
/// tenant has a share of 50 %, on a device this benchmark arbitrates as the
/// monitor would: it hands out a sealed grant page in which the tenant holds
/// the device. Alone, each launch reads the grant and counts towards the
/// next checkpoint; every few launches one records a checkpoint event.
pub fn granted_launches(c: &mut Criterion, prefix: &str, shim: &Path, dir: &Path) {
    use ledger::grants::{Grant, Grants};
    let ledger_dir = dir.join("ledger");
    std::fs::create_dir_all(&ledger_dir).expect("the ledger directory");
    let listener = std::os::unix::net::UnixListener::bind(ledger::broker::socket_path(&ledger_dir)).expect("the arbiter's socket");
    let grants = Grants::create_sealed("bench").expect("a grant page");
    grants.page().header.grant.store(Grant::new(2, 1, false).0, std::sync::atomic::Ordering::Release);
    grants.page().header.arbitrated.store(1, std::sync::atomic::Ordering::Release);
    let fd = grants.fd();
    std::thread::spawn(move || {
        let _keep = grants;
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if ledger::broker::read_hello(&mut stream).is_ok() {
                let _ = ledger::broker::accept(std::os::fd::AsRawFd::as_raw_fd(&stream), 0, fd);
                // Kept open, as the monitor keeps it (its messages are not read).
                open.push(stream);
            }
        }
    });
    let copy = dir.join("libgpuslice-granted.so");
    std::fs::copy(shim, &copy).expect("cannot copy the shim");
    std::env::set_var("GPUSLICE_TENANT", "granted");
    std::env::set_var("GPUSLICE_COMPUTE_SHARE", "50");
    let lib = load_library(&copy);
    let driver = Driver::resolve(&lib, &copy);
    std::env::remove_var("GPUSLICE_COMPUTE_SHARE");
    let mut group = c.benchmark_group(format!("{prefix}launch_granted"));
    group.bench_function("share_50", |b| {
        driver.make_current();
        b.iter_custom(|iters| driver.launch_zero_length(iters))
    });
    group.finish();
}

/// How close to its limit a tenant gets on simgpu: `cargo bench --bench shim
/// -- compute_accuracy`. For each limit, a client launching 1 ms kernels
/// back to back for 5 s under the shim alone on a simulated GPU of its own,
/// beside the same client without the shim on another (what the simulator
/// delivers at all on this machine). Prints, per limit:
/// - `delivered`: kernels × 1 ms / wall time (what the application got);
/// - `of_bare`: `delivered` / the bare client's (the simulator's own losses
///   divided out);
/// - `charged`: the tenant's charged device time / wall time (what the
///   throttle measured and held to the limit; the target is the limit ±2
///   points).
pub fn accuracy() {
    use gpuslice_tests::Sim;
    let run = |sim: &Sim, envs: &[(&str, &str)], args: &[&str]| {
        let mut cmd = sim.c("compute_load");
        cmd.envs(envs.iter().copied()).args(args);
        sim.spawn(&mut cmd)
    };
    let share = |out: &gpuslice_tests::Output| out.f64("share");
    println!("limit  kernels_us       delivered  bare   of_bare  charged  error_points");
    // One process per kernel length: 1 ms kernels (each launch bracketed),
    // then launches short enough to be sampled (100 µs, 5 µs, 1 µs); a
    // tenant whose two processes run 1 ms and 5 µs kernels at once; and one
    // process whose kernels take the lengths of a list in turn (mixed).
    let rows: [(&str, &[&str]); 11] = [
        ("10", &["1000"]),
        ("30", &["1000"]),
        ("60", &["1000"]),
        ("90", &["1000"]),
        ("30", &["1000", "1000"]),
        ("30", &["100"]),
        ("30", &["5"]),
        ("30", &["1"]),
        ("30", &["1000", "5"]),
        ("30", &["1000,5"]),
        ("30", &["5,1,100,1,1,5"]),
    ];
    for (limit, kernels_us) in rows {
        let sim = Sim::new().shim().tenant("accuracy").env("GPUSLICE_COMPUTE_LIMIT", limit);
        let bare = Sim::new();
        let clients: Vec<_> = kernels_us.iter().map(|k| run(&sim, &[], &["kernel", k, "5"])).collect();
        let reference = run(&bare, &[], &["kernel", kernels_us[0], "5"]);
        let outs: Vec<_> = clients.into_iter().map(|c| c.wait()).collect();
        let reference = reference.wait();
        let wall_us = outs.iter().map(|o| o.f64("wall_us")).fold(0.0, f64::max);
        let delivered: f64 = outs.iter().map(|o| o.u64("busy_us") as f64).sum::<f64>() / wall_us;
        let ledger = Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "accuracy")).expect("ledger");
        let charged = ledger.busy_ns_total(0) as f64 / 1e3 / wall_us;
        let limit_ratio = limit.parse::<f64>().unwrap_or(0.0) / 100.0;
        let sizes = kernels_us.join("+");
        println!(
            "{limit:>5}  {sizes:<15}  {delivered:>9.3}  {:.3}  {:>7.3}  {charged:>7.3}  {:>+12.1}",
            share(&reference),
            delivered / share(&reference),
            (charged - limit_ratio) * 100.0
        );
    }
}
