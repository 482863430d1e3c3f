//! Graph structure and the node kinds beyond kernels, alongside the
//! kernel and empty nodes of [`super::graph`]:
//! - edges: each graph's dependency edges, added with the nodes or later
//!   (`cuGraphAddDependencies`), queried both ways, removed, each with its
//!   edge data (`CUgraphEdgeData`: ports and type, checked as cuda.h
//!   describes them; a programmatic edge between kernel nodes, as XLA's
//!   command buffers add on sm_90, runs as a full dependency, which is a
//!   schedule the driver may also choose);
//! - memset, memcpy, host, event record, event wait and child-graph nodes:
//!   a node of each is an entry in the graph's node list (so listing,
//!   instantiating and destroying treat it like any node) whose operation
//!   is kept here; an instantiated graph keeps a copy of each operation,
//!   and launching it issues the operations in node order on the launch
//!   stream, through the same entry points a stream would use;
//! - cloning, finding a node in a clone, enabling and disabling nodes in an
//!   instantiated graph, kernel-node attributes, and whole-graph update.
//!
//! Kinds simgpu does not model answer as their feature's absence does:
//! memory-allocation nodes `CUDA_ERROR_NOT_SUPPORTED` (graphs here own no
//! memory, see `cuDeviceGetGraphMemAttribute`), external-semaphore nodes
//! `CUDA_ERROR_INVALID_HANDLE` (no semaphore can be imported), conditional
//! and batch-memop nodes `CUDA_ERROR_NOT_SUPPORTED`.
//!
//! Locking: this module's state is locked after the driver's objects,
//! never before, and never across a call to another entry point.

use super::event::cuEventRecord;
use super::memcpy3d::{cuMemcpy3DAsync_v2, cuMemsetD16Async, CudaMemcpy3d};
use super::memory::{cuMemsetD32Async, cuMemsetD8Async};
use super::stream::{cuLaunchHostFunc, cuStreamWaitEvent};
use super::{h, ptr};
use crate::driver::{driver, CuResult, Driver, KernelNode, TAG_GRAPH, TAG_NODE};
use crate::exec::{Op, Stream};
use crate::ffi::{cstr, cu_export, input, out, out_opt};
use abi::cuda::*;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::{Arc, Mutex};

/// What a non-kernel node does when its graph runs.
#[derive(Clone, Copy)]
pub enum NodeOp {
    Memset { dst: u64, pitch: usize, value: u32, element_bytes: u32, width: usize, height: usize },
    Memcpy(Copy3d),
    Host { func: usize, data: usize },
    EventRecord(u64),
    EventWait(u64),
    Child(u64),
}

/// A copy's description, held between calls.
#[derive(Clone, Copy)]
pub struct Copy3d(CudaMemcpy3d);
// SAFETY: the pointers inside are the application's, passed back to the
// copy entry points unexamined when the graph runs (cuda.h's contract for
// memcpy nodes); simgpu never dereferences them here.
unsafe impl Send for Copy3d {}

impl NodeOp {
    /// `CUgraphNodeType`.
    fn node_type(&self) -> c_uint {
        match self {
            NodeOp::Memcpy(_) => 1,
            NodeOp::Memset { .. } => 2,
            NodeOp::Host { .. } => 3,
            NodeOp::Child(_) => 4,
            NodeOp::EventWait(_) => 6,
            NodeOp::EventRecord(_) => 7,
        }
    }
}

#[derive(Default)]
struct State {
    /// Each graph's edges (from, to), in the order they were added.
    edges: HashMap<u64, Vec<(u64, u64)>>,
    /// The data of edges whose data is not the default, by (from, to)
    /// (node handles are unique across graphs).
    edge_data: HashMap<(u64, u64), EdgeData>,
    /// Operations of graph nodes, by node.
    ops: HashMap<u64, NodeOp>,
    /// Operations as an instantiated graph holds them, by (exec, node).
    exec_ops: HashMap<(u64, u64), NodeOp>,
    /// Nodes disabled in an instantiated graph: (exec, node).
    disabled: HashSet<(u64, u64)>,
    /// Kernel-node launch attributes, by node and attribute id.
    attrs: HashMap<u64, HashMap<c_uint, LaunchAttrValue>>,
    /// (clone, original node) -> the node's copy in the clone.
    clones: HashMap<(u64, u64), u64>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(State::default))
}

/// The kind of a node this module holds, as `CUgraphNodeType`.
pub fn node_type(node: u64) -> Option<c_uint> {
    state(|s| s.ops.get(&node).map(NodeOp::node_type))
}

