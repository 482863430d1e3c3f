//! One cap per tenant across its processes, under the shim on simgpu:
//! shared at the same time and one after another, independent between
//! tenants, never overshot by concurrent processes and threads, released on
//! exit, reclaimed after `kill -9`, and right across `fork` and bad frees.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Sim, MIB};
use std::time::{Duration, Instant};

const TENANT: &str = "team-a";

/// A 4 GiB simulated device whose contexts cost 64 MiB; the tenant's cap is 512 MiB.
fn tenant_sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("512MiB").tenant(TENANT)
}

fn used(sim: &Sim, tenant: &str) -> u64 {
    ledger_view::used_bytes(&sim.ledger_dir(), tenant, 0)
}

#[test]
fn processes_of_a_tenant_share_one_cap_at_the_same_time() {
    let sim = tenant_sim();
    let mut a = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:200M", "hold"]));
    a.wait_for("ready");
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "info", "alloc:over:free+1", "alloc:b:free", "alloc:one:1"]));
    let a = a.wait();
    a.assert_success().assert_rc("a", cu::SUCCESS);
    out.assert_success();
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("info.free"), (512 - 64 - 200 - 64) * MIB, "the other process's share counts\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("b", cu::SUCCESS);
    out.assert_rc("one", cu::OUT_OF_MEMORY);
}

#[test]
fn processes_of_a_tenant_share_one_cap_one_after_another() {
    let sim = tenant_sim();
    let first = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:a:300M", "alloc:over:300M", "exit:0"]));
    first.assert_rc("a", cu::SUCCESS).assert_rc("over", cu::OUT_OF_MEMORY);
    assert_eq!(used(&sim, TENANT), 0, "a normal exit releases everything\n{first}");
    let second = sim.run(sim.c("memctl").args(["init", "ctx", "info", "alloc:over:free+1", "alloc:b:free"]));
    second.assert_success();
    assert_eq!(second.u64("info.free"), 448 * MIB, "{second}");
    second.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
}

#[test]
fn tenants_never_affect_each_other() {
    let sim = tenant_sim();
    let mut a = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:free", "hold"]));
    a.wait_for("ready");
    let mut other = sim.c("memctl");
    other.env("GPUSLICE_TENANT", "team-b").args(["init", "ctx", "info", "alloc:over:free+1", "alloc:b:free", "hold"]);
    let mut b = sim.spawn(&mut other);
    b.wait_for("ready");
    let (used_a, used_b) = (used(&sim, TENANT), used(&sim, "team-b"));
    let b = b.wait();
    a.wait().assert_success().assert_rc("a", cu::SUCCESS);
    b.assert_success();
    assert_eq!(b.u64("info.free"), 448 * MIB, "a full tenant must not shrink another\n{b}");
    b.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
    assert_eq!((used_a, used_b), (512 * MIB, 512 * MIB));
}

