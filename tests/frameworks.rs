//! The CUDA runtime and the frameworks built on it, on simgpu, bare and
//! under a 1 GiB cap: NVIDIA's libcudart 13.5 driven as nvcc-built host code
//! drives it (a registered fatbin, its kernel and its variable), CuPy, numba-cuda,
//! cuda.core, and NVRTC's output through every driver loader (module,
//! fatbin, library, linker). Each runs in a real process and prints what it
//! saw.
//!
//! Both set-ups give the process 1 GiB with a 64 MiB context, so 960 MiB
//! are free: bare, a simulated 1 GiB device; capped, a 4 GiB device with
//! `GPUSLICE_MEMORY_LIMIT=1GiB`. Allocating 64 MiB blocks fits exactly 15,
//! and the 16th is refused (CuPy: `OutOfMemoryError`), after which the
//! process frees and goes on. Kernels are compiled on the CPU (NVRTC,
//! NVVM, nvJitLink from the pip wheels), loaded by simgpu from the real
//! cubin or PTX, and run as simulated work: they compute nothing.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, repo_root, Output, Sim, GIB, MIB};

const TENANT: &str = "frameworks";
const CONTEXT_MIB: u64 = 64;
const CHUNK_MIB: u64 = 64;
/// 64 MiB blocks that fit beside the context in 1 GiB.
const CHUNKS: u64 = (1024 - CONTEXT_MIB) / CHUNK_MIB;

fn bare() -> Sim {
    Sim::new().memory("1GiB").context_memory("64MiB")
}

fn capped() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT)
}

/// After the process: nothing stays charged to the tenant.
fn assert_nothing_charged(sim: &Sim) {
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "the tenant's usage after exit");
}

fn libcudart() -> String {
    let path = repo_root().join(".deps/lib/libcudart.so.13");
    assert!(path.is_file(), "{} is missing: run `bash scripts/setup.sh`", path.display());
    path.display().to_string()
}

fn check_cudart(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("register.handle"), "1", "{out}");
    for key in [
        "get_device_count",
        "mem_get_info",
        "malloc_after",
        "stream_create",
        "event_create",
        "launch",
        "stream_sync",
        "elapsed",
        "device_sync",
    ] {
        out.assert_rc(key, 0);
    }
    assert_eq!(out.u64("device_count"), 1, "{out}");
    assert_eq!(out.u64("info.total"), GIB, "total is the cap (or the device)\n{out}");
    assert_eq!(out.u64("info.free"), GIB - CONTEXT_MIB * MIB, "{out}");
    // cudaErrorMemoryAllocation
    out.assert_rc("malloc_over", 2);
    assert_eq!(out.u64("malloc.chunks"), CHUNKS, "{out}");
    assert!(out.f64("elapsed_ms") >= 0.0, "{out}");
    // A registered __device__ variable: cudaMemcpyToSymbol and back.
    for key in ["to_symbol", "from_symbol", "symbol_size"] {
        out.assert_rc(key, 0);
    }
    assert_eq!(out.get("symbol.round_trip"), "1", "{out}");
    assert_eq!(out.u64("symbol.bytes"), 16, "{out}");
    // A host pointer the runtime never registered is refused, not launched.
    assert_ne!(out.i64("launch_unregistered"), 0, "{out}");
    // cudaDeviceReset destroys the primary context; the runtime then makes
    // a new one and its registered kernel still launches.
    for key in ["reset", "malloc_after_reset", "mem_get_info_after_reset", "launch_after_reset", "sync_after_reset"] {
        out.assert_rc(key, 0);
    }
    assert_eq!(out.u64("info_after_reset.free"), GIB - (CONTEXT_MIB + CHUNK_MIB) * MIB, "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn cuda_runtime_registers_and_launches_a_fatbin_kernel() {
    let sim = bare();
    check_cudart(&sim.run(sim.py("fw_cudart.py").args([libcudart(), CHUNK_MIB.to_string()])));
}

#[test]
fn cuda_runtime_under_a_cap() {
    let sim = capped();
    check_cudart(&sim.run(sim.py("fw_cudart.py").args([libcudart(), CHUNK_MIB.to_string()])));
    assert_nothing_charged(&sim);
}

