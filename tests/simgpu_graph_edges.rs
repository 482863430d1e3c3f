//! Graph edge data on simgpu (`CUgraphEdgeData`): the programmatic edges
//! XLA's command buffers put between kernel nodes on sm_90 are kept, read
//! back, cloned and launched; data cuda.h rules out is refused with
//! `CUDA_ERROR_INVALID_VALUE`; a query with no room for non-default data
//! is `CUDA_ERROR_LOSSY_QUERY`; an edge is removed only when named with its
//! own data. `tests/python/sim_graph_edges.py` makes the calls through the
//! driver's exported symbols. JAX training through these graphs is in
//! `tests/simgpu_jax_training.rs`.

use gpuslice_tests::Sim;

const SUCCESS: i64 = 0;
const INVALID_VALUE: i64 = 1;
const LOSSY_QUERY: i64 = 402;

#[test]
fn programmatic_edges_between_kernel_nodes_are_kept_checked_and_launched() {
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    let out = sim.run(&mut sim.py("sim_graph_edges.py"));
    out.assert_success();
    for key in ["module", "alloc", "graph", "add.first", "add.second_programmatic", "add.memset_default", "add.third", "deps.launch_order"]
    {
        out.assert_rc(key, SUCCESS);
    }
    for key in ["add.memset_programmatic", "add.to_port", "add.port_without_type", "add.reserved", "add.unknown_type", "add.unknown_port"] {
        out.assert_rc(key, INVALID_VALUE);
    }
    out.assert_rc("edges.rc", SUCCESS);
    assert_eq!(out.u64("edges.count"), 3, "{out}");
    // from_port/to_port/type of each edge, as added.
    assert_eq!(out.get("edges.list"), "first>second:1/0/1,second>memset:0/0/0,second>third:2/0/1", "{out}");
    out.assert_rc("edges.lossy", LOSSY_QUERY);
    out.assert_rc("edges.legacy_lossy", LOSSY_QUERY);
    out.assert_rc("deps_of_second.rc", SUCCESS);
    assert_eq!(out.get("deps_of_second"), "first:1/1", "{out}");
    // Only default edges lead to the memset node: the legacy query answers.
    out.assert_rc("deps_of_memset.legacy", SUCCESS);
    out.assert_rc("dependents_of_first.lossy", LOSSY_QUERY);
    out.assert_rc("clone.edges.rc", SUCCESS);
    assert_eq!(out.u64("clone.programmatic"), 2, "{out}");
    for key in ["instantiate", "launch.0", "launch.1", "launch.2", "sync"] {
        out.assert_rc(key, SUCCESS);
    }
    out.assert_rc("remove.default_data", INVALID_VALUE);
    out.assert_rc("remove.own_data", SUCCESS);
    assert_eq!(out.u64("edges.after_remove"), 2, "{out}");
    for key in ["exec_destroy", "clone_destroy", "graph_destroy"] {
        out.assert_rc(key, SUCCESS);
    }
    assert_eq!(out.get("done"), "1", "{out}");
}
