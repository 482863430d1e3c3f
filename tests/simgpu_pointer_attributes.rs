//! Pointer attributes on simgpu as NVIDIA's CUDA runtime and PyTorch read
//! them, bare and under a cap. cuda.h gives each attribute's type in words
//! ("a boolean", "an integer"); callers read booleans into a 32-bit
//! integer they often have not zeroed (the runtime's
//! `cudaPointerGetAttributes` does, and so does XLA), so an attribute
//! written narrower than that leaves garbage the caller believes. The
//! runtime then called pinned memory managed, and PyTorch's `is_pinned()`
//! said false.
//!
//! `tests/python/sim_pointer_attributes.py` reads every attribute of every
//! kind of memory through the driver entry points the runtime hands out,
//! each into a slot filled with 0xAB, and prints how many bytes the driver
//! wrote. PyTorch lives in `.deps/torch-venv` (`scripts/setup.sh`); without
//! it the PyTorch tests fail, saying so.

use gpuslice_tests::{repo_root, Output, Sim};
use std::path::PathBuf;

/// Each `CUpointer_attribute` and the width it is written at, as NVIDIA's
/// Python bindings read it (`cuda/bindings/_lib/utils.pxi`: booleans into
/// a C `int`, the memory type and access flags into an `unsigned int`,
/// ordinals into an `int`, sizes into `size_t`, the rest 64-bit).
const WIDTHS: &[(&str, usize)] = &[
    ("context", 8),
    ("memory_type", 4),
    ("device_pointer", 8),
    ("host_pointer", 8),
    ("sync_memops", 4),
    ("buffer_id", 8),
    ("is_managed", 4),
    ("device_ordinal", 4),
    ("is_legacy_cuda_ipc_capable", 4),
    ("range_start_addr", 8),
    ("range_size", 8),
    ("mapped", 4),
    ("allowed_handle_types", 8),
    ("is_gpu_direct_rdma_capable", 4),
    ("access_flags", 4),
    ("mempool_handle", 8),
    ("mapping_size", 8),
    ("mapping_base_addr", 8),
    ("memory_block_id", 8),
    ("is_hw_decompress_capable", 4),
    ("locality_domain_ordinal", 4),
];

/// The kinds of memory the script allocates, with the `cudaMemoryType` the
/// runtime must report (1 host, 2 device, 3 managed, 0 unregistered) and
/// whether the memory has a host address.
const KINDS: &[(&str, i64, bool)] = &[
    ("device", 2, false),
    ("pinned", 1, true),
    ("host_alloc", 1, true),
    ("registered", 1, true),
    ("managed", 3, true),
    ("async", 2, false),
];

fn libcudart() -> String {
    let path = repo_root().join(".deps/lib/libcudart.so.13");
    assert!(path.is_file(), "{} is missing: run `bash scripts/setup.sh`", path.display());
    path.display().to_string()
}

fn torch_python() -> PathBuf {
    let path = repo_root().join(".deps/torch-venv/bin/python");
    assert!(path.is_file(), "{} is missing: scripts/setup.sh installs PyTorch", path.display());
    path
}

