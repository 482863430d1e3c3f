//! Graphs of kernels: built node by node or captured from a stream,
//! instantiated, launched (each kernel node is queued in insertion order,
//! which is a topological order since dependencies must exist first).

use super::launch::{kernel_duration_ns, Dims};
use super::{h, ptr};
use crate::ffi::cu_export;
use crate::driver::{driver, CuResult, Graph, GraphExec, KernelNode, TAG_EXEC, TAG_GRAPH, TAG_NODE};
use crate::exec::Op;
use crate::ffi::{input, out, out_opt};
use abi::cuda::*;
use std::ffi::{c_char, c_ulonglong};
use std::sync::Arc;

cu_export!(cuGraphCreate(phgraph: *mut CUgraph, flags: std::ffi::c_uint) {
    let d = driver()?;
    if phgraph.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let g = d.new_handle(TAG_GRAPH);
    d.write().graphs.insert(g, Graph { nodes: Vec::new() });
    out(phgraph, ptr(g))
});

unsafe fn add_kernel_node(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize, p: CUDA_KERNEL_NODE_PARAMS_v1) -> CuResult<()> {
    let d = driver()?;
    if phnode.is_null() || (num_deps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let func = d.read().functions.get(&h(p.func)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let dims = Dims { grid: [p.gridDimX, p.gridDimY, p.gridDimZ], block: [p.blockDimX, p.blockDimY, p.blockDimZ], shared_bytes: p.sharedMemBytes };
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: kernelParams/extra follow cuda.h's contract.
    let duration_ns = unsafe { kernel_duration_ns(d, &func, p.kernelParams, p.extra) }?;
    let node = d.new_handle(TAG_NODE);
    let mut objs = d.write();
    for i in 0..num_deps {
        // SAFETY: `deps` holds num_deps node handles (checked non-null).
        let dep = h(unsafe { *deps.add(i) });
        if objs.nodes.get(&dep).map(|(g, _)| *g) != Some(h(graph)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    let g = objs.graphs.get_mut(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    g.nodes.push(node);
    objs.nodes.insert(node, (h(graph), KernelNode { duration_ns }));
    drop(objs);
    // SAFETY: checked non-null.
    unsafe { out(phnode, ptr(node)) }
}

cu_export!(cuGraphAddKernelNode_v2(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize, params: *const CUDA_KERNEL_NODE_PARAMS) {
    let p = input(params)?;
    if p.func.is_null() {
        // Nodes by CUkernel (library kernels) are not supported by simgpu's modules.
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let v1 = CUDA_KERNEL_NODE_PARAMS_v1 {
        func: p.func, gridDimX: p.gridDimX, gridDimY: p.gridDimY, gridDimZ: p.gridDimZ,
        blockDimX: p.blockDimX, blockDimY: p.blockDimY, blockDimZ: p.blockDimZ,
        sharedMemBytes: p.sharedMemBytes, kernelParams: p.kernelParams, extra: p.extra,
    };
    add_kernel_node(phnode, graph, deps, num_deps, v1)
});

cu_export!(cuGraphAddKernelNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize, params: *const CUDA_KERNEL_NODE_PARAMS_v1) {
    let p = input(params)?;
    add_kernel_node(phnode, graph, deps, num_deps, p)
});

fn instantiate(pexec: *mut CUgraphExec, graph: CUgraph) -> CuResult<()> {
    let d = driver()?;
    if pexec.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let kernels_ns = {
        let objs = d.read();
        let g = objs.graphs.get(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        g.nodes.iter().filter_map(|n| objs.nodes.get(n).map(|(_, k)| k.duration_ns)).collect()
    };
    let e = d.new_handle(TAG_EXEC);
    d.write().execs.insert(e, Arc::new(GraphExec { kernels_ns }));
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(pexec, ptr(e)) }
}

cu_export!(cuGraphInstantiateWithFlags(pexec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong) {
    if flags & !0xf != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    instantiate(pexec, graph)
});

cu_export!(cuGraphInstantiate_v2(pexec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) {
    out_opt(error_node, std::ptr::null_mut());
    if !log.is_null() && log_size > 0 {
        *log = 0;
    }
    instantiate(pexec, graph)
}; cuGraphInstantiate);

cu_export!(cuGraphLaunch(exec: CUgraphExec, stream: CUstream) {
    let d = driver()?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (ctx, s) = d.stream(h(stream))?;
    if s.capturing().is_some() {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    for &ns in &ge.kernels_ns {
        ctx.exec.submit(Op::Kernel { stream: s.clone(), remaining_ns: ns });
    }
    Ok(())
}; cuGraphLaunch_ptsz);

cu_export!(cuGraphExecDestroy(exec: CUgraphExec) {
    let d = driver()?;
    d.write().execs.remove(&h(exec)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
});

cu_export!(cuGraphDestroy(graph: CUgraph) {
    let d = driver()?;
    let mut objs = d.write();
    let g = objs.graphs.remove(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for n in g.nodes {
        objs.nodes.remove(&n);
    }
    Ok(())
});

cu_export!(cuGraphGetNodes(graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize) {
    let d = driver()?;
    if count.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let objs = d.read();
    let g = objs.graphs.get(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if nodes.is_null() {
        return out(count, g.nodes.len());
    }
    let n = (*count).min(g.nodes.len());
    for (i, node) in g.nodes.iter().take(n).enumerate() {
        *nodes.add(i) = ptr(*node);
    }
    out(count, n)
});
