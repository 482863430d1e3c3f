//! Events: a record completes when its stream reaches it, stamped with the
//! simulated completion time, so `cuEventElapsedTime` measures simulated
//! kernel time.

use super::{h, ptr};
use crate::driver::{driver, CuResult, TAG_EVENT};
use crate::exec::{lock, Event, Op};
use crate::ffi::cu_export;
use crate::ffi::out;
use abi::cuda::*;
use std::ffi::c_uint;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
const CU_EVENT_INTERPROCESS: c_uint = 0x4;

fn event(e: CUevent) -> CuResult<Arc<Event>> {
    driver()?.read().events.get(&h(e)).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)
}

cu_export!(cuEventCreate(phevent: *mut CUevent, flags: c_uint) {
    let d = driver()?;
    d.current()?;
    if phevent.is_null() || flags & !0x7 != 0 || (flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let hnd = d.new_handle(TAG_EVENT);
    d.write().events.insert(hnd, Arc::new(Event::new(hnd, flags)));
    out(phevent, ptr(hnd))
});

/// Records `hevent` on `stream`: it completes when the stream reaches it.
/// While the stream is being captured the record becomes part of the
/// capture instead (simgpu's graphs hold kernels, so it adds nothing).
fn record(hevent: CUevent, stream: CUstream) -> CuResult<()> {
    let d = driver()?;
    let e = event(hevent)?;
    let (ctx, s) = d.stream(h(stream))?;
    if s.capturing_valid()?.is_some() {
        return Ok(());
    }
    let generation = e.generation.fetch_add(1, AcqRel) + 1;
    e.complete.store(false, Release);
    e.recorded.store(true, Release);
    *lock(&e.exec) = Some(ctx.exec.clone());
    // On an idle context the record completes here, at the stream's last
    // op (the source lock inside the queue's: nothing takes them the other
    // way round).
    let at_once = ctx.exec.complete_if_idle(|now_ns| {
        *lock(&e.source) = (s.handle, s.submitted.load(Acquire));
        if e.generation.load(Acquire) == generation {
            e.time_ns.store(now_ns, Release);
            e.complete.store(true, Release);
        }
        e.done_generation.fetch_max(generation, AcqRel);
    });
    if at_once {
        return Ok(());
    }
    *lock(&e.source) = (s.handle, s.submitted.load(Acquire) + 1);
    ctx.exec.submit(Op::Record { stream: s, event: e, generation });
    Ok(())
}

cu_export!(cuEventRecord(hevent: CUevent, stream: CUstream) {
    record(hevent, stream)
}; cuEventRecord_ptsz);

/// `CU_EVENT_RECORD_EXTERNAL`: during capture, an event record node rather
/// than an internal dependency; outside capture, an ordinary record.
const CU_EVENT_RECORD_EXTERNAL: c_uint = 0x1;

cu_export!(cuEventRecordWithFlags(hevent: CUevent, stream: CUstream, flags: c_uint) {
    if flags & !CU_EVENT_RECORD_EXTERNAL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    record(hevent, stream)
}; cuEventRecordWithFlags_ptsz);

cu_export!(cuEventQuery(hevent: CUevent) {
    if event(hevent)?.completed_at().is_some() { Ok(()) } else { Err(CUDA_ERROR_NOT_READY) }
});

// Waits for the latest record; then, as every synchronisation does, the
// device's pools give back what they hold above their release threshold.
cu_export!(cuEventSynchronize(hevent: CUevent) {
    let e = event(hevent)?;
    let exec = lock(&e.exec).clone();
    if let Some(exec) = exec {
        exec.wait_for_record(&e);
        crate::pool::release_after_sync(driver()?, exec.device);
    }
    Ok(())
});

fn elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> CuResult<()> {
    if ms.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (a, b) = (event(start)?, event(end)?);
    if a.flags & CU_EVENT_DISABLE_TIMING != 0 || b.flags & CU_EVENT_DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    if !a.recorded.load(Acquire) || !b.recorded.load(Acquire) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let (Some(a_ns), Some(b_ns)) = (a.completed_at(), b.completed_at()) else {
        return Err(CUDA_ERROR_NOT_READY);
    };
    let diff_ns = b_ns as i128 - a_ns as i128;
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(ms, (diff_ns as f64 / 1e6) as f32) }
}

cu_export!(cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) {
    elapsed(ms, start, end)
}; cuEventElapsedTime);

cu_export!(cuEventDestroy_v2(hevent: CUevent) {
    let d = driver()?;
    d.write().events.remove(&h(hevent)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    Ok(())
}; cuEventDestroy);
