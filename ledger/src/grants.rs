//! Grants: which tenant may run work on a device, decided by the monitor
//! alone and read by every process that launches there.
//!
//! One [`GrantPage`] per device. The monitor creates it in a memfd, maps it
//! writable, then seals it with `F_SEAL_FUTURE_WRITE` (and against
//! shrinking and growing) before it hands the descriptor to any tenant
//! ([`Grants::create_sealed`]). A tenant can map it read-only and nothing
//! else: no `write(2)`, no writable or `mprotect`-upgraded mapping, no
//! truncation. So the holder of the device, the members, their weights,
//! virtual times and the time each was served are the monitor's figures,
//! and no tenant can change them for another.
//!
//! # The grant word
//! [`GrantHeader::grant`] is the futex word the launch path reads: an epoch
//! that moves on at every change, and a code ([`Grant::code`]):
//! - [`OPEN`]: no tenant on the device has a compute setting; everybody
//!   launches (the device is shared as the hardware shares it);
//! - a member index + 1: that tenant's processes launch, the others wait;
//! - [`NOBODY`]: the turn is being handed over; nobody launches.
//!
//! [`SHALLOW`] marks a grant whose holder must keep few launches in
//! flight, so that whoever it gives way to waits for a kernel or two at
//! most; [`GrantHeader::shallow_launches`] says how many. One while a
//! tenant of higher priority is active on the device, so that its burst
//! waits for one kernel; two while the holder fills in for a tenant that
//! paused for its own synchronisation, so that its kernels run back to
//! back (with one in flight, each waited for its predecessor's completion
//! to reach the launching thread) and the one that paused, back, waits
//! for two at most. The count is a word beside the grant word, which
//! builds before it left zero and never read: theirs is one launch, so a
//! shim and a monitor of different builds still agree on the rule, at
//! worst on the stricter one.
//!
//! A process learns its member index when the monitor hands it the page
//! (`crate::broker`), and says what is its own (that it wants the device,
//! that it is busy, that it is done) over its own connection, which no
//! other process can write.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::layout::SharedLayout;

/// `b"GPUGRANT"` read as a little-endian `u64`.
pub const GRANTS_MAGIC: u64 = u64::from_le_bytes(*b"GPUGRANT");
/// Tenants that can be members of one device.
pub const MAX_MEMBERS: usize = 62;
/// Size of a grant page.
pub const GRANTS_BYTES: usize = 4096;

/// The grant code of a device nobody arbitrates: everybody launches.
pub const OPEN: u32 = 0x7f;
/// The grant code while the turn is handed over: nobody launches.
pub const NOBODY: u32 = 0;
/// Set in a grant whose holder keeps one or two launches in flight
/// ([`GrantHeader::shallow_launches`]).
pub const SHALLOW: u32 = 0x80;
const CODE_MASK: u32 = 0x7f;
const EPOCH_SHIFT: u32 = 8;

/// A decoded grant word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant(pub u32);

impl Grant {
    /// The word for `code` at `epoch` (which wraps; never 0 as a whole).
    pub fn new(epoch: u32, code: u32, shallow: bool) -> Grant {
        let epoch = (epoch & 0x00ff_ffff).max(1);
        Grant((epoch << EPOCH_SHIFT) | (code & CODE_MASK) | if shallow { SHALLOW } else { 0 })
    }
    /// [`OPEN`], [`NOBODY`] or a member index + 1.
    pub fn code(self) -> u32 {
        self.0 & CODE_MASK
    }
    pub fn epoch(self) -> u32 {
        self.0 >> EPOCH_SHIFT
    }
    pub fn is_open(self) -> bool {
        self.code() == OPEN
    }
    pub fn is_shallow(self) -> bool {
        self.0 & SHALLOW != 0
    }
    /// Whether member `member` may launch under this grant.
    pub fn lets(self, member: u32) -> bool {
        self.is_open() || self.code() == member + 1
    }
}

/// Member states as the monitor shows them.
pub mod member_state {
    pub const FREE: u32 = 0;
    pub const IDLE: u32 = 1;
    pub const WAITING: u32 = 2;
    pub const HOLDING: u32 = 3;
}

