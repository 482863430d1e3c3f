//! Stream capture modes: which calls a capture forbids, and to whom.
//!
//! A stream capture is begun in one of three modes (`CUstreamCaptureMode`),
//! and each thread has an interaction mode of its own, global by default,
//! that `cuThreadExchangeStreamCaptureMode` swaps. Together they decide
//! whether a thread may make a "potentially unsafe" call (one that may
//! synchronise with work the capture is turning into a graph: allocating
//! or freeing memory, synchronising the context or the legacy stream, a
//! synchronous copy or fill), as cuda.h documents them:
//! - a thread in global mode may not while it has a capture of its own
//!   not begun in relaxed mode, nor while any other thread has a capture
//!   begun in global mode;
//! - a thread in thread-local mode may not while it has a capture of its
//!   own not begun in relaxed mode; other threads' captures do not matter;
//! - a thread in relaxed mode may.
//!
//! A forbidden call fails with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and
//! invalidates the captures that forbade it: their streams stay in capture,
//! further work there fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`,
//! and ending them returns that error and no graph. This is what makes a
//! background thread that synchronises the context (a monitor, a profiler,
//! gpuslice's shim) break another thread's CUDA graph capture unless it
//! puts itself in relaxed mode.
//!
//! Captures in progress are listed here (process-wide, as the rule is);
//! the list is locked before any stream's capture, never the other way.

use crate::driver::CuResult;
use crate::exec::{lock, Stream};
use abi::cuda::*;
use std::cell::Cell;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};

/// `CU_STREAM_CAPTURE_MODE_*`.
pub const MODE_GLOBAL: c_uint = 0;
pub const MODE_THREAD_LOCAL: c_uint = 1;
pub const MODE_RELAXED: c_uint = 2;

/// A stream's capture in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capture {
    /// The graph the capture records into (handle); also the capture's id.
    pub graph: u64,
    /// The mode it was begun in.
    pub mode: c_uint,
    /// The thread that began it ([`thread_number`]).
    pub thread: u64,
    /// A forbidden call or a misuse broke it; it still has to be ended.
    pub invalidated: bool,
}

thread_local! {
    /// This thread's interaction mode.
    static MODE: Cell<c_uint> = const { Cell::new(MODE_GLOBAL) };
    /// A number for this thread, unique in the process (0: not yet given).
    static NUMBER: Cell<u64> = const { Cell::new(0) };
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

/// Captures in progress, and their count for the common case of none.
static ACTIVE: Mutex<Vec<Arc<Stream>>> = Mutex::new(Vec::new());
static ACTIVE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's number, unique in the process while it lives.
pub fn thread_number() -> u64 {
    NUMBER
        .try_with(|n| {
            if n.get() == 0 {
                n.set(NEXT_THREAD.fetch_add(1, Relaxed));
            }
            n.get()
        })
        .unwrap_or(u64::MAX)
}

/// Sets the calling thread's interaction mode, returning the previous one.
pub fn exchange_mode(mode: c_uint) -> CuResult<c_uint> {
    if mode > MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    MODE.try_with(|m| m.replace(mode)).map_err(|_| CUDA_ERROR_UNKNOWN)
}

/// The calling thread's interaction mode (a thread being torn down is
/// taken as global, the default).
pub fn thread_mode() -> c_uint {
    MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL)
}

/// Puts `s` in capture into `graph`, begun by this thread in `mode`.
/// `CUDA_ERROR_ILLEGAL_STATE` if it already is.
pub fn begin(s: &Arc<Stream>, graph: u64, mode: c_uint) -> CuResult<()> {
    if mode > MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut active = lock(&ACTIVE);
    let mut cap = lock(&s.capture);
    if cap.is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    *cap = Some(Capture { graph, mode, thread: thread_number(), invalidated: false });
    active.push(s.clone());
    ACTIVE_COUNT.store(active.len(), Release);
    Ok(())
}

