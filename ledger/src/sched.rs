//! A scheduler hint for threads that stand in for hardware or answer it:
//! the shim's helper thread (`gpuslice::compute::helper`) and simgpu's
//! workers. Kept here because both crates build on this one.

use std::time::Duration;

/// `struct sched_attr` as `sched_setattr(2)` first defined it (48 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime_ns: u64,
    deadline_ns: u64,
    period_ns: u64,
}

/// Asks the fair scheduler (EEVDF, Linux 6.12 and later) for slices of
/// `slice` for the calling thread, its nice value and policy unchanged: a
/// thread whose slice is short has an early deadline, so when it wakes it
/// runs at once instead of after the current slice of whatever occupies
/// the CPU. It takes no more CPU time than before. Older kernels take the
/// request without effect or refuse it; either is fine, and a thread under
/// another policy is left as it is.
pub fn ask_for_short_slices(slice: Duration) {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes into the live local.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, size, 0) };
    if r != 0 || attr.policy != libc::SCHED_OTHER as u32 {
        return;
    }
    attr.size = size;
    attr.flags = 0;
    attr.runtime_ns = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: sched_setattr reads `attr.size` bytes from the live local.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}
