//! The set of tenant ledgers the monitor watches, in both layouts
//! ([`discovery`]), found again on every round, so ledgers created later are
//! picked up within one round. A file that cannot be opened (not a ledger,
//! other version, truncated, corrupt, or naming another tenant than its
//! path) is reported once per change of the file and never touched.
//!
//! Every byte of a ledger is its tenant's to write, so nothing in one may
//! stop or crash the monitor:
//! - nothing waits inside a round: a file still empty or not yet
//!   initialised is skipped and looked at again next round, and refused
//!   with one error line only once it has stayed so for
//!   [`UNINITIALISED_GRACE`];
//! - a ledger cut short, resized or whose header was overwritten while
//!   watched is dropped with one error line (a fault on a page past its new
//!   end is absorbed by the `SIGBUS` handler of [`sigbus`](super::sigbus),
//!   which this set installs);
//! - a slot holding a state no writer writes is reset to free when nobody
//!   holds its lock, with one line per slot saying so
//!   (`Ledger::reset_invalid_slots`): that is the one rewrite of a tenant's
//!   file the monitor does besides its policy, reclaim and leak correction.
//!
//! The directory: the monitor makes `<dir>` owned by root, mode 1777
//! (sticky: any local user can create its ledger, nobody can remove
//! another's), or root:G 1770 with `--group G` (only G's members), and
//! refuses a directory owned by another user. With `--layout tenant-dirs`
//! it keeps `<dir>/tenants` private (mode 0700: only root reaches it; pods
//! reach their own directory through their bind mount) and creates the
//! directory of each tenant its configuration names with mode 1777, and the
//! ledger in it with mode 0666, so any uid of that tenant's pods can use it
//! and nobody else can reach it. In the flat layout the ledgers it creates
//! are root's, mode 0600. The ledger crate's `open` module sets out the
//! whole model.

use super::{log, sigbus};
use crate::discovery::{self, Found, HostArgs, Layout};
use ledger::{FileAccess, Ledger};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Mode of `<dir>/tenants`: nobody but root lists or enters it.
const TENANTS_DIR_MODE: u32 = 0o700;
/// Mode of a tenant's directory: every uid of the tenant can create its
/// ledger there (sticky: none removes another uid's file).
const TENANT_DIR_MODE: u32 = 0o1777;
/// Mode of the ledger directory: every local user can create its ledger
/// (sticky: none removes or renames another's).
const DIR_MODE: u32 = 0o1777;
/// Mode of the ledger directory with `--group`: only the group's members.
const GROUP_DIR_MODE: u32 = 0o1770;
/// How long a file may stay empty or uninitialised before it is refused. A
/// gpuslice creator publishes only complete files, so this is for creators
/// of another kind; it is well past the shim's own wait for one.
pub const UNINITIALISED_GRACE: Duration = Duration::from_secs(2);

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
    /// Files found empty or uninitialised, with when they were first seen so.
    uninitialised: HashMap<PathBuf, Instant>,
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

/// The group named by `--group`: a name or a numeric gid.
fn group_id(group: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let name = std::ffi::CString::new(group).map_err(|_| format!("--group {group:?}: not a group name"))?;
    // SAFETY: a zeroed group struct is a valid value to fill in.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(format!("--group {group:?}: no such group (give a group name or a numeric gid)"));
    }
    Ok(entry.gr_gid)
}

/// Gives the ledger directory its owner and mode (see the module docs);
/// returns what it changed, for the log.
fn prepare_ledger_dir(dir: &Path, group: Option<u32>) -> Result<Option<String>, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot use the ledger directory {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("the ledger directory {} is not a directory", dir.display()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "the ledger directory {} belongs to uid {}, neither root nor this monitor's user (uid {me}): \
             that user could replace any tenant's ledger; remove it or give it to root",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = if group.is_some() { GROUP_DIR_MODE } else { DIR_MODE };
    let mut changed = Vec::new();
    if let Some(gid) = group.filter(|gid| *gid != meta.gid()) {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .map_err(|e| format!("cannot give the ledger directory {} to group {gid}: {e}", dir.display()))?;
        changed.push(format!("group {} -> {gid}", meta.gid()));
    }
    let old_mode = meta.mode() & 0o7777;
    if old_mode != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of the ledger directory {} to {mode:04o}: {e}", dir.display()))?;
        changed.push(format!("mode {old_mode:04o} -> {mode:04o}"));
    }
    Ok((!changed.is_empty()).then(|| changed.join(", ")))
}

