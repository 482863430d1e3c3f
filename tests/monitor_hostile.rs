//! A hostile tenant against the monitor: whatever it writes in its own
//! ledger, it cannot have another tenant's process counted as its own or
//! killed, cannot widen the tolerance of the bypass check, and cannot raise
//! a cap the monitor holds it to. Each test runs the real monitor in kill
//! mode over real processes under the shim on simgpu, and writes into the
//! attacker's ledger as the attacker could.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, Running, Sim, GIB, MIB};
use monitor_support::{pid_alive, Monitor, MonitorOptions};
use std::sync::atomic::Ordering;

fn kill_mode(sim: &Sim, extra: &str) -> Monitor {
    let config = sim.dir().join("gpuslice.toml");
    std::fs::write(&config, format!("on_violation = \"kill\"\nviolation_grace = \"0ms\"\n{extra}")).unwrap();
    Monitor::start(sim, MonitorOptions { config: Some(config), ..Default::default() })
}

/// A process of `tenant` under the shim with cap `limit`: it makes a
/// context, runs `ops`, prints `ready=1` and holds what it has until told
/// to go on. Returned once it has printed `started=1` (before `ops`).
fn holder(sim: &Sim, tenant: &str, limit: &str, ops: &[&str]) -> Running {
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_MEMORY_LIMIT", limit).args(["init", "ctx", "mark:started"]).args(ops).arg("hold");
    let mut p = sim.spawn(&mut cmd);
    p.wait_for("started");
    p
}

fn start_time_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    ledger::process::start_time_ticks(&stat).unwrap()
}

fn driver_bytes(monitor: &Monitor, tenant: &str) -> Option<f64> {
    monitor.metrics().value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", tenant)])
}

/// The attacker claims a slot in its own ledger (holding its lock, as any
/// of its processes can) and writes the victim's identity into it, with
/// the namespace inode that used to match any namespace.
#[test]
fn a_slot_naming_another_tenants_process_attributes_nothing_and_kills_nothing() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim();
    let monitor = kill_mode(&sim, "");
    let mut victim = holder(&sim, "victim", "2GiB", &["alloc:a:600M"]);
    victim.wait_for("ready");
    let attacker = holder(&sim, "attacker", "128MiB", &[]);
    let ledger = ledger_view::open(&sim.ledger_dir(), "attacker");
    let slot = ledger.claim_slot().unwrap();
    let record = &ledger.layout().slots[slot.index()];
    let victim_pid = victim.pid();
    record.pid.store(victim_pid, Ordering::SeqCst);
    record.ns_pid.store(victim_pid, Ordering::SeqCst);
    record.pidns_inode.store(0, Ordering::SeqCst);
    record.start_time_ticks.store(start_time_ticks(victim_pid), Ordering::SeqCst);

    // The victim's memory is its own tenant's, and the attacker's stays its own.
    monitor.metrics_until("the victim's memory, counted for the victim", |m| {
        m.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "victim")]) == Some((664 * MIB) as f64)
    });
    monitor.wait_rounds(8);
    assert!(pid_alive(victim_pid), "the victim was killed");
    assert_eq!(driver_bytes(&monitor, "attacker"), Some((64 * MIB) as f64), "only the attacker's own context");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(0.0));
    ledger.release_slot(slot);
    victim.wait().assert_success();
    attacker.wait().assert_success();
}

