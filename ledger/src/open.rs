//! Finding, creating, validating and mapping ledger files, and the
//! directories they live in.
//!
//! # Who creates what
//! One ledger directory serves several Unix users. Each file belongs to
//! the user whose process created it, and only the users of its tenant can
//! open it; anyone else gets `EACCES`.
//!
//! | path | created by | owner:group | mode |
//! |---|---|---|---|
//! | `<dir>` (`/run/gpuslice`) | the monitor (or systemd's `RuntimeDirectory=`) | root:root, or root:G with `--group G` | 1777, or 1770 with `--group` |
//! | `<dir>/<tenant>.ledger` | the tenant's first process (or the monitor, for a tenant its configuration names) | the creator's uid, and gid (the directory's group where it is set-group-ID) | 0600, or 0660 in a set-group-ID directory |
//! | `<dir>/tenants/` | the monitor, `--layout tenant-dirs` | root:root | 0700 |
//! | `<dir>/tenants/<tenant>/` | the monitor, for each tenant it configures; or an administrator | root:root (or root:T) | 1777 (or 3770 root:T) |
//! | `<dir>/tenants/<tenant>/<tenant>.ledger` | the monitor (configured tenants) or the tenant's first process | as above | 0666 when the monitor made it ([`FileAccess::Tenant`]), else as above |
//! | `/tmp/gpuslice-<uid>` (fallback) | the user's first process | the user | 0700, or it is refused |
//!
//! The sticky bit keeps a user from removing or renaming another user's
//! ledger. A tenant whose processes run as several uids shares one ledger
//! through a group: give it its own directory, owned by root and a group T
//! of those uids, set-group-ID and sticky
//! (`install -d -o root -g T -m 3770 <dir>/tenants/<tenant>`), and point
//! its processes' `GPUSLICE_DIR` there.
//! Files created in it get group T and mode 0660. A tenant directory the
//! monitor makes for Kubernetes (`tenants/<tenant>`, 1777) is reached only
//! through that tenant's pods' mounts (`tenants/` is 0700), so the ledger
//! the monitor puts there is 0666, for any uid of those pods.
//!
//! A directory is used only if it is safe (`prepare_dir`): it is owned
//! by root or by this process's user, and, when anyone may write to it, it
//! is sticky; the per-user fallback `/tmp/gpuslice-<uid>` must moreover be
//! this user's own, mode 0700, and no link (as `ssh-agent` and `tmux`
//! require of theirs). Anything else is [`OpenError::UnsafeDir`]: another
//! user could replace the ledger or plant one with an unlimited cap.
//!
//! # Creating
//! Creation is race-free without locks: the creator builds a complete file
//! under a temporary name in the same directory, writes the `initialised`
//! word last, and publishes it with `link(2)`, which fails if the ledger
//! already exists. So a ledger file is never visible half-written, and of
//! several first processes exactly one file wins; the others use it.
//!
//! # Opening
//! Opening never writes. A file that is not a ledger of this version, or is
//! cut short, or holds values no writer writes, is an [`OpenError`] and is
//! left untouched. Files are opened without following links and without
//! blocking (a FIFO, or a lease its owner holds, cannot hold the opener
//! up), and must be regular files. An empty file, or one whose
//! `initialised` word is still zero, may be a creator of another kind at
//! work ([`OpenError::is_uninitialised`]): [`Ledger::open`](crate::Ledger::open)
//! says so at once, so that the monitor can look again next round, and
//! [`Ledger::open_or_create`](crate::Ledger::open_or_create) (a tenant's
//! process) waits up to [`CREATION_WAIT`] for it.

use crate::guard::{self, Guard};
use crate::layout::{self, LedgerFile, FILE_BYTES, INITIALISED, LAYOUT_VERSION, MAGIC, PAGE_BYTES};
use crate::{OpenError, UNLIMITED};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

