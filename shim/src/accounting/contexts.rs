//! Contexts: `cuCtxCreate*`, `cuCtxDestroy*` and the primary contexts
//! (`cuDevicePrimaryCtxRetain`, `…Release*`, `…Reset*`).
//!
//! - Each context costs its measured overhead (`Ledger::context_overhead_bytes`).
//!   The first process of a tenant to create a context on a device measures it
//!   (see `overhead`: NVML's figure for this process, or the device's growth
//!   across the creation when NVML's pids are not this process's) and records
//!   it; later contexts reserve it before they are created.
//! - Destroying a context (or the last release or a reset of a primary one)
//!   frees the memory allocated in it, as the driver does, and the charges
//!   go with it: its allocations ([`super::memory`]), its pending
//!   stream-ordered frees, and what its pools gave back ([`super::stream_ordered`]). Every thread's cached
//!   context is forgotten (see [`super::devices`]). Before the driver
//!   destroys it, the launches still running there are charged to the
//!   compute limit and its timing events retired ([`super::throttle`]).
//!
//! Owns `Contexts`: the contexts this process created and, per device,
//! its primary context's retains and charge. The per-device primary lock is
//! the one lock of the core held across a driver call: the driver's retain
//! count and our charge must change together, and primary retains are rare
//! and never on the allocation or launch path.

use abi::cuda::*;
use std::sync::{Mutex, RwLock};

use super::devices::contexts_changed;
use super::{lock, Device, Kind, Runtime};
use crate::real;

/// How many of its created contexts [`Runtime::drain_device`] copies out
/// of the list at a time.
const DRAIN_BATCH: usize = 8;

#[derive(Clone, Copy, Debug)]
struct ContextRecord {
    ctx: usize,
    ledger_index: usize,
    charged_bytes: u64,
}

#[derive(Default)]
struct Primary {
    retains: u32,
    ctx: usize,
    charged_bytes: u64,
    charged: bool,
}

/// The contexts of this process that are charged.
pub(super) struct Contexts {
    /// Created with `cuCtxCreate*`.
    created: Mutex<Vec<ContextRecord>>,
    /// One per device, in the order of `Runtime::devices`.
    primaries: Vec<Mutex<Primary>>,
    /// Held for reading while the compute helper waits for a device's
    /// contexts ([`Runtime::drain_device`]) and for writing while one is
    /// destroyed, so that the helper never pushes a context being
    /// destroyed. Taken before any primary's lock.
    drain: RwLock<()>,
}

impl Contexts {
    pub(super) fn new(device_count: usize) -> Self {
        Self {
            created: Mutex::new(Vec::new()),
            primaries: (0..device_count).map(|_| Mutex::new(Primary::default())).collect(),
            drain: RwLock::new(()),
        }
    }
}

impl Runtime {
    /// The ledger device of context `ctx`, when it is one this process
    /// created or a charged primary context.
    pub(crate) fn context_ledger_index(&self, ctx: usize) -> Option<usize> {
        lock(&self.contexts.created).iter().find(|c| c.ctx == ctx).map(|c| c.ledger_index).or_else(|| {
            self.devices.iter().zip(&self.contexts.primaries).find_map(|(d, p)| {
                let p = lock(p);
                (p.charged && p.ctx == ctx).then_some(d.ledger_index)
            })
        })
    }

    /// Waits until every context of this process on ledger device `dev`
    /// has run what it queued (the compute helper, after a revoke). It
    /// allocates nothing, for the helper's loop never does (see
    /// `compute::helper`): the contexts this process created are taken
    /// [`DRAIN_BATCH`] at a time into the stack, and none is waited for
    /// under a lock that creating one takes. None can go meanwhile (a
    /// destroy waits for `drain`), and one created meanwhile comes last in
    /// the list.
    pub(crate) fn drain_device(&self, dev: usize) {
        let _drain = self.contexts.drain.read().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        loop {
            let mut batch = [0usize; DRAIN_BATCH];
            let mut taken = 0;
            for (slot, record) in batch.iter_mut().zip(lock(&self.contexts.created).iter().filter(|c| c.ledger_index == dev).skip(done)) {
                *slot = record.ctx;
                taken += 1;
            }
            for &ctx in batch.iter().take(taken) {
                let _ = real::ctx_synchronize_in(ctx as CUcontext);
            }
            done += taken;
            if taken < DRAIN_BATCH {
                break;
            }
        }
        for (d, p) in self.devices.iter().zip(&self.contexts.primaries) {
            let primary = if d.ledger_index == dev {
                let p = lock(p);
                p.charged.then_some(p.ctx)
            } else {
                None
            };
            if let Some(ctx) = primary {
                let _ = real::ctx_synchronize_in(ctx as CUcontext);
            }
        }
    }

