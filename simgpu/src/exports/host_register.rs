//! Page-locking memory the application allocated itself:
//! `cuMemHostRegister` (`_v2`), `cuMemHostUnregister`.
//!
//! Registration costs no device memory, so nothing is charged in the shared
//! state; the registry is this process's own, as the driver's is. A range
//! may not overlap one already registered or pinned by the driver
//! (`cuMemAllocHost`/`cuMemHostAlloc`): that is
//! `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`. Unregistering takes the base
//! address a registration was made with; anything else is
//! `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`. A registered range answers
//! `cuMemHostGetDevicePointer` with its own address (unified addressing).
//!
//! Copies treat registered memory as pageable host memory: the bytes are
//! the same, only the asynchrony of a copy from it differs from a real
//! driver's.

use crate::driver::{driver, CuResult};
use crate::ffi::cu_export;
use abi::cuda::*;
use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

/// `CU_MEMHOSTREGISTER_*` flags from cuda.h.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 0x02;
pub const CU_MEMHOSTREGISTER_IOMEMORY: c_uint = 0x04;
pub const CU_MEMHOSTREGISTER_READ_ONLY: c_uint = 0x08;
const KNOWN_FLAGS: c_uint =
    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

/// `CUresult` values from cuda.h that `abi` does not name.
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;

/// One registered range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    pub bytes: u64,
    pub flags: c_uint,
}

/// Registered ranges by base address; they never overlap.
#[derive(Default)]
pub struct HostRegistry {
    ranges: BTreeMap<u64, Registration>,
}

impl HostRegistry {
    /// The registration containing `ptr`, as (base, registration).
    pub fn find(&self, ptr: u64) -> Option<(u64, Registration)> {
        let (&base, &reg) = self.ranges.range(..=ptr).next_back()?;
        (ptr - base < reg.bytes).then_some((base, reg))
    }

    /// Whether `[base, base + bytes)` overlaps a registered range.
    pub fn overlaps(&self, base: u64, bytes: u64) -> bool {
        let end = base.saturating_add(bytes);
        self.find(base).is_some() || self.ranges.range(base..end).next().is_some()
    }

    /// Records a range; overlapping an existing one is refused.
    pub fn register(&mut self, base: u64, bytes: u64, flags: c_uint) -> CuResult<()> {
        if self.overlaps(base, bytes) {
            return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        }
        self.ranges.insert(base, Registration { bytes, flags });
        Ok(())
    }

    /// Forgets the range registered at exactly `base`.
    pub fn unregister(&mut self, base: u64) -> CuResult<Registration> {
        self.ranges.remove(&base).ok_or(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    }
}

static REGISTRY: Mutex<HostRegistry> = Mutex::new(HostRegistry { ranges: BTreeMap::new() });

/// This process's registry (a poisoned lock still holds consistent data:
/// every update is a single insert or remove).
pub fn registry() -> MutexGuard<'static, HostRegistry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Checks flags as the driver does: unknown bits are invalid; I/O memory
/// (a third-party device's PCIe space) does not exist on the simulated bus.
fn check_flags(flags: c_uint) -> CuResult<()> {
    if flags & !KNOWN_FLAGS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if flags & CU_MEMHOSTREGISTER_IOMEMORY != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// Whether every page of `[base, base + bytes)` is mapped in this process
/// (the driver pins the pages, which fails for an unmapped one).
fn is_mapped(base: u64, bytes: u64) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let Some(end) = base.checked_add(bytes) else { return false };
    let first = base / page * page;
    let pages = (end - first).div_ceil(page) as usize;
    let mut residency = vec![0u8; pages];
    // SAFETY: `first` is page-aligned, and `residency` has one byte per page
    // of the queried length, as mincore(2) requires; it only reads the page
    // tables and fails with ENOMEM for unmapped pages.
    unsafe { libc::mincore(first as *mut c_void, (end - first) as usize, residency.as_mut_ptr()) == 0 }
}

/// `cuMemHostRegister`'s core.
fn register(p: u64, bytes: usize, flags: c_uint) -> CuResult<()> {
    let d = driver()?;
    d.current()?;
    if p == 0 || bytes == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_flags(flags)?;
    let bytes = bytes as u64;
    let end = p.checked_add(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let pinned_by_driver = d.read().host_allocs.iter().any(|(&b, &s)| p < b.saturating_add(s as u64) && b < end);
    if pinned_by_driver {
        return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    if !is_mapped(p, bytes) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    registry().register(p, bytes, flags)
}

cu_export!(cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) {
    register(p as u64, bytesize, flags)
}; cuMemHostRegister);

cu_export!(cuMemHostUnregister(p: *mut c_void) {
    let d = driver()?;
    d.current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    registry().unregister(p as u64).map(drop)
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges_are_refused_and_neighbours_accepted() {
        let mut r = HostRegistry::default();
        r.register(0x1000, 0x1000, 0).unwrap();
        assert_eq!(r.register(0x1800, 0x10, 0), Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED));
        assert_eq!(r.register(0x0800, 0x1000, 0), Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED));
        assert_eq!(r.register(0x0000, 0x10000, 0), Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED));
        r.register(0x2000, 0x1000, 0).unwrap();
        r.register(0x0000, 0x1000, 0).unwrap();
        assert_eq!(r.find(0x1fff), Some((0x1000, Registration { bytes: 0x1000, flags: 0 })));
        assert_eq!(r.find(0x3000), None);
    }

    #[test]
    fn unregister_takes_the_base_address_once() {
        let mut r = HostRegistry::default();
        r.register(0x1000, 0x1000, CU_MEMHOSTREGISTER_DEVICEMAP).unwrap();
        assert_eq!(r.unregister(0x1800), Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED));
        assert_eq!(r.unregister(0x1000).map(|reg| reg.flags), Ok(CU_MEMHOSTREGISTER_DEVICEMAP));
        assert_eq!(r.unregister(0x1000), Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED));
    }

    #[test]
    fn flags_are_checked_as_the_driver_does() {
        assert_eq!(check_flags(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY), Ok(()));
        assert_eq!(check_flags(0x10), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(check_flags(CU_MEMHOSTREGISTER_IOMEMORY), Err(CUDA_ERROR_NOT_SUPPORTED));
    }

    #[test]
    fn only_mapped_memory_can_be_pinned() {
        let buffer = vec![0u8; 10_000];
        assert!(is_mapped(buffer.as_ptr() as u64, buffer.len() as u64));
        assert!(!is_mapped(u64::MAX - 10, 100));
        assert!(!is_mapped(0x1000, 0x1000));
    }
}