impl LedgerSet {
    /// Watches the ledger directory `dir` of `host`: gives it its owner and
    /// mode, installs the fault handler that keeps the monitor alive when a
    /// ledger is cut short, and with [`Layout::TenantDirs`] makes
    /// `<dir>/tenants` private.
    pub fn new(dir: PathBuf, host: &HostArgs) -> Result<LedgerSet, String> {
        let group = host.group.as_deref().map(group_id).transpose()?;
        if let Some(changed) = prepare_ledger_dir(&dir, group)? {
            log::info(&format!("ledger directory {}: {changed}", dir.display()));
        }
        sigbus::install().map_err(|e| format!("cannot handle SIGBUS: {e}"))?;
        let layout = host.layout;
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
            uninitialised: HashMap::new(),
            dir_error_logged: false,
        })
    }

    /// Drops the ledgers whose file changed under the mapping in a way no
    /// writer changes it, with one error line each; resets the slots that
    /// hold a state no writer writes, with one line each.
    fn check_open(&mut self) {
        let mut damaged = Vec::new();
        for (path, ledger) in &self.open {
            if let Some(damage) = ledger.damage() {
                damaged.push((path.clone(), damage));
                continue;
            }
            for slot in ledger.reset_invalid_slots() {
                let bytes: Vec<String> = slot
                    .bytes_per_device
                    .iter()
                    .map(|(dev, b)| format!("{} on device {dev}", crate::status::human_bytes(*b)))
                    .collect();
                log::warn(&format!(
                    "tenant {}: slot {} held state word {:#x} (pid {}), which no writer writes, and nobody held its lock: \
                     reset it to free, returning {} to the tenant",
                    ledger.tenant(),
                    slot.slot_index,
                    slot.state_word,
                    slot.pid,
                    if bytes.is_empty() { "nothing".into() } else { bytes.join(", ") }
                ));
            }
        }
        for (path, damage) in damaged {
            self.open.remove(&path);
            log::error(&format!("dropped ledger {}: {damage}; not watched again until the file changes", path.display()));
            if let Some(now) = identity(&path) {
                self.refused.insert(path, now);
            }
        }
    }

    /// Drops damaged ledgers, resets invalid slots, finds new ledgers and
    /// forgets removed ones.
    pub fn refresh(&mut self) {
        self.check_open();
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
            match Ledger::open(&f.path) {
                Err(e) if e.is_uninitialised() => {
                    // Not yet a ledger: look again next round, up to a bound.
                    let since = *self.uninitialised.entry(f.path.clone()).or_insert_with(Instant::now);
                    if since.elapsed() >= UNINITIALISED_GRACE {
                        log::error(&format!(
                            "ignoring {}: it stayed empty or uninitialised for {} s ({e}); looked at again when it changes",
                            f.path.display(),
                            UNINITIALISED_GRACE.as_secs()
                        ));
                        self.uninitialised.remove(&f.path);
                        if let Some(now) = now {
                            self.refused.insert(f.path, now);
                        }
                    }
                }
                opened => {
                    self.uninitialised.remove(&f.path);
                    match opened.map_err(|e| e.to_string()).and_then(|l| self.verify(&f, l)) {
                        Ok(ledger) => {
                            self.refused.remove(&f.path);
                            log::info(&format!("watching tenant {} ({}{})", f.tenant, f.path.display(), owner_of(&f.path)));
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
        }
        self.uninitialised.retain(|path, _| path.exists());
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
                // A file under this name is the tenant's (or a squatter's):
                // `refresh` opens it, without waiting, once it is a sound
                // ledger. Only a missing one is made here.
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    if !meta.file_type().is_file() {
                        log::warn(&format!(
                            "cannot apply the configuration of tenant {tenant}: {} is not a regular file (links are not \
                             followed); it was left alone",
                            path.display()
                        ));
                        if let Some(now) = now {
                            self.refused.insert(path.clone(), now);
                        }
                    }
                    return None;
                }
                // In a tenant's own directory, any uid of its pods may use
                // the ledger; in the shared flat directory, only its owner.
                let access = match self.layout {
                    Layout::TenantDirs => FileAccess::Tenant,
                    Layout::Flat => FileAccess::Creator,
                };
                match Ledger::open_or_create_with(&dir, tenant, access) {
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

/// ", owner uid U, mode M" of a file, for the log.
fn owner_of(path: &Path) -> String {
    std::fs::symlink_metadata(path).map(|m| format!(", owner uid {}, mode {:04o}", m.uid(), m.mode() & 0o7777)).unwrap_or_default()
}

fn file_inode(ledger: &Ledger) -> Option<u64> {
    // SAFETY: fstat on a descriptor the ledger owns, into a zeroed struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to a live local.
    let rc = unsafe { libc::fstat(ledger.lock_fd(), &mut stat) };
    (rc == 0).then_some(stat.st_ino)
}