/// How long `open_or_create` waits for a file that is empty or not yet
/// initialised.
pub const CREATION_WAIT: Duration = Duration::from_millis(500);

/// Who may open a ledger file being created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// The creator's user only (0600); in a set-group-ID directory, also the
    /// directory's group (0660). What every process of a tenant uses.
    Creator,
    /// Every user who can reach the directory (0666): only for a directory
    /// that is itself the tenant's alone, such as the `tenants/<tenant>`
    /// directory the monitor makes for a tenant's pods.
    Tenant,
}

impl FileAccess {
    fn mode(self, dir: &Path) -> u32 {
        match self {
            FileAccess::Tenant => 0o666,
            FileAccess::Creator => {
                let group_shared = std::fs::metadata(dir).is_ok_and(|m| m.mode() & libc::S_ISGID != 0);
                if group_shared {
                    0o660
                } else {
                    0o600
                }
            }
        }
    }
}

/// A shared, read-write mapping of a whole ledger file.
pub(crate) struct Mapping {
    ptr: NonNull<LedgerFile>,
    /// Its entry in the fault guard's table, when guarding is on. Dropped
    /// before the mapping is unmapped (field order of `Drop` below).
    guard: Option<Guard>,
}

// SAFETY: the mapping holds only atomics and never-written byte arrays
// (SharedLayout), so sharing or sending references to it between threads is
// as safe as sharing the atomics themselves.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `FILE_BYTES` of `file`, which must be at least that long.
    pub(crate) fn new(file: &File) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file we hold open; the kernel
        // picks the address, so nothing else is overwritten.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), FILE_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(ptr) = NonNull::new(ptr.cast::<LedgerFile>()) else {
            return Err(io::Error::other("mmap returned null"));
        };
        match guard::register(ptr.as_ptr() as usize) {
            Ok(guard) => Ok(Mapping { ptr, guard }),
            Err(e) => {
                // SAFETY: unmaps what was mapped just above; nothing refers to it.
                unsafe { libc::munmap(ptr.as_ptr().cast(), FILE_BYTES) };
                Err(e)
            }
        }
    }

    /// The mapped file.
    pub(crate) fn file(&self) -> &LedgerFile {
        // SAFETY: the pointer is page-aligned (mmap), spans FILE_BYTES and
        // stays mapped until drop; LedgerFile is SharedLayout, so every bit
        // pattern is a valid value and all writes go through atomics.
        unsafe { self.ptr.as_ref() }
    }

    /// Whether a fault replaced the mapping with zero pages (see [`guard`]).
    pub(crate) fn poisoned(&self) -> bool {
        self.guard.as_ref().is_some_and(Guard::poisoned)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The fault handler must stop looking at the range before it goes.
        drop(self.guard.take());
        // SAFETY: unmaps exactly what new() mapped; no reference outlives self.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), FILE_BYTES);
        }
    }
}

/// Why a ledger that was opened can no longer be trusted as mapped: its
/// file changed under the mapping in a way no gpuslice writer changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// An access faulted past the file's end (the file was cut short while
    /// mapped); the mapping now reads as zeros.
    Faulted,
    /// The file's length is no longer a ledger's.
    Length {
        /// Its length now.
        len: u64,
    },
    /// A header word no longer holds what every ledger of this layout holds.
    Header {
        /// The field, as named in `include/gpuslice.h`.
        field: &'static str,
        /// The value found.
        value: u64,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Faulted => write!(f, "it was cut short while mapped (an access past its end faulted)"),
            Damage::Length { len } => write!(f, "its length changed to {len} bytes (a ledger has {FILE_BYTES})"),
            Damage::Header { field, value } => write!(f, "its header field {field} was overwritten with {value:#x}"),
        }
    }
}

