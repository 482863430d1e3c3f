//! Graphs of kernels: built node by node or captured from a stream,
//! instantiated, launched (each kernel node is queued in insertion order,
//! which is a topological order since dependencies must exist first).

use super::launch::{kernel_duration_ns, Dims};
use super::{h, ptr};
use crate::driver::{driver, CuResult, Graph, GraphExec, KernelNode, UserObject, TAG_EXEC, TAG_GRAPH, TAG_NODE, TAG_USER_OBJECT};
use crate::exec::Op;
use crate::ffi::cu_export;
use crate::ffi::{input, out, out_opt};
use crate::log::simgpu_debug;
use abi::cuda::*;
use std::ffi::{c_char, c_uint, c_ulonglong};
use std::sync::{Arc, Mutex};

cu_export!(cuGraphCreate(phgraph: *mut CUgraph, flags: std::ffi::c_uint) {
    let d = driver()?;
    if phgraph.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let g = d.new_handle(TAG_GRAPH);
    d.write().graphs.insert(g, Graph::default());
    out(phgraph, ptr(g))
});

unsafe fn add_kernel_node(
    phnode: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    num_deps: usize,
    p: CUDA_KERNEL_NODE_PARAMS_v1,
) -> CuResult<()> {
    let d = driver()?;
    if phnode.is_null() || (num_deps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let func = d.read().functions.get(&h(p.func)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let dims =
        Dims { grid: [p.gridDimX, p.gridDimY, p.gridDimZ], block: [p.blockDimX, p.blockDimY, p.blockDimZ], shared_bytes: p.sharedMemBytes };
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
    objs.nodes.insert(
        node,
        (h(graph), KernelNode { duration_ns, func: h(p.func), grid: dims.grid, block: dims.block, shared_bytes: dims.shared_bytes }),
    );
    drop(objs);
    // SAFETY: the dependencies were checked above.
    unsafe { super::graph_nodes::record_dependencies(h(graph), node, deps, num_deps) };
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

/// `CUgraphInstantiate_flags`: AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH,
/// USE_NODE_PRIORITY.
const INSTANTIATE_FLAGS: u64 = 0x1 | 0x2 | 0x4 | 0x8;

fn instantiate(pexec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CuResult<()> {
    let d = driver()?;
    if pexec.is_null() || flags & !INSTANTIATE_FLAGS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let e = d.new_handle(TAG_EXEC);
    let mut objs = d.write();
    let g = objs.graphs.get(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let user_refs = g.user_refs.clone();
    // Launch order: the nodes in an order their edges allow (insertion
    // order where edges leave it free).
    let order = super::graph_nodes::launch_order(h(graph), &g.nodes)?;
    let (nodes, kernels_ns): (Vec<u64>, Vec<u64>) =
        order.iter().filter_map(|n| objs.nodes.get(n).map(|(_, k)| (*n, k.duration_ns))).unzip();
    // An executable graph holds its own references to its graph's user
    // objects: they live while either does.
    for (object, count) in &user_refs {
        if let Some(o) = objs.user_objects.get_mut(object) {
            o.refs += count;
        }
    }
    let launch_order = nodes.clone();
    objs.execs.insert(e, Arc::new(GraphExec { nodes, kernels_ns: Mutex::new(kernels_ns), flags, user_refs }));
    drop(objs);
    if crate::log::debug_enabled() {
        let (edges, programmatic) = super::graph_nodes::edge_counts(h(graph));
        simgpu_debug!("graph instantiated: {} nodes, {edges} edges, {programmatic} programmatic", launch_order.len());
    }
    // The executable graph keeps its own copy of each non-kernel node.
    if let Err(err) = super::graph_nodes::snapshot(d, e, &launch_order) {
        // SAFETY: the handle made just above; no pointer is read.
        unsafe { cuGraphExecDestroy(ptr(e)) };
        return Err(err);
    }
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(pexec, ptr(e)) }
}

cu_export!(cuGraphInstantiateWithFlags(pexec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong) {
    instantiate(pexec, graph, flags)
});

cu_export!(cuGraphInstantiate_v2(pexec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) {
    out_opt(error_node, std::ptr::null_mut());
    if !log.is_null() && log_size > 0 {
        *log = 0;
    }
    instantiate(pexec, graph, 0)
}; cuGraphInstantiate);

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`: flags, upload stream, error node, result.
#[repr(C)]
pub struct GraphInstantiateParams {
    pub flags: u64,
    pub upload_stream: CUstream,
    pub error_node: CUgraphNode,
    pub result: c_uint,
}

/// `CUDA_GRAPH_INSTANTIATE_SUCCESS`, `CUDA_GRAPH_INSTANTIATE_ERROR`.
const GRAPH_INSTANTIATE_SUCCESS: c_uint = 0;
const GRAPH_INSTANTIATE_ERROR: c_uint = 1;
const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: u64 = 0x2;

// Instantiates, reporting the outcome in the parameters too; with the
// upload flag, the upload is ordered on the given stream.
cu_export!(cuGraphInstantiateWithParams(pexec: *mut CUgraphExec, graph: CUgraph, params: *mut GraphInstantiateParams) {
    if params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let flags = (*params).flags;
    (*params).error_node = std::ptr::null_mut();
    if flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD != 0 {
        driver()?.stream(h((*params).upload_stream))?;
    }
    let r = instantiate(pexec, graph, flags);
    (*params).result = if r.is_ok() { GRAPH_INSTANTIATE_SUCCESS } else { GRAPH_INSTANTIATE_ERROR };
    r
}; cuGraphInstantiateWithParams_ptsz);

cu_export!(cuGraphExecGetFlags(exec: CUgraphExec, flags: *mut u64) {
    let ge = driver()?.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    out(flags, ge.flags)
});

cu_export!(cuGraphLaunch(exec: CUgraphExec, stream: CUstream) {
    let d = driver()?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (ctx, s) = d.stream(h(stream))?;
    if s.capturing().is_some() {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let kernels_ns = crate::exec::lock(&ge.kernels_ns).clone();
    for (node, ns) in ge.nodes.iter().zip(kernels_ns) {
        if ns > 0 {
            ctx.exec.submit(Op::Kernel { stream: s.clone(), remaining_ns: ns });
        } else {
            // Other kinds (memset, memcpy, host, events, child graphs) are
            // issued on the stream in node order, as the stream's own calls.
            super::graph_nodes::launch_node(d, h(exec), *node, &ctx, &s, stream)?;
        }
    }
    Ok(())
}; cuGraphLaunch_ptsz);

// The device holds nothing of a graph apart from its launches here, so
// uploading only checks its arguments.
cu_export!(cuGraphUpload(exec: CUgraphExec, stream: CUstream) {
    let d = driver()?;
    d.read().execs.get(&h(exec)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    d.stream(h(stream))?;
    Ok(())
}; cuGraphUpload_ptsz);

/// `CUgraphNodeType`: KERNEL and EMPTY are the kinds simgpu's graphs hold.
const CU_GRAPH_NODE_TYPE_KERNEL: c_uint = 0;
const CU_GRAPH_NODE_TYPE_EMPTY: c_uint = 5;

cu_export!(cuGraphNodeGetType(node: CUgraphNode, kind: *mut c_uint) {
    let d = driver()?;
    let objs = d.read();
    let (_, k) = objs.nodes.get(&h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Some(t) = super::graph_nodes::node_type(h(node)) {
        return out(kind, t);
    }
    out(kind, if k.func != 0 { CU_GRAPH_NODE_TYPE_KERNEL } else { CU_GRAPH_NODE_TYPE_EMPTY })
});

// A kernel node's launch: its function, shape and shared memory. The
// argument values are not kept, so `kernelParams` and `extra` come back null.
cu_export!(cuGraphKernelNodeGetParams_v2(node: CUgraphNode, params: *mut CUDA_KERNEL_NODE_PARAMS) {
    let d = driver()?;
    let objs = d.read();
    let (_, k) = objs.nodes.get(&h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if k.func == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(params, CUDA_KERNEL_NODE_PARAMS {
        func: ptr(k.func), gridDimX: k.grid[0], gridDimY: k.grid[1], gridDimZ: k.grid[2],
        blockDimX: k.block[0], blockDimY: k.block[1], blockDimZ: k.block[2], sharedMemBytes: k.shared_bytes,
        kernelParams: std::ptr::null_mut(), extra: std::ptr::null_mut(), kern: std::ptr::null_mut(), ctx: std::ptr::null_mut(),
    })
}; cuGraphKernelNodeGetParams);

// Changes one kernel's launch in an instantiated graph: its simulated run
// time follows the new arguments; the function must stay a kernel.
cu_export!(cuGraphExecKernelNodeSetParams_v2(exec: CUgraphExec, node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS) {
    let d = driver()?;
    let p = input(params)?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let at = ge.nodes.iter().position(|&n| n == h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let func = d.read().functions.get(&h(p.func)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let duration_ns = kernel_duration_ns(d, &func, p.kernelParams, p.extra)?;
    if d.read().nodes.get(&h(node)).is_none_or(|(_, k)| k.func == 0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut kernels = crate::exec::lock(&ge.kernels_ns);
    *kernels.get_mut(at).ok_or(CUDA_ERROR_INVALID_VALUE)? = duration_ns;
    Ok(())
}; cuGraphExecKernelNodeSetParams);

cu_export!(cuGraphAddEmptyNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, num_deps: usize) {
    let d = driver()?;
    if phnode.is_null() || (num_deps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let node = d.new_handle(TAG_NODE);
    let mut objs = d.write();
    for i in 0..num_deps {
        let dep = h(*deps.add(i));
        if objs.nodes.get(&dep).map(|(g, _)| *g) != Some(h(graph)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    objs.graphs.get_mut(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?.nodes.push(node);
    objs.nodes.insert(node, (h(graph), KernelNode::empty()));
    drop(objs);
    super::graph_nodes::record_dependencies(h(graph), node, deps, num_deps);
    out(phnode, ptr(node))
});

// ---- graph memory --------------------------------------------------------

/// `CUgraphMem_attribute`: USED_MEM_CURRENT, USED_MEM_HIGH,
/// RESERVED_MEM_CURRENT, RESERVED_MEM_HIGH.
const GRAPH_MEM_ATTR_USED_MEM_HIGH: c_uint = 1;
const GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: c_uint = 3;

// simgpu's graphs have no memory-allocation nodes, so no memory is ever
// associated with graphs: every figure is 0, and a high-water mark may
// only be reset (to 0), as cuda.h allows.
cu_export!(cuDeviceGetGraphMemAttribute(device: CUdevice, attr: c_uint, value: *mut u64) {
    driver()?.check_device(device)?;
    if attr > GRAPH_MEM_ATTR_RESERVED_MEM_HIGH {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(value, 0)
});

cu_export!(cuDeviceSetGraphMemAttribute(device: CUdevice, attr: c_uint, value: *mut u64) {
    driver()?.check_device(device)?;
    let v = input(value)?;
    match attr {
        GRAPH_MEM_ATTR_USED_MEM_HIGH | GRAPH_MEM_ATTR_RESERVED_MEM_HIGH if v == 0 => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuDeviceGraphMemTrim(device: CUdevice) {
    driver()?.check_device(device).map(drop)
});

cu_export!(cuGraphExecDestroy(exec: CUgraphExec) {
    let d = driver()?;
    let mut objs = d.write();
    let ge = objs.execs.remove(&h(exec)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let destroyed = ge.user_refs.iter().filter_map(|(object, count)| release_user_object(&mut objs, *object, *count)).collect();
    drop(objs);
    super::graph_nodes::forget_exec(h(exec));
    run_destructors(destroyed);
    Ok(())
});

cu_export!(cuGraphDestroy(graph: CUgraph) {
    let d = driver()?;
    let mut objs = d.write();
    let g = objs.graphs.remove(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for n in &g.nodes {
        objs.nodes.remove(n);
    }
    let destroyed = g.user_refs.iter().filter_map(|(object, count)| release_user_object(&mut objs, *object, *count)).collect();
    drop(objs);
    // Child graphs belong to their nodes: they go with the graph.
    for child in super::graph_nodes::forget_graph(h(graph), &g.nodes) {
        cuGraphDestroy(ptr(child));
    }
    run_destructors(destroyed);
    Ok(())
});

/// `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`, the one flag of `cuUserObjectCreate`
/// (and a required one).
const CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
/// `CU_GRAPH_USER_OBJECT_MOVE`: the graph takes the caller's references.
const CU_GRAPH_USER_OBJECT_MOVE: c_uint = 1;

/// A reference count as the user-object calls take it: 1 to `INT_MAX`.
fn ref_count(count: c_uint) -> CuResult<u64> {
    if count == 0 || count > i32::MAX as c_uint {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(u64::from(count))
}

/// A destructor and the pointer it is given.
type Destructor = (unsafe extern "C" fn(*mut std::ffi::c_void), usize);

/// Drops `count` references to `object`; its destructor when that was the last.
fn release_user_object(objs: &mut crate::driver::Objects, object: u64, count: u64) -> Option<Destructor> {
    let o = objs.user_objects.get_mut(&object)?;
    o.refs = o.refs.saturating_sub(count);
    if o.refs > 0 {
        return None;
    }
    objs.user_objects.remove(&object).map(|o| (o.destroy, o.data))
}

/// Runs destructors as the driver does, on a thread of its own (they may
/// not call CUDA, and nobody waits for them), never under the driver's lock.
fn run_destructors(destroyed: Vec<Destructor>) {
    if destroyed.is_empty() {
        return;
    }
    let run = move || {
        for (destroy, data) in destroyed {
            // SAFETY: the application gave this callback and pointer to
            // cuUserObjectCreate for exactly this call.
            unsafe { destroy(data as *mut std::ffi::c_void) };
        }
    };
    if let Err(e) = std::thread::Builder::new().name("simgpu-user-objects".into()).spawn(run) {
        crate::log::simgpu_debug!("cannot start the thread for user-object destructors: {e}");
    }
}

cu_export!(cuUserObjectCreate(object_out: *mut CUuserObject, data: *mut std::ffi::c_void, destroy: CUhostFn, initial_refcount: c_uint, flags: c_uint) {
    let d = driver()?;
    let (Some(destroy), false) = (destroy, object_out.is_null()) else { return Err(CUDA_ERROR_INVALID_VALUE) };
    if flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let refs = ref_count(initial_refcount)?;
    let object = d.new_handle(TAG_USER_OBJECT);
    d.write().user_objects.insert(object, UserObject { data: data as usize, destroy, refs });
    out(object_out, ptr(object))
});

cu_export!(cuUserObjectRetain(object: CUuserObject, count: c_uint) {
    let count = ref_count(count)?;
    let d = driver()?;
    let mut objs = d.write();
    let o = objs.user_objects.get_mut(&h(object)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    o.refs = o.refs.saturating_add(count);
    Ok(())
});

cu_export!(cuUserObjectRelease(object: CUuserObject, count: c_uint) {
    let count = ref_count(count)?;
    let d = driver()?;
    let mut objs = d.write();
    if !objs.user_objects.contains_key(&h(object)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let destroyed = release_user_object(&mut objs, h(object), count);
    drop(objs);
    run_destructors(destroyed.into_iter().collect());
    Ok(())
});

cu_export!(cuGraphRetainUserObject(graph: CUgraph, object: CUuserObject, count: c_uint, flags: c_uint) {
    let count = ref_count(count)?;
    if flags & !CU_GRAPH_USER_OBJECT_MOVE != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let d = driver()?;
    let mut objs = d.write();
    if !objs.graphs.contains_key(&h(graph)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let o = objs.user_objects.get_mut(&h(object)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // Moved references were the caller's, and are the graph's now; new
    // ones are added.
    if flags & CU_GRAPH_USER_OBJECT_MOVE == 0 {
        o.refs = o.refs.saturating_add(count);
    }
    let g = objs.graphs.get_mut(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    *g.user_refs.entry(h(object)).or_default() += count;
    Ok(())
});

cu_export!(cuGraphReleaseUserObject(graph: CUgraph, object: CUuserObject, count: c_uint) {
    let count = ref_count(count)?;
    let d = driver()?;
    let mut objs = d.write();
    let g = objs.graphs.get_mut(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let held = g.user_refs.get_mut(&h(object)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if *held < count {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    *held -= count;
    if *held == 0 {
        g.user_refs.remove(&h(object));
    }
    let destroyed = release_user_object(&mut objs, h(object), count);
    drop(objs);
    run_destructors(destroyed.into_iter().collect());
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