/// A tenant raises its cap in its own ledger (the monitor names it in its
/// configuration) and writes an enormous context overhead, then takes 3 GiB
/// while the raised cap lasts. The monitor still judges it by the
/// configured cap, tolerating at most 1 GiB of claimed overhead, and kills
/// it.
#[test]
fn a_claimed_context_overhead_does_not_hide_memory_past_the_cap() {
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    let monitor = kill_mode(&sim, "[tenants.greedy]\nmemory = \"1GiB\"\n");
    // The monitor writes its cap back every round: the tenant races it, and
    // tries again when the monitor was first.
    for attempt in 0..5 {
        let mut greedy = holder(&sim, "greedy", "1GiB", &["wait", "alloc:big:3G", "mark:took"]);
        let pid = greedy.pid();
        let ledger = ledger_view::open(&sim.ledger_dir(), "greedy");
        ledger.set_context_overhead_bytes(0, 1 << 60);
        ledger.set_memory_limit_bytes(0, ledger::UNLIMITED, ledger::PolicySource::Monitor);
        greedy.send_line("go");
        let took = greedy.wait_for("big");
        if took != cu::SUCCESS.to_string() {
            eprintln!("attempt {attempt}: the monitor restored the cap first ({took})");
            greedy.wait().assert_success();
            // The next process's context would be charged the lie.
            ledger.set_context_overhead_bytes(0, 64 * MIB);
            continue;
        }
        gpuslice_tests::poll::until("the greedy tenant is killed", || !pid_alive(pid));
        let out = greedy.wait();
        assert!(!out.success(), "{out}");
        let metrics = monitor.metrics_after_this_round();
        assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0));
        return;
    }
    panic!("the tenant never got its raised cap in before the monitor restored it");
}

/// A tenant the configuration does not name writes an unlimited cap into
/// its ledger: the monitor pinned the cap its first process set, writes it
/// back, and its next allocation past it is refused.
#[test]
fn a_tenant_cannot_raise_the_cap_it_started_with() {
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    let monitor = kill_mode(&sim, "");
    let mut tenant = holder(&sim, "raiser", "1GiB", &["ready", "wait", "alloc:big:2G", "mark:tried"]);
    tenant.wait_for("ready");
    monitor.metrics_until("the pinned cap", |m| m.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "raiser")]) == Some(GIB as f64));
    let ledger = ledger_view::open(&sim.ledger_dir(), "raiser");
    ledger.set_memory_limit_bytes(0, ledger::UNLIMITED, ledger::PolicySource::Monitor);
    monitor.wait_rounds(2);
    assert_eq!(ledger.memory_limit_bytes(0), GIB, "the monitor wrote the pinned cap back");
    tenant.send_line("go");
    tenant.wait_for("tried");
    let out = tenant.wait();
    out.assert_success().assert_rc("big", cu::OUT_OF_MEMORY);
}

/// The same raise, made before the monitor ever saw the tenant: its page
/// says "unlimited" by the time the monitor looks. The process is still
/// held to the cap its environment asked for, and the monitor pins that
/// cap from what the process said when it joined, and writes it back.
#[test]
fn a_cap_erased_before_the_monitor_looks_still_holds() {
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    let mut tenant = holder(&sim, "eraser", "1GiB", &["ready", "wait", "alloc:big:2G", "mark:tried"]);
    tenant.wait_for("ready");
    let ledger = ledger_view::open(&sim.ledger_dir(), "eraser");
    ledger.set_memory_limit_bytes(0, ledger::UNLIMITED, ledger::PolicySource::Unset);
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    monitor.metrics_until("the cap the process asked for, pinned", |m| {
        m.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "eraser")]) == Some(GIB as f64)
    });
    assert_eq!(ledger.memory_limit_bytes(0), GIB, "the monitor wrote the asked cap back");
    tenant.send_line("go");
    tenant.wait_for("tried");
    let out = tenant.wait();
    out.assert_success().assert_rc("big", cu::OUT_OF_MEMORY);
}

/// A process of the tenant that skips the shim writes a slot for itself
/// (holding its lock, so it is the tenant's own) and an enormous context
/// overhead, then takes 3 GiB from the driver past a 1 GiB cap: it is the
/// tenant's, its memory counts against the tenant's cap, and the claimed
/// overhead widens the tolerance by 1 GiB at most, so it is killed.
#[test]
fn a_process_without_the_shim_that_plants_its_own_slot_is_caught() {
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").shim();
    let monitor = kill_mode(&sim, "[tenants.planter]\nmemory = \"1GiB\"\n");
    let mut honest = holder(&sim, "planter", "1GiB", &[]);
    honest.wait_for("ready");
    let ledger_path = ledger::tenant_path(&sim.ledger_dir(), "planter");
    let mut cmd = sim.c("planted_slot");
    cmd.env_remove("LD_PRELOAD").arg(&ledger_path).arg("3G");
    let mut planted = sim.spawn(&mut cmd);
    let pid = planted.pid();
    assert_eq!(planted.wait_for("big"), cu::SUCCESS.to_string(), "the driver alone gave it 3 GiB");
    gpuslice_tests::poll::until("the planted process is killed", || !pid_alive(pid));
    let out = planted.wait();
    assert!(!out.success(), "{out}");
    // Every process of the tenant holding memory goes, the honest one too.
    assert!(monitor.metrics_after_this_round().value("gpuslice_violation_kills_total", &[]).is_some_and(|kills| kills >= 1.0));
    drop(honest);
}