/// What [`crate::Ledger::damage`] checks, in an order that touches the
/// mapping last: the fault mark, the file's length, then the header.
pub(crate) fn damage(file: &File, mapping: &Mapping) -> Option<Damage> {
    if mapping.poisoned() {
        return Some(Damage::Faulted);
    }
    match file.metadata() {
        Ok(meta) if meta.len() != FILE_BYTES as u64 => return Some(Damage::Length { len: meta.len() }),
        _ => {}
    }
    let header = &mapping.file().header;
    let words: [(&'static str, u64, u64); 4] = [
        ("magic", header.magic.load(Ordering::Acquire), MAGIC),
        ("layout_version", header.layout_version.load(Ordering::Acquire) as u64, LAYOUT_VERSION as u64),
        ("file_bytes", header.file_bytes.load(Ordering::Acquire), FILE_BYTES as u64),
        ("initialised", header.initialised.load(Ordering::Acquire) as u64, INITIALISED as u64),
    ];
    // A fault in the loads above is absorbed (guarded) and marks the mapping.
    if mapping.poisoned() {
        return Some(Damage::Faulted);
    }
    words.into_iter().find(|(_, found, expected)| found != expected).map(|(field, value, _)| Damage::Header { field, value })
}

fn io_error(path: &Path, action: &'static str, source: io::Error) -> OpenError {
    OpenError::Io { path: path.to_path_buf(), action, source }
}

fn read_u32(page: &[u8], offset: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&page[offset..offset + 4]);
    u32::from_ne_bytes(bytes)
}

fn read_u64(page: &[u8], offset: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&page[offset..offset + 8]);
    u64::from_ne_bytes(bytes)
}

/// What the first page of a file says, before it is mapped.
enum FirstLook {
    /// A complete, initialised ledger of this version (contents not yet checked).
    Ready,
    /// Empty, or a ledger whose creator has not finished.
    NotYet(OpenError),
}

fn first_look(path: &Path, file: &File) -> Result<FirstLook, OpenError> {
    let meta = file.metadata().map_err(|e| io_error(path, "stat", e))?;
    if !meta.file_type().is_file() {
        let kind = FileKind::of(&meta);
        return Err(io_error(path, "open", io::Error::other(format!("it is {kind}, not a regular file"))));
    }
    let len = meta.len();
    let truncated = || OpenError::Truncated { path: path.to_path_buf(), len, expected: FILE_BYTES as u64 };
    if len == 0 {
        return Ok(FirstLook::NotYet(truncated()));
    }
    let mut page = vec![0u8; PAGE_BYTES];
    let got = file.read_at(&mut page, 0).map_err(|e| io_error(path, "read", e))?;
    let page = &page[..got];
    if page.len() < 8 {
        return Err(truncated());
    }
    let magic = read_u64(page, 0);
    if magic != MAGIC {
        return Err(OpenError::NotALedger { path: path.to_path_buf(), found_magic: magic });
    }
    if page.len() < 12 {
        return Err(truncated());
    }
    let version = read_u32(page, 8);
    if version != LAYOUT_VERSION {
        return Err(OpenError::OtherVersion { path: path.to_path_buf(), found: version, expected: LAYOUT_VERSION });
    }
    if len < FILE_BYTES as u64 || page.len() < PAGE_BYTES {
        return Err(truncated());
    }
    let corrupt = |field: &str, value: u64| OpenError::Corrupt { path: path.to_path_buf(), field: field.to_string(), value };
    if len != FILE_BYTES as u64 {
        return Err(corrupt("file length", len));
    }
    let sizes: [(&str, usize, u64); 8] = [
        ("header_bytes", 12, PAGE_BYTES as u64),
        ("policy_offset", 16, layout::POLICY_OFFSET as u64),
        ("usage_offset", 20, layout::USAGE_OFFSET as u64),
        ("slots_offset", 24, layout::SLOTS_OFFSET as u64),
        ("slot_bytes", 28, layout::SLOT_BYTES as u64),
        ("max_devices", 32, layout::MAX_DEVICES as u64),
        ("max_slots", 36, layout::MAX_SLOTS as u64),
        ("file_bytes", 40, FILE_BYTES as u64),
    ];
    for (field, offset, expected) in sizes {
        let value = if offset == 40 { read_u64(page, offset) } else { read_u32(page, offset) as u64 };
        if value != expected {
            return Err(corrupt(field, value));
        }
    }
    // Files of builds from before the field hold 0 there (it was reserved).
    let compute_offset = read_u32(page, 52);
    if compute_offset != 0 && compute_offset as usize != layout::COMPUTE_OFFSET {
        return Err(corrupt("compute_offset", compute_offset as u64));
    }
    match read_u32(page, 48) {
        INITIALISED => Ok(FirstLook::Ready),
        0 => Ok(FirstLook::NotYet(corrupt("initialised", 0))),
        other => Err(corrupt("initialised", other as u64)),
    }
}