/// The first two cache lines.
#[repr(C)]
pub struct GrantHeader {
    /// [`GRANTS_MAGIC`].
    pub magic: AtomicU64,
    /// [`GRANTS_VERSION`].
    pub version: AtomicU32,
    /// [`GRANTS_BYTES`].
    pub page_bytes: AtomicU32,
    /// The futex word (see the module docs).
    pub grant: AtomicU32,
    /// 1 while a member other than the holder waits.
    pub contended: AtomicU32,
    /// 1 when some member has a compute setting (the grant is not [`OPEN`]).
    pub arbitrated: AtomicU32,
    /// Under a [`SHALLOW`] grant, the launches its holder may keep in
    /// flight: 2, or one when 0 or 1 (see the module docs). Written before
    /// the grant word that it goes with.
    pub shallow_launches: AtomicU32,
    /// Turns granted.
    pub turns_total: AtomicU64,
    /// When the current grant was made (`CLOCK_MONOTONIC`, ns).
    pub granted_ns: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 10],
}

/// One tenant on the device, as the monitor keeps it: one cache line.
#[repr(C, align(64))]
pub struct Member {
    /// The tenant's key ([`tenant_key`]); 0 when the entry is free.
    pub key: AtomicU64,
    /// Its virtual time: device time charged × 10 000 / weight.
    pub vtime: AtomicU64,
    /// Device time the monitor charged it here: its turns' wall time.
    pub served_ns_total: AtomicU64,
    /// Its guaranteed share, ratio × 10 000 (0 = none).
    pub share_e4: AtomicU32,
    /// Its limit, ratio × 10 000 (0 = none).
    pub limit_e4: AtomicU32,
    /// Its priority: higher first.
    pub priority: AtomicI32,
    /// Its weight: the target the monitor computed for it.
    pub weight_e4: AtomicU32,
    /// [`member_state`].
    pub state: AtomicU32,
    /// Its processes connected for this device.
    pub processes: AtomicU32,
    /// `reserved[0]`: [`Member::team_memory_quota_bytes`]; the rest zero.
    pub reserved: [AtomicU64; 2],
}

impl Member {
    /// Its team's memory quota on this device, bytes
    /// ([`UNLIMITED`](crate::UNLIMITED) when none): what its processes'
    /// reservations in their team's page ([`crate::team_usage`]) are held
    /// to. It is the first reserved word, so the page keeps its layout and
    /// version, and shims and monitors of builds before it still read each
    /// other's pages (a rolling upgrade leaves running processes
    /// arbitrated): a monitor of before leaves it zero, and hands over no
    /// team page, and only a process holding one reads it.
    pub fn team_memory_quota_bytes(&self) -> &AtomicU64 {
        &self.reserved[0]
    }
}

/// A device's grant page.
#[repr(C)]
pub struct GrantPage {
    pub header: GrantHeader,
    pub members: [Member; MAX_MEMBERS],
}

// SAFETY: repr(C), fixed-width atomics only (checked below by size and
// offset, and by the fingerprint), all-zero when created.
unsafe impl SharedLayout for GrantHeader {}
// SAFETY: as above.
unsafe impl SharedLayout for Member {}
// SAFETY: as above.
unsafe impl SharedLayout for GrantPage {}

/// A number that changes whenever a field moves, grows or shrinks: the
/// offsets and sizes of every field, folded.
const fn fold(hash: u64, value: usize) -> u64 {
    (hash ^ value as u64).wrapping_mul(0x100_0000_01b3)
}

macro_rules! fingerprint {
    ($($ty:ty => [$($field:ident),*]),*) => {{
        let mut hash = 0xcbf2_9ce4_8422_2325_u64;
        $(
            hash = fold(hash, std::mem::size_of::<$ty>());
            $( hash = fold(hash, std::mem::offset_of!($ty, $field)); )*
        )*
        hash
    }};
}

/// The layout's fingerprint.
pub const LAYOUT_FINGERPRINT: u64 = fingerprint!(
    GrantHeader => [magic, version, page_bytes, grant, contended, arbitrated, shallow_launches, turns_total, granted_ns, reserved],
    Member => [key, vtime, served_ns_total, share_e4, limit_e4, priority, weight_e4, state, processes, reserved],
    GrantPage => [header, members]
);

