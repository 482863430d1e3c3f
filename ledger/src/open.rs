//! Finding, creating, validating and mapping ledger files.
//!
//! Creation is race-free without locks: the creator builds a complete file
//! under a temporary name in the same directory, writes the `initialised`
//! word last, and publishes it with `link(2)`, which fails if the ledger
//! already exists. So a ledger file is never visible half-written, and of
//! several first processes exactly one file wins; the others use it.
//!
//! Opening never writes. A file that is not a ledger of this version, or is
//! cut short, or holds values no writer writes, is an [`OpenError`] and is
//! left untouched. An empty file, or one whose `initialised` word is still
//! zero, may be a creator of another kind at work, so `open` waits up to
//! [`CREATION_WAIT`] for it before giving up.

use crate::layout::{self, LedgerFile, FILE_BYTES, INITIALISED, LAYOUT_VERSION, MAGIC, PAGE_BYTES};
use crate::{OpenError, UNLIMITED};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

/// Mode of ledger files: read-write for every process of the tenant.
pub const LEDGER_MODE: u32 = 0o666;

/// How long `open` waits for a file that is empty or not yet initialised.
pub const CREATION_WAIT: Duration = Duration::from_millis(500);

/// A shared, read-write mapping of a whole ledger file.
pub(crate) struct Mapping {
    ptr: NonNull<LedgerFile>,
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
            libc::mmap(
                std::ptr::null_mut(),
                FILE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(ptr.cast::<LedgerFile>()).map(|ptr| Mapping { ptr }).ok_or_else(|| io::Error::other("mmap returned null"))
    }

    /// The mapped file.
    pub(crate) fn file(&self) -> &LedgerFile {
        // SAFETY: the pointer is page-aligned (mmap), spans FILE_BYTES and
        // stays mapped until drop; LedgerFile is SharedLayout, so every bit
        // pattern is a valid value and all writes go through atomics.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what new() mapped; no reference outlives self.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), FILE_BYTES);
        }
    }
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
    let len = file.metadata().map_err(|e| io_error(path, "stat", e))?.len();
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
    match read_u32(page, 48) {
        INITIALISED => Ok(FirstLook::Ready),
        0 => Ok(FirstLook::NotYet(corrupt("initialised", 0))),
        other => Err(corrupt("initialised", other as u64)),
    }
}

/// Checks the mapped contents: every enumerated word holds a known value.
fn check_contents(path: &Path, file: &LedgerFile) -> Result<(), OpenError> {
    let corrupt = |field: String, value: u64| OpenError::Corrupt { path: path.to_path_buf(), field, value };
    tenant_of(file).ok_or_else(|| corrupt("tenant_name".into(), 0))?;
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
    let bytes: Vec<u8> = file
        .header
        .tenant_name
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .take_while(|b| *b != 0)
        .collect();
    let name = String::from_utf8(bytes).ok()?;
    crate::units::validate_tenant_name(&name).ok()?;
    Some(name)
}

/// Opens and maps an existing ledger file, waiting briefly for one that is
/// still being created.
pub(crate) fn open_existing(path: &Path) -> Result<(File, Mapping), OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io_error(path, "open", e))?;
    let deadline = Instant::now() + CREATION_WAIT;
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
    Ok((file, mapping))
}

/// Builds a complete ledger for `tenant` under a temporary name in `dir` and
/// links it to `path`. Returns normally if another process published `path`
/// first.
pub(crate) fn create(dir: &Path, tenant: &str, path: &Path) -> Result<(), OpenError> {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let temp: PathBuf = dir.join(format!(".{tenant}.ledger.{}.{nanos}.tmp", std::process::id()));
    let result = build_and_link(tenant, &temp, path);
    let _ = std::fs::remove_file(&temp);
    result
}

fn build_and_link(tenant: &str, temp: &Path, path: &Path) -> Result<(), OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(LEDGER_MODE)
        .custom_flags(libc::O_CLOEXEC)
        .open(temp)
        .map_err(|e| io_error(temp, "create", e))?;
    // Every process of a tenant maps the file read-write, whatever its uid,
    // so the mode is set past the umask. The ledger is bookkeeping, not a
    // security boundary: a process can always skip the shim, which is what
    // the monitor's bypass detection is for.
    std::fs::set_permissions(temp, std::fs::Permissions::from_mode(LEDGER_MODE))
        .map_err(|e| io_error(temp, "set the mode of", e))?;
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

/// Creates `dir` (mode 0755, parents too) if it does not exist.
pub(crate) fn create_dir(dir: &Path) -> Result<(), OpenError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|e| io_error(dir, "create directory", e))
}