/// 4 processes x 16 threads allocate and free at once through every path
/// (plain, managed, stream-ordered without a synchronisation after the
/// free, VMM mapped and unmapped): neither the ledger nor the device ever
/// holds more than the cap for the tenant (contexts included: they are part
/// of the cap), and the ledger ends at exactly zero.
#[test]
fn concurrent_processes_and_threads_never_pass_the_cap() {
    const CAP_BYTES: u64 = 256 * MIB;
    let sim = Sim::new().memory("4GiB").context_memory("16MiB").memory_limit("256MiB").tenant(TENANT).timeout(Duration::from_secs(120));
    // The device as the driver sees it, sampled by a process without the shim.
    let mut sampler_cmd = sim.c("shim_stress");
    sampler_cmd.env_remove("LD_PRELOAD").arg("sample");
    let mut sampler = sim.spawn(&mut sampler_cmd);
    sampler.wait_for("ready");
    let mut procs: Vec<_> = (0..4).map(|_| sim.spawn(sim.c("shim_stress").args(["16", "1000", "8M"]))).collect();
    for p in &mut procs {
        p.wait_for("ready");
    }
    let ledger = ledger_view::open(&sim.ledger_dir(), TENANT);
    for p in &mut procs {
        p.send_line("go");
    }
    // Sample the tenant's usage while the processes run.
    let mut max_used = 0;
    let mut samples = 0u64;
    let started = Instant::now();
    let mut finished = 0;
    while finished < procs.len() && started.elapsed() < Duration::from_secs(110) {
        for _ in 0..200 {
            max_used = max_used.max(ledger.used_bytes(0));
            samples += 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        finished = procs.iter_mut().map(|p| p.has_printed("finished")).filter(|done| *done).count();
    }
    sampler.send_line("stop");
    let device = sampler.wait();
    device.assert_success();
    let outs: Vec<_> = procs.into_iter().map(|p| p.wait()).collect();
    let (mut ok, mut oom) = (0, 0);
    for out in &outs {
        out.assert_success();
        assert_eq!(out.u64("errors"), 0, "no allocation or free may fail except with OUT_OF_MEMORY\n{out}");
        ok += out.u64("ok");
        oom += out.u64("oom");
    }
    let device_max = device.u64("max_used");
    eprintln!(
        "stress: ok={ok} oom={oom} ledger max_used={max_used} ({samples} samples); device max_used={device_max} ({} samples) in {:?}",
        device.u64("samples"),
        started.elapsed()
    );
    assert!(max_used <= CAP_BYTES, "usage reached {max_used} bytes, over the cap of {CAP_BYTES} ({samples} samples)");
    assert!(device.u64("samples") > 100, "the device was hardly sampled\n{device}");
    assert!(device_max <= CAP_BYTES, "the device held {device_max} bytes for the tenant, over its cap of {CAP_BYTES}\n{device}");
    assert!(oom > 0 && ok > 0, "the load must reach the cap to test it: ok={ok} oom={oom}");
    assert_eq!(ledger.used_bytes(0), 0, "usage must end at exactly zero");
    assert!(ledger.slots().is_empty(), "every process slot must be free: {:?}", ledger.slots());
}

#[test]
fn an_unknown_pointer_free_is_forwarded_to_the_driver() {
    let bare = Sim::new();
    let expected = bare.run(bare.c("memctl").args(["init", "ctx", "freeptr:0xdead0000"]));
    let sim = tenant_sim();
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "info:before", "freeptr:0xdead0000", "info:after"]));
    out.assert_success();
    assert_ne!(expected.i64("freeptr"), cu::SUCCESS, "{expected}");
    assert_eq!(out.i64("freeptr"), expected.i64("freeptr"), "the driver's own answer\n{out}\n{expected}");
    assert_eq!(out.u64("after.free"), out.u64("before.free"), "{out}");
}

#[test]
fn a_double_free_gets_the_driver_error_and_leaves_the_ledger_right() {
    let bare = Sim::new();
    let expected = bare.run(bare.c("memctl").args(["init", "ctx", "alloc:a:100M", "free:a", "free:a"]));
    let sim = tenant_sim();
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:a:100M",
        "free:a",
        "free:a",
        "info",
        "alloc:over:free+1",
        "alloc:b:free",
        "free:b",
        "hold",
    ]));
    p.wait_for("ready");
    let held = used(&sim, TENANT);
    let out = p.wait();
    out.assert_success();
    let frees = out.all("free.a");
    assert_eq!(frees[0], "0", "{out}");
    assert_eq!(frees[1], expected.all("free.a")[1], "the second free gets the driver's error\n{out}\n{expected}");
    assert_ne!(frees[1], "0", "{out}");
    assert_eq!(out.u64("info.free"), 448 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
    assert_eq!(held, 64 * MIB, "only the context is charged after the frees");
}

