//! NVML as a capped tenant sees it: a process that lists the processes on a
//! device (as nvitop does, through nvidia-ml-py) sees only its own
//! tenant's, and a used figure that agrees with them; a process without a
//! cap sees every process and the driver's figures.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{Running, Sim, GIB, MIB};

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").shim()
}

/// A process of `tenant` under `limit` holding a context and `size`.
fn holder(sim: &Sim, tenant: &str, limit: &str, size: &str) -> Running {
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_MEMORY_LIMIT", limit).args(["init", "ctx", &format!("alloc:x:{size}"), "hold"]);
    let mut p = sim.spawn(&mut cmd);
    p.wait_for("ready");
    p
}

#[test]
fn a_capped_process_sees_only_its_own_tenants_processes() {
    let sim = sim();
    let mut a1 = holder(&sim, "team-a", "1GiB", "100M");
    let mut a2 = holder(&sim, "team-a", "1GiB", "50M");
    let mut b = holder(&sim, "team-b", "2GiB", "200M");
    let team_a = format!("{},{}", a1.pid().min(a2.pid()), a1.pid().max(a2.pid()));

    let mut capped = sim.py("nvml_view.py");
    capped.env("GPUSLICE_TENANT", "team-a").env("GPUSLICE_MEMORY_LIMIT", "1GiB");
    let out = sim.run(&mut capped);
    out.assert_success();
    for list in ["list", "v1", "v2", "v3"] {
        assert_eq!(out.get(&format!("{list}.pids")), team_a, "{list}: only team-a's processes\n{out}");
    }
    assert_eq!(out.get("graphics.pids"), "", "{out}");
    assert_eq!(out.get("util.pids"), team_a, "utilization samples of team-a's processes only\n{out}");
    let team_a_bytes = 2 * 64 * MIB + 150 * MIB;
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), "team-a", 0), team_a_bytes);
    assert_eq!(out.u64("list.used"), team_a_bytes, "the listed processes hold what the tenant is charged\n{out}");
    assert_eq!(out.u64("mem.used"), team_a_bytes, "used agrees with the processes listed\n{out}");
    assert_eq!(out.u64("mem.total"), GIB, "{out}");

    let mut uncapped = sim.py("nvml_view.py");
    uncapped.env("GPUSLICE_TENANT", "team-c");
    let out = sim.run(&mut uncapped);
    out.assert_success();
    let mut all = [a1.pid(), a2.pid(), b.pid()];
    all.sort_unstable();
    let all = all.map(|pid| pid.to_string()).join(",");
    for list in ["list", "v1", "v2", "v3", "util"] {
        assert_eq!(out.get(&format!("{list}.pids")), all, "{list}: every process\n{out}");
    }
    assert_eq!(out.u64("list.used"), team_a_bytes + 264 * MIB, "{out}");
    assert_eq!(out.u64("mem.total"), 4 * GIB, "{out}");

    for p in [&mut a1, &mut a2, &mut b] {
        p.send_line("go");
    }
    for p in [a1, a2, b] {
        p.wait().assert_success();
    }
}

/// Across PID namespaces: a tenant's process in a namespace of its own
/// (sharing the host's `/proc`, as `unshare --pid --fork` does) is listed
/// under its host pid, which its slot records beside its namespace pid;
/// a lister in a namespace of its own sees the same.
#[test]
fn the_tenants_processes_are_known_by_their_host_pids_across_pid_namespaces() {
    gpuslice_tests::require_pid_namespaces();
    let sim = sim();
    let namespaced = |tenant: &str, program: &std::process::Command| {
        let mut cmd = sim.command("unshare");
        cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_MEMORY_LIMIT", "1GiB");
        cmd.args(["--pid", "--fork", "--kill-child"]).arg(program.get_program()).args(program.get_args());
        cmd
    };
    let mut memctl = std::process::Command::new(gpuslice_tests::compile_c("memctl"));
    memctl.args(["init", "ctx", "alloc:x:100M", "pid", "hold"]);
    let mut a = sim.spawn(&mut namespaced("team-a", &memctl));
    a.wait_for("ready");
    assert_eq!(a.wait_for("pid"), "1", "memctl runs as pid 1 of its namespace");
    let slots = ledger_view::slots(&sim.ledger_dir(), "team-a");
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].ns_pid, 1, "{slots:?}");
    let host_pid = slots[0].pid;
    assert_ne!(host_pid, 1, "the slot records the host pid too");
    let mut b = holder(&sim, "team-b", "2GiB", "200M");

    let mut lister = std::process::Command::new(gpuslice_tests::python());
    lister.arg(gpuslice_tests::python_script("nvml_view.py"));
    let out = sim.run(&mut namespaced("team-a", &lister));
    out.assert_success();
    for list in ["list", "v1", "v2", "v3"] {
        assert_eq!(out.get(&format!("{list}.pids")), host_pid.to_string(), "{list}\n{out}");
    }
    assert_eq!(out.u64("mem.used"), 164 * MIB, "{out}");
    assert_eq!(out.u64("list.used"), 164 * MIB, "{out}");

    for p in [&mut a, &mut b] {
        p.send_line("go");
    }
    a.wait().assert_success();
    b.wait().assert_success();
}
