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
//!   end is absorbed by the `SIGBUS` handler of [`sigbus`](crate::sigbus),
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
//! are root's, mode 0600. It changes the directory's owner or mode only
//! where it may ([`DirChanges`]): the default directory, one it created
//! itself, or any with `--fix-mode`; any other it refuses, naming what it
//! found and what it needs. The ledger crate's `open` module sets out the
//! whole model.

use super::log::{self, Level};
use crate::discovery::{self, Found, HostArgs, Layout};
use crate::error::Error;
use crate::sigbus;
use ledger::{AttachError, FileAccess, Ledger, MappedLedger};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
/// Mode of the ledger directory of a monitor that is not root: it can open
/// no other user's ledger (each is its owner's, 0600) nor govern their
/// processes, so it is its own user's private monitor, and its directory
/// is as private as that user's processes require of their own
/// (`/tmp/gpuslice-<uid>` must be 0700).
const PRIVATE_DIR_MODE: u32 = 0o700;
/// The ledger directory the monitor may always set up itself.
pub const DEFAULT_DIR: &str = "/run/gpuslice";
/// How long a file may stay empty or uninitialised before it is refused. A
/// gpuslice creator publishes only complete files, so this is for creators
/// of another kind; it is well past the shim's own wait for one.
pub const UNINITIALISED_GRACE: Duration = Duration::from_secs(2);
/// Ledgers of one file owner watched at most, by default.
pub const DEFAULT_MAX_LEDGERS_PER_UID: usize = 32;
/// Ledgers watched at most, by default.
pub const DEFAULT_MAX_LEDGERS: usize = 512;

/// How many ledgers the monitor watches at most (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Per file owner (uid), root's files and the configured tenants' aside.
    pub per_uid: usize,
    /// In all, the configured tenants' aside.
    pub total: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { per_uid: DEFAULT_MAX_LEDGERS_PER_UID, total: DEFAULT_MAX_LEDGERS }
    }
}

/// Which bound kept a file from being watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OverBound {
    PerUid,
    Total,
}

impl OverBound {
    /// Its name in metrics.
    pub fn reason(self) -> &'static str {
        match self {
            OverBound::PerUid => "per_uid_bound",
            OverBound::Total => "total_bound",
        }
    }
}

/// A ledger file that could be watched, as the bounds see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Candidate {
    /// Its owner.
    uid: u32,
    /// Its tenant is named by the configuration: always watched.
    configured: bool,
    /// Not held to the per-uid bound (root's, or under a `tenants/` only
    /// root can write).
    per_uid_exempt: bool,
}

/// Where the bounds stand: what is watched now, per owner and in all.
#[derive(Debug, Clone, Default)]
struct Tally {
    per_uid: HashMap<u32, usize>,
    total: usize,
}

impl Tally {
    /// Whether `candidate` may be watched on top of what is; counts it if so.
    fn admit(&mut self, bounds: Bounds, candidate: Candidate) -> Result<(), OverBound> {
        if !candidate.configured {
            let of_uid = self.per_uid.get(&candidate.uid).copied().unwrap_or(0);
            if !candidate.per_uid_exempt && of_uid >= bounds.per_uid {
                return Err(OverBound::PerUid);
            }
            if self.total >= bounds.total {
                return Err(OverBound::Total);
            }
        }
        self.count(candidate);
        Ok(())
    }

    fn count(&mut self, candidate: Candidate) {
        *self.per_uid.entry(candidate.uid).or_default() += 1;
        self.total += 1;
    }
}

/// Whether the monitor may change the ledger directory's owner and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirChanges {
    /// The default directory, one the monitor just created, or `--fix-mode`.
    Allowed,
    /// A directory someone else gave it: refused if it would change it.
    Refused,
}

/// A file as `lstat` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStat {
    ino: u64,
    mtime_ns: i64,
    len: u64,
    uid: u32,
}

impl FileStat {
    /// What identifies a version of the file.
    fn identity(self) -> (u64, i64, u64) {
        (self.ino, self.mtime_ns, self.len)
    }
}