#[test]
fn a_normal_exit_releases_everything_the_process_held() {
    let sim = tenant_sim();
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx",
        "pctx",
        "alloc:a:100M",
        "managed:m:50M",
        "vmm:v:20M",
        "array:r:1024:1024",
        "async:s:8M",
        "pid",
        "exit:0",
    ]));
    for key in ["a", "m", "v", "r", "s"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(used(&sim, TENANT), 0, "{out}");
    let pid: u32 = out.get("pid").parse().expect("pid");
    assert!(ledger_view::slot_of(&sim.ledger_dir(), TENANT, pid).is_none(), "the slot must be free\n{out}");
}

#[test]
fn after_kill_dash_nine_the_next_allocation_reclaims_the_dead_share() {
    let sim = tenant_sim();
    let mut victim = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:400M", "pid", "hold"]));
    let pid: u32 = victim.wait_for("pid").parse().expect("pid");
    victim.wait_for("ready");
    let killed = victim.kill9();
    assert_eq!(killed.code(), None, "{killed}");
    // No monitor runs: the dead process's share stays until someone needs it.
    let dead = ledger_view::slot_of(&sim.ledger_dir(), TENANT, pid).expect("the dead process's slot");
    assert!(!dead.alive, "{dead:?}");
    assert_eq!(dead.total_bytes(), 464 * MIB, "{dead:?}");

    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:b:380M", "info", "hold"]));
    out.assert_success();
    out.assert_rc("ctx", cu::SUCCESS).assert_rc("b", cu::SUCCESS);
    assert_eq!(out.u64("info.free"), (512 - 64 - 380) * MIB, "{out}");
    assert!(ledger_view::slot_of(&sim.ledger_dir(), TENANT, pid).is_none(), "the dead slot must be reclaimed");
    assert_eq!(used(&sim, TENANT), 0, "{out}");
}

#[test]
fn a_forked_child_without_cuda_leaves_the_parent_alone() {
    let sim = tenant_sim();
    let mut p = sim.spawn(sim.c("shim_fork").arg("nocuda"));
    let parent_pid: u32 = p.wait_for("parent.pid").parse().expect("pid");
    p.wait_for("parent.ready");
    let slots = ledger_view::slots(&sim.ledger_dir(), TENANT);
    let held = used(&sim, TENANT);
    let out = p.wait();
    out.assert_success();
    assert_eq!(out.i64("child.exit"), 0, "{out}");
    assert_eq!(out.get("child.done"), "1", "{out}");
    assert_eq!(out.u64("parent.after.free"), out.u64("parent.before.free"), "{out}");
    out.assert_rc("parent.alloc", cu::SUCCESS).assert_rc("parent.free", cu::SUCCESS);
    out.assert_rc("parent.free_held", cu::SUCCESS);
    assert_eq!(held, 164 * MIB, "the child's exit must not release the parent's share\n{out}");
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].pid, parent_pid, "{slots:?}");
    assert!(slots[0].alive, "{slots:?}");
    assert_eq!(used(&sim, TENANT), 0, "{out}");
}