/// A process of tenant `a` (capped at 1 GiB) that skips the shim plants a
/// slot for itself in `a`'s ledger and in a second ledger, `a2`, that the
/// tenant made itself, then takes 8 GiB from the driver. A process two
/// ledgers claimed was judged under neither, so it kept the 8 GiB. Now it is
/// judged under each ledger that claims it, so `a`'s cap, the strictest of
/// the two, has it killed; `a2` (no cap) gains it nothing.
#[test]
fn a_process_two_ledgers_claim_is_judged_under_the_strictest_cap() {
    let sim = Sim::new().memory("16GiB").context_memory("64MiB").shim();
    let monitor = kill_mode(&sim, "[tenants.a]\nmemory = \"1GiB\"\n");
    let mut honest = holder(&sim, "a", "1GiB", &[]);
    honest.wait_for("ready");
    let mut second = sim.c("memctl");
    second.env("GPUSLICE_TENANT", "a2").args(["init", "ctx"]);
    sim.run(&mut second).assert_success();
    let mut cmd = sim.c("planted_slot");
    cmd.env_remove("LD_PRELOAD")
        .arg(ledger::tenant_path(&sim.ledger_dir(), "a"))
        .arg("8G")
        .arg(ledger::tenant_path(&sim.ledger_dir(), "a2"));
    let mut planted = sim.spawn(&mut cmd);
    let pid = planted.pid();
    assert_eq!(planted.wait_for("big"), cu::SUCCESS.to_string(), "the driver alone gave it 8 GiB");
    gpuslice_tests::poll::until("the process two ledgers claim is killed", || !pid_alive(pid));
    let out = planted.wait();
    assert!(!out.success(), "{out}");
    assert!(monitor.metrics_after_this_round().value("gpuslice_violation_kills_total", &[]).is_some_and(|kills| kills >= 1.0));
    drop(honest);
}

/// The attacker writes into its own ledger that it holds every byte there
/// is, as any of its processes can. Its memory pressure, the figure an
/// autoscaler reads, says full (1) and no more; the victim's stays what
/// the victim holds, and the attacker's cap stays 1 GiB: the lie can raise
/// only its own pressure, to what a tenant that really filled its cap shows.
#[test]
fn a_ledger_claiming_more_than_its_cap_reads_as_full_pressure_and_moves_no_other_tenant() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut victim = holder(&sim, "victim", "1GiB", &["alloc:a:448M"]);
    victim.wait_for("ready");
    let mut attacker = holder(&sim, "attacker", "1GiB", &[]);
    attacker.wait_for("ready");
    let pressure = |m: &monitor_support::Metrics, tenant: &str| {
        m.value("gpuslice_tenant_memory_pressure_ratio", &[("tenant", tenant), ("device", "0")])
    };
    let before = monitor.metrics_until("both tenants' pressure", |m| pressure(m, "victim").is_some() && pressure(m, "attacker").is_some());
    // 448 MiB and the context's 64 MiB of 1 GiB; the attacker's context alone.
    assert_eq!(pressure(&before, "victim"), Some(0.5));
    assert_eq!(pressure(&before, "attacker"), Some(0.0625));
    let ledger = ledger_view::open(&sim.ledger_dir(), "attacker");
    ledger.layout().usage.devices[0].used_bytes.store(u64::MAX, Ordering::SeqCst);
    let after = monitor.metrics_until("the attacker's claim read", |m| pressure(m, "attacker") == Some(1.0));
    assert_eq!(pressure(&after, "victim"), Some(0.5));
    let cap = |tenant: &str| after.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", tenant), ("device", "0")]);
    assert_eq!(cap("attacker"), Some(GIB as f64));
    assert_eq!(cap("victim"), Some(GIB as f64));
    drop(attacker);
    drop(victim);
}