fn file_stat(path: &Path) -> Option<FileStat> {
    std::fs::symlink_metadata(path).ok().map(|m| FileStat {
        ino: m.ino(),
        mtime_ns: m.mtime_nsec() + m.mtime() * 1_000_000_000,
        len: m.len(),
        uid: m.uid(),
    })
}

fn identity(path: &Path) -> Option<(u64, i64, u64)> {
    file_stat(path).map(FileStat::identity)
}

/// A watched ledger: mapped for good, opened for the round.
struct Watched {
    mapped: MappedLedger,
    candidate: Candidate,
    /// The ledger with its descriptor, from the start of a round to its end.
    attached: Option<Ledger>,
}

/// Open ledgers by path.
pub struct LedgerSet {
    dir: PathBuf,
    layout: Layout,
    bounds: Bounds,
    open: BTreeMap<PathBuf, Watched>,
    /// Files refused, with the (inode, mtime, length) they were refused at.
    refused: HashMap<PathBuf, (u64, i64, u64)>,
    /// Ledgers shadowed by the same tenant's ledger in the preferred layout,
    /// already reported.
    shadowed: HashSet<PathBuf>,
    /// Files found empty or uninitialised, with when they were first seen so.
    uninitialised: HashMap<PathBuf, Instant>,
    /// Files not watched because of a bound, with the inode counted.
    over_bound: HashMap<PathBuf, (u64, OverBound)>,
    /// Owners past the per-uid bound, and whether the total bound is
    /// reached, as last said in the log.
    uids_over: BTreeSet<u32>,
    total_over: bool,
    /// Files refused for a bound, counted once each, by reason.
    refused_total: BTreeMap<&'static str, u64>,
    /// The tenants the configuration names.
    configured: HashSet<String>,
    dir_error_logged: bool,
    tenants_problem: Option<String>,
    /// Whether every ledger there is was seen this round.
    complete: bool,
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
    let shown = log::bounded(group);
    let name = std::ffi::CString::new(group).map_err(|_| format!("--group \"{shown}\": not a group name"))?;
    // SAFETY: a zeroed group struct is a valid value to fill in.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(format!("--group \"{shown}\": no such group (give a group name or a numeric gid)"));
    }
    Ok(entry.gr_gid)
}

/// Gives the ledger directory its owner and mode (see the module docs), if
/// `changes` allows; returns what it changed, for the log.
fn prepare_ledger_dir(dir: &Path, group: Option<u32>, changes: DirChanges) -> Result<Option<String>, String> {
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
    if me != 0 && meta.uid() != me {
        return Err(format!(
            "the ledger directory {} is root's, and this monitor runs as uid {me}: it could open no other user's ledger \
             nor govern their processes. Run the monitor as root (the shipped unit does), or give it a directory of \
             your own with --dir for a private monitor of your own tenants",
            dir.display()
        ));
    }
    let mode = match (group, me) {
        (Some(_), _) => GROUP_DIR_MODE,
        (None, 0) => DIR_MODE,
        (None, _) => PRIVATE_DIR_MODE,
    };
    let old_mode = meta.mode() & 0o7777;
    let new_group = group.filter(|gid| *gid != meta.gid());
    if (new_group.is_some() || old_mode != mode) && changes == DirChanges::Refused {
        let needed = match group {
            Some(gid) => format!("group {gid} and mode {mode:04o} (only the group's members create ledgers; sticky)"),
            None if me != 0 => format!("mode {mode:04o} (a monitor that is not root governs its own user's tenants only)"),
            None => format!("mode {mode:04o} (every local user creates its ledger; sticky, so none removes another's)"),
        };
        return Err(format!(
            "the ledger directory {} has mode {old_mode:04o}, owner uid {}, group {}; the monitor needs {needed}. \
             It changes only the default directory {DEFAULT_DIR} or one it creates: set it up yourself \
             (chown root{} and chmod {mode:04o} {}) or pass --fix-mode to let the monitor do it",
            dir.display(),
            meta.uid(),
            meta.gid(),
            group.map(|g| format!(":{g}")).unwrap_or_default(),
            dir.display()
        ));
    }
    let mut changed = Vec::new();
    if let Some(gid) = new_group {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .map_err(|e| format!("cannot give the ledger directory {} to group {gid}: {e}", dir.display()))?;
        changed.push(format!("group {} -> {gid}", meta.gid()));
    }
    if old_mode != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of the ledger directory {} to {mode:04o}: {e}", dir.display()))?;
        changed.push(format!("mode {old_mode:04o} -> {mode:04o}"));
    }
    Ok((!changed.is_empty()).then(|| changed.join(", ")))
}

