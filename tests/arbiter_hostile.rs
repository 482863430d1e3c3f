//! Hostile tenants against the arbiter, part 3: what a tenant writes never
//! stands in for what the monitor observes, every hello is answered in
//! bounded time, and nobody gains by inventing tenants. Each attack runs
//! against the real binaries on simgpu (`tests/c/crowd_join.c` is the
//! hostile process, under the shim), as the tenant and, where it says so,
//! as another Unix user.

#[path = "compute_support/mod.rs"]
mod compute_support;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use compute_support::{busy_bins, busy_ratio, saturate, serial, sim};
use gpuslice_tests::{compile_c, Sim};
use ledger::broker;
use monitor_support::{Monitor, MonitorOptions};
use std::time::{Duration, Instant};

fn config(sim: &Sim, text: &str) -> std::path::PathBuf {
    let path = sim.dir().join("monitor.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `crowd_join` as a process of `tenant`: it holds `connections` arbiter
/// connections of its own before and while its shim joins device 0 (idle
/// ones, or with `join_device`, joins of that device with its own slot),
/// then launches 1 ms kernels for `seconds`, through the shim (`gate`) or
/// around it (`raw`), or only holds its connections (`hold`).
fn crowd(sim: &Sim, tenant: &str, connections: u32, seconds: &str, mode: &str, join_device: Option<u32>) -> gpuslice_tests::Running {
    let socket = broker::socket_path(&sim.ledger_dir());
    let mut cmd = sim.command(compile_c("crowd_join"));
    cmd.env("GPUSLICE_TENANT", tenant).arg(&socket).arg(connections.to_string()).args(["1000", seconds, mode]);
    if let Some(device) = join_device {
        let (base, stride) = (ledger::slot_lock_offset(0), ledger::slot_lock_offset(1) - ledger::slot_lock_offset(0));
        cmd.args([tenant.to_string(), base.to_string(), stride.to_string(), device.to_string()]);
    }
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("started");
    running
}

/// Makes `tenant`'s own ledger say that it ran `ratio` of device 0 for
/// `seconds`, as any process of the tenant can (the ledger is the tenant's).
fn inflate_busy_counter(sim: &Sim, tenant: &str, ratio: f64, seconds: f64) -> std::thread::JoinHandle<()> {
    let path = ledger::tenant_path(&sim.ledger_dir(), tenant);
    std::thread::spawn(move || {
        let ledger = ledger::Ledger::open(&path).expect("the tenant's ledger");
        let index = ledger.devices().first().expect("a device").index;
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let mut last = Instant::now();
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            let grown_ns = last.elapsed().as_nanos() as f64 * ratio;
            last = Instant::now();
            if let Some(bucket) = ledger.compute_bucket(index) {
                bucket.count_busy(grown_ns as u64);
            }
        }
    })
}

/// A process of tenant `att` (share 10) crowds its shim's join out with
/// connections of its own and launches around the shim's gate, while the
/// tenant's ledger claims the device time NVML shows. Whatever the ledger
/// says, a process that holds no turn on an arbitrated device runs outside
/// its turns: counted, and killed in kill mode, and `vic` keeps its 90.
///
/// Before: `att` took 50.3 % and `vic` 49.7 %, with no violation.
#[test]
fn a_process_without_a_turn_is_outside_its_turns_whatever_its_ledger_says() {
    let _serial = serial();
    let sim = sim().devices(2);
    let config = config(&sim, "on_violation = \"kill\"\nviolation_grace = \"1s\"\n[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "7");
    let att = crowd(&sim, "att", 80, "6", "raw", Some(1));
    let writer = inflate_busy_counter(&sim, "att", 1.0, 6.0);
    let (att, vic) = (att.wait(), vic.wait());
    writer.join().unwrap();
    vic.assert_success();
    let v = busy_ratio(&busy_bins(&vic, 1000.0), 3.0, 6.0);
    let metrics = monitor.metrics();
    let outside = metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]).unwrap_or(0.0);
    eprintln!("share 90 beside a process without a turn and a ledger that lies: vic {v:.3}, outside_turns {outside}\n{att}");
    assert!(outside >= 1.0, "the process that held no turn was not counted outside its turns\n{att}\n{metrics:#?}");
    assert!(!att.success() && !att.stdout.contains("kernels="), "the process that held no turn was not stopped\n{att}");
    assert!(v > 0.75, "vic kept {v:.3} of the device beside a process without a turn\n{vic}\n{att}");
}

/// A process may hold one place per device in the turns: the joins of
/// device 1 that `att`'s process makes with its own slot, beyond the first,
/// are refused, and cannot crowd out its shim's join on device 0, so its
/// launches there take turns.
///
/// Before: all 80 were accepted, and the shim's join on device 0 was
/// refused ("this user has the most connections the monitor allows").
#[test]
fn a_process_holds_one_place_per_device_and_cannot_crowd_out_its_shim() {
    let _serial = serial();
    let sim = sim().devices(2);
    let config = config(&sim, "[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "7");
    let att = crowd(&sim, "att", 80, "6", "gate", Some(1));
    let (att, vic) = (att.wait(), vic.wait());
    vic.assert_success();
    eprintln!("{att}");
    assert!(att.stdout.contains("joined=1\n"), "the process held more than one place on device 1\n{att}");
    assert!(att.stdout.contains("kernels="), "the process's launches did not go\n{att}");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]), Some(0.0), "{att}\n{metrics:#?}");
    let v = busy_ratio(&busy_bins(&vic, 1000.0), 3.0, 6.0);
    assert!(v > 0.8, "vic kept {v:.3} of the device\n{vic}\n{att}");
}

/// A process under the shim whose join a running monitor refuses (here
/// every member place of the device is taken) does not launch ungoverned:
/// its launches wait for a place in the turns and, when none comes, fail
/// with CUDA_ERROR_NOT_PERMITTED and a line that says why.
///
/// Before: the process launched without turns and ran to the end.
#[test]
fn a_refused_join_fails_the_launch_rather_than_run_ungoverned() {
    let _serial = serial();
    let sim = sim();
    let config = config(&sim, "[tenants.att]\nshare = 10\n[tenants.vic]\nshare = 90\n");
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let vic = saturate(&sim, "vic", &[], "9");
    // Every other place of device 0, each held by a process of its own tenant.
    let mut fillers: Vec<_> =
        (1..ledger::grants::MAX_MEMBERS).map(|i| crowd(&sim, &format!("filler{i:02}"), 1, "12", "hold", Some(0))).collect();
    for filler in &mut fillers {
        assert_eq!(filler.wait_for("joined"), "1", "a filler did not get its place");
    }
    let att = crowd(&sim, "att", 0, "5", "gate", None);
    let att = att.wait();
    let vic = vic.wait();
    vic.assert_success();
    drop(fillers);
    eprintln!("{att}");
    assert!(att.stdout.contains("launch_error=800"), "the refused process's launches were not failed with CUDA_ERROR_NOT_PERMITTED\n{att}");
    assert!(att.stderr.contains("no place in the monitor's turns"), "the failure did not say why\n{att}");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "outside_turns")]), Some(0.0), "{att}\n{metrics:#?}");
}
