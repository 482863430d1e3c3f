//! Waiting for a state instead of sleeping for a time.
//!
//! A test that needs something to happen (a monitor to reclaim a slot, a
//! device to report itself busy) polls for it and fails, naming what it
//! waited for and the last thing it saw, only if it has not happened within
//! a deadline long enough for a starved machine: a slow run still passes, a
//! run where it never happens still fails. Nothing here measures how long a
//! wait took; figures like that belong in the benchmarks.
//!
//! ```text
//!  poll::until("the slot is reclaimed", || used_bytes() == 0);
//!  let metrics = poll::fetch_until("the bypass is counted", || monitor.metrics(), |m| m.value(..) == Some(1.0));
//! ```
//!
//! `GS_TEST_WAIT_S` sets the deadline (default 30 s).

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Time between two looks.
const INTERVAL: Duration = Duration::from_millis(20);

/// How long a wait goes on before the state is taken never to arrive.
pub fn deadline() -> Duration {
    let secs = std::env::var("GS_TEST_WAIT_S").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    Duration::from_secs(secs)
}

/// Fetches a value until `done` accepts it, and returns it; fails the test
/// with `what` and the last value fetched if none was accepted within the
/// [`deadline`].
#[track_caller]
pub fn fetch_until<V: Debug>(what: &str, mut fetch: impl FnMut() -> V, mut done: impl FnMut(&V) -> bool) -> V {
    let limit = deadline();
    let until = Instant::now() + limit;
    loop {
        let value = fetch();
        if done(&value) {
            return value;
        }
        if Instant::now() >= until {
            panic!("waited {limit:?} for {what}, in vain; last seen:\n{value:#?}");
        }
        std::thread::sleep(INTERVAL);
    }
}

/// Waits until `condition` holds; fails the test with `what` if it has not
/// within the [`deadline`].
#[track_caller]
pub fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let limit = deadline();
    let until = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= until {
            panic!("waited {limit:?} for {what}, in vain");
        }
        std::thread::sleep(INTERVAL);
    }
}
