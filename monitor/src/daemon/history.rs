//! The monitor's side of the history ([`crate::history`]): every round is
//! folded into the open interval; once an interval is over, its rows go to
//! a writer thread that writes them in one transaction and, once an hour,
//! deletes what is older than the retention. The round never waits on the
//! disk: if the writer falls behind by more than a few intervals, an
//! interval is dropped and the log says so. When the monitor stops, the
//! open interval is written before it exits.
//!
//! A history that cannot be opened (a broken file is moved aside once and
//! started afresh) or written costs only the history: the monitor goes on.

use super::log;
use crate::history::aggregate::{Aggregator, Batch};
use crate::history::store::{CreateError, Store};
use crate::snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Intervals waiting for the writer at most.
const QUEUE_DEPTH: usize = 8;
/// How often old rows are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// What `gpuslice monitor`'s history flags say.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub retention: Duration,
    pub interval: Duration,
}

/// Parses `--history-retention`: a duration in gpuslice's one grammar
/// ([`crate::duration`]: `30d`, `2w`, `12h`), at least a minute.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    let value = crate::duration::parse(text)?;
    if value < Duration::from_secs(60) {
        return Err(format!("{text:?}: the history keeps at least a minute (1m); use --no-history to keep none"));
    }
    Ok(value)
}

/// Parses `--history-interval`: a duration of at least one second.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let value = crate::duration::parse(text)?;
    if value < Duration::from_secs(1) {
        return Err(format!("{text:?}: an interval is at least 1s"));
    }
    Ok(value)
}

fn unix_ms(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Records the rounds; does nothing when the history is off or could not
/// be opened.
pub struct Recorder {
    aggregator: Aggregator,
    interval_ms: u64,
    writer: Option<(SyncSender<Batch>, JoinHandle<()>)>,
    dropped_intervals: u64,
}

impl Recorder {
    /// A recorder that records nothing (`--no-history`); `report` is told
    /// of no file.
    pub fn off(dir: &Path) -> Recorder {
        let _ = std::fs::remove_file(crate::allocation::state_dir(dir).join(crate::history::POINTER_NAME));
        Recorder::none()
    }

    fn none() -> Recorder {
        Recorder { aggregator: Aggregator::default(), interval_ms: u64::MAX, writer: None, dropped_intervals: 0 }
    }

    /// Opens the history at `file` (made absolute), names it in the
    /// monitor's own directory for `report`, and starts the writer.
    pub fn start(dir: &Path, file: &Path, settings: Settings) -> Recorder {
        let path = match place(dir, file) {
            Ok(path) => path,
            Err(e) => {
                log::warn(&format!("history is off: {e}"));
                return Recorder::off(dir);
            }
        };
        let store = match open(&path) {
            Ok(store) => store,
            Err(e) => {
                log::warn(&format!("history is off: {e}"));
                return Recorder::off(dir);
            }
        };
        if let Err(e) = name_for_report(dir, &path) {
            log::warn(&format!("history: `gpuslice report` will not find {} by itself ({e}); give it --history-file", path.display()));
        }
        if on_tmpfs(path.parent().unwrap_or(Path::new("/"))) {
            log::warn(&format!(
                "history: {} is on tmpfs and is lost at reboot; --history-file on a disk keeps it (the shipped unit uses /var/lib/gpuslice)",
                path.display()
            ));
        }
        let (sender, receiver) = sync_channel::<Batch>(QUEUE_DEPTH);
        let retention = settings.retention;
        let thread = std::thread::Builder::new().name("history".into()).spawn({
            let path = path.clone();
            move || write_loop(store, receiver, retention, path)
        });
        match thread {
            Ok(handle) => {
                log::info(&format!(
                    "history: {} (an interval every {}, kept {})",
                    path.display(),
                    humantime::format_duration(settings.interval),
                    humantime::format_duration(settings.retention)
                ));
                Recorder {
                    aggregator: Aggregator::default(),
                    interval_ms: u64::try_from(settings.interval.as_millis()).unwrap_or(u64::MAX).max(1000),
                    writer: Some((sender, handle)),
                    dropped_intervals: 0,
                }
            }
            Err(e) => {
                log::warn(&format!("history is off: cannot start its writer: {e}"));
                Recorder::off(dir)
            }
        }
    }

    /// Folds this round's snapshot in; hands the interval to the writer
    /// once it is over (or early, where a tenant's row would pass to
    /// another holder or team).
    /// `teams` is the monitor's decision of who is in which team this round.
    pub fn record(
        &mut self,
        snapshot: &Snapshot,
        allocations: &[crate::metrics::AllocationInfo],
        teams: &crate::teams::membership::Membership,
    ) {
        if self.writer.is_none() {
            return;
        }
        self.aggregator.set_origins(
            allocations.iter().filter_map(|a| crate::history::aggregate::Origin::from_labels(&a.labels).map(|o| (a.tenant.clone(), o))),
        );
        self.aggregator.set_teams(teams.pairs().map(|(tenant, team)| (tenant.to_string(), team.to_string())));
        let now_ms = unix_ms(SystemTime::now());
        // Closed early where a tenant's rows would pass to another holder.
        if self.aggregator.started_ms().is_some_and(|start| now_ms.saturating_sub(start) >= self.interval_ms || now_ms < start)
            || self.aggregator.holder_changes(snapshot, now_ms)
        {
            self.hand_over(now_ms);
        }
        self.aggregator.fold(snapshot, now_ms);
    }

    fn hand_over(&mut self, now_ms: u64) {
        let (Some(batch), Some((sender, _))) = (self.aggregator.close(now_ms), &self.writer) else {
            return;
        };
        if batch.left_out > 0 {
            log::limited(
                "history-left-out",
                log::Level::Warn,
                &format!("history: {} tenant-device pair(s) over the bound of an interval were not recorded", batch.left_out),
            );
        }
        match sender.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped_intervals += 1;
                log::limited(
                    "history-behind",
                    log::Level::Warn,
                    &format!("history: the writer is behind; {} interval(s) dropped so far", self.dropped_intervals),
                );
            }
            Err(TrySendError::Disconnected(_)) => self.writer = None,
        }
    }
}