/// Whether `<dir>/tenants` is a directory only root (or this monitor's
/// user) can write: then each directory in it was made by them, and a
/// ledger under it is not held to the per-uid bound.
fn tenants_dir_is_private(dir: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(discovery::tenants_dir(dir)) else { return false };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    meta.file_type().is_dir() && (meta.uid() == 0 || meta.uid() == me) && meta.mode() & 0o022 == 0
}

/// The log key of complaints of one kind about one file.
pub fn file_key(path: &Path, kind: &str) -> String {
    format!("{} ({kind})", path.display())
}

/// The log key of all complaints about new files of owner `uid`, beside
/// each file's own: one user cannot fill the log by making many files.
fn owner_key(uid: u32) -> String {
    format!("ledger files of uid {uid}")
}

/// Renames `path` (whatever it is: file, link, FIFO, directory) to a
/// dot-name beside it, which no listing takes for a ledger and nobody can
/// have made in its place (`RENAME_NOREPLACE`); returns the new path.
fn move_aside(path: &Path, ino: u64) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    let from = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    for attempt in 0..16u32 {
        let aside = dir.join(format!(".{name}.moved-aside.{ino}.{attempt}"));
        let to = std::ffi::CString::new(aside.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: two valid NUL-terminated paths; renameat2 reads them only.
        let rc = unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
        if rc == 0 {
            return Ok(aside);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Err(std::io::Error::other("every name to move it to is taken"))
}

/// What a file in place of a ledger is, for the log.
fn kind_of(meta: &std::fs::Metadata) -> String {
    match ledger::FileKind::of(meta) {
        ledger::FileKind::RegularFile => "a file that is no sound ledger".to_string(),
        kind => kind.to_string(),
    }
}

impl LedgerSet {
    /// Watches the ledger directory `dir` of `host`: gives it its owner and
    /// mode (where `changes` allows), installs the fault handler that keeps
    /// the monitor alive when a ledger is cut short, and with
    /// [`Layout::TenantDirs`] makes `<dir>/tenants` private.
    /// A `--group` that names no group is a usage mistake; the rest are
    /// failures of the host.
    pub fn new(dir: PathBuf, host: &HostArgs, group: Option<&str>, changes: DirChanges, bounds: Bounds) -> Result<LedgerSet, Error> {
        let group = group.map(group_id).transpose().map_err(Error::Usage)?;
        if let Some(changed) = prepare_ledger_dir(&dir, group, changes).map_err(Error::Failed)? {
            log::info(&format!("ledger directory {}: {changed}", dir.display()));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if me != 0 && group.is_none() {
            log::warn(&format!(
                "running as uid {me}, not root: a private monitor of this user's own tenants, in {} (mode 0700); \
                 to govern every user's, run it as root (the shipped unit does)",
                dir.display()
            ));
        }
        sigbus::install().map_err(|e| Error::Failed(format!("cannot handle SIGBUS: {e}")))?;
        let layout = host.layout;
        if layout == Layout::TenantDirs {
            let tenants = discovery::tenants_dir(&dir);
            ensure_dir_mode(&tenants, TENANTS_DIR_MODE)
                .map_err(|e| Error::Failed(format!("cannot make the tenants' directory {} (mode 0700): {e}", tenants.display())))?;
        }
        Ok(LedgerSet {
            dir,
            layout,
            bounds,
            open: BTreeMap::new(),
            refused: HashMap::new(),
            shadowed: HashSet::new(),
            uninitialised: HashMap::new(),
            over_bound: HashMap::new(),
            uids_over: BTreeSet::new(),
            total_over: false,
            refused_total: BTreeMap::new(),
            configured: HashSet::new(),
            dir_error_logged: false,
            tenants_problem: None,
            complete: true,
        })
    }

    /// The tenants the configuration names: always watched.
    pub fn set_configured<'a>(&mut self, tenants: impl IntoIterator<Item = &'a String>) {
        self.configured = tenants.into_iter().cloned().collect();
    }

    /// Opens every watched ledger for the round (see the module docs); a
    /// ledger whose path no longer names its file is forgotten.
    fn attach_all(&mut self) {
        let mut gone = Vec::new();
        for (path, watched) in &mut self.open {
            match watched.mapped.attach() {
                Ok(ledger) => watched.attached = Some(ledger),
                Err(AttachError::Replaced) => gone.push(path.clone()),
                Err(AttachError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => gone.push(path.clone()),
                Err(e) => {
                    self.complete = false;
                    log::limited(
                        &file_key(path, "look"),
                        Level::Error,
                        &format!("cannot look at ledger {} this round ({e}); its tenant is not judged until it can", path.display()),
                    );
                }
            }
        }
        for path in gone {
            self.open.remove(&path);
            log::limited(&file_key(&path, "watching"), Level::Info, &format!("ledger {} is gone; no longer watched", path.display()));
        }
    }

    /// Closes every watched ledger's descriptor (they stay mapped); called
    /// at the end of each round.
    pub fn release_descriptors(&mut self) {
        for watched in self.open.values_mut() {
            watched.attached = None;
        }
    }

    /// Drops the ledgers whose file changed under the mapping in a way no
    /// writer changes it, with one error line each; resets the slots that
    /// hold a state no writer writes, with one line each (at most a few
    /// per file and minute, see [`log`]).
    fn check_open(&mut self) {
        let mut damaged = Vec::new();
        for (path, watched) in &self.open {
            let Some(ledger) = &watched.attached else { continue };
            if let Some(damage) = ledger.damage() {
                damaged.push((path.clone(), damage));
                continue;
            }
            let key = file_key(path, "slot resets");
            for slot in ledger.reset_invalid_slots() {
                let bytes: Vec<String> =
                    slot.bytes_per_device.iter().map(|(dev, b)| format!("{} on device {dev}", crate::text::human_bytes(*b))).collect();
                log::limited(
                    &key,
                    Level::Warn,
                    &format!(
                        "tenant {}: slot {} held state word {:#x} (pid {}), which no writer writes, and nobody held its lock: \
                         reset it to free, returning {} to the tenant",
                        ledger.tenant(),
                        slot.slot_index,
                        slot.state_word,
                        slot.pid,
                        if bytes.is_empty() { "nothing".into() } else { bytes.join(", ") }
                    ),
                );
            }
        }
        for (path, damage) in damaged {
            self.open.remove(&path);
            log::limited(
                &file_key(&path, "damage"),
                Level::Error,
                &format!("dropped ledger {}: {damage}; not watched again until the file changes", path.display()),
            );
            if let Some(now) = identity(&path) {
                self.refused.insert(path, now);
            }
        }
    }

    /// Opens the watched ledgers for the round, drops damaged ones, resets
    /// invalid slots, finds new ledgers (within the bounds) and forgets
    /// removed ones.
    pub fn refresh(&mut self) {
        self.complete = true;
        self.attach_all();
        self.check_open();
        let problem = discovery::tenants_dir_problem(&self.dir);
        if problem.is_some() && problem != self.tenants_problem {
            log::warn(problem.as_deref().unwrap_or_default());
        }
        self.tenants_problem = problem;
        let found = match discovery::ledger_files(&self.dir) {
            Ok(found) => {
                self.dir_error_logged = false;
                found
            }
            Err(e) => {
                if !self.dir_error_logged {
                    log::warn(&format!(
                        "cannot read the ledger directory {}: {e}; going on with the {} ledger(s) already watched",
                        self.dir.display(),
                        self.open.len()
                    ));
                    self.dir_error_logged = true;
                }
                self.complete = false;
                return;
            }
        };
        let (kept, shadowed) = discovery::one_per_tenant(found, self.layout);
        for f in &shadowed {
            if self.shadowed.insert(f.path.clone()) {
                log::limited(
                    &file_key(&f.path, "layouts"),
                    Level::Warn,
                    &format!(
                        "tenant {} has a ledger in both layouts; watching the {} one, ignoring {}",
                        f.tenant,
                        self.layout.name(),
                        f.path.display()
                    ),
                );
            }
        }
        self.shadowed.retain(|p| shadowed.iter().any(|f| &f.path == p));
        // A ledger replaced by another file (same name, other inode) is reopened.
        let listed: HashSet<&Path> = kept.iter().map(|f| f.path.as_path()).collect();
        self.open.retain(|path, watched| {
            let keep = listed.contains(path.as_path()) && identity(path).map(|i| i.0) == Some(watched.mapped.inode());
            if !keep {
                log::limited(&file_key(path, "watching"), Level::Info, &format!("ledger {} is gone; no longer watched", path.display()));
            }
            keep
        });
        let mut tally = Tally::default();
        for watched in self.open.values() {
            tally.count(watched.candidate);
        }
        let private_tenants = tenants_dir_is_private(&self.dir);
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut over_now: HashMap<PathBuf, (u64, OverBound)> = HashMap::new();
        let mut over_uids: BTreeMap<u32, (usize, Vec<String>)> = BTreeMap::new();
        let mut total_refused = 0usize;
        // The configured tenants first: they are watched whatever the bounds.
        let mut candidates: Vec<Found> = kept.into_iter().filter(|f| !self.open.contains_key(&f.path)).collect();
        candidates.sort_by_key(|f| !self.configured.contains(&f.tenant));
        for f in candidates {
            let Some(stat) = file_stat(&f.path) else { continue };
            if self.refused.get(&f.path) == Some(&stat.identity()) {
                continue;
            }
            let candidate = Candidate {
                uid: stat.uid,
                configured: self.configured.contains(&f.tenant),
                per_uid_exempt: stat.uid == 0 || stat.uid == me || (f.layout == Layout::TenantDirs && private_tenants),
            };
            if let Err(bound) = tally.clone().admit(self.bounds, candidate) {
                if self.over_bound.get(&f.path).map(|(ino, _)| *ino) != Some(stat.ino) {
                    *self.refused_total.entry(bound.reason()).or_default() += 1;
                }
                match bound {
                    OverBound::PerUid => {
                        let entry = over_uids.entry(stat.uid).or_default();
                        entry.0 += 1;
                        if entry.1.len() < 3 {
                            entry.1.push(f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
                        }
                    }
                    OverBound::Total => total_refused += 1,
                }
                over_now.insert(f.path, (stat.ino, bound));
                continue;
            }
            if self.open_new(f, stat, candidate) {
                tally.count(candidate);
            }
        }
        self.over_bound = over_now;
        self.say_bounds(over_uids, total_refused);
        self.uninitialised.retain(|path, _| path.exists());
    }

    /// Says once per episode which owners are past the per-uid bound, and
    /// when the total bound is reached.
    fn say_bounds(&mut self, over_uids: BTreeMap<u32, (usize, Vec<String>)>, total_refused: usize) {
        for (uid, (count, examples)) in &over_uids {
            if self.uids_over.insert(*uid) {
                log::warn(&format!(
                    "uid {uid} has more ledger files than the per-uid bound of {} (--max-ledgers-per-uid): {count} of them \
                     are not watched (such as {}); its processes using them count as untracked",
                    self.bounds.per_uid,
                    examples.join(", ")
                ));
            }
        }
        let back: Vec<u32> = self.uids_over.iter().filter(|uid| !over_uids.contains_key(uid)).copied().collect();
        for uid in back {
            self.uids_over.remove(&uid);
            log::info(&format!("uid {uid} is back within the per-uid bound of ledger files"));
        }
        if total_refused > 0 && !self.total_over {
            log::warn(&format!(
                "{} ledgers are watched, the bound (--max-ledgers): {total_refused} more file(s) are not watched until some go",
                self.bounds.total
            ));
        } else if total_refused == 0 && self.total_over {
            log::info("every ledger file is watched again: the number of ledgers is within --max-ledgers");
        }
        self.total_over = total_refused > 0;
    }

    /// Opens a ledger found for the first time (or changed); returns
    /// whether it is now watched.
    fn open_new(&mut self, f: Found, stat: FileStat, candidate: Candidate) -> bool {
        let (owner, key) = (owner_key(stat.uid), file_key(&f.path, "opening"));
        match Ledger::open(&f.path) {
            Err(e) if e.is_uninitialised() => {
                // Not yet a ledger: look again next round, up to a bound.
                let since = *self.uninitialised.entry(f.path.clone()).or_insert_with(Instant::now);
                if since.elapsed() >= UNINITIALISED_GRACE {
                    log::limited_per_owner(
                        &key,
                        &owner,
                        Level::Error,
                        &format!(
                            "ignoring {}: it stayed empty or uninitialised for {} s ({e}); looked at again when it changes",
                            f.path.display(),
                            UNINITIALISED_GRACE.as_secs()
                        ),
                    );
                    self.uninitialised.remove(&f.path);
                    self.refused.insert(f.path, stat.identity());
                }
                false
            }
            opened => {
                self.uninitialised.remove(&f.path);
                let verified = opened.map_err(|e| e.to_string()).and_then(|l| self.verify(&f, l));
                let mapped = verified.and_then(|l| l.keep_mapped().map(|m| (m, l)).map_err(|e| format!("cannot keep it mapped: {e}")));
                match mapped {
                    Ok((mapped, ledger)) => {
                        self.refused.remove(&f.path);
                        log::limited_per_owner(
                            &file_key(&f.path, "watching"),
                            &owner,
                            Level::Info,
                            &format!("watching tenant {} ({}{})", f.tenant, f.path.display(), owner_of(&f.path)),
                        );
                        self.open.insert(f.path, Watched { mapped, candidate, attached: Some(ledger) });
                        true
                    }
                    Err(e) => {
                        log::limited_per_owner(
                            &key,
                            &owner,
                            Level::Warn,
                            &format!("ignoring {}: {}", f.path.display(), log::bounded_message(&e)),
                        );
                        self.refused.insert(f.path, stat.identity());
                        false
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
    /// monitor's layout. Something else under its ledger's name is moved
    /// aside (see the module docs).
    pub fn ensure_tenant(&mut self, tenant: &str) -> Option<&Ledger> {
        let existing = self.open.iter().find(|(_, w)| w.mapped.tenant() == tenant).map(|(p, _)| p.clone());
        let path = match existing {
            Some(path) => path,
            None => {
                let dir = discovery::tenant_ledger_dir(&self.dir, tenant, self.layout);
                let path = ledger::tenant_path(&dir, tenant);
                if self.layout == Layout::TenantDirs {
                    if let Err(e) = ensure_dir_mode(&dir, TENANT_DIR_MODE) {
                        log::limited(
                            &file_key(&path, "configuration"),
                            Level::Warn,
                            &format!("cannot make the directory of tenant {tenant} ({}): {e}", dir.display()),
                        );
                        return None;
                    }
                }
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    // A regular file under this name is the tenant's while it
                    // may still become a ledger: `refresh` opens it, without
                    // waiting, once it is sound. Anything else goes aside.
                    let refused = self.refused.get(&path) == identity(&path).as_ref();
                    if meta.file_type().is_file() && !refused {
                        return None;
                    }
                    // In a tenant's own directory only its own pods write:
                    // what is there is theirs, and is left alone.
                    if self.layout != Layout::Flat {
                        self.leave_alone(tenant, &path, &meta);
                        return None;
                    }
                    if !self.squatter_moved_aside(tenant, &path, &meta) {
                        return None;
                    }
                }
                // In a tenant's own directory, any uid of its pods may use
                // the ledger; in the shared flat directory, only its owner.
                let access = match self.layout {
                    Layout::TenantDirs => FileAccess::Tenant,
                    Layout::Flat => FileAccess::Creator,
                };
                let opened = Ledger::open_or_create_with(&dir, tenant, access)
                    .map_err(|e| e.to_string())
                    .and_then(|l| l.keep_mapped().map(|m| (m, l)).map_err(|e| e.to_string()));
                match opened {
                    Ok((mapped, ledger)) => {
                        log::info(&format!("watching tenant {tenant} ({})", path.display()));
                        let candidate = Candidate { uid: file_stat(&path).map_or(0, |s| s.uid), configured: true, per_uid_exempt: true };
                        self.open.insert(path.clone(), Watched { mapped, candidate, attached: Some(ledger) });
                    }
                    Err(e) => {
                        log::limited(
                            &file_key(&path, "configuration"),
                            Level::Warn,
                            &format!("cannot apply the configuration of tenant {tenant}: {}", log::bounded_message(&e)),
                        );
                        if let Some(now) = identity(&path) {
                            self.refused.insert(path.clone(), now);
                        }
                        return None;
                    }
                }
                path
            }
        };
        self.open.get(&path).and_then(|w| w.attached.as_ref())
    }

    /// Says once per change of the file that `path`, which is no ledger,
    /// keeps configured tenant `tenant` from its ledger.
    fn leave_alone(&mut self, tenant: &str, path: &Path, meta: &std::fs::Metadata) {
        let now = identity(path);
        if !meta.file_type().is_file() && now.is_some() && self.refused.get(path) != now.as_ref() {
            log::limited(
                &file_key(path, "configuration"),
                Level::Warn,
                &format!(
                    "cannot apply the configuration of tenant {tenant}: {} is {} (links are not followed); it was left alone",
                    path.display(),
                    kind_of(meta)
                ),
            );
            if let Some(now) = now {
                self.refused.insert(path.to_path_buf(), now);
            }
        }
    }

    /// Moves aside what took configured tenant `tenant`'s ledger name;
    /// returns whether the name is free now.
    fn squatter_moved_aside(&mut self, tenant: &str, path: &Path, meta: &std::fs::Metadata) -> bool {
        match move_aside(path, meta.ino()) {
            Ok(aside) => {
                log::warn(&format!(
                    "{} ({}, owner uid {}, mode {:04o}) took the ledger name of configured tenant {tenant} and is no ledger: \
                     moved it aside to {}, so that the tenant gets its ledger",
                    path.display(),
                    kind_of(meta),
                    meta.uid(),
                    meta.mode() & 0o7777,
                    aside.display()
                ));
                self.refused.remove(path);
                self.uninitialised.remove(path);
                true
            }
            Err(e) => {
                log::limited(
                    &file_key(path, "configuration"),
                    Level::Warn,
                    &format!(
                        "cannot apply the configuration of tenant {tenant}: {} is {} and could not be moved aside ({e}); it was left alone",
                        path.display(),
                        kind_of(meta)
                    ),
                );
                false
            }
        }
    }

    /// The watched ledgers open for this round.
    pub fn ledgers(&self) -> impl Iterator<Item = &Ledger> {
        self.open.values().filter_map(|w| w.attached.as_ref())
    }

    /// Whether this round saw every ledger there is: the directory could be
    /// listed and every watched ledger opened. When not, a process that no
    /// watched ledger knows may belong to one unseen.
    pub fn view_complete(&self) -> bool {
        self.complete
    }

    /// Files refused for a bound, counted once each, by reason.
    pub fn refused_total(&self) -> &BTreeMap<&'static str, u64> {
        &self.refused_total
    }

    /// Files not watched now because of a bound, by reason.
    pub fn over_bound_now(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::new();
        for (_, bound) in self.over_bound.values() {
            *counts.entry(bound.reason()).or_default() += 1;
        }
        counts
    }

    /// Ledgers watched now.
    pub fn watched(&self) -> usize {
        self.open.len()
    }

    /// Keeps allocated tenant `tenant`'s ledger name (flat layout) for
    /// root and user `owner`: a file there of any other owner is a
    /// squatter's (the directory is open to every user) and goes aside, so
    /// that the tenant's ledger is made afresh and made the owner's.
    pub fn keep_name_for(&mut self, tenant: &str, owner: u32) {
        let path = ledger::tenant_path(&discovery::tenant_ledger_dir(&self.dir, tenant, Layout::Flat), tenant);
        let Ok(meta) = std::fs::symlink_metadata(&path) else { return };
        if meta.uid() == 0 || meta.uid() == owner {
            return;
        }
        self.open.remove(&path);
        match move_aside(&path, meta.ino()) {
            Ok(aside) => log::warn(&format!(
                "{} (uid {}) took the ledger name of tenant {tenant}, which is allocated to uid {owner}: moved it aside to {}",
                path.display(),
                meta.uid(),
                aside.display()
            )),
            Err(e) => log::limited(
                &file_key(&path, "allocation"),
                Level::Warn,
                &format!(
                    "{} (uid {}) took the ledger name of tenant {tenant} and could not be moved aside: {e}",
                    path.display(),
                    meta.uid()
                ),
            ),
        }
        self.refused.remove(&path);
        self.uninitialised.remove(&path);
    }

    /// Makes allocated tenant `tenant`'s ledger (flat layout) user
    /// `owner`'s, mode 0600, where it is still root's.
    pub fn give_to(&self, tenant: &str, owner: u32) {
        let Some(ledger) = self.ledgers().find(|l| l.tenant() == tenant) else { return };
        let path = ledger.path();
        let Ok(meta) = std::fs::symlink_metadata(path) else { return };
        if meta.uid() == owner || !meta.file_type().is_file() {
            return;
        }
        let done = std::os::unix::fs::lchown(path, Some(owner), None)
            .and_then(|_| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)));
        match done {
            Ok(()) => log::info(&format!("tenant {tenant}: {} is uid {owner}'s", path.display())),
            Err(e) => log::limited(
                &file_key(path, "allocation"),
                Level::Warn,
                &format!("tenant {tenant}: cannot give {} to uid {owner}: {e}", path.display()),
            ),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(uid: u32) -> Candidate {
        Candidate { uid, configured: false, per_uid_exempt: false }
    }

    #[test]
    fn one_owner_gets_its_bound_and_leaves_the_rest_to_others() {
        let bounds = Bounds { per_uid: 3, total: 10 };
        let mut tally = Tally::default();
        let flood: Vec<Result<(), OverBound>> = (0..100).map(|_| tally.admit(bounds, file(1001))).collect();
        assert_eq!(flood.iter().filter(|r| r.is_ok()).count(), 3);
        assert!(flood[3..].iter().all(|r| *r == Err(OverBound::PerUid)));
        // Another user is under its own bound.
        assert_eq!(tally.admit(bounds, file(1002)), Ok(()));
        // Root's files are not held to the per-uid bound, but to the total.
        let root = Candidate { per_uid_exempt: true, ..file(0) };
        let admitted = (0..20).filter(|_| tally.admit(bounds, root).is_ok()).count();
        assert_eq!(admitted, 6, "up to the total of 10");
        assert_eq!(tally.admit(bounds, file(1003)), Err(OverBound::Total));
        // A configured tenant is watched whatever the bounds.
        assert_eq!(tally.admit(bounds, Candidate { configured: true, ..file(1001) }), Ok(()));
        assert_eq!(tally.total, 11);
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-ledgers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_directory_given_is_changed_only_when_allowed() {
        let dir = temp_dir("dir-mode");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_ledger_dir(&dir, None, DirChanges::Refused).unwrap_err();
        assert!(e.contains(&dir.display().to_string()) && e.contains("mode 0755") && e.contains("1777") && e.contains("--fix-mode"), "{e}");
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o755, "refused means untouched");
        assert_eq!(prepare_ledger_dir(&dir, None, DirChanges::Allowed).unwrap().as_deref(), Some("mode 0755 -> 1777"));
        // Nothing to change: nothing refused.
        assert_eq!(prepare_ledger_dir(&dir, None, DirChanges::Refused).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_squatter_is_moved_aside_under_a_name_nobody_took() {
        let dir = temp_dir("aside");
        let path = dir.join("cfg.ledger");
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        let ino = std::fs::symlink_metadata(&path).unwrap().ino();
        // Someone made the first name it would take.
        std::fs::create_dir(dir.join(format!(".cfg.ledger.moved-aside.{ino}.0"))).unwrap();
        let aside = move_aside(&path, ino).unwrap();
        assert_eq!(aside, dir.join(format!(".cfg.ledger.moved-aside.{ino}.1")));
        assert!(std::fs::symlink_metadata(&aside).unwrap().file_type().is_symlink(), "moved, not followed");
        assert!(std::fs::symlink_metadata(&path).is_err());
        let found = discovery::ledger_files(&dir).unwrap();
        assert!(found.is_empty(), "a file moved aside is no ledger: {found:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
