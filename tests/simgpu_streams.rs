//! Streams on the simulated GPU: the context a stream belongs to, host
//! functions and callbacks run in stream order, stream-ordered copies and
//! fills, waits between streams, and events on an idle context.

use gpuslice_tests::{cu, Sim};

#[test]
fn a_stream_reports_the_context_it_belongs_to() {
    let sim = Sim::new().devices(2).memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("getctx"));
    out.assert_success();
    for case in [
        "stream_a",
        "stream_b",
        "null_is_current",
        "legacy_is_current",
        "per_thread_is_current",
        "v2_stream_a",
        "v2_green_null",
        "ptsz_v2_stream_a",
        "proc_12000_stream_b",
    ] {
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

#[test]
fn host_functions_and_callbacks_run_in_stream_order_off_the_calling_thread() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("hostfn"));
    out.assert_success();
    // Queuing returned before anything ran, with the stream still busy.
    assert_eq!(out.i64("called_early"), 0, "{out}");
    out.assert_rc("query", cu::NOT_READY);
    let host_at = out.f64("host_at_us");
    assert!(host_at >= 95_000.0, "the host function runs after the 100 ms kernel before it\n{out}");
    // The 50 ms kernel starts only once the host function (sleeping 100 ms)
    // has returned, and the callback follows it.
    assert!(out.f64("callback_at_us") >= host_at + 140_000.0, "{out}");
    assert!(out.f64("sync_us") >= out.f64("callback_at_us"), "synchronising waits for the callback\n{out}");
    out.assert_rc("callback_status", cu::SUCCESS);
    assert_eq!(out.i64("callback_stream_ok"), 1, "{out}");
    assert_eq!(out.i64("other_thread"), 1, "{out}");
    assert_eq!(out.i64("ptsz_called"), 1, "{out}");
    out.assert_rc("null_fn_rc", cu::INVALID_VALUE);
}

fn check_wait(same_context: bool) {
    let sim = Sim::new().devices(2).memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").args(["wait", if same_context { "1" } else { "0" }]));
    out.assert_success();
    out.assert_rc("query_b", cu::NOT_READY);
    assert!(out.f64("waited_at_us") >= 190_000.0, "work after the wait starts after the 200 ms kernel\n{out}");
    assert!(out.f64("sync_b_us") >= 190_000.0, "synchronising the waiting stream waits for the event\n{out}");
    out.assert_rc("never_recorded_rc", cu::SUCCESS);
}

#[test]
fn a_stream_waits_for_an_event_of_another_context() {
    check_wait(false);
}

#[test]
fn a_stream_waits_for_an_event_of_another_stream_of_its_context() {
    check_wait(true);
}

#[test]
fn an_event_recorded_on_an_idle_context_completes_at_once() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("idle"));
    out.assert_success();
    // As a GPU's front end takes it in: no wait for a worker to wake.
    out.assert_rc("idle_query", cu::SUCCESS);
    out.assert_rc("again_query", cu::SUCCESS);
    // Behind work, a record still completes in stream order.
    out.assert_rc("behind_query", cu::NOT_READY);
    assert!(out.f64("elapsed_ms") >= 49.0, "{out}");
    assert_eq!(out.i64("again_after"), 1, "{out}");
    // Another context waits for it without hanging.
    out.assert_rc("other_wait_rc", cu::SUCCESS);
}

#[test]
fn a_completion_is_seen_at_its_time_on_the_device_clock() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("due"));
    out.assert_success();
    // The worker lays out up to 500 µs of work at once and wakes at its
    // end: E1, 50 µs into such a batch, was seen about 450 µs late when
    // only the worker published. A thread asking or waiting is told at
    // E1's time.
    assert!(out.f64("late_us") < 250.0, "{out}");
    assert!(out.f64("late_sync_us") < 250.0, "{out}");
    // And not before its time: E2 is 100 ms further on.
    assert_eq!(out.i64("e2_early"), 0, "{out}");
    // A record behind a copy of its batch waits for the copy to happen.
    assert_eq!(out.get("behind_copy"), "cd", "{out}");
}

#[test]
fn asynchronous_copies_and_fills_run_when_their_stream_reaches_them() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    let out = sim.run(sim.c("sim_streams").arg("copies"));
    out.assert_success();
    // Queued behind a 150 ms kernel: nothing has happened yet.
    assert_eq!(out.get("pinned_early"), "00", "the fill and copy must wait for the kernel\n{out}");
    out.assert_rc("query", cu::NOT_READY);
    out.assert_rc("event_query", cu::NOT_READY);
    assert_eq!(out.get("pinned_late"), "ab", "{out}");
    assert!(out.f64("event_us") >= 140_000.0, "{out}");
    // A pageable source is staged at the call.
    assert_eq!(out.get("staged"), "11", "{out}");
    // A pageable destination: the call returns with the data, after the kernel.
    assert!(out.f64("pageable_us") >= 90_000.0, "{out}");
    assert_eq!(out.get("pageable"), "04", "{out}");
}

#[test]
fn memory_pools_report_what_is_allocated_from_them() {
    // Two devices, only the second visible: the pool's location is ordinal 0.
    let sim = Sim::new().devices(2).memory("2GiB").context_memory("64MiB").env("CUDA_VISIBLE_DEVICES", "1");
    let out = sim.run(sim.c("sim_streams").arg("pools"));
    out.assert_success();
    assert_eq!(out.u64("threshold"), 1024, "{out}");
    let step = |n: u32| {
        [out.u64(&format!("used.{n}")), out.u64(&format!("reserved.{n}")), out.u64(&format!("high.{n}")), out.u64(&format!("dropped.{n}"))]
    };
    // [used, reserved, used high-water mark, device bytes taken], in MiB:
    // the device sees what the pool reserves, and a freed block stays
    // reserved below the release threshold.
    assert_eq!(step(1), [30, 30, 30, 30], "three 10 MiB allocations\n{out}");
    assert_eq!(step(2), [20, 30, 30, 30], "one freed in stream order, kept under the threshold\n{out}");
    assert_eq!(step(3), [20, 30, 20, 30], "the high mark reset to the current figure\n{out}");
    assert_eq!(step(4), [0, 0, 20, 0], "everything freed (cuMemFree and cuMemFreeAsync), then trimmed\n{out}");
    assert_eq!(out.u64("created_used"), 4, "{out}");
    assert_eq!(out.i64("location_id"), 0, "{out}");
    assert_eq!(out.i64("location_type"), 1, "{out}");
    out.assert_rc("set_high_rc", cu::INVALID_VALUE);
    out.assert_rc("set_type_rc", cu::INVALID_VALUE);
}
