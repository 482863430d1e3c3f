//! The set of tenant ledgers the monitor watches: every `<tenant>.ledger` in
//! the directory, found again on every round, so ledgers created later are
//! picked up within one round. A file that cannot be opened (not a ledger,
//! other version, truncated, corrupt) is reported once per change of the
//! file and never touched.

use super::log;
use crate::discovery;
use ledger::Ledger;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Open ledgers by path.
pub struct LedgerSet {
    dir: PathBuf,
    open: BTreeMap<PathBuf, Ledger>,
    /// Files refused, with the (inode, mtime, length) they were refused at.
    refused: HashMap<PathBuf, (u64, i64, u64)>,
    dir_error_logged: bool,
}

fn identity(path: &Path) -> Option<(u64, i64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.mtime_nsec() + m.mtime() * 1_000_000_000, m.len()))
}

impl LedgerSet {
    pub fn new(dir: PathBuf) -> LedgerSet {
        LedgerSet { dir, open: BTreeMap::new(), refused: HashMap::new(), dir_error_logged: false }
    }

    /// Finds new ledgers and forgets removed ones.
    pub fn refresh(&mut self) {
        let files = match discovery::ledger_files(&self.dir) {
            Ok(files) => {
                self.dir_error_logged = false;
                files
            }
            Err(e) => {
                if !self.dir_error_logged {
                    log::warn(&format!("cannot read the ledger directory {}: {e}", self.dir.display()));
                    self.dir_error_logged = true;
                }
                return;
            }
        };
        // A ledger replaced by another file (same name, other inode) is reopened.
        self.open.retain(|path, ledger| {
            let keep = files.contains(path) && identity(path).map(|i| i.0) == file_inode(ledger);
            if !keep {
                log::info(&format!("ledger {} is gone; no longer watched", path.display()));
            }
            keep
        });
        for path in files {
            if self.open.contains_key(&path) {
                continue;
            }
            let now = identity(&path);
            if now.is_some() && self.refused.get(&path) == now.as_ref() {
                continue;
            }
            match Ledger::open(&path) {
                Ok(ledger) => {
                    self.refused.remove(&path);
                    log::info(&format!("watching tenant {} ({})", ledger.tenant(), path.display()));
                    self.open.insert(path, ledger);
                }
                Err(e) => {
                    log::warn(&format!("ignoring {}: {e}", path.display()));
                    if let Some(now) = now {
                        self.refused.insert(path, now);
                    }
                }
            }
        }
    }

    /// Opens (creating if needed) the ledger of a tenant the configuration
    /// names, so its policy is in place before its first process starts.
    pub fn ensure_tenant(&mut self, tenant: &str) -> Option<&Ledger> {
        let path = ledger::tenant_path(&self.dir, tenant);
        if !self.open.contains_key(&path) {
            let now = identity(&path);
            if now.is_some() && self.refused.get(&path) == now.as_ref() {
                return None;
            }
            match Ledger::open_or_create(&self.dir, tenant) {
                Ok(ledger) => {
                    log::info(&format!("watching tenant {tenant} ({})", path.display()));
                    self.open.insert(path.clone(), ledger);
                }
                Err(e) => {
                    log::warn(&format!("cannot apply the configuration of tenant {tenant}: {e}"));
                    if let Some(now) = identity(&path) {
                        self.refused.insert(path.clone(), now);
                    }
                    return None;
                }
            }
        }
        self.open.get(&path)
    }

    pub fn ledgers(&self) -> impl Iterator<Item = &Ledger> {
        self.open.values()
    }
}

fn file_inode(ledger: &Ledger) -> Option<u64> {
    // SAFETY: fstat on a descriptor the ledger owns, into a zeroed struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to a live local.
    let rc = unsafe { libc::fstat(ledger.lock_fd(), &mut stat) };
    (rc == 0).then_some(stat.st_ino)
}