    fn release_context_memory(&self, ctx: usize) {
        for kind in [Kind::Pointer, Kind::Array] {
            for charge in self.allocations.remove_context(kind, ctx) {
                self.release(charge.ledger_index, charge.bytes);
            }
        }
        for charge in self.pending_frees.remove_context(ctx) {
            self.release(charge.ledger_index, charge.bytes);
        }
        // The driver gave back the pool memory of the context's
        // allocations.
        self.pools.remove_context(ctx);
        self.settle_pools();
    }

    fn has_context_on(&self, dev: usize) -> bool {
        lock(&self.contexts.created).iter().any(|c| c.ledger_index == dev)
            || self.devices.iter().zip(&self.contexts.primaries).any(|(d, p)| d.ledger_index == dev && lock(p).charged)
    }

    /// Says why a context was refused: unlike an allocation (which
    /// frameworks probe and expect to fail), a context that does not fit is
    /// rare and otherwise leaves the application with a bare
    /// `CUDA_ERROR_OUT_OF_MEMORY` from a call that allocates nothing.
    fn context_refused(&self, device: &Device, bytes: u64) {
        let dev = device.ledger_index;
        warn!(
            "a context on device {} costs {bytes} bytes of device memory, and the tenant's cap there ({} bytes) has {} left: \
             refused with CUDA_ERROR_OUT_OF_MEMORY",
            device.ordinal,
            self.ledger.memory_limit_bytes(dev),
            self.ledger.memory_limit_bytes(dev).saturating_sub(self.ledger.used_bytes(dev))
        );
    }

