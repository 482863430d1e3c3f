//! The set of tenant ledgers the monitor watches, in both layouts
//! ([`discovery`]), found again on every round, so ledgers created later are
//! picked up within one round. A file that cannot be opened (not a ledger,
//! other version, truncated, corrupt, or naming another tenant than its
//! path) is reported once per change of the file and never touched.
//!
//! With `--layout tenant-dirs` the monitor keeps `<dir>/tenants` private
//! (mode 0700: only root reaches it; pods reach their own directory through
//! their bind mount) and creates the directory of each tenant its
//! configuration names with mode 1777, so any uid of that tenant's pods can
//! use the ledger, and nobody else can reach it.

use super::log;
use crate::discovery::{self, Found, Layout};
use ledger::Ledger;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of `<dir>/tenants`: nobody but root lists or enters it.
const TENANTS_DIR_MODE: u32 = 0o700;
/// Mode of a tenant's directory: every uid of the tenant can create its
/// ledger there (sticky: none removes another uid's file).
const TENANT_DIR_MODE: u32 = 0o1777;

/// Open ledgers by path.
pub struct LedgerSet {
    dir: PathBuf,
    layout: Layout,
    open: BTreeMap<PathBuf, Ledger>,
    /// Files refused, with the (inode, mtime, length) they were refused at.
    refused: HashMap<PathBuf, (u64, i64, u64)>,
    /// Ledgers shadowed by the same tenant's ledger in the preferred layout,
    /// already reported.
    shadowed: HashSet<PathBuf>,
    dir_error_logged: bool,
}

fn identity(path: &Path) -> Option<(u64, i64, u64)> {
    std::fs::symlink_metadata(path).ok().map(|m| (m.ino(), m.mtime_nsec() + m.mtime() * 1_000_000_000, m.len()))
}

/// Creates `path` if needed and gives it `mode`, whatever the umask or
/// whoever created it first (the kubelet creates hostPath directories 0755).
fn ensure_dir_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_dir() {
        return Err(std::io::Error::other("exists and is not a directory"));
    }
    if meta.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

impl LedgerSet {
    /// Watches `dir`; with [`Layout::TenantDirs`], makes `<dir>/tenants` private.
    pub fn new(dir: PathBuf, layout: Layout) -> Result<LedgerSet, String> {
        if layout == Layout::TenantDirs {
            let tenants = discovery::tenants_dir(&dir);
            ensure_dir_mode(&tenants, TENANTS_DIR_MODE)
                .map_err(|e| format!("cannot make the tenants' directory {} (mode 0700): {e}", tenants.display()))?;
        }
        Ok(LedgerSet {
            dir,
            layout,
            open: BTreeMap::new(),
            refused: HashMap::new(),
            shadowed: HashSet::new(),
            dir_error_logged: false,
        })
    }

    /// Finds new ledgers and forgets removed ones.
    pub fn refresh(&mut self) {
        let found = match discovery::ledger_files(&self.dir) {
            Ok(found) => {
                self.dir_error_logged = false;
                found
            }
            Err(e) => {
                if !self.dir_error_logged {
                    log::warn(&format!("cannot read the ledger directory {}: {e}", self.dir.display()));
                    self.dir_error_logged = true;
                }
                return;
            }
        };
        let (kept, shadowed) = discovery::one_per_tenant(found, self.layout);
        for f in &shadowed {
            if self.shadowed.insert(f.path.clone()) {
                log::warn(&format!(
                    "tenant {} has a ledger in both layouts; watching the {} one, ignoring {}",
                    f.tenant,
                    self.layout.name(),
                    f.path.display()
                ));
            }
        }
        self.shadowed.retain(|p| shadowed.iter().any(|f| &f.path == p));
        // A ledger replaced by another file (same name, other inode) is reopened.
        self.open.retain(|path, ledger| {
            let keep = kept.iter().any(|f| &f.path == path) && identity(path).map(|i| i.0) == file_inode(ledger);
            if !keep {
                log::info(&format!("ledger {} is gone; no longer watched", path.display()));
            }
            keep
        });
        for f in kept {
            if self.open.contains_key(&f.path) {
                continue;
            }
            let now = identity(&f.path);
            if now.is_some() && self.refused.get(&f.path) == now.as_ref() {
                continue;
            }
            match Ledger::open(&f.path).map_err(|e| e.to_string()).and_then(|l| self.verify(&f, l)) {
                Ok(ledger) => {
                    self.refused.remove(&f.path);
                    log::info(&format!("watching tenant {} ({})", f.tenant, f.path.display()));
                    self.open.insert(f.path, ledger);
                }
                Err(e) => {
                    log::warn(&format!("ignoring {}: {e}", f.path.display()));
                    if let Some(now) = now {
                        self.refused.insert(f.path, now);
                    }
                }
            }
        }
    }

    /// An opened ledger is the tenant its path names, and the very file
    /// that was listed (not one swapped in between).
    fn verify(&self, found: &Found, ledger: Ledger) -> Result<Ledger, String> {
        discovery::check_tenant(found, &ledger.tenant())?;
        if identity(&found.path).map(|i| i.0) != file_inode(&ledger) {
            return Err("the file changed while it was being opened".into());
        }
        Ok(ledger)
    }

    /// Opens (creating if needed) the ledger of a tenant the configuration
    /// names, so its policy is in place before its first process starts. A
    /// tenant that has a ledger keeps it; a new one is made in the
    /// monitor's layout.
    pub fn ensure_tenant(&mut self, tenant: &str) -> Option<&Ledger> {
        let existing = self.open.iter().find(|(_, l)| l.tenant() == tenant).map(|(p, _)| p.clone());
        let path = match existing {
            Some(path) => path,
            None => {
                let dir = discovery::tenant_ledger_dir(&self.dir, tenant, self.layout);
                let path = ledger::tenant_path(&dir, tenant);
                let now = identity(&path);
                if now.is_some() && self.refused.get(&path) == now.as_ref() {
                    return None;
                }
                if self.layout == Layout::TenantDirs {
                    if let Err(e) = ensure_dir_mode(&dir, TENANT_DIR_MODE) {
                        log::warn(&format!("cannot make the directory of tenant {tenant} ({}): {e}", dir.display()));
                        return None;
                    }
                }
                match Ledger::open_or_create(&dir, tenant) {
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
                path
            }
        };
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
