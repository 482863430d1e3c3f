//! Virtual memory management: `cuMemCreate` handles.
//!
//! VMM memory lives while its handle is referenced (the create, plus each
//! `cuMemRetainAllocationHandle`) or mapped (`cuMemMap`): `cuMemRelease` of
//! a mapped handle keeps the charge, and the handle's last `cuMemUnmap`
//! releases it, as the driver frees it then. A handle is charged to the
//! device its location names (see [`super::devices`] and
//! [`crate::placement`]): host-located handles are not device memory and
//! pass uncharged, and a location the shim cannot tie to a device it knows
//! is refused. A handle belongs to no context, so destroying a context
//! leaves it alone.
//!
//! Owns `Vmm`: each handle's charge and counts, and where it is mapped.

use abi::cuda::*;
use std::collections::{BTreeMap, HashMap};

use super::{lock, Charge, Runtime};
use crate::placement;

/// A `cuMemCreate` handle: its memory lives while the handle is referenced
/// (the create and each `cuMemRetainAllocationHandle`, until matching
/// `cuMemRelease`s) or mapped anywhere; the driver frees it when the last
/// of both goes.
#[derive(Clone, Copy, Debug)]
struct VmmHandle {
    charge: Charge,
    refs: u32,
    mappings: u32,
}

impl VmmHandle {
    fn dead(&self) -> bool {
        self.refs == 0 && self.mappings == 0
    }
}

/// The VMM handles of this process and where they are mapped.
#[derive(Default)]
pub(super) struct Vmm {
    handles: HashMap<u64, VmmHandle>,
    /// Mapped address → (handle, size).
    mappings: BTreeMap<u64, (u64, u64)>,
}

impl Runtime {
    /// `cuMemCreate` of `bytes` at `location`: charged to the device it
    /// names, passed through for host memory, refused where no known device
    /// can be charged. `call` returns the handle.
    pub fn alloc_on_device(&self, location: CUmemLocation, bytes: u64, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        let device = match self.placed_device(placement::of_allocation(location), "cuMemCreate") {
            Ok(Some(device)) => device,
            Ok(None) => return call().err().unwrap_or(CUDA_SUCCESS),
            Err(r) => return r,
        };
        let dev = device.ledger_index;
        if self.reserve(dev, bytes).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match call() {
            Ok(key) => {
                let handle = VmmHandle { charge: Charge { ledger_index: dev, bytes, ctx: 0 }, refs: 1, mappings: 0 };
                // A value the driver reused was freed without our seeing it.
                if let Some(stale) = lock(&self.vmm).handles.insert(key, handle) {
                    self.release(stale.charge.ledger_index, stale.charge.bytes);
                }
                CUDA_SUCCESS
            }
            Err(r) => {
                self.release(dev, bytes);
                r
            }
        }
    }

    /// `cuMemRelease`: drops one reference; the charge goes when the handle
    /// is neither referenced nor mapped, which is when the driver frees it.
    /// Decided before the call (the driver may hand the value out again the
    /// moment it frees it) and undone if the driver refuses.
    pub fn release_vmm(&self, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let before = {
            let mut vmm = lock(&self.vmm);
            let before = vmm.handles.get(&key).copied();
            if let Some(mut handle) = before {
                handle.refs = handle.refs.saturating_sub(1);
                if handle.dead() {
                    vmm.handles.remove(&key);
                } else {
                    vmm.handles.insert(key, handle);
                }
            }
            before
        };
        let r = call();
        let Some(before) = before else { return r };
        if r != CUDA_SUCCESS {
            lock(&self.vmm).handles.insert(key, before);
        } else if before.refs <= 1 && before.mappings == 0 {
            self.release(before.charge.ledger_index, before.charge.bytes);
        }
        r
    }

    /// `cuMemRetainAllocationHandle`: one more reference to a handle.
    pub fn retain_vmm(&self, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        match call() {
            Ok(key) => {
                if let Some(handle) = lock(&self.vmm).handles.get_mut(&key) {
                    handle.refs = handle.refs.saturating_add(1);
                }
                CUDA_SUCCESS
            }
            Err(r) => r,
        }
    }

    /// `cuMemMap` of `handle` at `va`: a mapped handle's memory stays.
    pub fn map_vmm(&self, va: u64, size: u64, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let r = call();
        if r == CUDA_SUCCESS {
            let mut vmm = lock(&self.vmm);
            if let Some(handle) = vmm.handles.get_mut(&key) {
                handle.mappings = handle.mappings.saturating_add(1);
                vmm.mappings.insert(va, (key, size));
            }
        }
        r
    }

    /// `cuMemUnmap` of `[va, va + size)`: every mapping that starts there is
    /// gone; a handle that is neither mapped nor referenced is freed.
    /// Decided after the call: a mapping keeps its handle's value from being
    /// reused until the driver unmaps it, and a value reused right after
    /// replaced our record (releasing its charge) before we look.
    pub fn unmap_vmm(&self, va: u64, size: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let r = call();
        if r != CUDA_SUCCESS {
            return r;
        }
        let mut freed = Vec::new();
        {
            let mut vmm = lock(&self.vmm);
            let end = va.saturating_add(size.max(1));
            let starts: Vec<u64> = vmm.mappings.range(va..end).map(|(start, _)| *start).collect();
            for start in starts {
                let Some((key, _)) = vmm.mappings.remove(&start) else { continue };
                let Some(handle) = vmm.handles.get_mut(&key) else { continue };
                handle.mappings = handle.mappings.saturating_sub(1);
                if handle.dead() {
                    if let Some(gone) = vmm.handles.remove(&key) {
                        freed.push(gone.charge);
                    }
                }
            }
        }
        for charge in freed {
            self.release(charge.ledger_index, charge.bytes);
        }
        r
    }
}