fn check_runtime(out: &Output) {
    out.assert_success();
    for entry in ["cuPointerGetAttribute", "cuPointerGetAttributes"] {
        out.assert_rc(&format!("entry.{entry}"), 0);
        out.assert_rc(&format!("entry.{entry}.status"), 0);
    }
    for (kind, memory_type, has_host) in KINDS {
        out.assert_rc(&format!("alloc.{kind}"), 0);
        out.assert_rc(&format!("{kind}.runtime"), 0);
        assert_eq!(out.i64(&format!("{kind}.type")), *memory_type, "{kind}: cudaPointerAttributes::type\n{out}");
        assert_eq!(out.get(&format!("{kind}.device_pointer_same")), "1", "{kind}\n{out}");
        assert_eq!(out.get(&format!("{kind}.host_pointer_same")), if *has_host { "1" } else { "0" }, "{kind}\n{out}");
        for (name, width) in WIDTHS {
            if *name == "host_pointer" && !has_host {
                // Device memory has no host address: CUDA_ERROR_INVALID_VALUE.
                out.assert_rc(&format!("{kind}.{name}.rc"), 1);
                continue;
            }
            out.assert_rc(&format!("{kind}.{name}.rc"), 0);
            assert_eq!(out.u64(&format!("{kind}.{name}.width")), *width as u64, "{kind}: bytes written for {name}\n{out}");
            assert_eq!(
                out.u64(&format!("{kind}.many.{name}.width")),
                *width as u64,
                "{kind}: bytes written for {name} by cuPointerGetAttributes\n{out}"
            );
        }
        out.assert_rc(&format!("{kind}.many.rc"), 0);
        let managed = u64::from(*kind == "managed");
        assert_eq!(out.u64(&format!("{kind}.is_managed.value")), managed, "{kind}\n{out}");
        assert_eq!(out.u64(&format!("{kind}.mapped.value")), 1, "{kind}\n{out}");
        assert_eq!(
            out.u64(&format!("{kind}.memory_type.value")),
            if *has_host && managed == 0 { 1 } else { 2 },
            "{kind}: CUmemorytype\n{out}"
        );
        assert_eq!(out.u64(&format!("{kind}.range_size.value")), 1 << 20, "{kind}\n{out}");
    }
    // Only plain cudaMalloc memory can be shared by legacy IPC.
    assert_eq!(out.u64("device.is_legacy_cuda_ipc_capable.value"), 1, "{out}");
    assert_eq!(out.u64("async.is_legacy_cuda_ipc_capable.value"), 0, "{out}");
    assert_ne!(out.u64("async.mempool_handle.value"), 0, "memory from a pool names its pool\n{out}");
    // Memory CUDA does not know: the runtime says unregistered (device -2),
    // the single query refuses every attribute, the multiple query answers
    // each with its empty value, at its width.
    out.assert_rc("unregistered.runtime", 0);
    assert_eq!(out.i64("unregistered.type"), 0, "{out}");
    assert_eq!(out.i64("unregistered.device"), -2, "{out}");
    for (name, width) in WIDTHS {
        out.assert_rc(&format!("unregistered.{name}.rc"), 1);
        assert_eq!(out.u64(&format!("unregistered.many.{name}.width")), *width as u64, "{name}\n{out}");
    }
    out.assert_rc("unregistered.many.rc", 0);
    for key in ["free.device", "free.pinned", "free.host_alloc", "free.registered", "free.managed", "free.async", "device_sync"] {
        out.assert_rc(key, 0);
    }
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn every_pointer_attribute_reads_through_the_runtime_at_its_width() {
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    check_runtime(&sim.run(sim.py("sim_pointer_attributes.py").args(["runtime", &libcudart()])));
}

#[test]
fn every_pointer_attribute_reads_through_the_runtime_under_a_cap() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("pointers");
    check_runtime(&sim.run(sim.py("sim_pointer_attributes.py").args(["runtime", &libcudart()])));
}

fn check_torch(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("cuda_available"), "1", "{out}");
    for (key, pinned) in [
        ("pinned", "1"),
        ("pinned_view", "1"),
        ("plain", "0"),
        ("pin_memory", "1"),
        ("registered", "1"),
        ("unregistered", "0"),
        ("cuda_tensor", "0"),
    ] {
        assert_eq!(out.get(&format!("torch.{key}")), pinned, "is_pinned() of the {key} tensor\n{out}");
    }
    out.assert_rc("torch.register_rc", 0);
    out.assert_rc("torch.unregister_rc", 0);
    assert_eq!(out.get("torch.copy_equal"), "1", "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

fn run_torch(sim: &Sim) -> Output {
    let mut cmd = sim.command(torch_python());
    cmd.arg(repo_root().join("tests/python/sim_pointer_attributes.py")).arg("torch");
    sim.run(&mut cmd)
}

#[test]
fn pytorch_sees_pinned_memory_as_pinned() {
    let sim = Sim::new().memory("16GiB").context_memory("256MiB");
    check_torch(&run_torch(&sim));
}

#[test]
fn pytorch_sees_pinned_memory_as_pinned_under_a_cap() {
    let sim = Sim::new().memory("16GiB").context_memory("256MiB").memory_limit("2GiB").tenant("pinned");
    check_torch(&run_torch(&sim));
}
