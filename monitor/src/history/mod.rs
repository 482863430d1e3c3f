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
//! The file is `<dir>/.monitor/history.sqlite` by default, mode 0600, in
//! the monitor's own 0700 directory: no tenant can write it, and only root
//! (or the monitor's own user) can read it. The ledger directory is tmpfs
//! under the shipped unit and the chart, so they keep the history on disk
//! instead (`monitor --history-file /var/lib/gpuslice/history.sqlite`): a
//! directory only the monitor's user may write, or the monitor records
//! nothing. The monitor names the file it writes in its own directory
//! ([`POINTER_NAME`]), where `gpuslice report` finds it. Nothing the monitor decides reads the
//! history: it is for people. Its figures are the ledgers' (what the
//! tenants' shims counted) and the monitor's own (caps and compute), so a
//! tenant that lies in its ledger changes only its own report; the values
//! are clamped and the rows bounded so that it cannot stop the others'
//! history from being written either.

pub mod aggregate;
pub mod groups;
pub mod store;
pub mod summary;

use std::path::{Path, PathBuf};

/// The history's file name in the monitor's state directory.
pub const FILE_NAME: &str = "history.sqlite";

/// The file in the monitor's own directory that names where its history
/// is, for `gpuslice report`.
pub const POINTER_NAME: &str = "history-location";

/// Where the monitor of ledger directory `dir` keeps its history when no
/// `--history-file` says otherwise.
pub fn path(dir: &Path) -> PathBuf {
    crate::allocation::state_dir(dir).join(FILE_NAME)
}

/// Where the monitor of `dir` said it writes its history, else the
/// default. Only the monitor writes its own directory (0700), so what it
/// holds is trusted; anything but one absolute path is ignored.
pub fn recorded_path(dir: &Path) -> PathBuf {
    let pointer = crate::allocation::state_dir(dir).join(POINTER_NAME);
    std::fs::read_to_string(pointer)
        .ok()
        .map(|text| PathBuf::from(text.trim_end_matches('\n')))
        .filter(|p| p.is_absolute() && !p.as_os_str().is_empty())
        .unwrap_or_else(|| path(dir))
}
