//! Stream capture modes on simgpu, as a real driver enforces them: while a
//! stream is captured, a "potentially unsafe" call (allocating, freeing,
//! synchronising the context or the legacy stream, a synchronous copy)
//! fails with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` for the threads the
//! capture's mode and their own mode forbid, and breaks the capture: work
//! queued there and its end fail with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
//! and no graph comes out. A background thread that synchronises the
//! context therefore has to put itself in relaxed mode, as gpuslice's shim
//! does (`tests/simgpu_models.rs` captures PyTorch graphs under the shim).

use gpuslice_tests::Sim;

const OK: i64 = 0;
const UNSUPPORTED: i64 = 900;
const INVALIDATED: i64 = 901;
const WRONG_THREAD: i64 = 908;
/// `CUstreamCaptureStatus`.
const ACTIVE: i64 = 1;
const BROKEN: i64 = 2;

#[test]
fn captures_forbid_unsafe_calls_by_mode_and_break_when_one_is_made() {
    let sim = Sim::new();
    let out = sim.run(&mut sim.c("capture_modes"));
    out.assert_success();
    // Global: another thread in global mode may not allocate or synchronise;
    // trying breaks the capture.
    out.assert_rc("global.other_alloc", UNSUPPORTED)
        .assert_rc("global.status", BROKEN)
        .assert_rc("global.launch_after", INVALIDATED)
        .assert_rc("global.end", INVALIDATED)
        .assert_rc("global.graph", 0);
    out.assert_rc("global_sync.other_ctx_sync", UNSUPPORTED).assert_rc("global_sync.end", INVALIDATED);
    // Relaxed and thread-local threads may, and the capture survives.
    out.assert_rc("global_relaxed.other_alloc", OK)
        .assert_rc("global_relaxed.other_ctx_sync", OK)
        .assert_rc("global_relaxed.other_legacy_sync", OK)
        .assert_rc("global_thread_local.other_ctx_sync", OK)
        .assert_rc("global_relaxed.status", ACTIVE)
        .assert_rc("global_relaxed.end", OK)
        .assert_rc("global_relaxed.graph", 1);
    // Thread-local: only the capturing thread is held to the rule.
    out.assert_rc("thread_local.other_alloc", OK)
        .assert_rc("thread_local.other_ctx_sync", OK)
        .assert_rc("thread_local.status_before", ACTIVE)
        .assert_rc("thread_local.own_sync_copy", UNSUPPORTED)
        .assert_rc("thread_local.status_after", BROKEN)
        .assert_rc("thread_local.end", INVALIDATED)
        .assert_rc("thread_local.graph", 0);
    // Relaxed: no one is held to it.
    out.assert_rc("relaxed.own_alloc", OK).assert_rc("relaxed.other_alloc", OK).assert_rc("relaxed.end", OK).assert_rc("relaxed.graph", 1);
    // Only the capturing thread ends a non-relaxed capture, which goes on.
    out.assert_rc("wrong_thread.other_end", WRONG_THREAD)
        .assert_rc("wrong_thread.status", ACTIVE)
        .assert_rc("wrong_thread.end", OK)
        .assert_rc("wrong_thread.graph", 1);
    out.assert_rc("after.other_alloc", OK).assert_rc("after.own_ctx_sync", OK);
    assert_eq!(out.get("done"), "1", "{out}");
}
