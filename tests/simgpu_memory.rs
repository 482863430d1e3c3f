//! simgpu's memory model seen by real processes: capacity is enforced
//! exactly across processes (contexts included), memory comes back when a
//! process exits or is killed, NVML agrees with the driver view, and every
//! kind of allocation (VMM, pools, arrays) is charged and released.

use gpuslice_tests::{cu, Sim, GIB, MIB};

#[test]
fn capacity_is_reached_exactly_with_context_memory_counted() {
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx",
        "info:before",
        "alloc:over:free+1",
        "alloc:all:free",
        "info:full",
        "alloc:one:1",
        "free:all",
        "info:after",
        "alloc:again:free",
    ]));
    out.assert_success();
    assert_eq!(out.u64("before.total"), GIB, "{out}");
    assert_eq!(out.u64("before.free"), GIB - 256 * MIB, "the context costs SIMGPU_CONTEXT_MEMORY\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("all", cu::SUCCESS);
    assert_eq!(out.u64("full.free"), 0, "{out}");
    out.assert_rc("one", cu::OUT_OF_MEMORY);
    out.assert_rc("free.all", cu::SUCCESS);
    assert_eq!(out.u64("after.free"), GIB - 256 * MIB, "{out}");
    out.assert_rc("again", cu::SUCCESS);
}

#[test]
fn capacity_is_shared_by_processes() {
    let sim = Sim::new().memory("2GiB").context_memory("256MiB");
    let mut holder = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:512M", "hold"]));
    holder.wait_for("ready");
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "info:seen", "alloc:over:free+1", "alloc:rest:free", "alloc:one:1"]));
    out.assert_success();
    // The holder's context and allocation, and this process's own context.
    assert_eq!(out.u64("seen.free"), 2 * GIB - 256 * MIB - 512 * MIB - 256 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("rest", cu::SUCCESS);
    out.assert_rc("one", cu::OUT_OF_MEMORY);

    // A normal exit gives everything back.
    let held = holder.wait();
    held.assert_success();
    held.assert_rc("a", cu::SUCCESS);
    let after = sim.run(sim.c("memctl").args(["init", "ctx", "info:after"]));
    after.assert_success();
    assert_eq!(after.u64("after.free"), 2 * GIB - 256 * MIB, "{after}");
}

#[test]
fn kill_dash_nine_frees_the_memory_of_the_killed_process() {
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let mut victim = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:512M", "hold"]));
    victim.wait_for("ready");
    let blocked = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:b:512M"]));
    blocked.assert_success().assert_rc("b", cu::OUT_OF_MEMORY);

    let killed = victim.kill9();
    assert_eq!(killed.code(), None, "the victim must have died by the signal\n{killed}");
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:b:512M", "info"]));
    out.assert_success().assert_rc("b", cu::SUCCESS);
    assert_eq!(out.u64("info.free"), GIB - 256 * MIB - 512 * MIB, "{out}");
}

#[test]
fn a_destroyed_context_returns_its_memory() {
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let out = sim.run(sim.c("memctl").args(["init", "pctx", "info:one", "ctx", "info:two", "destroyctx", "info:three"]));
    out.assert_success();
    out.assert_rc("destroyctx", cu::SUCCESS);
    assert_eq!(out.u64("one.free") - out.u64("two.free"), 256 * MIB, "{out}");
    assert_eq!(out.u64("three.free"), out.u64("one.free"), "{out}");
}

#[test]
fn nvml_reports_the_driver_view_and_per_process_memory() {
    let sim = Sim::new().memory("4GiB").context_memory("256MiB");
    let mut other = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "pid", "hold"]));
    let other_pid = other.wait_for("pid");
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:x:64M", "info", "nvml", "nvml2", "procs"]));
    drop(other);
    out.assert_success();
    let total = out.u64("info.total");
    let free = out.u64("info.free");
    assert_eq!(total, 4 * GIB, "{out}");
    out.assert_rc("nvml", 0);
    assert_eq!(out.u64("nvml.total"), total, "{out}");
    assert_eq!(out.u64("nvml.used"), total - free, "NVML used == total - driver free\n{out}");
    assert_eq!(out.u64("nvml.free"), free, "{out}");
    out.assert_rc("nvml2", 0);
    assert_eq!(out.u64("nvml2.total"), total, "{out}");
    assert_eq!(out.u64("nvml2.free"), free, "{out}");
    assert_eq!(out.u64("nvml2.used") + out.u64("nvml2.reserved"), total - free, "{out}");
    out.assert_rc("procs", 0);
    assert_eq!(out.u64("procs.count"), 2, "{out}");
    assert_eq!(out.u64("procs.self"), 64 * MIB + 256 * MIB, "allocations plus context\n{out}");
    assert_eq!(out.u64(&format!("procs.pid.{other_pid}")), 100 * MIB + 256 * MIB, "{out}");
}