fn check_cupy(out: &Output) {
    out.assert_success();
    assert_eq!(out.u64("device_count"), 1, "{out}");
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    assert_eq!(out.u64("info.free"), GIB - CONTEXT_MIB * MIB, "{out}");
    for pool in ["pool", "async"] {
        assert_eq!(out.get(&format!("{pool}.oom")), "OutOfMemoryError", "{pool}: CuPy's own error at the cap\n{out}");
        assert_eq!(out.u64(&format!("{pool}.chunks")), CHUNKS, "{pool}\n{out}");
        assert_eq!(out.get(&format!("{pool}.after_oom")), "ok", "{pool}: the process goes on\n{out}");
    }
    assert_eq!(out.u64("pool.after_free.used"), 0, "{out}");
    assert_eq!(out.get("stream.done"), "1", "{out}");
    assert!(out.f64("events.elapsed_ms") >= 0.0, "{out}");
    assert_eq!(out.get("sync"), "ok", "{out}");
    assert_eq!(out.get("kernel"), "ok", "an NVRTC-compiled kernel launches\n{out}");
    assert_eq!(out.get("cub"), "ok", "prebuilt CUB and Thrust kernels (compressed fatbins) launch\n{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn cupy_allocates_to_the_device_size_and_launches() {
    let sim = bare();
    check_cupy(&sim.run(sim.py("fw_cupy.py").arg(CHUNK_MIB.to_string())));
}

#[test]
fn cupy_sees_the_cap_and_recovers_from_out_of_memory() {
    let sim = capped();
    check_cupy(&sim.run(sim.py("fw_cupy.py").arg(CHUNK_MIB.to_string())));
    assert_nothing_charged(&sim);
}

fn check_numba(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("available"), "1", "{out}");
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    assert_eq!(out.u64("info.free"), GIB - CONTEXT_MIB * MIB, "{out}");
    assert_eq!(out.get("launch"), "ok", "{out}");
    assert_eq!(out.get("sync"), "ok", "{out}");
    assert_eq!(out.u64("kernels"), 1, "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn numba_cuda_jit_kernel_launches() {
    let sim = bare();
    check_numba(&sim.run(&mut sim.py("fw_numba.py")));
}

#[test]
fn numba_cuda_jit_kernel_launches_under_a_cap() {
    let sim = capped();
    check_numba(&sim.run(&mut sim.py("fw_numba.py")));
    assert_nothing_charged(&sim);
}

fn check_cuda_core(out: &Output) {
    out.assert_success();
    assert_eq!(out.u64("arch"), 90, "{out}");
    assert_eq!(out.get("cubin.launch"), "ok", "{out}");
    assert_eq!(out.get("ptx.launch"), "ok", "{out}");
    assert_eq!(out.get("missing"), "CUDA_ERROR_NOT_FOUND", "a name the image lacks is not a kernel\n{out}");
    assert_eq!(out.get("sync"), "ok", "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn cuda_core_program_compiles_and_launches() {
    let sim = bare();
    check_cuda_core(&sim.run(&mut sim.py("fw_cuda_core.py")));
}

#[test]
fn cuda_core_program_launches_under_a_cap() {
    let sim = capped();
    check_cuda_core(&sim.run(&mut sim.py("fw_cuda_core.py")));
    assert_nothing_charged(&sim);
}

fn check_images(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("cubin.elf"), "1", "NVRTC wrote an ELF cubin\n{out}");
    let success = [
        "init",
        "retain",
        "set_current",
        "ptx.load",
        "ptx.first",
        "ptx.second",
        "ptx.launch",
        "ptx.unload",
        "cubin.load",
        "cubin.first",
        "cubin.second",
        "cubin.launch",
        "cubin.unload",
        "load_ex",
        "load_ex.first",
        "fatbin.load",
        "fatbin.second",
        "fatbin.launch",
        "library.load",
        "library.count_rc",
        "library.kernel",
        "library.function",
        "library.launch",
        "library.launch_kernel_handle",
        "link.create",
        "link.add_ptx",
        "link.complete",
        "link.load",
        "link.first",
        "link.launch",
        "link.destroy",
        "sync",
    ];
    for key in success {
        out.assert_rc(key, cu::SUCCESS);
    }
    for key in ["ptx.missing", "cubin.missing", "library.missing", "link.missing"] {
        out.assert_rc(key, cu::NOT_FOUND);
    }
    assert_eq!(out.u64("library.count"), 2, "{out}");
    // Device variables, from each loader: their declared sizes, and memory
    // a copy round-trips through.
    for loader in ["ptx", "cubin", "library", "link"] {
        for key in ["counter", "table", "write", "read"] {
            out.assert_rc(&format!("{loader}.globals.{key}"), cu::SUCCESS);
        }
        assert_eq!(out.u64(&format!("{loader}.globals.counter.bytes")), 4, "{loader}: int fw_counter\n{out}");
        assert_eq!(out.u64(&format!("{loader}.globals.table.bytes")), 64, "{loader}: float fw_table[16]\n{out}");
        out.assert_rc(&format!("{loader}.globals.missing_variable"), cu::NOT_FOUND);
        assert_eq!(out.get(&format!("{loader}.globals.round_trip")), "1", "{loader}\n{out}");
    }
    // CUDA_ERROR_INVALID_IMAGE
    out.assert_rc("garbage.load", 200);
    // The runtime interface table: its size, fatbins loaded through it, the
    // primary context's handle, and the answers for what simgpu does not know.
    for key in ["table.get", "table.module", "table.module.first", "table.module_ext", "table.module_ext.second", "table.primary"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(out.u64("table.size"), 13 * 8, "{out}");
    assert_eq!(
        out.get("table.primary_is_retained"),
        "1",
        "the handle cuDevicePrimaryCtxRetain gave
{out}"
    );
    out.assert_rc("table.unknown_slot", cu::NOT_SUPPORTED);
    out.assert_rc("table.unknown_guid", cu::INVALID_VALUE);
    assert_eq!(out.get("table.unknown_guid.null"), "1", "{out}");
    for key in ["tools.get", "tools.context_id", "ctx_id"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(out.get("tools.context_id.same"), "1", "the tools context table's id is cuCtxGetId's\n{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn driver_loads_compiler_output_through_every_loader() {
    let sim = bare();
    check_images(&sim.run(&mut sim.py("fw_images.py")));
}

#[test]
fn driver_loaders_under_a_cap() {
    let sim = capped();
    check_images(&sim.run(&mut sim.py("fw_images.py")));
    assert_nothing_charged(&sim);
}

/// Two processes of one tenant, one through CuPy and one through
/// numba-cuda, share one cap exactly: what CuPy holds is not numba's to
/// take, numba's own library raises at the cap, and the ledger counts both
/// processes' contexts and blocks to the byte.
#[test]
fn cupy_and_numba_processes_of_one_tenant_share_one_cap() {
    let sim = capped();
    let mut cupy_cmd = sim.py("fw_share_cupy.py");
    cupy_cmd.arg("512");
    let mut cupy = sim.spawn(&mut cupy_cmd);
    cupy.wait_for("ready");
    // 1 GiB - (64 MiB context + 512 MiB) - the numba process's 64 MiB context = 384 MiB left.
    let mut numba_cmd = sim.py("fw_share_numba.py");
    numba_cmd.args(["400", "320"]);
    let mut numba = sim.spawn(&mut numba_cmd);
    numba.wait_for("ready");
    let used = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let (numba, cupy) = (numba.wait(), cupy.wait());
    numba.assert_success();
    cupy.assert_success();
    assert_eq!(cupy.u64("held_mib"), 512, "{cupy}");
    assert_eq!(numba.u64("info.free_mib"), 384, "numba sees what the cap leaves it\n{numba}");
    assert_eq!(numba.u64("refused"), 1, "400 MiB past the shared cap was allocated\n{numba}");
    assert_eq!(numba.u64("held_mib"), 320, "{numba}");
    assert_eq!(used, (2 * CONTEXT_MIB + 512 + 320) * MIB, "the tenant's usage with both processes holding");
    assert_nothing_charged(&sim);
}