/// Checks the mapped contents: every enumerated word holds a known value.
fn check_contents(path: &Path, file: &LedgerFile) -> Result<(), OpenError> {
    let corrupt = |field: String, value: u64| OpenError::Corrupt { path: path.to_path_buf(), field, value };
    if tenant_of(file).is_none() {
        // The first bytes of the name, so that the message shows what is there.
        let mut first = [0u8; 8];
        for (byte, cell) in first.iter_mut().zip(&file.header.tenant_name) {
            *byte = cell.load(Ordering::Relaxed);
        }
        return Err(corrupt("tenant_name".into(), u64::from_le_bytes(first)));
    }
    for (i, device) in file.header.devices.iter().enumerate() {
        let state = device.state.load(Ordering::Acquire);
        if state > layout::device_state::READY {
            return Err(corrupt(format!("devices[{i}].state"), state as u64));
        }
    }
    for (i, policy) in file.policy.devices.iter().enumerate() {
        let source = policy.policy_source.load(Ordering::Acquire);
        if source > layout::policy_source::MONITOR {
            return Err(corrupt(format!("policy.devices[{i}].policy_source"), source as u64));
        }
    }
    for (i, slot) in file.slots.iter().enumerate() {
        let word = slot.state_word.load(Ordering::Acquire);
        if layout::split_state_word(word).0 > layout::slot_state::RECLAIMING {
            return Err(corrupt(format!("slots[{i}].state_word"), word));
        }
    }
    Ok(())
}

/// The tenant name stored in a ledger, if it is a valid one.
pub(crate) fn tenant_of(file: &LedgerFile) -> Option<String> {
    let bytes: Vec<u8> = file.header.tenant_name.iter().map(|b| b.load(Ordering::Relaxed)).take_while(|b| *b != 0).collect();
    let name = String::from_utf8(bytes).ok()?;
    crate::units::validate_tenant_name(&name).ok()?;
    Some(name)
}

/// What stands at a path, as messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Link,
    Directory,
    Fifo,
    Socket,
    Device,
    EmptyFile,
    RegularFile,
}

impl FileKind {
    /// The kind of what `meta` (from `symlink_metadata`, or of an open
    /// file) describes.
    pub fn of(meta: &std::fs::Metadata) -> FileKind {
        let kind = meta.file_type();
        if kind.is_symlink() {
            FileKind::Link
        } else if kind.is_dir() {
            FileKind::Directory
        } else if kind.is_fifo() {
            FileKind::Fifo
        } else if kind.is_socket() {
            FileKind::Socket
        } else if !kind.is_file() {
            FileKind::Device
        } else if meta.len() == 0 {
            FileKind::EmptyFile
        } else {
            FileKind::RegularFile
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Link => "a symbolic link",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::Device => "a device",
            FileKind::EmptyFile => "an empty file",
            FileKind::RegularFile => "a regular file",
        })
    }
}