/// Every layout this page ever had, with its version: a change of layout
/// changes [`LAYOUT_FINGERPRINT`], and the build fails until a new version
/// is added here, so a layout change cannot keep the old version.
const VERSIONS: [(u32, u64); 1] = [(1, 0x3564_611b_79e9_16d7)];
/// The layout of [`GrantPage`].
pub const GRANTS_VERSION: u32 = VERSIONS[VERSIONS.len() - 1].0;
const _: () = assert!(VERSIONS[VERSIONS.len() - 1].1 == LAYOUT_FINGERPRINT, "the grant page changed: add a version");

const _: () = assert!(std::mem::size_of::<GrantHeader>() == 128);
const _: () = assert!(std::mem::size_of::<Member>() == 64);
const _: () = assert!(std::mem::offset_of!(GrantHeader, grant) == 16);
const _: () = assert!(std::mem::offset_of!(Member, share_e4) == 24);
const _: () = assert!(std::mem::size_of::<GrantPage>() == GRANTS_BYTES);

/// A tenant's key in grant pages: FNV-1a of its name, never 0.
pub fn tenant_key(tenant: &str) -> u64 {
    let hash = tenant.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    hash.max(1)
}

impl GrantPage {
    /// The grant now.
    #[inline(always)]
    pub fn grant(&self) -> Grant {
        Grant(self.header.grant.load(Ordering::Acquire))
    }

    /// Under a [`SHALLOW`] grant, how many launches its holder may keep
    /// in flight: 1 or 2 ([`GrantHeader::shallow_launches`]).
    pub fn shallow_launches(&self) -> u32 {
        self.header.shallow_launches.load(Ordering::Acquire).clamp(1, 2)
    }

    /// Whether the page is one this build reads.
    pub fn is_valid(&self) -> bool {
        self.header.magic.load(Ordering::Acquire) == GRANTS_MAGIC
            && self.header.version.load(Ordering::Acquire) == GRANTS_VERSION
            && self.header.page_bytes.load(Ordering::Acquire) as usize == GRANTS_BYTES
    }
}

/// Sleeps until the grant word is no longer `seen`, or `timeout_ns` passed.
pub fn wait_for_change(page: &GrantPage, seen: u32, timeout_ns: u64) {
    let timeout =
        libc::timespec { tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t, tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long };
    // SAFETY: a futex wait on a live, aligned u32 of a shared mapping
    // (read-only mappings may be waited on), with a valid relative timeout.
    unsafe {
        libc::syscall(libc::SYS_futex, page.header.grant.as_ptr(), libc::FUTEX_WAIT, seen, &timeout as *const libc::timespec);
    }
}

/// Wakes every process waiting on the grant word.
pub fn wake_all(page: &GrantPage) {
    // SAFETY: a futex wake on a live, aligned u32 of a shared mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, page.header.grant.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// One mapped grant page: the monitor's writable one, or a tenant's
/// read-only one.
pub struct Grants {
    fd: OwnedFd,
    map: *mut GrantPage,
}

// SAFETY: the mapping is only reached through atomics (SharedLayout).
unsafe impl Send for Grants {}
// SAFETY: as above.
unsafe impl Sync for Grants {}

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;

impl Grants {
    /// A new page in a memfd named `name`, mapped writable here and sealed
    /// so that every other mapping of it is read-only.
    pub fn create_sealed(name: &str) -> io::Result<Grants> {
        let fd = crate::memfd::create(&format!("grants-{name}"), GRANTS_BYTES)?;
        let grants = Grants::map(fd, libc::PROT_READ | libc::PROT_WRITE)?;
        // The writable mapping exists before F_SEAL_FUTURE_WRITE, so it stays writable.
        crate::memfd::seal(&grants.fd, SEALS)?;
        let h = &grants.page().header;
        h.version.store(GRANTS_VERSION, Ordering::Relaxed);
        h.page_bytes.store(GRANTS_BYTES as u32, Ordering::Relaxed);
        h.grant.store(Grant::new(1, OPEN, false).0, Ordering::Relaxed);
        h.magic.store(GRANTS_MAGIC, Ordering::Release);
        Ok(grants)
    }

    /// Maps a page the monitor handed over, read-only; refuses a descriptor
    /// that is not sealed as [`Grants::create_sealed`] seals (it could be
    /// written, or cut short) or whose page this build cannot read.
    pub fn from_fd(fd: OwnedFd) -> Result<Grants, String> {
        crate::memfd::check(&fd, SEALS, GRANTS_BYTES, "the grant page")?;
        let grants = Grants::map(fd, libc::PROT_READ).map_err(|e| format!("cannot map the grant page: {e}"))?;
        if !grants.page().is_valid() {
            return Err("the grant page handed over is of another version".into());
        }
        Ok(grants)
    }

    fn map(fd: OwnedFd, prot: libc::c_int) -> io::Result<Grants> {
        // SAFETY: a shared mapping of GRANTS_BYTES of a descriptor we own,
        // which is at least that long.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), GRANTS_BYTES, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Grants { fd, map: map.cast() })
    }

    /// The page.
    pub fn page(&self) -> &GrantPage {
        // SAFETY: the mapping is GRANTS_BYTES long, page-aligned, lives as
        // long as self, and every bit pattern is a valid GrantPage.
        unsafe { &*self.map }
    }

    /// Its descriptor, to hand to a tenant.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Leaks the mapping: the page stays readable for the life of the
    /// process (the shim's launch path reads it without a lock).
    pub fn leak(self) -> &'static GrantPage {
        let page = self.map;
        std::mem::forget(self);
        // SAFETY: the mapping is never unmapped now.
        unsafe { &*page }
    }
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants").field("fd", &self.fd.as_raw_fd()).finish()
    }
}

