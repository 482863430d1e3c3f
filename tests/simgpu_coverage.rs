//! The breadth of simgpu's driver: every function the CUDA 13 runtime looks
//! up at start is found, and the families added for that answer as a real
//! driver does, through NVIDIA's own client (`cuda-bindings`, which resolves
//! each entry point with `cuGetProcAddress_v2`):
//! - features a simulated device lacks (graphics interop, external memory
//!   and semaphores, IPC) give the documented error, and the device
//!   attributes that announce them say they are absent;
//! - core calls have their effects: 3D copies and 2D fills byte for byte,
//!   copy batches, managed-range queries, graph edges both ways, memset and
//!   memcpy nodes that run when their graph launches, clones, capture into
//!   an existing graph, whole-graph update, child graphs, texture objects,
//!   context-wide event records, devices found by PCI bus id.

use gpuslice_tests::{cu, repo_root, Output, Sim};
use std::collections::BTreeSet;

#[test]
fn cuda_runtime_finds_every_driver_function_it_looks_up() {
    let libcudart = repo_root().join(".deps/lib/libcudart.so.13");
    assert!(libcudart.is_file(), "{} is missing: run `bash scripts/setup.sh`", libcudart.display());
    let sim = Sim::new().env("SIMGPU_LOG", "debug");
    let out = sim.run(sim.py("fw_cudart.py").arg(&libcudart).arg("16"));
    out.assert_success();
    assert_eq!(out.get("done"), "1", "{out}");
    let missing: BTreeSet<&str> = out
        .stderr
        .lines()
        .filter_map(|l| l.split_once("cuGetProcAddress: ")?.1.strip_suffix(" not found"))
        .filter(|name| !name.is_empty())
        .collect();
    assert!(missing.is_empty(), "the runtime looked up {} functions simgpu lacks: {missing:?}", missing.len());
    // The debug log is what this test reads: it was on (the runtime also
    // asks for an empty name, which no driver has, so there is always a line).
    assert!(out.stderr.contains(": debug: cuGetProcAddress:"), "no simgpu debug log of lookups\n{out}");
}

fn check_absent_features(out: &Output) {
    const INVALID_GRAPHICS_CONTEXT: i64 = 219;
    for key in ["gl_get_devices", "gl_register_buffer", "vdpau_get_device", "egl_consumer_connect"] {
        out.assert_rc(key, INVALID_GRAPHICS_CONTEXT);
    }
    out.assert_rc("graphics_unregister", cu::INVALID_HANDLE);
    out.assert_rc("import_external_memory", cu::NOT_SUPPORTED);
    out.assert_rc("import_external_semaphore", cu::NOT_SUPPORTED);
    out.assert_rc("destroy_external_memory", cu::INVALID_HANDLE);
    out.assert_rc("ipc_get_mem_handle", cu::NOT_SUPPORTED);
    out.assert_rc("ipc_get_event_handle", cu::NOT_SUPPORTED);
    // The attributes that announce these features say they are absent.
    for attr in [
        "ipc_event_supported",
        "multicast_supported",
        "host_native_atomic",
        "timeline_semaphore_interop",
        "mempool_handle_types",
        "sparse_arrays",
        "deferred_mapping_arrays",
    ] {
        assert_eq!(out.u64(&format!("attr.{attr}")), 0, "{attr}\n{out}");
    }
}

fn check_copies_and_fills(out: &Output) {
    for key in ["memcpy3d", "memcpy3d_async", "memset2d", "memset2d_async", "batch"] {
        out.assert_rc(key, cu::SUCCESS);
        assert_eq!(out.get(&format!("{key}.bytes_ok")), "1", "{key}\n{out}");
    }
    out.assert_rc("memset2d16", cu::SUCCESS);
    out.assert_rc("memset2d32_async", cu::SUCCESS);
    assert_eq!(out.get("memset2d_wide.bytes_ok"), "1", "{out}");
    out.assert_rc("memset16_misaligned", cu::INVALID_VALUE);
    out.assert_rc("memcpy3d_pitch_too_small", cu::INVALID_VALUE);
    out.assert_rc("batch_legacy_stream", cu::INVALID_VALUE);
    out.assert_rc("range_read_mostly", cu::SUCCESS);
    assert_eq!(out.u64("range_read_mostly.value"), 0, "{out}");
    out.assert_rc("attach", cu::SUCCESS);
    out.assert_rc("attach_bad_flags", cu::INVALID_VALUE);
    out.assert_rc("attach_not_managed", cu::INVALID_VALUE);
}

