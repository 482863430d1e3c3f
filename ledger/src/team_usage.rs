//! A team's memory on one device: the bytes its members' processes hold
//! together, counted where every member's process can reserve atomically.
//!
//! A team's members are several tenants (often several Unix users), each
//! with its own ledger, so no tenant's ledger can hold the team's total.
//! The monitor makes one [`TeamUsage`] page per team and device in a memfd
//! and hands its descriptor (`SCM_RIGHTS`, with the device's grant page,
//! `crate::broker`) to the processes of the team's members alone, so no
//! other tenant or user can reach it. The memfd is sealed against
//! shrinking and growing, so no member can cut the page short under the
//! others.
//!
//! Admission is the tenant's ([`crate::accounts`]) one level up: a process
//! reserves in its team's page first, with one compare-and-swap that
//! succeeds only if the team's total stays within the quota, then in its
//! tenant's ledger, and gives the team's part back if the tenant refuses; a
//! release goes the other way (tenant, then team). So concurrent
//! allocations from any number of members' processes never pass the quota.
//!
//! The quota itself is not in this page: it is in each member's record of
//! the device's grant page ([`crate::grants::Member`]), which only the
//! monitor writes. What a member can write here is the team's total, as a
//! tenant can write its own ledger: it can lower it (its team then holds
//! more than its quota, which the monitor reports from NVML) or raise it
//! (its team-mates are refused). The monitor audits the total against the
//! sum of the members' ledgers and corrects a difference that stays.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::layout::SharedLayout;

/// `b"GPUTEAMU"` read as a little-endian `u64`.
pub const TEAM_USAGE_MAGIC: u64 = u64::from_le_bytes(*b"GPUTEAMU");
/// The page's layout.
pub const TEAM_USAGE_VERSION: u32 = 1;
/// Size of the page.
pub const TEAM_USAGE_BYTES: usize = 4096;

/// The page: a header line and the counter on a line of its own, so that
/// reservations do not bounce the line the header is read from.
#[repr(C)]
pub struct TeamUsagePage {
    /// [`TEAM_USAGE_MAGIC`].
    pub magic: AtomicU64,
    /// [`TEAM_USAGE_VERSION`].
    pub version: AtomicU32,
    /// [`TEAM_USAGE_BYTES`].
    pub page_bytes: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 6],
    /// Bytes the team's members' processes hold on the device.
    pub used_bytes: AtomicU64,
    /// Reserved, zero.
    pub reserved_after: [AtomicU64; 7],
}

// SAFETY: repr(C), fixed-width atomics only, all-zero when created.
unsafe impl SharedLayout for TeamUsagePage {}

const _: () = assert!(std::mem::size_of::<TeamUsagePage>() == 128);
const _: () = assert!(std::mem::offset_of!(TeamUsagePage, used_bytes) == 64);

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// One mapped team page, writable: the monitor's, or a member process's.
pub struct TeamUsage {
    fd: OwnedFd,
    map: *mut TeamUsagePage,
}

// SAFETY: the mapping is only reached through atomics (SharedLayout).
unsafe impl Send for TeamUsage {}
// SAFETY: as above.
unsafe impl Sync for TeamUsage {}

impl TeamUsage {
    /// A new page in a memfd named after `name`, holding `used_bytes`,
    /// sealed against shrinking and growing.
    pub fn create(name: &str, used_bytes: u64) -> io::Result<TeamUsage> {
        let fd = crate::memfd::create(&format!("team-{name}"), TEAM_USAGE_BYTES)?;
        crate::memfd::seal(&fd, SEALS)?;
        let usage = TeamUsage::map(fd)?;
        let page = usage.page();
        page.used_bytes.store(used_bytes, Ordering::Relaxed);
        page.version.store(TEAM_USAGE_VERSION, Ordering::Relaxed);
        page.page_bytes.store(TEAM_USAGE_BYTES as u32, Ordering::Relaxed);
        page.magic.store(TEAM_USAGE_MAGIC, Ordering::Release);
        Ok(usage)
    }