impl Drop for Grants {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping, no reference outlives self.
        unsafe { libc::munmap(self.map.cast(), GRANTS_BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    #[test]
    fn grant_words_never_read_as_zero_and_say_who_launches() {
        let g = Grant::new(0, 3, false);
        assert_ne!(g.0, 0);
        assert!(g.lets(2) && !g.lets(3) && !g.lets(0));
        assert!(Grant::new(5, OPEN, false).lets(40));
        assert!(!Grant::new(5, NOBODY, false).lets(0));
        let s = Grant::new(u32::MAX, 1, true);
        assert!(s.is_shallow() && s.lets(0) && s.epoch() != 0);
        assert_ne!(Grant::new(7, 1, false), Grant::new(8, 1, false));
    }

    #[test]
    fn a_tenant_can_read_the_page_and_write_it_in_no_way() {
        let grants = Grants::create_sealed("test").unwrap();
        grants.page().header.turns_total.store(42, Ordering::Relaxed);
        // SAFETY: dup of our own descriptor.
        let dup = unsafe { OwnedFd::from_raw_fd(libc::fcntl(grants.fd(), libc::F_DUPFD_CLOEXEC, 0)) };
        let theirs = Grants::from_fd(dup).unwrap();
        assert_eq!(theirs.page().header.turns_total.load(Ordering::Relaxed), 42);
        let fd = theirs.fd();
        // SAFETY: attempts that the seals must refuse, on a live descriptor.
        unsafe {
            let writable = libc::mmap(std::ptr::null_mut(), GRANTS_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            assert_eq!(writable, libc::MAP_FAILED, "a writable shared mapping");
            assert_eq!(libc::mprotect(theirs.map.cast(), GRANTS_BYTES, libc::PROT_READ | libc::PROT_WRITE), -1, "mprotect to writable");
            assert_eq!(libc::pwrite(fd, [1u8; 8].as_ptr().cast(), 8, 0), -1, "write(2)");
            assert_eq!(libc::ftruncate(fd, 0), -1, "truncation");
            let reopened = libc::open(std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap().as_ptr(), libc::O_RDWR);
            if reopened >= 0 {
                assert_eq!(libc::pwrite(reopened, [1u8; 8].as_ptr().cast(), 8, 0), -1, "write(2) through /proc");
                libc::close(reopened);
            }
        }
        assert_eq!(grants.page().header.magic.load(Ordering::Relaxed), GRANTS_MAGIC);
    }

    #[test]
    fn an_unsealed_descriptor_is_refused() {
        // SAFETY: a plain memfd, sized, never sealed.
        let fd = unsafe {
            let raw = libc::memfd_create(c"plain".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
            assert!(raw >= 0);
            assert_eq!(libc::ftruncate(raw, GRANTS_BYTES as libc::off_t), 0);
            OwnedFd::from_raw_fd(raw)
        };
        assert!(Grants::from_fd(fd).unwrap_err().contains("not sealed"));
    }
}