impl Drop for Recorder {
    /// Writes the open interval and waits for the writer to finish.
    fn drop(&mut self) {
        self.hand_over(unix_ms(SystemTime::now()));
        if let Some((sender, handle)) = self.writer.take() {
            drop(sender);
            let _ = handle.join();
        }
    }
}

/// The history's absolute path, its directory made (0700) if missing and
/// checked: a directory another user could write would let a tenant swap
/// the file under the monitor, so it must belong to the monitor's user
/// (or root) and be writable by no group or other.
fn place(dir: &Path, file: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let path = std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let Some(parent) = path.parent().filter(|_| path.file_name().is_some()) else {
        return Err(format!("--history-file {}: not a file name", file.display()));
    };
    if path != crate::history::path(dir) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
    }
    let meta = std::fs::symlink_metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || (meta.uid() != me && meta.uid() != 0) || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of the monitor's user (or root) that no group or other may write (mode {:o}, owner {})",
            parent.display(),
            meta.mode() & 0o7777,
            meta.uid()
        ));
    }
    Ok(path)
}

/// Names `path` in the monitor's own directory, where `gpuslice report`
/// looks first (written whole, then renamed into place).
fn name_for_report(dir: &Path, path: &Path) -> std::io::Result<()> {
    let state = crate::allocation::state_dir(dir);
    let pointer = state.join(crate::history::POINTER_NAME);
    let partial = state.join(format!("{}.partial", crate::history::POINTER_NAME));
    let _ = std::fs::remove_file(&partial);
    std::fs::write(&partial, format!("{}\n", path.display()))?;
    std::fs::rename(&partial, &pointer)
}

/// Whether `dir` is on a file system that a reboot empties.
fn on_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes one struct into a zeroed local; the path is a
    // NUL-terminated string alive for the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.f_type as libc::c_long;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// Opens the store; a file that is not a history this monitor can write
/// is moved aside once (kept, not deleted), and a new one made.
fn open(path: &Path) -> Result<Store, String> {
    match Store::create(path) {
        Ok(store) => Ok(store),
        Err(CreateError::NotAHistory(first)) => {
            let aside = path.with_extension(format!("sqlite.unreadable-{}", unix_ms(SystemTime::now()) / 1000));
            std::fs::rename(path, &aside).map_err(|e| format!("{first}; cannot move it aside: {e}"))?;
            log::warn(&format!("history: {first}; moved to {} and started afresh", aside.display()));
            Store::create(path).map_err(|e| e.to_string())
        }
        Err(CreateError::Failed(e)) => Err(e),
    }
}

fn write_loop(mut store: Store, batches: std::sync::mpsc::Receiver<Batch>, retention: Duration, path: PathBuf) {
    let mut last_prune: Option<std::time::Instant> = None;
    let mut failing = false;
    for batch in batches {
        match store.write(&batch) {
            Ok(()) if failing => {
                log::info(&format!("history: {} is written again", path.display()));
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    log::warn(&format!("history: an interval was not written: {e}"));
                }
                failing = true;
            }
        }
        if last_prune.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            last_prune = Some(std::time::Instant::now());
            let before_s = (unix_ms(SystemTime::now()) / 1000).saturating_sub(retention.as_secs());
            if let Err(e) = store.prune(before_s) {
                log::warn(&format!("history: old intervals were not deleted: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_history_is_moved_aside_and_a_new_one_made() {
        let dir = std::env::temp_dir().join(format!("gpuslice-history-aside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.sqlite");
        std::fs::write(&path, b"this is not a database, just text long enough to hold a header of one").unwrap();
        let mut store = open(&path).unwrap();
        store.write(&Batch::default()).unwrap();
        let aside: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("history.sqlite.unreadable-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(dir.join(&aside[0])).unwrap(), b"this is not a database, just text long enough to hold a header of one");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn durations_are_parsed_with_clear_errors() {
        assert_eq!(parse_retention("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_retention("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_retention("30x").unwrap_err().contains(crate::duration::FORMAT));
        assert!(parse_retention("10s").unwrap_err().contains("--no-history"));
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert!(parse_interval("500ms").unwrap_err().contains("at least 1s"));
    }
}