#[test]
fn a_forked_child_that_uses_cuda_is_its_own_process() {
    let sim = tenant_sim();
    let mut p = sim.spawn(sim.c("shim_fork").arg("cuda"));
    let parent_pid: u32 = p.wait_for("parent.pid").parse().expect("pid");
    let child_pid: u32 = p.wait_for("child.pid").parse().expect("pid");
    p.wait_for("child.ready");
    let with_child = ledger_view::slots(&sim.ledger_dir(), TENANT);
    let used_with_child = used(&sim, TENANT);
    p.send_line("child, exit");
    p.wait_for("parent.ready");
    let after_child = ledger_view::slots(&sim.ledger_dir(), TENANT);
    let used_after_child = used(&sim, TENANT);
    let out = p.wait();
    out.assert_success();
    for key in ["child.init", "child.ctx", "child.alloc", "parent.alloc", "parent.free", "parent.free_held"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(out.u64("child.info.free"), (512 - 164 - 114) * MIB, "{out}");
    let bytes_of = |slots: &[ledger::SlotView], pid: u32| slots.iter().find(|s| s.pid == pid).map(|s| s.total_bytes());
    assert_eq!(bytes_of(&with_child, parent_pid), Some(164 * MIB), "{with_child:?}");
    assert_eq!(bytes_of(&with_child, child_pid), Some(114 * MIB), "{with_child:?}");
    assert_eq!(used_with_child, 278 * MIB);
    assert_eq!(bytes_of(&after_child, child_pid), None, "{after_child:?}");
    assert_eq!(bytes_of(&after_child, parent_pid), Some(164 * MIB), "{after_child:?}");
    assert_eq!(used_after_child, 164 * MIB);
    assert_eq!(out.u64("parent.after.free"), out.u64("parent.before.free"), "{out}");
}

/// Processes of one tenant that start together with different caps agree
/// on one: the tenant's cap is decided once per device, atomically, and
/// none of them replaces it while the others are starting.
#[test]
fn processes_starting_together_with_different_caps_all_see_one_cap() {
    const PROCESSES: u64 = 12;
    for round in 0..3 {
        let sim = Sim::new().memory("4GiB").context_memory("64MiB").devices(2).shim().tenant(TENANT);
        let mut running: Vec<_> = (1..=PROCESSES)
            .map(|i| {
                let mut cmd = sim.c("memctl");
                cmd.env("GPUSLICE_MEMORY_LIMIT", format!("{}MiB", 64 * i)).env("GPUSLICE_LOG", "info").args([
                    "ready",
                    "wait",
                    "init",
                    "hold",
                    "totalmem:0",
                    "totalmem:1",
                ]);
                sim.spawn(&mut cmd)
            })
            .collect();
        // All loaded: let them initialise at once.
        for p in &mut running {
            p.wait_for("ready");
        }
        for p in &mut running {
            p.send_line("go");
        }
        for p in &mut running {
            p.wait_for("init");
        }
        let outputs: Vec<_> = running.into_iter().map(|p| p.wait()).collect();
        let seen: Vec<Vec<u64>> =
            outputs.iter().map(|out| out.assert_success().all("totalmem.bytes").iter().map(|v| v.parse().unwrap()).collect()).collect();
        let replaced: Vec<&str> = outputs.iter().flat_map(|out| out.stderr.lines()).filter(|line| line.contains("cap changed")).collect();
        assert!(replaced.is_empty(), "round {round}: a process replaced the cap of others starting with it: {replaced:?}");
        let first = seen[0][0];
        // The first decision stands: the cap is one process's own, and every
        // other process was told, for each device, that the tenant's cap is
        // that one and its own request is ignored.
        let requested = |i: usize| 64 * (i as u64 + 1) * MIB;
        let decider = (0..outputs.len()).find(|&i| requested(i) == first);
        assert!(decider.is_some(), "round {round}: {first} is nobody's cap");
        for (i, out) in outputs.iter().enumerate() {
            for device in 0..2 {
                let kept = format!(
                    "device {device}: the tenant's cap is {first} bytes (set by the tenant's running processes); \
                     GPUSLICE_MEMORY_LIMIT asks for {} bytes and is ignored",
                    requested(i)
                );
                let told = out.stderr.contains(&kept);
                assert_eq!(told, Some(i) != decider, "round {round}, process {i}, device {device}: {kept:?}\n{out}");
            }
        }
        for (i, caps) in seen.iter().enumerate() {
            assert_eq!(caps, &vec![first, first], "round {round}: process {i} sees other caps than process 0: {seen:?}");
        }
        let ledger = ledger_view::open(&sim.ledger_dir(), TENANT);
        assert_eq!((ledger.memory_limit_bytes(0), ledger.memory_limit_bytes(1)), (first, first), "round {round}");
    }
}

/// Two tenants, three processes each, all started at once through
/// `gpuslice run --sim`, each process making a context and two allocations
/// that together ask for more than its tenant's cap. The arithmetic leaves
/// one outcome per tenant (any refusal needs four allocations already in,
/// and a fifth never fits): exactly four allocations succeed in each, so
/// each ledger holds exactly its contexts and four allocations, sampled
/// usage never passes a cap, each process sees its own tenant's cap, and
/// both ledgers end at zero with every slot free.
#[test]
fn two_tenants_with_several_processes_each_started_together_stay_apart() {
    // (tenant, cap, allocation size): 3 x 16 MiB contexts + 6 allocations each.
    let tenants = [("alpha", 512 * MIB, "100M", 100 * MIB), ("beta", 1024 * MIB, "200M", 200 * MIB)];
    let sim = Sim::new().memory("4GiB").context_memory("16MiB");
    let memctl = gpuslice_tests::compile_c("memctl");
    let dir = sim.ledger_dir();
    let mut procs = Vec::new();
    for (tenant, cap, size, _) in tenants {
        for _ in 0..3 {
            let mut cmd = sim.gpuslice();
            cmd.args(["run", "--sim", "--memory", &format!("{cap}B"), "--tenant", tenant, "--dir"]).arg(&dir).arg("--");
            cmd.arg(&memctl).args([
                "mark:loaded".to_string(),
                "wait".into(),
                "init".into(),
                "ctx".into(),
                format!("alloc:a:{size}"),
                format!("alloc:b:{size}"),
                "info".into(),
                "hold".into(),
            ]);
            procs.push((tenant, sim.spawn(&mut cmd)));
        }
    }
    for (_, p) in &mut procs {
        p.wait_for("loaded");
    }
    for (_, p) in &mut procs {
        p.send_line("go");
    }
    // Sample both ledgers while the processes allocate.
    let mut max_used = [0u64; 2];
    let started = Instant::now();
    while !procs.iter_mut().all(|(_, p)| p.has_printed("ready")) && started.elapsed() < Duration::from_secs(60) {
        for (i, (tenant, ..)) in tenants.iter().enumerate() {
            if let Ok(ledger) = ledger::Ledger::open(&ledger::tenant_path(&dir, tenant)) {
                max_used[i] = max_used[i].max(ledger.used_bytes(0));
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for (_, p) in &mut procs {
        p.wait_for("ready");
    }
    let held: Vec<(u64, u64)> = tenants
        .iter()
        .map(|(tenant, ..)| {
            let ledger = ledger_view::open(&dir, tenant);
            (ledger.used_bytes(0), ledger.slots().iter().map(|s| s.total_bytes()).sum())
        })
        .collect();
    let outs: Vec<(&str, _)> = procs.into_iter().map(|(tenant, p)| (tenant, p.wait())).collect();
    for (i, (tenant, cap, _, size_bytes)) in tenants.iter().enumerate() {
        let mine: Vec<_> = outs.iter().filter(|(t, _)| t == tenant).map(|(_, out)| out).collect();
        let mut admitted = 0;
        for out in &mine {
            out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("ctx", cu::SUCCESS);
            assert_eq!(out.u64("info.total"), *cap, "{tenant}: each process sees its own tenant's cap\n{out}");
            for key in ["a", "b"] {
                match out.i64(key) {
                    cu::SUCCESS => admitted += 1,
                    cu::OUT_OF_MEMORY => {}
                    other => panic!("{tenant}: allocation {key} returned {other}\n{out}"),
                }
            }
        }
        assert_eq!(admitted, 4, "{tenant}: exactly four allocations fit under its cap: {mine:?}");
        let expected = 3 * 16 * MIB + 4 * size_bytes;
        assert_eq!(held[i], (expected, expected), "{tenant}: usage and its slots' bytes, exactly");
        assert!(max_used[i] <= *cap, "{tenant}: usage reached {} bytes, over its cap of {cap}", max_used[i]);
        let ledger = ledger_view::open(&dir, tenant);
        assert_eq!(ledger.used_bytes(0), 0, "{tenant}: usage must end at exactly zero");
        assert!(ledger.slots().is_empty(), "{tenant}: every slot must be free: {:?}", ledger.slots());
        assert_eq!(ledger.memory_limit_bytes(0), *cap, "{tenant}");
    }
}
