//! Streams: creation (with priority), destruction, synchronisation, queries,
//! their context, waits on events, host functions and callbacks, and graph
//! capture.

use super::{h, ptr};
use crate::driver::{driver, CuResult, Driver, Graph, TAG_GRAPH, TAG_STREAM};
use crate::exec::{lock, HostCall, Op, Stream};
use crate::ffi::cu_export;
use crate::ffi::{out, out_opt};
use abi::cuda::*;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const LEAST_PRIORITY: c_int = 0;
const GREATEST_PRIORITY: c_int = -5;

fn create(d: &Driver, phstream: *mut CUstream, flags: c_uint, priority: c_int) -> CuResult<()> {
    let ctx = d.current()?;
    if phstream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
    let hnd = d.new_handle(TAG_STREAM);
    d.write().streams.insert(hnd, Arc::new(Stream::new(hnd, ctx.handle, flags, priority)));
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(phstream, ptr(hnd)) }
}

cu_export!(cuStreamCreate(phstream: *mut CUstream, flags: c_uint) {
    create(driver()?, phstream, flags, 0)
});

cu_export!(cuStreamCreateWithPriority(phstream: *mut CUstream, flags: c_uint, priority: c_int) {
    create(driver()?, phstream, flags, priority)
});

cu_export!(cuStreamDestroy_v2(stream: CUstream) {
    let d = driver()?;
    let s = d.write().streams.remove(&h(stream)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    // Queued work still completes: ops hold the stream.
    crate::capture::end(&s);
    if let Some(attrs) = lock(&STREAM_ATTRS).as_mut() {
        attrs.retain(|&(stream, _), _| stream != s.handle);
    }
    Ok(())
}; cuStreamDestroy);

// The context a stream belongs to; the null and per-thread streams belong to
// the calling thread's current context.
cu_export!(cuStreamGetCtx(stream: CUstream, pctx: *mut CUcontext) {
    let (ctx, _) = driver()?.stream(h(stream))?;
    out(pctx, ptr(ctx.handle))
}; cuStreamGetCtx_ptsz);

// As `cuStreamGetCtx`; simgpu has no green contexts, so `*pGreenCtx` is null.
cu_export!(cuStreamGetCtx_v2(stream: CUstream, pctx: *mut CUcontext, pgreen: *mut CUgreenCtx) {
    let (ctx, _) = driver()?.stream(h(stream))?;
    out(pctx, ptr(ctx.handle))?;
    out_opt(pgreen, std::ptr::null_mut());
    Ok(())
}; cuStreamGetCtx_v2_ptsz);

// The green context a stream was created under: simgpu creates none
// (`cuGreenCtxCreate` is not supported), so every valid stream answers null.
// cuBLASLt 13.10 resolves this with `dlsym` and fails handle creation
// without it.
cu_export!(cuStreamGetGreenCtx(stream: CUstream, pgreen: *mut CUgreenCtx) {
    driver()?.stream(h(stream))?;
    out(pgreen, std::ptr::null_mut())
});

cu_export!(cuStreamGetPriority(stream: CUstream, priority: *mut c_int) {
    let (_, s) = driver()?.stream(h(stream))?;
    out(priority, s.priority)
}; cuStreamGetPriority_ptsz);

cu_export!(cuStreamGetFlags(stream: CUstream, flags: *mut c_uint) {
    let (_, s) = driver()?.stream(h(stream))?;
    out(flags, s.flags)
}; cuStreamGetFlags_ptsz);

/// The legacy default stream (null or `CU_STREAM_LEGACY`) waits for the whole
/// context; any other stream for its own work.
fn is_legacy(stream: CUstream) -> bool {
    h(stream) <= 1
}

/// Synchronising or querying a capturing stream fails and breaks its
/// capture; doing so to the legacy stream (the whole context's work) is a
/// potentially unsafe call ([`crate::capture`]).
fn check_capture_for_sync(stream: CUstream, s: &Stream) -> CuResult<()> {
    if s.capturing().is_some() {
        crate::capture::invalidate(s);
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if is_legacy(stream) {
        crate::capture::check_unsafe_call()?;
    }
    Ok(())
}

cu_export!(cuStreamSynchronize(stream: CUstream) {
    let (ctx, s) = driver()?.stream(h(stream))?;
    check_capture_for_sync(stream, &s)?;
    if is_legacy(stream) {
        ctx.exec.synchronize();
    } else {
        let target = s.submitted.load(Acquire);
        ctx.exec.wait_until(|| s.completed.load(Acquire) >= target);
    }
    crate::pool::release_after_sync(driver()?, ctx.device);
    Ok(())
}; cuStreamSynchronize_ptsz);

cu_export!(cuStreamQuery(stream: CUstream) {
    let (ctx, s) = driver()?.stream(h(stream))?;
    check_capture_for_sync(stream, &s)?;
    let done = if is_legacy(stream) { ctx.exec.idle() } else { s.completed.load(Acquire) >= s.submitted.load(Acquire) };
    if done { Ok(()) } else { Err(CUDA_ERROR_NOT_READY) }
}; cuStreamQuery_ptsz);

const CU_EVENT_WAIT_EXTERNAL: c_uint = 1;

/// Work queued on `stream` after this starts after the event's latest record
/// (at the time of the call) has completed. A record that has completed, or an
/// event never recorded, needs nothing; a record in this context is satisfied
/// by queue order, one in another context is waited for by the worker.
fn wait_event(stream: CUstream, event: CUevent, flags: c_uint) -> CuResult<()> {
    let d = driver()?;
    let (ctx, s) = d.stream(h(stream))?;
    let e = d.read().events.get(&h(event)).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if flags & !CU_EVENT_WAIT_EXTERNAL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if s.capturing_valid()?.is_some() {
        return Ok(());
    }
    let (source, position) = *lock(&e.source);
    s.wait_for(source, position);
    let generation = e.generation.load(Acquire);
    if generation == 0 || e.done_generation.load(Acquire) >= generation {
        return Ok(());
    }
    let Some(recorder) = lock(&e.exec).clone() else { return Ok(()) };
    let recorder = (!Arc::ptr_eq(&recorder, &ctx.exec)).then_some(recorder);
    ctx.exec.submit(Op::Wait { stream: s, event: e, generation, recorder });
    Ok(())
}

cu_export!(cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) {
    wait_event(stream, event, flags)
}; cuStreamWaitEvent_ptsz);

fn host_call(stream: CUstream, call: HostCall) -> CuResult<()> {
    let (ctx, s) = driver()?.stream(h(stream))?;
    if s.capturing().is_some() {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    ctx.exec.submit(Op::Host { stream: s, call });
    Ok(())
}

cu_export!(cuLaunchHostFunc(stream: CUstream, func: CUhostFn, user_data: *mut c_void) {
    let func = func.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    host_call(stream, HostCall::Func { func, user_data })
}; cuLaunchHostFunc_ptsz);

const CU_HOST_TASK_SPINWAIT: c_uint = 1;

// The sync mode says how the driver's thread waits for host tasks; simgpu's
// worker sleeps either way. Exported for programs built against a newer
// cuda.h; cuGetProcAddress, answering as a 13.0 driver, resolves the
// three-argument form.
cu_export!(cuLaunchHostFunc_v2(stream: CUstream, func: CUhostFn, user_data: *mut c_void, sync_mode: c_uint) {
    if sync_mode > CU_HOST_TASK_SPINWAIT {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let func = func.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    host_call(stream, HostCall::Func { func, user_data })
}; cuLaunchHostFunc_v2_ptsz);

cu_export!(cuStreamAddCallback(stream: CUstream, callback: CUstreamCallback, user_data: *mut c_void, flags: c_uint) {
    let func = callback.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    host_call(stream, HostCall::Callback { func, stream: h(stream), user_data })
}; cuStreamAddCallback_ptsz);

fn begin_capture(stream: CUstream, mode: c_uint) -> CuResult<()> {
    let d = driver()?;
    if is_legacy(stream) {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if mode > 2 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (_, s) = d.stream(h(stream))?;
    if s.capturing().is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    let g = d.new_handle(TAG_GRAPH);
    d.write().graphs.insert(g, Graph::default());
    if let Err(e) = crate::capture::begin(&s, g, mode) {
        d.write().graphs.remove(&g);
        return Err(e);
    }
    Ok(())
}

// Swaps the calling thread's capture interaction mode with `*mode`: what
// the thread may do while captures are in progress (`crate::capture`).
cu_export!(cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) {
    driver()?;
    if mode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let previous = crate::capture::exchange_mode(*mode)?;
    out(mode, previous)
});

cu_export!(cuStreamBeginCapture_v2(stream: CUstream, mode: c_uint) {
    begin_capture(stream, mode)
}; cuStreamBeginCapture_v2_ptsz);

cu_export!(cuStreamBeginCapture(stream: CUstream) {
    begin_capture(stream, 0)
}; cuStreamBeginCapture_ptsz);

cu_export!(cuStreamEndCapture(stream: CUstream, phgraph: *mut CUgraph) {
    let d = driver()?;
    if phgraph.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (_, s) = d.stream(h(stream))?;
    let current = *lock(&s.capture);
    let c = current.ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    // Only the thread that began a capture ends it, unless it was begun
    // in relaxed mode; the capture goes on.
    if c.mode != crate::capture::MODE_RELAXED && c.thread != crate::capture::thread_number() {
        return Err(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    }
    let c = crate::capture::end(&s).ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    let user_graph = take_user_graph(c.graph);
    if c.invalidated {
        // A broken capture ends with no graph (one the application gave
        // to capture into stays the application's).
        if !user_graph {
            d.write().graphs.remove(&c.graph);
        }
        out(phgraph, std::ptr::null_mut())?;
        return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    out(phgraph, ptr(c.graph))
}; cuStreamEndCapture_ptsz);

/// `CUstreamCaptureStatus`: none, active, invalidated.
fn capture_status(s: &Stream) -> c_uint {
    match *lock(&s.capture) {
        None => 0,
        Some(c) if c.invalidated => 2,
        Some(_) => 1,
    }
}

/// `cuStreamGetCaptureInfo` in each of its versions: the stream's capture
/// status (required), its capture's id and graph when capturing (optional
/// outputs), and no dependency nodes or edges (simgpu's capture records
/// whole launches, not a dependency graph).
///
/// # Safety
/// Each non-null pointer must be valid for a write of its type, as cuda.h
/// requires of the caller.
unsafe fn capture_info(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    dependencies: *mut *const c_void,
    edges: *mut *const c_void,
    count: *mut usize,
) -> CuResult<()> {
    if status.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (_, s) = driver()?.stream(h(stream))?;
    let capture = s.capturing();
    // SAFETY: the caller's pointers, valid for writes or null (this
    // function's contract); null optional ones are skipped.
    unsafe {
        out(status, capture_status(&s))?;
        out_opt(id, capture.unwrap_or(0));
        out_opt(graph, capture.map_or(std::ptr::null_mut(), ptr));
        out_opt(dependencies, std::ptr::null());
        out_opt(edges, std::ptr::null());
        out_opt(count, 0);
    }
    Ok(())
}

cu_export!(cuStreamGetCaptureInfo(stream: CUstream, status: *mut c_uint, id: *mut u64) {
    capture_info(stream, status, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut())
}; cuStreamGetCaptureInfo_ptsz);

cu_export!(cuStreamGetCaptureInfo_v2(stream: CUstream, status: *mut c_uint, id: *mut u64, graph: *mut CUgraph, dependencies: *mut *const c_void, count: *mut usize) {
    capture_info(stream, status, id, graph, dependencies, std::ptr::null_mut(), count)
}; cuStreamGetCaptureInfo_v2_ptsz);

cu_export!(cuStreamGetCaptureInfo_v3(stream: CUstream, status: *mut c_uint, id: *mut u64, graph: *mut CUgraph, dependencies: *mut *const c_void, edges: *mut *const c_void, count: *mut usize) {
    capture_info(stream, status, id, graph, dependencies, edges, count)
}; cuStreamGetCaptureInfo_v3_ptsz);

cu_export!(cuStreamIsCapturing(stream: CUstream, status: *mut c_uint) {
    let (_, s) = driver()?.stream(h(stream))?;
    out(status, capture_status(&s))
}; cuStreamIsCapturing_ptsz);

// Stream memory operations (write or wait on a 32- or 64-bit value in
// device memory from a stream): simgpu does not model them and its devices
// say so (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 is 0), so each
// answers CUDA_ERROR_NOT_SUPPORTED, as a real driver does on a device
// without them. Frameworks look the entry points up and fall back.
macro_rules! unsupported_mem_op {
    ($($name:ident, $alias:ident, $value:ty;)*) => {$(
        cu_export!($name(stream: CUstream, _addr: CUdeviceptr, _value: $value, _flags: c_uint) {
            driver()?.stream(h(stream))?;
            Err(CUDA_ERROR_NOT_SUPPORTED)
        }; $alias);
    )*};
}

unsupported_mem_op! {
    cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz, u32;
    cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz, u32;
    cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz, u64;
    cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz, u64;
}

// The original (CUDA 8) memory-operation entry points, kept by the driver
// for old binaries; unsupported here as their `_v2` forms are.
unsupported_mem_op! {
    cuStreamWriteValue32, cuStreamWriteValue32_ptsz, u32;
    cuStreamWaitValue32, cuStreamWaitValue32_ptsz, u32;
    cuStreamWriteValue64, cuStreamWriteValue64_ptsz, u64;
    cuStreamWaitValue64, cuStreamWaitValue64_ptsz, u64;
}

cu_export!(cuStreamBatchMemOp_v2(stream: CUstream, count: c_uint, params: *mut c_void, flags: c_uint) {
    let _ = (count, params, flags);
    driver()?.stream(h(stream))?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz);

// A stream's identifier, unique in the process: its handle's counter (the
// null and per-thread streams name their context's default stream).
cu_export!(cuStreamGetId(stream: CUstream, id: *mut u64) {
    let (_, s) = driver()?.stream(h(stream))?;
    out(id, id_of(&s))
}; cuStreamGetId_ptsz);

/// A stream's id as `cuStreamGetId` reports it.
pub(crate) fn id_of(s: &Stream) -> u64 {
    s.handle & ((1 << 40) - 1)
}

cu_export!(cuStreamGetDevice(stream: CUstream, device: *mut CUdevice) {
    let d = driver()?;
    let (ctx, _) = d.stream(h(stream))?;
    out(device, d.ordinal_of(ctx.device))
}; cuStreamGetDevice_ptsz);

/// `CUstreamAttrID` values a stream has (cuda.h's `CU_STREAM_ATTRIBUTE_*`).
const STREAM_ATTR_ACCESS_POLICY_WINDOW: c_uint = 1;
const STREAM_ATTR_SYNCHRONIZATION_POLICY: c_uint = 3;
const STREAM_ATTR_PRIORITY: c_uint = 8;
const STREAM_ATTR_MEM_SYNC_DOMAIN_MAP: c_uint = 9;
const STREAM_ATTR_MEM_SYNC_DOMAIN: c_uint = 10;

/// `CUstreamAttrValue` (`CUlaunchAttributeValue`): a 64-byte union.
type AttrValue = [u64; 8];

/// Attribute values set on streams, by (stream, attribute). Priority lives
/// in the stream itself unless set here.
static STREAM_ATTRS: std::sync::Mutex<Option<std::collections::HashMap<(u64, c_uint), AttrValue>>> = std::sync::Mutex::new(None);

fn check_stream_attr(attr: c_uint) -> CuResult<()> {
    match attr {
        STREAM_ATTR_ACCESS_POLICY_WINDOW
        | STREAM_ATTR_SYNCHRONIZATION_POLICY
        | STREAM_ATTR_PRIORITY
        | STREAM_ATTR_MEM_SYNC_DOMAIN_MAP
        | STREAM_ATTR_MEM_SYNC_DOMAIN => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn stream_attr(s: &Stream, attr: c_uint) -> AttrValue {
    let stored = lock(&STREAM_ATTRS).as_ref().and_then(|m| m.get(&(s.handle, attr)).copied());
    stored.unwrap_or_else(|| {
        let mut v = [0u64; 8];
        match attr {
            STREAM_ATTR_PRIORITY => v[0] = s.priority as u32 as u64,
            // Domain map: default domain 0, remote domain 1.
            STREAM_ATTR_MEM_SYNC_DOMAIN_MAP => v[0] = 1 << 8,
            _ => {}
        }
        v
    })
}

cu_export!(cuStreamGetAttribute(stream: CUstream, attr: c_uint, value: *mut AttrValue) {
    let (_, s) = driver()?.stream(h(stream))?;
    check_stream_attr(attr)?;
    out(value, stream_attr(&s, attr))
}; cuStreamGetAttribute_ptsz);

cu_export!(cuStreamSetAttribute(stream: CUstream, attr: c_uint, value: *const AttrValue) {
    let (_, s) = driver()?.stream(h(stream))?;
    check_stream_attr(attr)?;
    let mut v = crate::ffi::input(value)?;
    if attr == STREAM_ATTR_PRIORITY {
        // Clamped to the device's range, as at creation.
        v[0] = (v[0] as u32 as c_int).clamp(GREATEST_PRIORITY, LEAST_PRIORITY) as u32 as u64;
    }
    lock(&STREAM_ATTRS).get_or_insert_with(Default::default).insert((s.handle, attr), v);
    Ok(())
}; cuStreamSetAttribute_ptsz);

cu_export!(cuStreamCopyAttributes(dst: CUstream, src: CUstream) {
    let d = driver()?;
    let (_, to) = d.stream(h(dst))?;
    let (_, from) = d.stream(h(src))?;
    let values: Vec<(c_uint, AttrValue)> = [STREAM_ATTR_ACCESS_POLICY_WINDOW, STREAM_ATTR_SYNCHRONIZATION_POLICY, STREAM_ATTR_PRIORITY, STREAM_ATTR_MEM_SYNC_DOMAIN_MAP, STREAM_ATTR_MEM_SYNC_DOMAIN].iter().map(|&a| (a, stream_attr(&from, a))).collect();
    let mut attrs = lock(&STREAM_ATTRS);
    let map = attrs.get_or_insert_with(Default::default);
    for (a, v) in values {
        map.insert((to.handle, a), v);
    }
    Ok(())
}; cuStreamCopyAttributes_ptsz);

// ---- capture into an existing graph, and capture dependencies ----------------

/// Graphs a capture was begun into by `cuStreamBeginCaptureToGraph`: the
/// application owns them, so a broken capture leaves them to it.
static USER_GRAPHS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// Whether `graph` is an application's graph being captured into (and
/// forgets it: the capture is ending).
fn take_user_graph(graph: u64) -> bool {
    let mut graphs = lock(&USER_GRAPHS);
    let before = graphs.len();
    graphs.retain(|&g| g != graph);
    graphs.len() != before
}

// Captures into `graph`, which the application made; the captured work
// follows `dependencies`, nodes already in it. simgpu records captured
// launches as nodes in the order they come, so the dependencies are
// checked and the new nodes are appended.
cu_export!(cuStreamBeginCaptureToGraph(stream: CUstream, graph: CUgraph, dependencies: *const CUgraphNode, edge_data: *const c_void, count: usize, mode: c_uint) {
    let d = driver()?;
    if is_legacy(stream) {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if mode > 2 || (count > 0 && dependencies.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let _ = edge_data;
    {
        let objs = d.read();
        if !objs.graphs.contains_key(&h(graph)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count {
            let node = h(*dependencies.add(i));
            if objs.nodes.get(&node).map(|(g, _)| *g) != Some(h(graph)) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
    }
    let (_, s) = d.stream(h(stream))?;
    if s.capturing().is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    crate::capture::begin(&s, h(graph), mode)?;
    lock(&USER_GRAPHS).push(h(graph));
    Ok(())
}; cuStreamBeginCaptureToGraph_ptsz);

/// `CU_STREAM_ADD_CAPTURE_DEPENDENCIES`, `CU_STREAM_SET_CAPTURE_DEPENDENCIES`.
const CAPTURE_DEPENDENCY_FLAGS_MAX: c_uint = 1;

unsafe fn update_capture_dependencies(stream: CUstream, dependencies: *const CUgraphNode, count: usize, flags: c_uint) -> CuResult<()> {
    let d = driver()?;
    if flags > CAPTURE_DEPENDENCY_FLAGS_MAX || (count > 0 && dependencies.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (_, s) = d.stream(h(stream))?;
    let graph = s.capturing_valid()?.ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    let objs = d.read();
    for i in 0..count {
        // SAFETY: `dependencies` holds `count` handles (checked non-null).
        let node = h(unsafe { *dependencies.add(i) });
        if objs.nodes.get(&node).map(|(g, _)| *g) != Some(graph) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    Ok(())
}

// The capture's dependency set is not kept (captured work is recorded in
// the order it comes), so updating it checks the nodes and changes nothing.
cu_export!(cuStreamUpdateCaptureDependencies(stream: CUstream, dependencies: *const CUgraphNode, count: usize, flags: c_uint) {
    update_capture_dependencies(stream, dependencies, count, flags)
}; cuStreamUpdateCaptureDependencies_ptsz);

cu_export!(cuStreamUpdateCaptureDependencies_v2(stream: CUstream, dependencies: *const CUgraphNode, edge_data: *const c_void, count: usize, flags: c_uint) {
    let _ = edge_data;
    update_capture_dependencies(stream, dependencies, count, flags)
}; cuStreamUpdateCaptureDependencies_v2_ptsz);
