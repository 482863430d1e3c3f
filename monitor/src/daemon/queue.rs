//! The admission queue and committed memory, for `/metrics`: the monitor
//! plays no part in the queue (see [`crate::queue`]); it only reads it.
//!
//! Each round it peeks at the queue directory ([`Queue::peek`]: no file
//! created or removed, a few non-blocking tries of the lock, never a wait
//! behind a job's look) and
//! - counts the live jobs by state;
//! - counts every admitted job once in the wait histogram, by priority,
//!   with `started_unix_ms - submitted_unix_ms` from its file: a job seen
//!   running (live, or ended but its file not yet cleared) for the first
//!   time. A job that starts and ends, and whose file is cleared, between
//!   two rounds is not seen;
//! - computes the memory committed per device the way `gpuslice devices`
//!   does ([`crate::queue::committed_bytes`]).
//!
//! Job files are anyone's: a file that is not a job is logged once and
//! skipped, and figures from a job file are bounded (a wait is at least 0
//! and at most a day, priorities are i32).

use crate::metrics::QueueFigures;
use crate::queue::store::{Job, JobState, Queue};
use crate::snapshot::Snapshot;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The longest wait counted; a file that says more is counted at this.
const MAX_WAIT_SECONDS: f64 = 86_400.0;
/// Most distinct priorities with a histogram of their own; jobs of others
/// are counted under the nearest one kept (the label set stays small
/// whatever the files say).
const MAX_PRIORITIES: usize = 32;

/// What the monitor remembers of the queue between rounds.
#[derive(Debug, Default)]
pub struct QueueState {
    /// Ids of admitted jobs already counted that still have a file.
    counted: HashSet<u64>,
    /// Files already reported as not being jobs.
    reported: HashSet<String>,
    /// The live jobs last read (kept when a peek gives up on the lock).
    live: Vec<Job>,
    figures: QueueFigures,
}

impl QueueState {
    /// Reads the queue beside `dir` and returns the figures and the memory
    /// committed per device in `snapshot`.
    pub fn read(&mut self, dir: &Path, snapshot: &Snapshot) -> (QueueFigures, HashMap<String, u64>) {
        match Queue::at(dir).peek() {
            Ok(Some(peek)) => {
                for problem in peek.problems {
                    if self.reported.insert(problem.clone()) {
                        super::log::warn(&format!("queue file {problem}; skipped"));
                    }
                }
                let present: HashSet<u64> = peek.live.iter().chain(&peek.ended).map(|j| j.id).collect();
                self.counted.retain(|id| present.contains(id));
                for job in peek.live.iter().chain(&peek.ended).filter(|j| j.state == JobState::Running) {
                    if self.counted.insert(job.id) {
                        self.observe(job);
                    }
                }
                self.figures.waiting = peek.live.iter().filter(|j| j.state == JobState::Waiting).count() as u64;
                self.figures.running = peek.live.iter().filter(|j| j.state == JobState::Running).count() as u64;
                self.live = peek.live;
            }
            // A job is looking: last round's figures stand.
            Ok(None) => {}
            Err(e) => {
                if self.reported.insert(e.clone()) {
                    super::log::warn(&format!("cannot read the admission queue: {e}"));
                }
            }
        }
        let capacity: HashMap<String, u64> = snapshot.devices.iter().map(|d| (d.uuid.clone(), d.memory_total_bytes)).collect();
        let committed = crate::queue::committed_bytes(&capacity, &self.live, &snapshot.tenants);
        (self.figures.clone(), committed)
    }

    fn observe(&mut self, job: &Job) {
        let Some(started) = job.started_unix_ms else { return };
        let seconds = (started.saturating_sub(job.submitted_unix_ms) as f64 / 1e3).min(MAX_WAIT_SECONDS);
        let histograms = &mut self.figures.wait_seconds;
        let priority = if histograms.contains_key(&job.priority) || histograms.len() < MAX_PRIORITIES {
            job.priority
        } else {
            // The nearest priority already kept.
            *histograms.keys().min_by_key(|p| (i64::from(**p) - i64::from(job.priority)).abs()).unwrap_or(&job.priority)
        };
        histograms.entry(priority).or_default().observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::WAIT_BUCKETS_SECONDS;

    fn job(id: u64, priority: i32, submitted: u64, started: Option<u64>) -> Job {
        Job {
            id,
            name: None,
            priority,
            gpus: 1,
            memory_bytes: Some(10),
            placement: Default::default(),
            tenant: "queue-1".into(),
            uid: 0,
            pid: 1,
            submitted_unix_ms: submitted,
            state: JobState::Running,
            devices: vec!["GPU-0".into()],
            started_unix_ms: started,
            command: vec![],
        }
    }

    #[test]
    fn waits_are_counted_once_bounded_and_by_priority() {
        let mut state = QueueState::default();
        state.counted.insert(1);
        state.observe(&job(2, 5, 1_000, Some(1_040)));
        state.observe(&job(3, 5, 9_000, Some(1_000)));
        state.observe(&job(4, 0, 0, Some(u64::MAX)));
        let five = &state.figures.wait_seconds[&5];
        assert_eq!(five.count, 2);
        assert_eq!(five.per_bucket[0], 1, "a start before submission counts as no wait");
        assert_eq!(five.per_bucket[1], 1, "40 ms is in the 50 ms bucket");
        let zero = &state.figures.wait_seconds[&0];
        assert_eq!((zero.sum_seconds, zero.per_bucket[WAIT_BUCKETS_SECONDS.len()]), (MAX_WAIT_SECONDS, 1));
        for p in 100..200 {
            state.observe(&job(p as u64, p, 0, Some(0)));
        }
        assert_eq!(state.figures.wait_seconds.len(), MAX_PRIORITIES);
    }
}