fn check_graphs(out: &Output) {
    for key in
        ["add_deps", "edges", "deps_of_c", "dependents_of_a", "remove_deps", "roots", "memset_node", "memcpy_node", "launch", "clone"]
    {
        out.assert_rc(key, cu::SUCCESS);
    }
    out.assert_rc("add_deps_again", cu::INVALID_VALUE);
    out.assert_rc("remove_missing", cu::INVALID_VALUE);
    assert_eq!(out.get("edges.list"), "a>b,b>c", "{out}");
    assert_eq!(out.get("deps_of_c.list"), "b", "{out}");
    assert_eq!(out.get("dependents_of_a.list"), "b", "{out}");
    assert_eq!(out.get("roots.list"), "a,c", "after b>c was removed\n{out}");
    // CU_GRAPH_NODE_TYPE_MEMCPY, in the graph and in its clone.
    assert_eq!(out.u64("memcpy_node_type.value"), 1, "{out}");
    assert_eq!(out.u64("clone_node_type.value"), 1, "{out}");
    assert_eq!(out.u64("clone_edges.count"), 3, "a>b, c>memset, memset>memcpy\n{out}");
    // The nodes ran at launch, not when they were added: 32 bytes copied
    // from memory the memset node had filled.
    assert_eq!(out.u64("dst_before_launch"), 0, "{out}");
    assert_eq!(out.u64("graph_copy.bytes"), 32, "{out}");
    // A copy added before the fill it depends on still copies what the
    // fill wrote: nodes launch in an order their edges allow.
    out.assert_rc("order_launch", cu::SUCCESS);
    assert_eq!(out.u64("order.bytes"), 32, "{out}");
    // CU_GRAPH_NODE_TYPE_MEMSET through cuGraphAddNode; graph memory
    // nodes are not modelled.
    out.assert_rc("generic_memset", cu::SUCCESS);
    assert_eq!(out.u64("generic_memset.type"), 2, "{out}");
    out.assert_rc("generic_mem_alloc", cu::NOT_SUPPORTED);
    out.assert_rc("generic_get_params", cu::SUCCESS);
    assert_eq!(out.u64("generic_get_params.type"), 2, "{out}");
    assert_eq!(out.u64("generic_get_params.width"), 4, "{out}");
    assert_eq!(out.get("containing_graph.same"), "1", "{out}");
    out.assert_rc("graph_id", cu::SUCCESS);
    assert_eq!(out.get("graph_id.distinct"), "1", "{out}");
    out.assert_rc("disable", cu::SUCCESS);
    assert_eq!(out.u64("get_enabled.value"), 0, "{out}");
    assert_eq!(out.u64("nodes_after_destroy.count"), 4, "{out}");
    out.assert_rc("capture_to_graph", cu::SUCCESS);
    out.assert_rc("update_capture_deps", cu::SUCCESS);
    assert_eq!(out.get("end_capture.same_graph"), "1", "{out}");
    // CUDA_ERROR_ILLEGAL_STATE: the stream no longer captures.
    out.assert_rc("update_capture_deps_not_capturing", 401);
    // An update from a graph of the same shape takes its parameters (a
    // memset of 0x22 instead of 0x11, over all 64 bytes); a child graph
    // runs its nodes; an update from another shape fails, saying so
    // (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE).
    out.assert_rc("exec_update", cu::SUCCESS);
    assert_eq!(out.u64("exec_update.result"), 0, "{out}");
    assert_eq!(out.u64("exec_update.bytes"), 64, "{out}");
    out.assert_rc("child_node", cu::SUCCESS);
    assert_eq!(out.u64("child_graph.bytes"), 64, "{out}");
    out.assert_rc("exec_update_topology", 910);
    for key in ["exec_destroy", "clone_destroy", "graph_destroy"] {
        out.assert_rc(key, cu::SUCCESS);
    }
}

fn check_objects_and_devices(out: &Output) {
    out.assert_rc("tex_create", cu::SUCCESS);
    assert_eq!(out.u64("tex_resource.size"), 4096, "{out}");
    out.assert_rc("tex_destroy", cu::SUCCESS);
    out.assert_rc("tex_destroy_again", cu::INVALID_VALUE);
    // No native atomics to host memory: no capability for any operation.
    out.assert_rc("host_atomics", cu::SUCCESS);
    assert_eq!(out.get("host_atomics.caps"), "0,0", "{out}");
    out.assert_rc("host_atomics_none", cu::INVALID_VALUE);
    // The default pool was made with no shareable handle type.
    out.assert_rc("pool_export_no_handle_type", cu::INVALID_VALUE);
    // An event recorded for the whole context; once the context has waited
    // for it, it has completed.
    out.assert_rc("ctx_record_event", cu::SUCCESS);
    out.assert_rc("ctx_wait_event", cu::SUCCESS);
    out.assert_rc("ctx_event_query", cu::SUCCESS);
    out.assert_rc("by_bus_id", cu::SUCCESS);
    assert_eq!(out.get("by_bus_id.same"), "1", "{out}");
    out.assert_rc("by_bus_id_unknown", cu::INVALID_DEVICE);
}

#[test]
fn cuda_bindings_gets_driver_answers_for_absent_features_and_effects_for_core_calls() {
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let out = sim.run(&mut sim.py("sim_coverage.py"));
    out.assert_success();
    assert_eq!(out.get("done"), "1", "{out}");
    check_absent_features(&out);
    check_copies_and_fills(&out);
    check_graphs(&out);
    check_objects_and_devices(&out);
}