#[test]
fn vmm_pools_and_arrays_are_charged_and_released() {
    let sim = Sim::new().memory("2GiB");
    let out = sim.run(sim.c("sim_features").arg("1000"));
    out.assert_success();
    for flag in ["copy.memset_ok", "copy.memset32_ok", "copy.roundtrip_ok", "copy.async_ok", "copy.range_ok", "vmm.copy_ok"] {
        assert_eq!(out.get(flag), "1", "{flag}\n{out}");
    }
    assert_eq!(out.u64("vmm.charged"), out.u64("vmm.size"), "{out}");
    assert_eq!(out.u64("vmm.released"), out.u64("vmm.size"), "{out}");
    assert!(out.u64("pool.default_charged") >= 8 * MIB, "{out}");
    assert_eq!(out.u64("pool.default_after_trim"), 0, "{out}");
    assert!(out.u64("pool.own_charged") >= 8 * MIB, "{out}");
    assert_eq!(out.u64("pool.own_after_destroy"), 0, "{out}");
    assert!(out.u64("array.charged") >= out.u64("array.bytes"), "{out}");
    assert_eq!(out.u64("array.after_destroy"), 0, "{out}");
    assert!(out.u64("array3d.charged") >= out.u64("array3d.bytes"), "{out}");
    assert_eq!(out.u64("array3d.after_destroy"), 0, "{out}");
    assert!(out.u64("mipmap.charged") >= out.u64("mipmap.level0_bytes"), "{out}");
    assert_eq!(out.u64("mipmap.after_destroy"), 0, "{out}");
}

#[test]
fn every_allocation_kind_hits_the_capacity() {
    // 256 MiB device, 64 MiB context: 192 MiB left for each kind in turn.
    let sim = Sim::new().memory("256MiB").context_memory("64MiB");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx",
        "managed:m:free+1",
        "managed:m:free",
        "free:m",
        "async:a:free+1",
        "pool:p:free+1",
        "vmm:v:256M",
        "vmm:v2:128M",
        "info:vmm",
        "free:v2",
        "array:arr:16384:16384",
        "pitch:pt:65536:4096",
        "info:end",
    ]));
    out.assert_success();
    out.assert_rc("m", cu::SUCCESS);
    assert_eq!(out.all("m")[0], cu::OUT_OF_MEMORY.to_string(), "managed over capacity\n{out}");
    out.assert_rc("a", cu::OUT_OF_MEMORY);
    out.assert_rc("p", cu::OUT_OF_MEMORY);
    out.assert_rc("v", cu::OUT_OF_MEMORY);
    out.assert_rc("v2", cu::SUCCESS);
    assert_eq!(out.u64("vmm.free"), 64 * MIB, "{out}");
    out.assert_rc("arr", cu::OUT_OF_MEMORY);
    out.assert_rc("pt", cu::OUT_OF_MEMORY);
    assert_eq!(out.u64("end.free"), 192 * MIB, "{out}");
}

#[test]
fn each_device_has_its_own_capacity() {
    let sim = Sim::new().devices(2).memory("1GiB").context_memory("256MiB");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx:1",
        "alloc:one:free",
        "info:one",
        "pctx:0",
        "info:zero",
        "alloc:zero:free",
        "totalmem:1",
    ]));
    out.assert_success();
    out.assert_rc("one", cu::SUCCESS).assert_rc("zero", cu::SUCCESS);
    assert_eq!(out.u64("one.free"), 0, "{out}");
    assert_eq!(out.u64("zero.free"), GIB - 256 * MIB, "device 0 is untouched by device 1\n{out}");
    assert_eq!(out.u64("totalmem.bytes"), GIB, "{out}");
}

#[test]
fn gpuslice_sim_runs_a_command_on_the_simulated_gpu() {
    let sim = Sim::new().memory("2GiB").context_memory("256MiB");
    let memctl = gpuslice_tests::compile_c("memctl");
    // Not configured by the harness: `gpuslice sim` alone must make the
    // program's libcuda.so.1 and libnvidia-ml.so.1 resolve to simgpu.
    let mut cmd = std::process::Command::new(gpuslice_tests::gpuslice_bin());
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env("SIMGPU_STATE", sim.state_file())
        .env("SIMGPU_MEMORY", "2GiB")
        .env("SIMGPU_CONTEXT_MEMORY", "256MiB")
        .args(["sim", "--"])
        .arg(memctl)
        .args(["init", "ctx", "info", "nvml"]);
    let out = sim.spawn(&mut cmd).wait();
    out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("nvml", 0);
    assert_eq!(out.u64("info.total"), 2 * GIB, "SIMGPU_* settings are honoured\n{out}");
    assert_eq!(out.u64("nvml.used"), 256 * MIB, "{out}");
}