/// Opens and maps an existing ledger file. With `wait`, waits up to
/// [`CREATION_WAIT`] for one that is still being created; without, says so
/// at once ([`OpenError::is_uninitialised`]).
pub(crate) fn open_existing(path: &Path, wait: bool) -> Result<(File, Mapping), OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_error(path, "open", e))?;
    let deadline = Instant::now() + if wait { CREATION_WAIT } else { Duration::ZERO };
    loop {
        match first_look(path, &file)? {
            FirstLook::Ready => break,
            FirstLook::NotYet(error) => {
                if Instant::now() >= deadline {
                    return Err(error);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let mapping = Mapping::new(&file).map_err(|e| io_error(path, "map", e))?;
    check_contents(path, mapping.file())?;
    // Cut short between the first look and the checks: the guard absorbed
    // the fault (when on); the file is no ledger now.
    match damage(&file, &mapping) {
        None => {}
        Some(Damage::Header { field, value }) => return Err(OpenError::Corrupt { path: path.to_path_buf(), field: field.into(), value }),
        Some(Damage::Faulted | Damage::Length { .. }) => {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            return Err(OpenError::Truncated { path: path.to_path_buf(), len, expected: FILE_BYTES as u64 });
        }
    }
    Ok((file, mapping))
}

/// Builds a complete ledger for `tenant` under a temporary name in `dir` and
/// links it to `path`. Returns normally if another process published `path`
/// first.
pub(crate) fn create(dir: &Path, tenant: &str, path: &Path, access: FileAccess) -> Result<(), OpenError> {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let temp: PathBuf = dir.join(format!(".{tenant}.ledger.{}.{nanos}.tmp", std::process::id()));
    let result = build_and_link(tenant, &temp, path, access.mode(dir));
    let _ = std::fs::remove_file(&temp);
    result
}

fn build_and_link(tenant: &str, temp: &Path, path: &Path, mode: u32) -> Result<(), OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(temp)
        .map_err(|e| io_error(temp, "create", e))?;
    // The mode is set past the umask, on the descriptor (no path to swap):
    // the tenant's processes must be able to open it whatever their umask,
    // and nobody else (see the module docs).
    file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(|e| io_error(temp, "set the mode of", e))?;
    file.set_len(FILE_BYTES as u64).map_err(|e| io_error(temp, "size", e))?;
    {
        let mapping = Mapping::new(&file).map_err(|e| io_error(temp, "map", e))?;
        initialise(mapping.file(), tenant);
    }
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(path, "publish", e)),
    }
}
/// Writes a fresh ledger into an all-zero mapping; the `initialised` word last.
fn initialise(file: &LedgerFile, tenant: &str) {
    let header = &file.header;
    header.magic.store(MAGIC, Ordering::Relaxed);
    header.layout_version.store(LAYOUT_VERSION, Ordering::Relaxed);
    header.header_bytes.store(PAGE_BYTES as u32, Ordering::Relaxed);
    header.policy_offset.store(layout::POLICY_OFFSET as u32, Ordering::Relaxed);
    header.usage_offset.store(layout::USAGE_OFFSET as u32, Ordering::Relaxed);
    header.slots_offset.store(layout::SLOTS_OFFSET as u32, Ordering::Relaxed);
    header.compute_offset.store(layout::COMPUTE_OFFSET as u32, Ordering::Relaxed);
    header.slot_bytes.store(layout::SLOT_BYTES as u32, Ordering::Relaxed);
    header.max_devices.store(layout::MAX_DEVICES as u32, Ordering::Relaxed);
    header.max_slots.store(layout::MAX_SLOTS as u32, Ordering::Relaxed);
    header.file_bytes.store(FILE_BYTES as u64, Ordering::Relaxed);
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    header.created_unix_s.store(now, Ordering::Relaxed);
    for (slot, byte) in header.tenant_name.iter().zip(tenant.bytes().take(63)) {
        slot.store(byte, Ordering::Relaxed);
    }
    for policy in &file.policy.devices {
        policy.memory_limit_bytes.store(UNLIMITED, Ordering::Relaxed);
    }
    header.initialised.store(INITIALISED, Ordering::Release);
}

