//! The monitor's history: what each tenant used on each device, kept
//! compactly for weeks so that `gpuslice report` can say which tenants
//! ask for far more than they use.
//!
//! Data flow:
//! - every round the monitor folds its [`Snapshot`](crate::snapshot::Snapshot)
//!   into an open interval in memory ([`aggregate::Aggregator`]);
//! - once an interval (a minute by default) is over, it becomes one row per
//!   tenant and device and one per device ([`aggregate::Batch`]), which the
//!   monitor writes in one transaction ([`store::Store::write`]) and then
//!   deletes what is older than the retention;
//! - `gpuslice report` reads the rows of a window ([`store::Store::read`])
//!   and sums each tenant and device up ([`summary`]), with a recommendation
//!   made by a stated rule ([`summary::recommend_memory`],
//!   [`summary::recommend_compute`]).
//!
//! The file is `<dir>/.monitor/history.sqlite`, mode 0600, in the monitor's
//! own 0700 directory: no tenant can write it, and only root (or the
//! monitor's own user) can read it. Nothing the monitor decides reads the
//! history: it is for people. Its figures are the ledgers' (what the
//! tenants' shims counted) and the monitor's own (caps and compute), so a
//! tenant that lies in its ledger changes only its own report; the values
//! are clamped and the rows bounded so that it cannot stop the others'
//! history from being written either.

pub mod aggregate;
pub mod store;
pub mod summary;

use std::path::{Path, PathBuf};

/// The history's file name in the monitor's state directory.
pub const FILE_NAME: &str = "history.sqlite";

/// Where the monitor of ledger directory `dir` keeps its history.
pub fn path(dir: &Path) -> PathBuf {
    crate::allocation::state_dir(dir).join(FILE_NAME)
}
