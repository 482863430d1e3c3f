//! Streams on the simulated GPU: the context a stream belongs to, host
//! functions and callbacks run in stream order, stream-ordered copies and
//! fills, and waits between streams.

use gpuslice_tests::{cu, Sim};

#[test]
fn a_stream_reports_the_context_it_belongs_to() {
    let sim = Sim::new().devices(2).memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("getctx"));
    out.assert_success();
    for case in ["stream_a", "stream_b", "null_is_current", "legacy_is_current", "per_thread_is_current", "v2_stream_a", "v2_green_null", "ptsz_v2_stream_a", "proc_12000_stream_b"] {
        assert_eq!(out.i64(case), 1, "{case}\n{out}");
    }
    out.assert_rc("null_out_rc", cu::INVALID_VALUE);
    out.assert_rc("bad_stream_rc", cu::INVALID_HANDLE);
    out.assert_rc("no_current_rc", cu::INVALID_CONTEXT);
}

#[test]
fn a_retained_allocation_handle_keeps_its_memory_until_released_again() {
    const SIZE: u64 = 64 << 20;
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("retain"));
    out.assert_success();
    assert_eq!(out.i64("same_handle"), 1, "{out}");
    let before = out.u64("free.before");
    assert_eq!(out.u64("free.created"), before - SIZE, "{out}");
    assert_eq!(out.u64("free.released_once"), before - SIZE, "still mapped and retained\n{out}");
    assert_eq!(out.u64("free.unmapped"), before - SIZE, "the retained reference still holds it\n{out}");
    assert_eq!(out.u64("free.released_twice"), before, "{out}");
    out.assert_rc("release_again_rc", cu::INVALID_VALUE);
    out.assert_rc("retain_unmapped_rc", cu::INVALID_VALUE);
}
