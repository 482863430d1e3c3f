//! NVIDIA's own clients under the shim on simgpu: `cuda-bindings` reaches
//! the driver only through `cuGetProcAddress_v2`, `nvidia-ml-py` only through
//! `dlsym` on `libnvidia-ml.so.1`; both must see the tenant's cap. A C
//! program checks the same through each interception route.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Sim, GIB, MIB};

const TENANT: &str = "clients";

#[test]
fn cuda_bindings_sees_the_cap_through_cu_get_proc_address() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("512MiB").tenant(TENANT);
    let out = sim.run(sim.py("sim_driver.py").arg("20000"));
    out.assert_success();
    assert_eq!(out.u64("total_mem"), 512 * MIB, "{out}");
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("info.free"), 448 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("all", cu::SUCCESS);
    out.assert_rc("one", cu::OUT_OF_MEMORY);
    out.assert_rc("free_all", cu::SUCCESS);
    assert_eq!(out.u64("info_after.free"), 448 * MIB, "{out}");
    out.assert_rc("launch", cu::SUCCESS).assert_rc("sync", cu::SUCCESS);
    assert_eq!(out.get("copy_ok"), "1", "{out}");
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0);
}

#[test]
fn nvidia_ml_py_sees_the_tenant_view() {
    let sim = Sim::new().memory("8GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let mut holder = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    holder.wait_for("ready");
    let out = sim.run(sim.py("sim_nvml.py").arg("memory"));
    let mut other = sim.py("sim_nvml.py");
    other.env("GPUSLICE_TENANT", "idle").env("GPUSLICE_MEMORY_LIMIT", "2GiB").arg("memory");
    let idle = sim.run(&mut other);
    holder.wait().assert_success();
    out.assert_success();
    assert_eq!(out.u64("mem.total"), GIB, "{out}");
    assert_eq!(out.u64("mem.used"), 164 * MIB, "the tenant's usage, context included\n{out}");
    assert_eq!(out.u64("mem.free"), GIB - 164 * MIB, "{out}");
    assert_eq!(out.u64("mem2.total"), GIB, "{out}");
    assert_eq!(out.u64("mem2.free"), GIB - 164 * MIB, "{out}");
    idle.assert_success();
    assert_eq!(idle.u64("mem.total"), 2 * GIB, "{idle}");
    assert_eq!(idle.u64("mem.used"), 0, "another tenant's usage is not this tenant's\n{idle}");
}

#[test]
fn every_interception_route_enforces_the_cap() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("512MiB").tenant(TENANT);
    let out = sim.run(&mut sim.c("shim_routes"));
    out.assert_success();
    let routes = out.all("route");
    let expected = ["direct", "dlsym", "procaddr", "procaddr_3020", "procaddr_ptsz", "procaddr_self", "procaddr_v1"];
    assert_eq!(routes, expected, "{out}");
    // The per-thread route hands out the shim's hooks of the _ptsz variants.
    for (function, symbol) in [("alloc", "cuMemAllocAsync_ptsz"), ("free", "cuMemFreeAsync_ptsz")] {
        assert_eq!(out.get(&format!("procaddr_ptsz.{function}.lib")), "libgpuslice.so", "{out}");
        assert_eq!(out.get(&format!("procaddr_ptsz.{function}.symbol")), symbol, "{out}");
    }
    for route in routes {
        assert_eq!(out.u64(&format!("{route}.total")), 512 * MIB, "{route}: the view shows the cap\n{out}");
        out.assert_rc(&format!("{route}.over"), cu::OUT_OF_MEMORY);
        out.assert_rc(&format!("{route}.fit"), cu::SUCCESS);
        out.assert_rc(&format!("{route}.free"), cu::SUCCESS);
    }
    for variant in ["ctxv3", "ctxv4"] {
        out.assert_rc(variant, cu::SUCCESS);
        assert_eq!(out.u64(&format!("{variant}.charged")), 64 * MIB, "{variant} through cuGetProcAddress is charged\n{out}");
    }
}
