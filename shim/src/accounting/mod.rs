//! The safe core: what each allocation, free, context and view call does to
//! the tenant's ledger. Hooks hand it a closure that makes the driver call;
//! the core decides around it.
//!
//! # Where each behaviour lives
//! A process that accounts has one [`Runtime`]: who the process is (its
//! ledger, its slot, the devices it sees, its pid) and one piece of state
//! per concern. Each concern is a file that defines its state, which no
//! other file reaches into, and the `impl Runtime` methods that use it:
//! - [`devices`]: which device a call is on: the process's devices, the
//!   calling thread's context and its device, a stream's context and
//!   device, and the device that memory at a named location is charged to.
//! - [`admission`]: reserving and releasing bytes in the ledger, and exit,
//!   after which nothing is admitted.
//! - [`memory`]: `cuMemAlloc*` and array allocations and their frees, each
//!   remembered with exactly what it was charged; the driver's granularity
//!   and array sizes.
//! - [`vmm`]: `cuMemCreate` handles, charged while referenced or mapped.
//! - [`stream_ordered`]: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` and
//!   `cuMemFreeAsync`, charged by what their pools reserve on the device;
//!   a free of other memory stays charged until the stream reaches it.
//! - [`contexts`]: contexts and primary contexts, each charged its
//!   overhead; destroying one frees the memory allocated in it.
//! - [`views`]: what `cuMemGetInfo`, `cuDeviceTotalMem` and NVML report
//!   under a cap, NVML's process lists included.
//!
//! Compute time is not this module's: launches go through `crate::compute`,
//! which holds its bucket's state here (`Runtime::throttle`) and drains a
//! device's contexts through [`contexts`] when the monitor ends a turn.
//!
//! # How a call flows
//! An allocation finds its device ([`devices`]: the current context's, the
//! stream's, or the one its location names), reserves its bytes
//! ([`admission`]: pending stream-ordered frees that completed are released
//! first, and a refusal settles the pools and reclaims dead processes'
//! slots once), makes the
//! driver call, and then remembers the charge ([`memory`], [`vmm`]) or, when
//! the driver failed, releases the reservation. A free forgets the charge,
//! makes the driver call, and releases exactly what was charged (or
//! remembers it again when the driver refused). Destroying a context
//! releases everything remembered in it. Views read the cap and the usage
//! back from the ledger.
//!
//! No lock of this module is held across a driver call, except the
//! per-device primary-context lock (see [`contexts`]): the driver's retain
//! count and our charge must change together, and primary retains are rare
//! and never on the allocation or launch path.

use ledger::{Ledger, Slot};
use std::sync::{Mutex, MutexGuard};

pub mod admission;
pub mod contexts;
pub mod devices;
pub mod memory;
pub mod stream_ordered;
pub mod team;
pub mod views;
pub mod vmm;

pub use devices::Device;
pub use memory::{
    allocation_bytes, array_bytes, element_bytes, mipmapped_bytes, pitch_estimate_bytes, AddressHasher, Charge, Kind, Tracker,
    ALLOCATION_GRANULARITY_BYTES,
};
pub use stream_ordered::has_stream_ordered_state;
pub use views::{capped_view, keep_tenant_processes, with_team};

/// Everything the shim knows in a process that is accounting.
pub struct Runtime {
    pub ledger: Ledger,
    pub slot: Slot,
    pub devices: Vec<Device>,
    /// The process that built this runtime (a forked child must not use it).
    pub owner_pid: u32,
    /// What the process read of `/proc/self` when it claimed its slot.
    pub me: ledger::process::SelfProcess,
    admission: admission::Admission,
    allocations: memory::Allocations,
    vmm: Mutex<vmm::Vmm>,
    contexts: contexts::Contexts,
    pending_frees: stream_ordered::PendingFrees,
    pools: stream_ordered::Pools,
    pub(crate) throttle: crate::compute::bucket::Throttle,
}

impl Runtime {
    pub fn new(ledger: Ledger, slot: Slot, devices: Vec<Device>, me: ledger::process::SelfProcess) -> Self {
        let contexts = contexts::Contexts::new(devices.len());
        Self {
            ledger,
            slot,
            devices,
            owner_pid: me.identity.ns_pid,
            me,
            admission: admission::Admission::new(),
            allocations: memory::Allocations::new(),
            vmm: Mutex::new(vmm::Vmm::default()),
            contexts,
            pending_frees: stream_ordered::PendingFrees::new(),
            pools: stream_ordered::Pools::new(),
            throttle: crate::compute::bucket::Throttle::new(),
        }
    }
}

/// Takes a lock even when a panic poisoned it: the panic was caught at the
/// hook's boundary, and every later call of the process must not panic too.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