    /// Charges a new context on `device` around `create`. Reserves the
    /// tenant's known overhead first; if none is known and this is the
    /// process's first context there, measures it after creation.
    fn charge_context(
        &self,
        device: &Device,
        first_here: bool,
        create: impl FnOnce() -> Result<usize, CUresult>,
    ) -> Result<(usize, u64), CUresult> {
        let dev = device.ledger_index;
        let known_bytes = self.ledger.context_overhead_bytes(dev);
        if self.reserve(dev, known_bytes).is_err() {
            self.context_refused(device, known_bytes);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let probe = if known_bytes == 0 && first_here { crate::overhead::prepare(&self.me, device) } else { None };
        let ctx = match create() {
            Ok(ctx) => ctx,
            Err(r) => {
                self.release(dev, known_bytes);
                return Err(r);
            }
        };
        let Some(probe) = probe else { return Ok((ctx, known_bytes)) };
        let Some(measured_bytes) = crate::overhead::measure(&self.me, device, probe) else { return Ok((ctx, 0)) };
        info!("context overhead on device {} measured at {measured_bytes} bytes", device.ordinal);
        // Another process of the tenant may have recorded it meanwhile: theirs stands.
        let recorded_bytes = self.ledger.context_overhead_bytes(dev);
        let bytes = if recorded_bytes != 0 { recorded_bytes } else { measured_bytes };
        if recorded_bytes == 0 {
            self.ledger.set_context_overhead_bytes(dev, measured_bytes);
        }
        if self.reserve(dev, bytes).is_err() {
            self.context_refused(device, bytes);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        Ok((ctx, bytes))
    }

    /// `cuCtxCreate*`: `create` makes the context and returns it.
    pub fn create_context(&self, cu_device: CUdevice, create: impl FnOnce() -> Result<CUcontext, CUresult>) -> CUresult {
        let Some(device) = self.device_by_handle(cu_device) else {
            return create().err().unwrap_or(CUDA_SUCCESS);
        };
        let first_here = !self.has_context_on(device.ledger_index);
        let mut created: CUcontext = core::ptr::null_mut();
        let charged = self.charge_context(device, first_here, || {
            created = create()?;
            Ok(created as usize)
        });
        match charged {
            Ok((ctx, bytes)) => {
                lock(&self.contexts.created).push(ContextRecord { ctx, ledger_index: device.ledger_index, charged_bytes: bytes });
                CUDA_SUCCESS
            }
            Err(r) => {
                if !created.is_null() {
                    let _ = real::ctx_destroy(created);
                }
                r
            }
        }
    }

    /// `cuCtxDestroy*`.
    pub fn destroy_context(&self, ctx: CUcontext, destroy: impl FnOnce() -> CUresult) -> CUresult {
        let _drain = self.contexts.drain.write().unwrap_or_else(|e| e.into_inner());
        let key = ctx as usize;
        self.forget_lanes_of(key);
        let record = {
            let mut contexts = lock(&self.contexts.created);
            contexts.iter().position(|c| c.ctx == key).map(|i| contexts.swap_remove(i))
        };
        let r = destroy();
        contexts_changed();
        if let Some(record) = record {
            if r == CUDA_SUCCESS {
                self.release(record.ledger_index, record.charged_bytes);
                self.release_context_memory(key);
            } else {
                lock(&self.contexts.created).push(record);
            }
        }
        r
    }

    fn primary(&self, cu_device: CUdevice) -> Option<(&Device, &Mutex<Primary>)> {
        self.devices.iter().zip(&self.contexts.primaries).find(|(d, _)| d.cu_device == cu_device)
    }

    /// `cuDevicePrimaryCtxRetain`: the retain that brings the primary
    /// context into being is charged its overhead.
    pub fn retain_primary(&self, cu_device: CUdevice, retain: impl FnOnce() -> Result<CUcontext, CUresult>) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else {
            return retain().err().unwrap_or(CUDA_SUCCESS);
        };
        let first_here = !self.has_context_on(device.ledger_index);
        let mut p = lock(primary);
        if p.charged {
            return match retain() {
                Ok(_) => {
                    p.retains = p.retains.saturating_add(1);
                    CUDA_SUCCESS
                }
                Err(r) => r,
            };
        }
        let mut retained = false;
        let charged = self.charge_context(device, first_here, || {
            let ctx = retain()?;
            retained = true;
            Ok(ctx as usize)
        });
        match charged {
            Ok((ctx, bytes)) => {
                *p = Primary { retains: p.retains.saturating_add(1), ctx, charged_bytes: bytes, charged: true };
                CUDA_SUCCESS
            }
            Err(r) => {
                if retained {
                    // Created but over the cap: give the retain back.
                    let _ = real::primary_ctx_release(cu_device);
                }
                r
            }
        }
    }

    fn uncharge_primary(&self, dev: usize, p: &mut Primary) {
        contexts_changed();
        if p.charged {
            p.charged = false;
            self.release(dev, p.charged_bytes);
            self.release_context_memory(p.ctx);
        }
    }

    /// `cuDevicePrimaryCtxRelease*`: the last release frees the context.
    pub fn release_primary(&self, cu_device: CUdevice, release: impl FnOnce() -> CUresult) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else { return release() };
        let _drain = self.contexts.drain.write().unwrap_or_else(|e| e.into_inner());
        let mut p = lock(primary);
        if p.charged && p.retains == 1 {
            // The last release destroys the context.
            self.forget_lanes_of(p.ctx);
        }
        let r = release();
        if r == CUDA_SUCCESS {
            p.retains = p.retains.saturating_sub(1);
            if p.retains == 0 {
                self.uncharge_primary(device.ledger_index, &mut p);
            }
        }
        r
    }

    /// `cuDevicePrimaryCtxReset*`: the context, its memory and its retains
    /// are gone; the next retain charges again.
    pub fn reset_primary(&self, cu_device: CUdevice, reset: impl FnOnce() -> CUresult) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else { return reset() };
        let _drain = self.contexts.drain.write().unwrap_or_else(|e| e.into_inner());
        let mut p = lock(primary);
        if p.charged {
            self.forget_lanes_of(p.ctx);
        }
        let r = reset();
        if r == CUDA_SUCCESS {
            // The driver drops every retain with the context.
            p.retains = 0;
            self.uncharge_primary(device.ledger_index, &mut p);
        }
        r
    }
}