/// `/tmp/gpuslice-<euid>`: the ledger directory of last resort, private to
/// this process's user.
pub(crate) fn fallback_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/tmp/gpuslice-{uid}"))
}

fn unsafe_dir(dir: &Path, reason: String) -> OpenError {
    OpenError::UnsafeDir { path: dir.to_path_buf(), reason }
}

/// Creates `dir` if it does not exist (missing parents mode 0755; the
/// per-user fallback 0700, without following a link) and checks that it is
/// safe to keep ledgers in (see the module docs).
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), OpenError> {
    let private = dir == fallback_dir();
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| io_error(parent, "create directory", e))?;
            }
            // mkdir(2) never follows a link in the last component: a link
            // planted in the meantime makes it fail, and is refused below.
            match std::fs::DirBuilder::new().mode(if private { 0o700 } else { 0o755 }).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error(dir, "create directory", e)),
            }
            std::fs::symlink_metadata(dir).map_err(|e| io_error(dir, "stat", e))?
        }
        Err(e) => return Err(io_error(dir, "stat", e)),
    };
    let meta = if meta.file_type().is_symlink() {
        let target = std::fs::read_link(dir).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
        if private {
            return Err(unsafe_dir(
                dir,
                format!("it is a symbolic link (to {target}), and the per-user directory must be a directory of this user's own"),
            ));
        }
        match std::fs::metadata(dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io_error(
                    dir,
                    "use it as the ledger directory",
                    io::Error::new(io::ErrorKind::NotFound, format!("it is a symbolic link to {target}, which does not exist")),
                ))
            }
            Err(e) => return Err(io_error(dir, "stat", e)),
        }
    } else {
        meta
    };
    if !meta.is_dir() {
        return Err(io_error(dir, "use it as the ledger directory", io::Error::other(format!("it is {}", FileKind::of(&meta)))));
    }
    check_dir_owner(dir, &meta, private)
}