    /// Maps a page the monitor handed over; refuses one that is not sealed
    /// as [`TeamUsage::create`] seals (it could be cut short under this
    /// process) or that this build cannot read.
    pub fn from_fd(fd: OwnedFd) -> Result<TeamUsage, String> {
        crate::memfd::check(&fd, SEALS, TEAM_USAGE_BYTES, "the team page")?;
        let usage = TeamUsage::map(fd).map_err(|e| format!("cannot map the team page: {e}"))?;
        let page = usage.page();
        if page.magic.load(Ordering::Acquire) != TEAM_USAGE_MAGIC || page.version.load(Ordering::Relaxed) != TEAM_USAGE_VERSION {
            return Err("the team page handed over is of another version".into());
        }
        Ok(usage)
    }

    fn map(fd: OwnedFd) -> io::Result<TeamUsage> {
        // SAFETY: a shared mapping of TEAM_USAGE_BYTES of a descriptor we
        // own, which is that long and sealed so.
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), TEAM_USAGE_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(TeamUsage { fd, map: map.cast() })
    }

    /// The page.
    pub fn page(&self) -> &TeamUsagePage {
        // SAFETY: the mapping is TEAM_USAGE_BYTES long, page-aligned, lives
        // as long as self, and every bit pattern is a valid page.
        unsafe { &*self.map }
    }

    /// Its descriptor, to hand to a member's process.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Leaks the mapping (and closes the descriptor): the page stays for
    /// the life of the process, read and written without a lock.
    pub fn leak(self) -> &'static TeamUsagePage {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the descriptor is read out of
        // it once and closed here, and the mapping is never unmapped now.
        unsafe {
            drop(std::ptr::read(&this.fd));
            &*this.map
        }
    }
}

impl Drop for TeamUsage {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of TEAM_USAGE_BYTES once.
        unsafe { libc::munmap(self.map.cast(), TEAM_USAGE_BYTES) };
    }
}

impl std::fmt::Debug for TeamUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TeamUsage(fd {}, {} bytes used)", self.fd.as_raw_fd(), self.page().used_bytes.load(Ordering::Relaxed))
    }
}

impl TeamUsagePage {
    /// Bytes the team holds.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Acquire)
    }

    /// Reserves `bytes` if the team's total stays within `quota_bytes`;
    /// the total found when it does not.
    pub fn try_reserve(&self, bytes: u64, quota_bytes: u64) -> Result<(), u64> {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|total| *total <= quota_bytes))
            .map(|_| ())
    }

    /// Gives back at most `bytes`, never below zero; what it took.
    pub fn release(&self, bytes: u64) -> u64 {
        crate::accounts::saturating_take(&self.used_bytes, bytes)
    }

    /// Moves the total by `delta` (the monitor's audit), never below zero.
    pub fn correct_by(&self, delta: i64) {
        if delta >= 0 {
            self.used_bytes.fetch_add(delta as u64, Ordering::AcqRel);
        } else {
            self.release(delta.unsigned_abs());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    #[test]
    fn reservations_never_pass_the_quota_and_releases_never_wrap() {
        let usage = TeamUsage::create("t", 100).unwrap();
        let page = usage.page();
        assert_eq!(page.try_reserve(50, 200), Ok(()));
        assert_eq!(page.try_reserve(51, 200), Err(150));
        assert_eq!(page.try_reserve(u64::MAX, u64::MAX), Err(150), "no wrap");
        assert_eq!(page.release(500), 150);
        assert_eq!(page.used_bytes(), 0);
        page.correct_by(30);
        page.correct_by(-40);
        assert_eq!(page.used_bytes(), 0);
    }

    #[test]
    fn a_page_handed_over_is_shared_and_cannot_be_cut_short() {
        let usage = TeamUsage::create("t", 7).unwrap();
        // SAFETY: dup of a live descriptor.
        let dup = unsafe { OwnedFd::from_raw_fd(libc::dup(usage.fd())) };
        let other = TeamUsage::from_fd(dup).unwrap();
        other.page().try_reserve(3, 100).unwrap();
        assert_eq!(usage.page().used_bytes(), 10);
        // SAFETY: ftruncate of a live descriptor; the seals refuse it.
        assert_ne!(unsafe { libc::ftruncate(usage.fd(), 0) }, 0);
        // An unsealed memfd is refused.
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: a new descriptor we own.
        let plain = unsafe { OwnedFd::from_raw_fd(raw) };
        assert!(TeamUsage::from_fd(plain).unwrap_err().contains("not sealed"));
    }
}