/// Reads `n` node handles that must all be nodes of `graph`.
unsafe fn read_nodes(d: &Driver, graph: u64, nodes: *const CUgraphNode, n: usize) -> CuResult<Vec<u64>> {
    if n > 0 && nodes.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let objs = d.read();
    (0..n)
        .map(|i| {
            // SAFETY: `nodes` holds n handles (cuda.h's contract; checked non-null).
            let node = h(unsafe { nodes.add(i).read_unaligned() });
            match objs.nodes.get(&node) {
                Some((g, _)) if *g == graph => Ok(node),
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        })
        .collect()
}

/// Records the edges from `deps` to a node just added to `graph`.
/// `deps` were checked by the caller.
pub unsafe fn record_dependencies(graph: u64, node: u64, deps: *const CUgraphNode, n: usize) {
    if n == 0 || deps.is_null() {
        return;
    }
    // SAFETY: `deps` holds n handles (checked by the caller).
    let from: Vec<u64> = (0..n).map(|i| h(unsafe { deps.add(i).read_unaligned() })).collect();
    state(|s| s.edges.entry(graph).or_default().extend(from.into_iter().map(|f| (f, node))));
}

/// `nodes` (a graph's, in insertion order) in an order that puts every
/// node after its dependencies, keeping insertion order where the edges
/// leave a choice. A cycle cannot be launched: `CUDA_ERROR_INVALID_VALUE`.
pub fn launch_order(graph: u64, nodes: &[u64]) -> CuResult<Vec<u64>> {
    let edges = state(|s| s.edges.get(&graph).cloned().unwrap_or_default());
    if edges.is_empty() {
        return Ok(nodes.to_vec());
    }
    let mut waiting: HashMap<u64, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    for (_, to) in &edges {
        if let Some(w) = waiting.get_mut(to) {
            *w += 1;
        }
    }
    let mut order = Vec::with_capacity(nodes.len());
    let mut placed = vec![false; nodes.len()];
    while order.len() < nodes.len() {
        // The first node in insertion order with no dependency left.
        let next = (0..nodes.len()).find(|&i| !placed[i] && waiting.get(&nodes[i]) == Some(&0)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        placed[next] = true;
        let node = nodes[next];
        order.push(node);
        for (from, to) in &edges {
            if *from == node {
                if let Some(w) = waiting.get_mut(to) {
                    *w = w.saturating_sub(1);
                }
            }
        }
    }
    Ok(order)
}

/// A graph's edges, and how many of them are programmatic (for the log).
pub fn edge_counts(graph: u64) -> (usize, usize) {
    state(|s| {
        let edges = s.edges.get(&graph).map(Vec::as_slice).unwrap_or_default();
        let programmatic = edges.iter().filter(|e| edge_data_of(s, **e).0[2] == DEPENDENCY_PROGRAMMATIC).count();
        (edges.len(), programmatic)
    })
}

/// Forgets a destroyed graph's structure; returns the child graphs it held
/// (the caller destroys them).
pub fn forget_graph(graph: u64, nodes: &[u64]) -> Vec<u64> {
    state(|s| {
        if let Some(edges) = s.edges.remove(&graph) {
            for e in edges {
                s.edge_data.remove(&e);
            }
        }
        s.clones.retain(|(clone, _), _| *clone != graph);
        nodes
            .iter()
            .filter_map(|n| {
                s.attrs.remove(n);
                match s.ops.remove(n) {
                    Some(NodeOp::Child(c)) => Some(c),
                    _ => None,
                }
            })
            .collect()
    })
}

/// Adds a node that this module holds the operation of.
unsafe fn add_node(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, op: NodeOp) -> CuResult<()> {
    let d = driver()?;
    if phnode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: forwarded under the caller's contract.
    unsafe { read_nodes(d, h(graph), deps, n) }?;
    let node = d.new_handle(TAG_NODE);
    let mut objs = d.write();
    objs.graphs.get_mut(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?.nodes.push(node);
    objs.nodes.insert(node, (h(graph), KernelNode::empty()));
    drop(objs);
    state(|s| s.ops.insert(node, op));
    // SAFETY: checked above.
    unsafe { record_dependencies(h(graph), node, deps, n) };
    // SAFETY: checked non-null.
    unsafe { out(phnode, ptr(node)) }
}

// ---- edges ---------------------------------------------------------------------

/// `CUgraphEdgeData`: `from_port`, `to_port`, `type`, five reserved bytes.
/// All zero is the default edge: full completion of the upstream node,
/// with its memory visible downstream.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct EdgeData([u8; 8]);

/// `CU_GRAPH_KERNEL_NODE_PORT_*`: where on a kernel node an edge leaves.
/// `CUDA_ERROR_LOSSY_QUERY`: a query without room for edge data where
/// an edge has some.
const CUDA_ERROR_LOSSY_QUERY: CUresult = 402;
const PORT_PROGRAMMATIC: u8 = 1;
const PORT_LAUNCH_ORDER: u8 = 2;
/// `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`.
const DEPENDENCY_PROGRAMMATIC: u8 = 1;

impl EdgeData {
    fn is_default(&self) -> bool {
        self.0 == [0; 8]
    }

    /// Whether the driver accepts this data on an edge between nodes of
    /// these kinds (cuda.h, `CUgraphEdgeData` and `CUgraphDependencyType`):
    /// only kernel nodes have non-zero outgoing ports, no node has a
    /// non-zero incoming port, reserved bytes are zero, and a programmatic
    /// edge joins two kernel nodes and leaves by the programmatic or the
    /// launch-order port (the programmatic port by no other kind of edge).
    fn valid(&self, from_kernel: bool, to_kernel: bool) -> bool {
        let [from_port, to_port, kind, reserved @ ..] = self.0;
        let port_ok = match from_port {
            0 => kind == 0,
            PORT_PROGRAMMATIC => from_kernel && kind == DEPENDENCY_PROGRAMMATIC,
            PORT_LAUNCH_ORDER => from_kernel,
            _ => false,
        };
        let kind_ok = match kind {
            0 => true,
            DEPENDENCY_PROGRAMMATIC => from_kernel && to_kernel,
            _ => false,
        };
        reserved == [0; 5] && to_port == 0 && port_ok && kind_ok
    }
}

/// Reads `n` edge data entries, all default where `data` is null.
unsafe fn read_edge_data(data: *const EdgeData, n: usize) -> Vec<EdgeData> {
    (0..n)
        .map(|i| match data.is_null() {
            true => EdgeData::default(),
            // SAFETY: `data` holds n entries when non-null (cuda.h's contract).
            false => unsafe { data.add(i).read_unaligned() },
        })
        .collect()
}

/// Whether a node of the driver's is a kernel node.
fn is_kernel(d: &Driver, node: u64) -> bool {
    d.read().nodes.get(&node).is_some_and(|(_, k)| k.func != 0)
}

/// Checks the edge data of edges from `from[i]` into a node that is (or is
/// about to be) a kernel node where `to_kernel(i)` says so.
fn check_edges(d: &Driver, from: &[u64], data: &[EdgeData], to_kernel: impl Fn(usize) -> bool) -> CuResult<()> {
    for (i, e) in data.iter().enumerate() {
        if !e.is_default() && !e.valid(is_kernel(d, from[i]), to_kernel(i)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    Ok(())
}

/// Keeps the non-default data of edges just added.
fn record_edge_data(edges: impl IntoIterator<Item = ((u64, u64), EdgeData)>) {
    state(|s| {
        for (e, data) in edges {
            if !data.is_default() {
                s.edge_data.insert(e, data);
            }
        }
    })
}

/// The data of an edge (default where none was given).
fn edge_data_of(s: &State, e: (u64, u64)) -> EdgeData {
    s.edge_data.get(&e).copied().unwrap_or_default()
}

/// The edges an add or remove call names (`from[i]` → `to[i]`) with their
/// data, checked as the driver checks them: a graph that exists, nodes of
/// that graph, and edge data that cuda.h allows between them.
unsafe fn named_edges(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const EdgeData,
    n: usize,
) -> CuResult<Vec<((u64, u64), EdgeData)>> {
    let d = driver()?;
    if !d.read().graphs.contains_key(&h(graph)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: forwarded under the caller's contract.
    let (from, to, data) = unsafe { (read_nodes(d, h(graph), from, n)?, read_nodes(d, h(graph), to, n)?, read_edge_data(data, n)) };
    check_edges(d, &from, &data, |i| is_kernel(d, to[i]))?;
    Ok(from.into_iter().zip(to).zip(data).collect())
}

unsafe fn add_dependencies(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const EdgeData,
    n: usize,
) -> CuResult<()> {
    // SAFETY: forwarded under the caller's contract.
    let new = unsafe { named_edges(graph, from, to, data, n) }?;
    if new.is_empty() {
        return Ok(());
    }
    state(|s| {
        let edges = s.edges.entry(h(graph)).or_default();
        let pairs: Vec<(u64, u64)> = new.iter().map(|(e, _)| *e).collect();
        if pairs.iter().enumerate().any(|(i, e)| e.0 == e.1 || edges.contains(e) || pairs[..i].contains(e)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        edges.extend(pairs);
        for (e, data) in new {
            if !data.is_default() {
                s.edge_data.insert(e, data);
            }
        }
        Ok(())
    })
}

cu_export!(cuGraphAddDependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) {
    add_dependencies(graph, from, to, std::ptr::null(), n)
});

cu_export!(cuGraphAddDependencies_v2(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, data: *const EdgeData, n: usize) {
    add_dependencies(graph, from, to, data, n)
});

unsafe fn remove_dependencies(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const EdgeData,
    n: usize,
) -> CuResult<()> {
    // SAFETY: forwarded under the caller's contract.
    let gone = unsafe { named_edges(graph, from, to, data, n) }?;
    if gone.is_empty() {
        return Ok(());
    }
    // An edge is named by its ends and its data (null data: the default).
    state(|s| {
        if !gone.iter().all(|(e, data)| s.edges.get(&h(graph)).is_some_and(|edges| edges.contains(e)) && edge_data_of(s, *e) == *data) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let pairs: Vec<(u64, u64)> = gone.iter().map(|(e, _)| *e).collect();
        s.edges.entry(h(graph)).or_default().retain(|e| !pairs.contains(e));
        for e in &pairs {
            s.edge_data.remove(e);
        }
        Ok(())
    })
}

cu_export!(cuGraphRemoveDependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) {
    remove_dependencies(graph, from, to, std::ptr::null(), n)
});

cu_export!(cuGraphRemoveDependencies_v2(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, data: *const EdgeData, n: usize) {
    remove_dependencies(graph, from, to, data, n)
});

/// Writes a list into caller arrays as the graph queries do: with no
/// array, only the count; otherwise up to `*count` entries, null for the
/// rest, and the number written.
///
/// Asked without a data array, a list that holds an edge with non-default
/// data is `CUDA_ERROR_LOSSY_QUERY` (the legacy entry points have no
/// array, so they always ask that way).
unsafe fn write_list(
    items: &[(u64, u64, EdgeData)],
    first: *mut CUgraphNode,
    second: *mut CUgraphNode,
    data: *mut EdgeData,
    count: *mut usize,
) -> CuResult<()> {
    if count.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if first.is_null() {
        if !second.is_null() || !data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: checked non-null.
        return unsafe { out(count, items.len()) };
    }
    if data.is_null() && items.iter().any(|e| !e.2.is_default()) {
        return Err(CUDA_ERROR_LOSSY_QUERY);
    }
    // SAFETY: `count` is non-null; the arrays hold *count entries (cuda.h's contract).
    unsafe {
        let room = *count;
        for i in 0..room {
            let item = items.get(i);
            first.add(i).write_unaligned(item.map_or(std::ptr::null_mut(), |e| ptr(e.0)));
            if !second.is_null() {
                second.add(i).write_unaligned(item.map_or(std::ptr::null_mut(), |e| ptr(e.1)));
            }
            if !data.is_null() {
                data.add(i).write_unaligned(item.map_or(EdgeData::default(), |e| e.2));
            }
        }
        out(count, room.min(items.len()))
    }
}

unsafe fn get_edges(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, data: *mut EdgeData, count: *mut usize) -> CuResult<()> {
    let d = driver()?;
    if !d.read().graphs.contains_key(&h(graph)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if from.is_null() != to.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let edges: Vec<(u64, u64, EdgeData)> =
        state(|s| s.edges.get(&h(graph)).map(|e| e.iter().map(|&(f, t)| (f, t, edge_data_of(s, (f, t)))).collect()).unwrap_or_default());
    // SAFETY: forwarded under the caller's contract.
    unsafe { write_list(&edges, from, to, data, count) }
}

cu_export!(cuGraphGetEdges(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, count: *mut usize) {
    get_edges(graph, from, to, std::ptr::null_mut(), count)
});

cu_export!(cuGraphGetEdges_v2(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, data: *mut EdgeData, count: *mut usize) {
    get_edges(graph, from, to, data, count)
});

/// The graph a node belongs to.
fn graph_of(d: &Driver, node: CUgraphNode) -> CuResult<u64> {
    d.read().nodes.get(&h(node)).map(|(g, _)| *g).ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// A node's neighbours: its dependencies (`incoming`) or its dependents.
unsafe fn neighbours(node: CUgraphNode, incoming: bool, nodes: *mut CUgraphNode, data: *mut EdgeData, count: *mut usize) -> CuResult<()> {
    let d = driver()?;
    let graph = graph_of(d, node)?;
    let list: Vec<(u64, u64, EdgeData)> = state(|s| {
        let edges = s.edges.get(&graph).map(Vec::as_slice).unwrap_or_default();
        edges
            .iter()
            .filter_map(|&(f, t)| match incoming {
                true if t == h(node) => Some((f, 0, edge_data_of(s, (f, t)))),
                false if f == h(node) => Some((t, 0, edge_data_of(s, (f, t)))),
                _ => None,
            })
            .collect()
    });
    // SAFETY: forwarded under the caller's contract.
    unsafe { write_list(&list, nodes, std::ptr::null_mut(), data, count) }
}

cu_export!(cuGraphNodeGetDependencies(node: CUgraphNode, deps: *mut CUgraphNode, count: *mut usize) {
    neighbours(node, true, deps, std::ptr::null_mut(), count)
});

cu_export!(cuGraphNodeGetDependencies_v2(node: CUgraphNode, deps: *mut CUgraphNode, data: *mut EdgeData, count: *mut usize) {
    neighbours(node, true, deps, data, count)
});

cu_export!(cuGraphNodeGetDependentNodes(node: CUgraphNode, dependents: *mut CUgraphNode, count: *mut usize) {
    neighbours(node, false, dependents, std::ptr::null_mut(), count)
});

cu_export!(cuGraphNodeGetDependentNodes_v2(node: CUgraphNode, dependents: *mut CUgraphNode, data: *mut EdgeData, count: *mut usize) {
    neighbours(node, false, dependents, data, count)
});

cu_export!(cuGraphGetRootNodes(graph: CUgraph, roots: *mut CUgraphNode, count: *mut usize) {
    let d = driver()?;
    let nodes = d.read().graphs.get(&h(graph)).map(|g| g.nodes.clone()).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let targets: HashSet<u64> = state(|s| s.edges.get(&h(graph)).map(|e| e.iter().map(|&(_, t)| t).collect()).unwrap_or_default());
    let list: Vec<(u64, u64, EdgeData)> = nodes.into_iter().filter(|n| !targets.contains(n)).map(|n| (n, 0, EdgeData::default())).collect();
    write_list(&list, roots, std::ptr::null_mut(), std::ptr::null_mut(), count)
});

cu_export!(cuGraphDestroyNode(node: CUgraphNode) {
    let d = driver()?;
    let mut objs = d.write();
    let (graph, _) = objs.nodes.remove(&h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Some(g) = objs.graphs.get_mut(&graph) {
        g.nodes.retain(|&n| n != h(node));
    }
    drop(objs);
    let child = state(|s| {
        if let Some(edges) = s.edges.get_mut(&graph) {
            edges.retain(|&(f, t)| f != h(node) && t != h(node));
        }
        s.edge_data.retain(|&(f, t), _| f != h(node) && t != h(node));
        s.attrs.remove(&h(node));
        match s.ops.remove(&h(node)) {
            Some(NodeOp::Child(c)) => Some(c),
            _ => None,
        }
    });
    if let Some(c) = child {
        super::graph::cuGraphDestroy(ptr(c));
    }
    Ok(())
});

// ---- typed nodes -------------------------------------------------------------

/// `CUDA_MEMSET_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemsetParams {
    pub dst: CUdeviceptr,
    pub pitch: usize,
    pub value: c_uint,
    pub element_size: c_uint,
    pub width: usize,
    pub height: usize,
}

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HostParams {
    pub func: Option<unsafe extern "C" fn(*mut c_void)>,
    pub data: *mut c_void,
}

fn memset_op(d: &Driver, p: MemsetParams) -> CuResult<NodeOp> {
    if ![1, 2, 4].contains(&p.element_size) || p.width == 0 || p.height == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let row_bytes = p.width.checked_mul(p.element_size as usize).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if p.height > 1 && p.pitch < row_bytes {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let span =
        (p.height as u64 - 1).checked_mul(p.pitch as u64).and_then(|s| s.checked_add(row_bytes as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    crate::memory::check_device_range(d, p.dst, span)?;
    Ok(NodeOp::Memset { dst: p.dst, pitch: p.pitch, value: p.value, element_bytes: p.element_size, width: p.width, height: p.height })
}

fn host_op(p: HostParams) -> CuResult<NodeOp> {
    let func = p.func.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(NodeOp::Host { func: func as usize, data: p.data as usize })
}

fn event_handle(d: &Driver, event: CUevent) -> CuResult<u64> {
    d.read().events.contains_key(&h(event)).then_some(h(event)).ok_or(CUDA_ERROR_INVALID_VALUE)
}

cu_export!(cuGraphAddMemsetNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const MemsetParams, ctx: CUcontext) {
    let d = driver()?;
    d.context(h(ctx))?;
    let op = memset_op(d, input(params)?)?;
    add_node(phnode, graph, deps, n, op)
});

cu_export!(cuGraphAddMemcpyNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const CudaMemcpy3d, ctx: CUcontext) {
    let d = driver()?;
    d.context(h(ctx))?;
    let p = input(params)?;
    if p.width_bytes == 0 || p.height == 0 || p.depth == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    add_node(phnode, graph, deps, n, NodeOp::Memcpy(Copy3d(p)))
});

cu_export!(cuGraphAddHostNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const HostParams) {
    let op = host_op(input(params)?)?;
    add_node(phnode, graph, deps, n, op)
});

cu_export!(cuGraphAddEventRecordNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, event: CUevent) {
    let op = NodeOp::EventRecord(event_handle(driver()?, event)?);
    add_node(phnode, graph, deps, n, op)
});

cu_export!(cuGraphAddEventWaitNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, event: CUevent) {
    let op = NodeOp::EventWait(event_handle(driver()?, event)?);
    add_node(phnode, graph, deps, n, op)
});

// The child graph is cloned into the node, as the driver does: later
// changes to `child` do not reach it.
cu_export!(cuGraphAddChildGraphNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, child: CUgraph) {
    let d = driver()?;
    if phnode.is_null() || h(child) == h(graph) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    read_nodes(d, h(graph), deps, n)?;
    let copy = clone_graph(d, h(child))?;
    add_node(phnode, graph, deps, n, NodeOp::Child(copy)).inspect_err(|_| {
        super::graph::cuGraphDestroy(ptr(copy));
    })
});

cu_export!(cuGraphChildGraphNodeGetGraph(node: CUgraphNode, graph_out: *mut CUgraph) {
    driver()?;
    match state(|s| s.ops.get(&h(node)).copied()) {
        Some(NodeOp::Child(g)) => out(graph_out, ptr(g)),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

/// The operation of a graph node of one kind.
fn op_of(node: CUgraphNode) -> CuResult<NodeOp> {
    driver()?;
    state(|s| s.ops.get(&h(node)).copied()).ok_or(CUDA_ERROR_INVALID_VALUE)
}

fn set_op(node: CUgraphNode, kind: c_uint, op: NodeOp) -> CuResult<()> {
    state(|s| match s.ops.get_mut(&h(node)) {
        Some(o) if o.node_type() == kind => {
            *o = op;
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

cu_export!(cuGraphMemsetNodeGetParams(node: CUgraphNode, params: *mut MemsetParams) {
    match op_of(node)? {
        NodeOp::Memset { dst, pitch, value, element_bytes, width, height } => {
            out(params, MemsetParams { dst, pitch, value, element_size: element_bytes, width, height })
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphMemsetNodeSetParams(node: CUgraphNode, params: *const MemsetParams) {
    let op = memset_op(driver()?, input(params)?)?;
    set_op(node, 2, op)
});

cu_export!(cuGraphMemcpyNodeGetParams(node: CUgraphNode, params: *mut CudaMemcpy3d) {
    match op_of(node)? {
        NodeOp::Memcpy(c) => out(params, c.0),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphMemcpyNodeSetParams(node: CUgraphNode, params: *const CudaMemcpy3d) {
    driver()?;
    set_op(node, 1, NodeOp::Memcpy(Copy3d(input(params)?)))
});

cu_export!(cuGraphHostNodeGetParams(node: CUgraphNode, params: *mut HostParams) {
    match op_of(node)? {
        NodeOp::Host { func, data } => {
            // SAFETY: `func` was a valid host function pointer when stored.
            let func = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(func);
            out(params, HostParams { func: Some(func), data: data as *mut c_void })
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphHostNodeSetParams(node: CUgraphNode, params: *const HostParams) {
    driver()?;
    set_op(node, 3, host_op(input(params)?)?)
});

cu_export!(cuGraphEventRecordNodeGetEvent(node: CUgraphNode, event_out: *mut CUevent) {
    match op_of(node)? {
        NodeOp::EventRecord(e) => out(event_out, ptr(e)),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphEventRecordNodeSetEvent(node: CUgraphNode, event: CUevent) {
    let e = event_handle(driver()?, event)?;
    set_op(node, 7, NodeOp::EventRecord(e))
});

cu_export!(cuGraphEventWaitNodeGetEvent(node: CUgraphNode, event_out: *mut CUevent) {
    match op_of(node)? {
        NodeOp::EventWait(e) => out(event_out, ptr(e)),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphEventWaitNodeSetEvent(node: CUgraphNode, event: CUevent) {
    let e = event_handle(driver()?, event)?;
    set_op(node, 6, NodeOp::EventWait(e))
});

// ---- the same, in an instantiated graph ----------------------------------------------

fn set_exec_op(exec: CUgraphExec, node: CUgraphNode, kind: c_uint, op: NodeOp) -> CuResult<()> {
    let d = driver()?;
    if !d.read().execs.contains_key(&h(exec)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    state(|s| match s.exec_ops.get_mut(&(h(exec), h(node))) {
        Some(o) if o.node_type() == kind => {
            *o = op;
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

cu_export!(cuGraphExecMemsetNodeSetParams(exec: CUgraphExec, node: CUgraphNode, params: *const MemsetParams, ctx: CUcontext) {
    let d = driver()?;
    d.context(h(ctx))?;
    let op = memset_op(d, input(params)?)?;
    set_exec_op(exec, node, 2, op)
});

cu_export!(cuGraphExecMemcpyNodeSetParams(exec: CUgraphExec, node: CUgraphNode, params: *const CudaMemcpy3d, ctx: CUcontext) {
    let d = driver()?;
    d.context(h(ctx))?;
    set_exec_op(exec, node, 1, NodeOp::Memcpy(Copy3d(input(params)?)))
});

cu_export!(cuGraphExecHostNodeSetParams(exec: CUgraphExec, node: CUgraphNode, params: *const HostParams) {
    set_exec_op(exec, node, 3, host_op(input(params)?)?)
});

cu_export!(cuGraphExecEventRecordNodeSetEvent(exec: CUgraphExec, node: CUgraphNode, event: CUevent) {
    let e = event_handle(driver()?, event)?;
    set_exec_op(exec, node, 7, NodeOp::EventRecord(e))
});

cu_export!(cuGraphExecEventWaitNodeSetEvent(exec: CUgraphExec, node: CUgraphNode, event: CUevent) {
    let e = event_handle(driver()?, event)?;
    set_exec_op(exec, node, 6, NodeOp::EventWait(e))
});

// The child's topology must match the node's; its nodes' parameters are
// taken over by the instantiated copy.
cu_export!(cuGraphExecChildGraphNodeSetParams(exec: CUgraphExec, node: CUgraphNode, child: CUgraph) {
    let d = driver()?;
    let held = state(|s| s.exec_ops.get(&(h(exec), h(node))).copied());
    let Some(NodeOp::Child(copy)) = held else { return Err(CUDA_ERROR_INVALID_VALUE) };
    let (new_nodes, old_nodes) = {
        let objs = d.read();
        let new = objs.graphs.get(&h(child)).map(|g| g.nodes.clone()).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let old = objs.graphs.get(&copy).map(|g| g.nodes.clone()).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        (new, old)
    };
    if new_nodes.len() != old_nodes.len() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let replacement = clone_graph(d, h(child))?;
    state(|s| s.exec_ops.insert((h(exec), h(node)), NodeOp::Child(replacement)));
    super::graph::cuGraphDestroy(ptr(copy));
    Ok(())
});

// ---- instantiation and launch ----------------------------------------------------

/// Keeps a copy of each node operation for a graph just instantiated as
/// `exec` (child graphs are cloned, as the executable graph owns its own).
pub fn snapshot(d: &Driver, exec: u64, nodes: &[u64]) -> CuResult<()> {
    let ops: Vec<(u64, NodeOp)> = state(|s| nodes.iter().filter_map(|n| s.ops.get(n).map(|o| (*n, *o))).collect());
    for (node, op) in ops {
        let op = match op {
            NodeOp::Child(g) => NodeOp::Child(clone_graph(d, g)?),
            other => other,
        };
        state(|s| s.exec_ops.insert((exec, node), op));
    }
    Ok(())
}

/// Forgets an instantiated graph; destroys its copies of child graphs.
pub fn forget_exec(exec: u64) {
    let children: Vec<u64> = state(|s| {
        s.disabled.retain(|(e, _)| *e != exec);
        let mine: Vec<(u64, u64)> = s.exec_ops.keys().filter(|(e, _)| *e == exec).copied().collect();
        mine.into_iter()
            .filter_map(|k| match s.exec_ops.remove(&k) {
                Some(NodeOp::Child(c)) => Some(c),
                _ => None,
            })
            .collect()
    });
    for c in children {
        // SAFETY: a graph handle this module made.
        unsafe { super::graph::cuGraphDestroy(ptr(c)) };
    }
}

fn check(r: CUresult) -> CuResult<()> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// Issues one node's operation on `stream`, as the application's own call
/// would be ordered there.
unsafe fn issue(d: &Driver, op: NodeOp, ctx: &Arc<crate::driver::Context>, s: &Arc<Stream>, stream: CUstream) -> CuResult<()> {
    // SAFETY (all calls): the operation's arguments were checked when it
    // was set; host pointers are the application's (cuda.h's contract).
    unsafe {
        match op {
            NodeOp::Memset { dst, pitch, value, element_bytes, width, height } => {
                for row in 0..height as u64 {
                    let at = dst + row * pitch as u64;
                    check(match element_bytes {
                        1 => cuMemsetD8Async(at, value as u8, width, stream),
                        2 => cuMemsetD16Async(at, value as u16, width, stream),
                        _ => cuMemsetD32Async(at, value, width, stream),
                    })?;
                }
                Ok(())
            }
            NodeOp::Memcpy(c) => check(cuMemcpy3DAsync_v2(&c.0, stream)),
            NodeOp::Host { func, data } => {
                let func = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(func);
                check(cuLaunchHostFunc(stream, Some(func), data as *mut c_void))
            }
            NodeOp::EventRecord(e) => check(cuEventRecord(ptr(e), stream)),
            NodeOp::EventWait(e) => check(cuStreamWaitEvent(stream, ptr(e), 0)),
            NodeOp::Child(g) => launch_graph(d, g, ctx, s, stream),
        }
    }
}

/// Launches a graph's nodes from the graph itself (a child graph's copy).
unsafe fn launch_graph(d: &Driver, graph: u64, ctx: &Arc<crate::driver::Context>, s: &Arc<Stream>, stream: CUstream) -> CuResult<()> {
    let nodes: Vec<(u64, u64)> = {
        let objs = d.read();
        let g = objs.graphs.get(&graph).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        g.nodes.iter().map(|n| (*n, objs.nodes.get(n).map_or(0, |(_, k)| k.duration_ns))).collect()
    };
    for (node, ns) in nodes {
        if ns > 0 {
            ctx.exec.submit(Op::Kernel { stream: s.clone(), remaining_ns: ns });
        } else if let Some(op) = state(|st| st.ops.get(&node).copied()) {
            // SAFETY: forwarded.
            unsafe { issue(d, op, ctx, s, stream) }?;
        }
    }
    Ok(())
}

/// Issues the non-kernel node `node` of instantiated graph `exec`, unless
/// it is disabled there.
pub unsafe fn launch_node(
    d: &Driver,
    exec: u64,
    node: u64,
    ctx: &Arc<crate::driver::Context>,
    s: &Arc<Stream>,
    stream: CUstream,
) -> CuResult<()> {
    let op = state(|st| if st.disabled.contains(&(exec, node)) { None } else { st.exec_ops.get(&(exec, node)).copied() });
    match op {
        // SAFETY: forwarded.
        Some(op) => unsafe { issue(d, op, ctx, s, stream) },
        None => Ok(()),
    }
}

// Kernel, memcpy and memset nodes may be disabled in an instantiated graph:
// a disabled node does nothing when the graph runs, and orders as an
// empty node.
cu_export!(cuGraphNodeSetEnabled(exec: CUgraphExec, node: CUgraphNode, enabled: c_uint) {
    let d = driver()?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let at = ge.nodes.iter().position(|&n| n == h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let kernel_ns = d.read().nodes.get(&h(node)).map(|(_, k)| (k.func != 0).then_some(k.duration_ns));
    let kind = state(|s| s.exec_ops.get(&(h(exec), h(node))).map(NodeOp::node_type));
    match (kernel_ns, kind) {
        (Some(Some(ns)), _) => {
            let mut kernels = crate::exec::lock(&ge.kernels_ns);
            let slot = kernels.get_mut(at).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let key = (h(exec), h(node));
            state(|s| {
                if enabled != 0 {
                    if s.disabled.remove(&key) {
                        *slot = ns;
                    }
                } else if s.disabled.insert(key) {
                    *slot = 0;
                }
            });
            Ok(())
        }
        (_, Some(1 | 2)) => {
            state(|s| if enabled != 0 { s.disabled.remove(&(h(exec), h(node))) } else { s.disabled.insert((h(exec), h(node))) });
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
});

cu_export!(cuGraphNodeGetEnabled(exec: CUgraphExec, node: CUgraphNode, enabled: *mut c_uint) {
    let d = driver()?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if !ge.nodes.contains(&h(node)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let kernel = d.read().nodes.get(&h(node)).is_some_and(|(_, k)| k.func != 0);
    let kind = state(|s| s.exec_ops.get(&(h(exec), h(node))).map(NodeOp::node_type));
    if !kernel && !matches!(kind, Some(1 | 2)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let disabled = state(|s| s.disabled.contains(&(h(exec), h(node))));
    out(enabled, c_uint::from(!disabled))
});

// ---- cloning -------------------------------------------------------------------------

/// Copies a graph: every node (with its operation and attributes) and
/// every edge; remembers which copy is which node's.
fn clone_graph(d: &Driver, graph: u64) -> CuResult<u64> {
    let nodes: Vec<(u64, KernelNode)> = {
        let objs = d.read();
        let g = objs.graphs.get(&graph).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        g.nodes
            .iter()
            .filter_map(|n| {
                objs.nodes.get(n).map(|(_, k)| {
                    (
                        *n,
                        KernelNode { duration_ns: k.duration_ns, func: k.func, grid: k.grid, block: k.block, shared_bytes: k.shared_bytes },
                    )
                })
            })
            .collect()
    };
    let copy = d.new_handle(TAG_GRAPH);
    let mut map = HashMap::new();
    let mut objs = d.write();
    let mut list = Vec::with_capacity(nodes.len());
    for (node, k) in nodes {
        let n = d.new_handle(TAG_NODE);
        objs.nodes.insert(n, (copy, k));
        list.push(n);
        map.insert(node, n);
    }
    objs.graphs.insert(copy, crate::driver::Graph { nodes: list, user_refs: HashMap::new() });
    drop(objs);
    let children: Vec<(u64, u64)> = state(|s| {
        let old: Vec<(u64, u64)> = s.edges.get(&graph).cloned().unwrap_or_default();
        let mut edges = Vec::with_capacity(old.len());
        for (f, t) in old {
            let (Some(&nf), Some(&nt)) = (map.get(&f), map.get(&t)) else { continue };
            if let Some(data) = s.edge_data.get(&(f, t)).copied() {
                s.edge_data.insert((nf, nt), data);
            }
            edges.push((nf, nt));
        }
        s.edges.insert(copy, edges);
        let mut children = Vec::new();
        for (old, new) in &map {
            if let Some(op) = s.ops.get(old).copied() {
                if let NodeOp::Child(c) = op {
                    children.push((*new, c));
                }
                s.ops.insert(*new, op);
            }
            if let Some(a) = s.attrs.get(old).cloned() {
                s.attrs.insert(*new, a);
            }
            s.clones.insert((copy, *old), *new);
        }
        children
    });
    // A child graph is owned by its node: the copy gets its own.
    for (node, child) in children {
        let c = clone_graph(d, child)?;
        state(|s| s.ops.insert(node, NodeOp::Child(c)));
    }
    Ok(copy)
}

cu_export!(cuGraphClone(clone_out: *mut CUgraph, graph: CUgraph) {
    let d = driver()?;
    if clone_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let copy = clone_graph(d, h(graph))?;
    out(clone_out, ptr(copy))
});

cu_export!(cuGraphNodeFindInClone(node_out: *mut CUgraphNode, original: CUgraphNode, clone: CUgraph) {
    driver()?;
    if node_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let found = state(|s| s.clones.get(&(h(clone), h(original))).copied()).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    out(node_out, ptr(found))
});

// ---- whole graphs ------------------------------------------------------------------

// Writes a graph in Graphviz DOT: one line per node (its handle and kind),
// one per edge. The flags choose detail the driver adds; simgpu has no
// more to add than this, so they are accepted and change nothing.
cu_export!(cuGraphDebugDotPrint(graph: CUgraph, path: *const c_char, flags: c_uint) {
    let d = driver()?;
    let _ = flags;
    let path = cstr(path)?.to_str().map_err(|_| CUDA_ERROR_INVALID_VALUE)?.to_owned();
    let nodes: Vec<(u64, c_uint)> = {
        let objs = d.read();
        let g = objs.graphs.get(&h(graph)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        g.nodes.iter().map(|n| (*n, objs.nodes.get(n).map_or(5, |(_, k)| if k.func != 0 { 0 } else { 5 }))).collect()
    };
    let edges = state(|s| s.edges.get(&h(graph)).cloned().unwrap_or_default());
    let mut text = format!("digraph simgpu_graph_{:x} {{\n", h(graph));
    for (n, kind) in &nodes {
        let kind = node_type(*n).unwrap_or(*kind);
        text.push_str(&format!("  n{n:x} [label=\"{}\"];\n", NODE_TYPE_NAMES.get(kind as usize).unwrap_or(&"node")));
    }
    for (f, t) in edges {
        text.push_str(&format!("  n{f:x} -> n{t:x};\n"));
    }
    text.push_str("}\n");
    std::fs::write(path, text).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)
});

const NODE_TYPE_NAMES: [&str; 8] = ["kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event", "event_record"];

/// `CUgraphExecUpdateResultInfo`: result, error node, error "from" node.
#[repr(C)]
pub struct ExecUpdateResultInfo {
    pub result: c_uint,
    pub error_node: CUgraphNode,
    pub error_from_node: CUgraphNode,
}

/// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`.
const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: CUresult = 910;
/// `CU_GRAPH_EXEC_UPDATE_*`.
const UPDATE_SUCCESS: c_uint = 0;
const UPDATE_ERROR_TOPOLOGY_CHANGED: c_uint = 2;
const UPDATE_ERROR_NODE_TYPE_CHANGED: c_uint = 3;

/// Takes `graph`'s node parameters into `exec` when both have the same
/// nodes, in the same order, of the same kinds, with the same edges.
fn exec_update(exec: CUgraphExec, graph: CUgraph) -> Result<(), (c_uint, u64, u64)> {
    let fail = |r: c_uint| (r, 0, 0);
    let d = driver().map_err(|_| fail(1))?;
    let ge = d.read().execs.get(&h(exec)).cloned().ok_or(fail(1))?;
    let (nodes, kinds): (Vec<u64>, Vec<(c_uint, u64, u64)>) = {
        let objs = d.read();
        let g = objs.graphs.get(&h(graph)).ok_or(fail(1))?;
        g.nodes
            .iter()
            .map(|n| {
                let (func, ns) = objs.nodes.get(n).map_or((0, 0), |(_, k)| (k.func, k.duration_ns));
                let kind = node_type(*n).unwrap_or(if func != 0 { 0 } else { 5 });
                (*n, (kind, func, ns))
            })
            .unzip()
    };
    if nodes.len() != ge.nodes.len() {
        return Err(fail(UPDATE_ERROR_TOPOLOGY_CHANGED));
    }
    let old_kinds: Vec<c_uint> = {
        let objs = d.read();
        ge.nodes
            .iter()
            .map(|n| {
                let held = state(|s| s.exec_ops.get(&(h(exec), *n)).map(NodeOp::node_type));
                held.unwrap_or(if objs.nodes.get(n).is_some_and(|(_, k)| k.func != 0) { 0 } else { 5 })
            })
            .collect()
    };
    for (i, (kind, _, _)) in kinds.iter().enumerate() {
        if *kind != old_kinds[i] {
            return Err((UPDATE_ERROR_NODE_TYPE_CHANGED, nodes[i], 0));
        }
    }
    let ops: Vec<Option<NodeOp>> = state(|s| nodes.iter().map(|n| s.ops.get(n).copied()).collect());
    if ops.iter().any(|o| matches!(o, Some(NodeOp::Child(_)))) {
        return Err(fail(UPDATE_ERROR_TOPOLOGY_CHANGED));
    }
    let mut kernels = crate::exec::lock(&ge.kernels_ns);
    state(|s| {
        for (i, (kind, _, ns)) in kinds.iter().enumerate() {
            let old = ge.nodes[i];
            if *kind == 0 && !s.disabled.contains(&(h(exec), old)) {
                kernels[i] = *ns;
            }
            if let Some(op) = ops[i] {
                s.exec_ops.insert((h(exec), old), op);
            }
        }
    });
    Ok(())
}

cu_export!(cuGraphExecUpdate_v2(exec: CUgraphExec, graph: CUgraph, info: *mut ExecUpdateResultInfo) {
    driver()?;
    if info.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (result, node, from) = match exec_update(exec, graph) {
        Ok(()) => (UPDATE_SUCCESS, 0, 0),
        Err(e) => e,
    };
    out(info, ExecUpdateResultInfo { result, error_node: ptr(node), error_from_node: ptr(from) })?;
    if result == UPDATE_SUCCESS {
        Ok(())
    } else {
        Err(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    }
});

cu_export!(cuGraphExecUpdate(exec: CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, result: *mut c_uint) {
    driver()?;
    if error_node.is_null() || result.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (r, node, _) = match exec_update(exec, graph) {
        Ok(()) => (UPDATE_SUCCESS, 0, 0),
        Err(e) => e,
    };
    out(error_node, ptr(node))?;
    out(result, r)?;
    if r == UPDATE_SUCCESS {
        Ok(())
    } else {
        Err(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    }
});

// ---- kernel nodes ----------------------------------------------------------------

/// `CUlaunchAttributeValue`: a 64-byte union, kept as it came.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchAttrValue([u64; 8]);

/// `CUlaunchAttributeID`: 1 ..= SHARED_MEMORY_MODE.
const LAUNCH_ATTRIBUTE_MAX: c_uint = 18;

fn kernel_node(d: &Driver, node: CUgraphNode) -> CuResult<()> {
    match d.read().nodes.get(&h(node)) {
        Some((_, k)) if k.func != 0 => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

// A kernel node's attributes read back as set; one never set reads as
// zero, the default of every attribute.
cu_export!(cuGraphKernelNodeGetAttribute(node: CUgraphNode, attr: c_uint, value: *mut LaunchAttrValue) {
    let d = driver()?;
    kernel_node(d, node)?;
    if attr == 0 || attr > LAUNCH_ATTRIBUTE_MAX {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let v = state(|s| s.attrs.get(&h(node)).and_then(|a| a.get(&attr).copied())).unwrap_or(LaunchAttrValue([0; 8]));
    out(value, v)
});

cu_export!(cuGraphKernelNodeSetAttribute(node: CUgraphNode, attr: c_uint, value: *const LaunchAttrValue) {
    let d = driver()?;
    kernel_node(d, node)?;
    if attr == 0 || attr > LAUNCH_ATTRIBUTE_MAX {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let v = input(value)?;
    state(|s| s.attrs.entry(h(node)).or_default().insert(attr, v));
    Ok(())
});

cu_export!(cuGraphKernelNodeCopyAttributes(dst: CUgraphNode, src: CUgraphNode) {
    let d = driver()?;
    kernel_node(d, dst)?;
    kernel_node(d, src)?;
    state(|s| {
        let a = s.attrs.get(&h(src)).cloned().unwrap_or_default();
        s.attrs.insert(h(dst), a);
    });
    Ok(())
});

/// Changes a kernel node's launch: its function, shape and simulated time.
unsafe fn set_kernel(node: CUgraphNode, p: CUDA_KERNEL_NODE_PARAMS_v1) -> CuResult<()> {
    let d = driver()?;
    kernel_node(d, node)?;
    let func = d.read().functions.get(&h(p.func)).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let grid = [p.gridDimX, p.gridDimY, p.gridDimZ];
    let block = [p.blockDimX, p.blockDimY, p.blockDimZ];
    if grid.contains(&0) || block.contains(&0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: kernelParams/extra follow cuda.h's contract.
    let duration_ns = unsafe { super::launch::kernel_duration_ns(d, &func, p.kernelParams, p.extra) }?;
    let mut objs = d.write();
    let (_, k) = objs.nodes.get_mut(&h(node)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    *k = KernelNode { duration_ns, func: h(p.func), grid, block, shared_bytes: p.sharedMemBytes };
    Ok(())
}

cu_export!(cuGraphKernelNodeSetParams_v2(node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS) {
    let p = input(params)?;
    if p.func.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    set_kernel(node, CUDA_KERNEL_NODE_PARAMS_v1 {
        func: p.func, gridDimX: p.gridDimX, gridDimY: p.gridDimY, gridDimZ: p.gridDimZ,
        blockDimX: p.blockDimX, blockDimY: p.blockDimY, blockDimZ: p.blockDimZ,
        sharedMemBytes: p.sharedMemBytes, kernelParams: p.kernelParams, extra: p.extra,
    })
});

cu_export!(cuGraphKernelNodeSetParams(node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS_v1) {
    set_kernel(node, input(params)?)
});

// ---- generic node parameters (`CUgraphNodeParams`) ----------------------------------

/// `CUgraphNodeParams`: the node type, then a 232-byte union at offset 16,
/// then a reserved word.
#[repr(C)]
pub struct GraphNodeParams {
    pub kind: c_uint,
    pub reserved0: [c_uint; 3],
    pub body: [u64; 29],
    pub reserved2: i64,
}

const _: () = assert!(std::mem::size_of::<GraphNodeParams>() == 256);

/// `CU_GRAPH_NODE_TYPE_*` the generic calls take here.
const NODE_KERNEL: c_uint = 0;
const NODE_MEMCPY: c_uint = 1;
const NODE_MEMSET: c_uint = 2;
const NODE_HOST: c_uint = 3;
const NODE_GRAPH: c_uint = 4;
const NODE_EMPTY: c_uint = 5;
const NODE_WAIT_EVENT: c_uint = 6;
const NODE_EVENT_RECORD: c_uint = 7;
const NODE_EXT_SEMAS_SIGNAL: c_uint = 8;
const NODE_EXT_SEMAS_WAIT: c_uint = 9;

/// Reads a struct from the union.
unsafe fn body<T: Copy>(p: *const GraphNodeParams) -> T {
    // SAFETY: the union is 232 bytes, larger than every member read here.
    unsafe { std::ptr::addr_of!((*p).body).cast::<T>().read_unaligned() }
}

/// The kernel parameters in the union (`CUDA_KERNEL_NODE_PARAMS_v3`, whose
/// first ten fields are the v1 layout).
unsafe fn kernel_body(p: *const GraphNodeParams) -> CuResult<CUDA_KERNEL_NODE_PARAMS_v1> {
    // SAFETY: forwarded.
    let k: CUDA_KERNEL_NODE_PARAMS_v1 = unsafe { body(p) };
    if k.func.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(k)
}

unsafe fn add_generic(
    phnode: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    data: *const EdgeData,
    n: usize,
    params: *mut GraphNodeParams,
) -> CuResult<()> {
    let d = driver()?;
    if params.is_null() || phnode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let kind = unsafe { (*params).kind };
    // SAFETY: forwarded under the caller's contract.
    let (deps_read, data) = unsafe { (read_nodes(d, h(graph), deps, n)?, read_edge_data(data, n)) };
    check_edges(d, &deps_read, &data, |_| kind == NODE_KERNEL)?;
    // SAFETY: forwarded under the caller's contract.
    unsafe { add_generic_node(d, phnode, graph, deps, n, params, kind) }?;
    // The typed entry points record the edges; their data is kept here.
    // SAFETY: written by the call above.
    let node = h(unsafe { phnode.read() });
    record_edge_data(deps_read.into_iter().map(|f| (f, node)).zip(data));
    Ok(())
}

/// Adds a node of `kind` through the typed entry point for it.
unsafe fn add_generic_node(
    d: &Driver,
    phnode: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut GraphNodeParams,
    kind: c_uint,
) -> CuResult<()> {
    // SAFETY (each arm): the union member the type names (cuda.h's contract).
    unsafe {
        match kind {
            NODE_KERNEL => {
                let k = kernel_body(params)?;
                let mut node = std::ptr::null_mut();
                check(super::graph::cuGraphAddKernelNode(&mut node, graph, deps, n, &k))?;
                out(phnode, node)
            }
            NODE_EMPTY => check(super::graph::cuGraphAddEmptyNode(phnode, graph, deps, n)),
            NODE_MEMCPY => {
                // copyCtx at 8 within the union, then the copy.
                let ctx: CUcontext = body(params);
                let copy: CudaMemcpy3d = std::ptr::addr_of!((*params).body).cast::<u8>().add(8).cast::<CudaMemcpy3d>().read_unaligned();
                check(cuGraphAddMemcpyNode(phnode, graph, deps, n, &copy, ctx))
            }
            NODE_MEMSET => {
                let m: MemsetParams = body(params);
                // ctx follows the v1 layout (40 bytes).
                let ctx = *std::ptr::addr_of!((*params).body).cast::<u64>().add(5);
                check(cuGraphAddMemsetNode(phnode, graph, deps, n, &m, ptr(ctx)))
            }
            NODE_HOST => {
                let host: HostParams = body(params);
                check(cuGraphAddHostNode(phnode, graph, deps, n, &host))
            }
            NODE_GRAPH => {
                let child: CUgraph = body(params);
                check(cuGraphAddChildGraphNode(phnode, graph, deps, n, child))
            }
            NODE_WAIT_EVENT => check(cuGraphAddEventWaitNode(phnode, graph, deps, n, body(params))),
            NODE_EVENT_RECORD => check(cuGraphAddEventRecordNode(phnode, graph, deps, n, body(params))),
            NODE_EXT_SEMAS_SIGNAL | NODE_EXT_SEMAS_WAIT => {
                let _ = d;
                Err(CUDA_ERROR_INVALID_HANDLE)
            }
            10..=13 => Err(CUDA_ERROR_NOT_SUPPORTED),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
}

cu_export!(cuGraphAddNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *mut GraphNodeParams) {
    add_generic(phnode, graph, deps, std::ptr::null(), n, params)
});

cu_export!(cuGraphAddNode_v2(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, data: *const EdgeData, n: usize, params: *mut GraphNodeParams) {
    add_generic(phnode, graph, deps, data, n, params)
}; cuGraphAddNode_v3);

cu_export!(cuGraphNodeSetParams(node: CUgraphNode, params: *mut GraphNodeParams) {
    driver()?;
    if params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match (*params).kind {
        NODE_KERNEL => set_kernel(node, kernel_body(params)?),
        NODE_MEMSET => check(cuGraphMemsetNodeSetParams(node, &body::<MemsetParams>(params))),
        NODE_HOST => check(cuGraphHostNodeSetParams(node, &body::<HostParams>(params))),
        NODE_MEMCPY => {
            let copy: CudaMemcpy3d = std::ptr::addr_of!((*params).body).cast::<u8>().add(8).cast::<CudaMemcpy3d>().read_unaligned();
            check(cuGraphMemcpyNodeSetParams(node, &copy))
        }
        NODE_WAIT_EVENT => check(cuGraphEventWaitNodeSetEvent(node, body(params))),
        NODE_EVENT_RECORD => check(cuGraphEventRecordNodeSetEvent(node, body(params))),
        NODE_EMPTY | NODE_GRAPH => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Err(CUDA_ERROR_NOT_SUPPORTED),
    }
}; cuGraphNodeSetParams_v2);

cu_export!(cuGraphExecNodeSetParams(exec: CUgraphExec, node: CUgraphNode, params: *mut GraphNodeParams) {
    driver()?;
    if params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match (*params).kind {
        NODE_KERNEL => {
            let k = kernel_body(params)?;
            let v2 = CUDA_KERNEL_NODE_PARAMS {
                func: k.func, gridDimX: k.gridDimX, gridDimY: k.gridDimY, gridDimZ: k.gridDimZ,
                blockDimX: k.blockDimX, blockDimY: k.blockDimY, blockDimZ: k.blockDimZ,
                sharedMemBytes: k.sharedMemBytes, kernelParams: k.kernelParams, extra: k.extra,
                kern: std::ptr::null_mut(), ctx: std::ptr::null_mut(),
            };
            check(super::graph::cuGraphExecKernelNodeSetParams_v2(exec, node, &v2))
        }
        NODE_MEMSET => {
            let ctx = *std::ptr::addr_of!((*params).body).cast::<u64>().add(5);
            check(cuGraphExecMemsetNodeSetParams(exec, node, &body::<MemsetParams>(params), ptr(ctx)))
        }
        NODE_HOST => check(cuGraphExecHostNodeSetParams(exec, node, &body::<HostParams>(params))),
        NODE_MEMCPY => {
            let ctx: CUcontext = body(params);
            let copy: CudaMemcpy3d = std::ptr::addr_of!((*params).body).cast::<u8>().add(8).cast::<CudaMemcpy3d>().read_unaligned();
            check(cuGraphExecMemcpyNodeSetParams(exec, node, &copy, ctx))
        }
        NODE_WAIT_EVENT => check(cuGraphExecEventWaitNodeSetEvent(exec, node, body(params))),
        NODE_EVENT_RECORD => check(cuGraphExecEventRecordNodeSetEvent(exec, node, body(params))),
        NODE_EMPTY | NODE_GRAPH => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Err(CUDA_ERROR_NOT_SUPPORTED),
    }
});

// ---- identities ---------------------------------------------------------------

/// The number part of a handle (unique in the process), as a 32-bit id.
fn id_of(handle: u64) -> c_uint {
    (handle & 0xffff_ffff) as c_uint
}

cu_export!(cuGraphGetId(graph: CUgraph, id: *mut c_uint) {
    let d = driver()?;
    if !d.read().graphs.contains_key(&h(graph)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(id, id_of(h(graph)))
});

cu_export!(cuGraphExecGetId(exec: CUgraphExec, id: *mut c_uint) {
    let d = driver()?;
    if !d.read().execs.contains_key(&h(exec)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(id, id_of(h(exec)))
});

cu_export!(cuGraphNodeGetContainingGraph(node: CUgraphNode, graph_out: *mut CUgraph) {
    let graph = graph_of(driver()?, node)?;
    out(graph_out, ptr(graph))
});

cu_export!(cuGraphNodeGetLocalId(node: CUgraphNode, id: *mut c_uint) {
    graph_of(driver()?, node)?;
    out(id, id_of(h(node)))
});

// Unique in the process: the graph's id above the node's.
cu_export!(cuGraphNodeGetToolsId(node: CUgraphNode, id: *mut u64) {
    let graph = graph_of(driver()?, node)?;
    out(id, (u64::from(id_of(graph)) << 32) | u64::from(id_of(h(node))))
});

// A node's description as `CUgraphNodeParams`: its type and the union
// member for it (the kernel's argument values are not kept: null).
cu_export!(cuGraphNodeGetParams(node: CUgraphNode, params: *mut GraphNodeParams) {
    let d = driver()?;
    if params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let kernel = d.read().nodes.get(&h(node)).map(|(_, k)| (k.func, k.grid, k.block, k.shared_bytes)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let op = state(|s| s.ops.get(&h(node)).copied());
    let mut p = GraphNodeParams { kind: NODE_EMPTY, reserved0: [0; 3], body: [0; 29], reserved2: 0 };
    let body = std::ptr::addr_of_mut!(p.body).cast::<u8>();
    match op {
        None if kernel.0 != 0 => {
            let (func, grid, block, shared) = kernel;
            p.kind = NODE_KERNEL;
            body.cast::<CUDA_KERNEL_NODE_PARAMS_v1>().write_unaligned(CUDA_KERNEL_NODE_PARAMS_v1 {
                func: ptr(func), gridDimX: grid[0], gridDimY: grid[1], gridDimZ: grid[2],
                blockDimX: block[0], blockDimY: block[1], blockDimZ: block[2], sharedMemBytes: shared,
                kernelParams: std::ptr::null_mut(), extra: std::ptr::null_mut(),
            });
        }
        None => {}
        Some(NodeOp::Memset { dst, pitch, value, element_bytes, width, height }) => {
            p.kind = NODE_MEMSET;
            body.cast::<MemsetParams>().write_unaligned(MemsetParams { dst, pitch, value, element_size: element_bytes, width, height });
        }
        Some(NodeOp::Memcpy(c)) => {
            p.kind = NODE_MEMCPY;
            body.add(8).cast::<CudaMemcpy3d>().write_unaligned(c.0);
        }
        Some(NodeOp::Host { func, data }) => {
            p.kind = NODE_HOST;
            body.cast::<[usize; 2]>().write_unaligned([func, data]);
        }
        Some(NodeOp::Child(g)) => {
            p.kind = NODE_GRAPH;
            body.cast::<u64>().write_unaligned(g);
        }
        Some(NodeOp::EventWait(e)) => {
            p.kind = NODE_WAIT_EVENT;
            body.cast::<u64>().write_unaligned(e);
        }
        Some(NodeOp::EventRecord(e)) => {
            p.kind = NODE_EVENT_RECORD;
            body.cast::<u64>().write_unaligned(e);
        }
    }
    params.write_unaligned(p);
    Ok(())
});

// ---- kinds not modelled ------------------------------------------------------------

// No external semaphore can be imported, so a node naming one names an
// invalid handle; no node is of these kinds, so queries on one are
// invalid values.
cu_export!(cuGraphAddExternalSemaphoresSignalNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const c_void) {
    let d = driver()?;
    if phnode.is_null() || params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    read_nodes(d, h(graph), deps, n)?;
    Err(CUDA_ERROR_INVALID_HANDLE)
});

cu_export!(cuGraphAddExternalSemaphoresWaitNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const c_void) {
    let d = driver()?;
    if phnode.is_null() || params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    read_nodes(d, h(graph), deps, n)?;
    Err(CUDA_ERROR_INVALID_HANDLE)
});

macro_rules! no_such_node {
    ($($name:ident($($arg:ident),*);)*) => {$(
        cu_export!($name($($arg: usize),*) {
            $(let _ = $arg;)*
            driver()?;
            Err(CUDA_ERROR_INVALID_VALUE)
        });
    )*};
}

no_such_node! {
    cuGraphExternalSemaphoresSignalNodeGetParams(node, params);
    cuGraphExternalSemaphoresSignalNodeSetParams(node, params);
    cuGraphExternalSemaphoresWaitNodeGetParams(node, params);
    cuGraphExternalSemaphoresWaitNodeSetParams(node, params);
    cuGraphExecExternalSemaphoresSignalNodeSetParams(exec, node, params);
    cuGraphExecExternalSemaphoresWaitNodeSetParams(exec, node, params);
    cuGraphMemAllocNodeGetParams(node, params);
    cuGraphMemFreeNodeGetParams(node, address);
}

// Graph-owned memory is not modelled (every graph memory attribute is 0).
cu_export!(cuGraphAddMemAllocNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *mut c_void) {
    let d = driver()?;
    if phnode.is_null() || params.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    read_nodes(d, h(graph), deps, n)?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuGraphAddMemFreeNode(phnode: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, dptr: CUdeviceptr) {
    let d = driver()?;
    let _ = dptr;
    if phnode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    read_nodes(d, h(graph), deps, n)?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

// Conditional nodes need the device to evaluate a condition a kernel sets;
// simulated kernels set nothing.
cu_export!(cuGraphConditionalHandleCreate(handle_out: *mut u64, graph: CUgraph, ctx: CUcontext, default_value: c_uint, flags: c_uint) {
    let d = driver()?;
    let _ = (default_value, flags);
    if handle_out.is_null() || !d.read().graphs.contains_key(&h(graph)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.context(h(ctx))?;
    out_opt(handle_out, 0);
    Err(CUDA_ERROR_NOT_SUPPORTED)
});