/// The rule of [`prepare_dir`] on a directory's metadata.
pub(crate) fn check_dir_owner(dir: &Path, meta: &std::fs::Metadata, private: bool) -> Result<(), OpenError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = meta.mode() & 0o7777;
    if private {
        if meta.uid() != me {
            return Err(unsafe_dir(
                dir,
                format!("it belongs to uid {}, not to this user (uid {me}); remove it or set GPUSLICE_DIR", meta.uid()),
            ));
        }
        if mode != 0o700 {
            return Err(unsafe_dir(
                dir,
                format!("its mode is {mode:04o}, and the per-user directory must be 0700 (chmod 0700 it, or remove it)"),
            ));
        }
        return Ok(());
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(unsafe_dir(
            dir,
            format!("it belongs to uid {}, neither root nor this user (uid {me}), who could replace any ledger in it", meta.uid()),
        ));
    }
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(unsafe_dir(
            dir,
            format!(
                "its mode is {mode:04o}: anyone may write to it and it is not sticky, so anyone could replace a ledger in it (chmod +t it)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ledger;
    use std::os::unix::fs::{chown, symlink};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-open-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_ledger_is_its_creators_alone_unless_its_directory_is_set_group_id() {
        let dir = temp_dir("modes");
        let ledger = Ledger::open_or_create(&dir, "solo").unwrap();
        assert_eq!(mode_of(ledger.path()), 0o600);
        let shared = dir.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o3770)).unwrap();
        let ledger = Ledger::open_or_create(&shared, "team").unwrap();
        assert_eq!(mode_of(ledger.path()), 0o660, "a set-group-ID directory shares the ledger with its group");
        let pods = dir.join("pods");
        let ledger = Ledger::open_or_create_with(&pods, "pod", FileAccess::Tenant).unwrap();
        assert_eq!(mode_of(ledger.path()), 0o666);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn directories_another_user_could_tamper_with_are_refused() {
        let dir = temp_dir("unsafe");
        let theirs = dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chown(&theirs, Some(54321), None).unwrap();
        let e = Ledger::open_or_create(&theirs, "t").err().unwrap();
        assert!(matches!(e, OpenError::UnsafeDir { .. }) && e.to_string().contains("uid 54321"), "{e}");

        let open_to_all = dir.join("open");
        std::fs::create_dir(&open_to_all).unwrap();
        std::fs::set_permissions(&open_to_all, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Ledger::open_or_create(&open_to_all, "t").err().unwrap();
        assert!(e.to_string().contains("not sticky"), "{e}");
        std::fs::set_permissions(&open_to_all, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Ledger::open_or_create(&open_to_all, "t").unwrap();

        let dangling = dir.join("dangling");
        symlink(dir.join("nowhere"), &dangling).unwrap();
        let e = Ledger::open_or_create(&dangling, "t").err().unwrap();
        let message = e.to_string();
        assert!(message.contains("symbolic link to") && message.contains("which does not exist"), "{message}");
        assert!(!message.contains("File exists"), "{message}");
        assert!(!dir.join("nowhere").exists(), "nothing was created through the link");

        // The per-user fallback: this user's own, 0700, no link.
        let me = std::fs::metadata(&dir).unwrap();
        let private = dir.join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_dir_owner(&private, &std::fs::metadata(&private).unwrap(), true).err().unwrap();
        assert!(e.to_string().contains("must be 0700"), "{e}");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(check_dir_owner(&private, &std::fs::metadata(&private).unwrap(), true).is_ok());
        chown(&private, Some(54321), None).unwrap();
        let e = check_dir_owner(&private, &std::fs::metadata(&private).unwrap(), true).err().unwrap();
        assert!(e.to_string().contains("belongs to uid 54321"), "{e}");
        assert!(me.is_dir());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn open_says_at_once_that_a_file_is_not_initialised_and_never_blocks() {
        let dir = temp_dir("nowait");
        let empty = dir.join("e.ledger");
        std::fs::write(&empty, b"").unwrap();
        let started = Instant::now();
        let e = Ledger::open(&empty).err().unwrap();
        assert!(e.is_uninitialised(), "{e}");
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());

        let fifo = dir.join("f.ledger");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let e = Ledger::open(&fifo).err().unwrap();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(!e.is_uninitialised());
        assert!(started.elapsed() < Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_renamed_ledger_names_the_tenant_it_belongs_to() {
        let dir = temp_dir("renamed");
        let ledger = Ledger::open_or_create(&dir, "alpha").unwrap();
        std::fs::rename(ledger.path(), dir.join("beta.ledger")).unwrap();
        let e = Ledger::open_or_create(&dir, "beta").err().unwrap();
        assert!(matches!(&e, OpenError::OtherTenant { stored, expected, .. } if stored == "alpha" && expected == "beta"), "{e}");
        assert!(e.to_string().contains("belongs to tenant \"alpha\", not \"beta\""), "{e}");
        assert!(!e.to_string().contains("0x0"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_ledger_changed_under_its_mapping_reports_its_damage() {
        let dir = temp_dir("damage");
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        assert_eq!(ledger.damage(), None);
        let other = Ledger::open(ledger.path()).unwrap();
        other.layout().header.magic.store(0, Ordering::SeqCst);
        assert_eq!(ledger.damage(), Some(Damage::Header { field: "magic", value: 0 }));
        other.layout().header.magic.store(MAGIC, Ordering::SeqCst);
        let file = OpenOptions::new().write(true).open(ledger.path()).unwrap();
        file.set_len(FILE_BYTES as u64 * 2).unwrap();
        assert_eq!(ledger.damage(), Some(Damage::Length { len: FILE_BYTES as u64 * 2 }));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