/// Takes `s` out of capture (ended, or the stream destroyed), returning
/// the capture it was in.
pub fn end(s: &Stream) -> Option<Capture> {
    let mut active = lock(&ACTIVE);
    let taken = lock(&s.capture).take();
    active.retain(|a| a.handle != s.handle);
    ACTIVE_COUNT.store(active.len(), Release);
    taken
}

/// Marks `s`'s capture, if any, invalidated.
pub fn invalidate(s: &Stream) {
    if let Some(c) = lock(&s.capture).as_mut() {
        c.invalidated = true;
    }
}

/// Whether the calling thread may make a potentially unsafe call now.
/// If not, the captures that forbid it are invalidated and the call is to
/// fail with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
pub fn check_unsafe_call() -> CuResult<()> {
    if ACTIVE_COUNT.load(Acquire) == 0 {
        return Ok(());
    }
    let mode = thread_mode();
    if mode == MODE_RELAXED {
        return Ok(());
    }
    let me = thread_number();
    let active = lock(&ACTIVE);
    let mut forbidden = false;
    for s in active.iter() {
        let mut cap = lock(&s.capture);
        let Some(c) = cap.as_mut() else { continue };
        if forbids(c, mode, me) {
            c.invalidated = true;
            forbidden = true;
        }
    }
    if forbidden {
        Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    } else {
        Ok(())
    }
}

/// Whether capture `c` forbids potentially unsafe calls to thread `me`,
/// which is in interaction mode `mode`.
fn forbids(c: &Capture, mode: c_uint, me: u64) -> bool {
    let own = c.thread == me && c.mode != MODE_RELAXED;
    let others_global = c.thread != me && c.mode == MODE_GLOBAL;
    match mode {
        MODE_GLOBAL => own || others_global,
        MODE_THREAD_LOCAL => own,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(mode: c_uint, thread: u64) -> Capture {
        Capture { graph: 1, mode, thread, invalidated: false }
    }

    #[test]
    fn a_global_capture_forbids_global_threads_everywhere_and_no_one_relaxed() {
        let c = capture(MODE_GLOBAL, 1);
        assert!(forbids(&c, MODE_GLOBAL, 1));
        assert!(forbids(&c, MODE_GLOBAL, 2));
        assert!(forbids(&c, MODE_THREAD_LOCAL, 1));
        assert!(!forbids(&c, MODE_THREAD_LOCAL, 2));
        assert!(!forbids(&c, MODE_RELAXED, 1));
        assert!(!forbids(&c, MODE_RELAXED, 2));
    }

    #[test]
    fn a_thread_local_capture_forbids_only_its_own_thread() {
        let c = capture(MODE_THREAD_LOCAL, 1);
        assert!(forbids(&c, MODE_GLOBAL, 1));
        assert!(forbids(&c, MODE_THREAD_LOCAL, 1));
        assert!(!forbids(&c, MODE_GLOBAL, 2));
        assert!(!forbids(&c, MODE_THREAD_LOCAL, 2));
    }

    #[test]
    fn a_relaxed_capture_forbids_no_one() {
        let c = capture(MODE_RELAXED, 1);
        for mode in [MODE_GLOBAL, MODE_THREAD_LOCAL, MODE_RELAXED] {
            assert!(!forbids(&c, mode, 1));
            assert!(!forbids(&c, mode, 2));
        }
    }

    #[test]
    fn the_thread_mode_is_exchanged_and_checked() {
        std::thread::spawn(|| {
            assert_eq!(thread_mode(), MODE_GLOBAL);
            assert_eq!(exchange_mode(MODE_RELAXED), Ok(MODE_GLOBAL));
            assert_eq!(thread_mode(), MODE_RELAXED);
            assert_eq!(exchange_mode(3), Err(CUDA_ERROR_INVALID_VALUE));
            assert_eq!(exchange_mode(MODE_GLOBAL), Ok(MODE_RELAXED));
        })
        .join()
        .unwrap();
    }
}
