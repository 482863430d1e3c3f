//! Which device a call is on.
//!
//! Owns the process's view of its devices ([`Device`]: ordinal, driver
//! handle, ledger index, UUID) and the per-thread memory of the last
//! context asked about. Every other concern comes here first:
//! - An allocation in "the current context" is charged to the calling
//!   thread's context and its device (`Runtime::current`). A context's
//!   device never changes, so each thread remembers the last (context,
//!   device) pair; any context destruction in the process
//!   (`contexts_changed`) invalidates every thread's memory, as a handle
//!   may be reused by a context on another device.
//! - A stream-ordered call is charged to the context and device of its
//!   stream (`cuStreamGetCtx`); the null, legacy and per-thread streams mean
//!   the calling thread's context (`Runtime::stream_context`).
//! - Memory whose location the caller names (`cuMemCreate`, a pool) is
//!   charged to the device it names; host memory is not charged, and a
//!   location that cannot be tied to a device this process knows is
//!   refused, never passed uncharged (`Runtime::placed_device`, the rule
//!   in [`crate::placement`]).

use abi::cuda::*;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Runtime;
use crate::placement::{self, Placement};
use crate::real;
use crate::thread;

/// One device as this process sees it.
#[derive(Clone, Copy, Debug)]
pub struct Device {
    /// Ordinal after `CUDA_VISIBLE_DEVICES`.
    pub ordinal: i32,
    /// The driver's handle for it.
    pub cu_device: CUdevice,
    /// Its index in the tenant's ledger.
    pub ledger_index: usize,
    pub uuid: [u8; 16],
}

/// Bumped whenever a context of this process may have been destroyed.
static CONTEXT_GENERATION: AtomicU64 = AtomicU64::new(0);

/// A thread's last current context and its device, valid for one
/// generation (`crate::thread`).
#[derive(Clone, Copy)]
pub(crate) struct LastContext {
    ctx: usize,
    cu_device: CUdevice,
    generation: u64,
}

impl LastContext {
    /// Nothing remembered.
    pub(crate) const NONE: LastContext = LastContext { ctx: 0, cu_device: 0, generation: u64::MAX };
}

/// Forgets every thread's last context: one may have been destroyed.
pub(super) fn contexts_changed() {
    CONTEXT_GENERATION.fetch_add(1, Ordering::AcqRel);
}

impl Runtime {
    pub fn device_by_handle(&self, cu_device: CUdevice) -> Option<&Device> {
        self.devices.iter().find(|d| d.cu_device == cu_device)
    }

    pub fn device_by_ordinal(&self, ordinal: i32) -> Option<&Device> {
        self.devices.iter().find(|d| d.ordinal == ordinal)
    }

    pub fn device_by_uuid(&self, uuid: &[u8; 16]) -> Option<&Device> {
        self.devices.iter().find(|d| &d.uuid == uuid)
    }

    /// The calling thread's context and its device. A context's device never
    /// changes, so each thread remembers the last (context, device) pair it
    /// asked about; any context destruction in the process invalidates every
    /// thread's memory (a handle may be reused by a context on another device).
    pub(super) fn current(&self) -> Result<(usize, &Device), CUresult> {
        let ctx = real::current_context()?;
        if ctx.is_null() {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let ctx = ctx as usize;
        let generation = CONTEXT_GENERATION.load(Ordering::Acquire);
        let cached = thread::with(|t| t.last_context.get()).filter(|c| c.ctx == ctx && c.generation == generation).map(|c| c.cu_device);
        let cu_device = match cached {
            Some(cu_device) => cu_device,
            None => {
                let cu_device = real::current_device()?;
                thread::with(|t| t.last_context.set(LastContext { ctx, cu_device, generation }));
                cu_device
            }
        };
        let device = self.device_by_handle(cu_device).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        Ok((ctx, device))
    }

    /// The context a stream belongs to and its device: the stream's own
    /// (`cuStreamGetCtx`); the null, legacy and per-thread streams, or a
    /// driver without `cuStreamGetCtx`, mean the calling thread's context.
    pub(super) fn stream_context(&self, stream: CUstream, per_thread: bool) -> Result<(usize, &Device), CUresult> {
        if is_default_stream(stream) {
            return self.current();
        }
        let ctx = match real::stream_context(stream, per_thread) {
            Ok(ctx) if !ctx.is_null() => ctx,
            Ok(_) | Err(CUDA_ERROR_NOT_FOUND) => return self.current(),
            Err(r) => return Err(r),
        };
        let key = ctx as usize;
        let device = match self.context_ledger_index(key) {
            Some(index) => self.devices.iter().find(|d| d.ledger_index == index),
            None => self.device_by_handle(real::context_device(ctx)?),
        };
        device.map(|d| (key, d)).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// The known device that memory at `placement` is charged to, `None`
    /// for host memory (not charged), or the refusal, with one warning
    /// line, when the shim cannot tie it to a device it knows (see
    /// [`placement`]).
    pub(super) fn placed_device(&self, placement: Placement, call_name: &str) -> Result<Option<&Device>, CUresult> {
        let unattributable = |location_type| {
            warn!(
                "{call_name} at {} ({location_type}) refused: gpuslice cannot tie that location to one device, so its memory could not be charged to a cap",
                placement::type_name(location_type)
            );
            Err(CUDA_ERROR_NOT_SUPPORTED)
        };
        match placement {
            Placement::Host => Ok(None),
            Placement::Device(ordinal) => match self.device_by_ordinal(ordinal) {
                Some(device) => Ok(Some(device)),
                None => {
                    warn!("{call_name} on device {ordinal} refused: this process does not see that device, so its memory could not be charged to a cap");
                    Err(CUDA_ERROR_INVALID_DEVICE)
                }
            },
            // Callers charge an unplaced managed pool where its work runs;
            // one that reaches here has no device either.
            Placement::Unplaced => unattributable(CU_MEM_LOCATION_TYPE_INVALID),
            Placement::Unattributable(location_type) => unattributable(location_type),
        }
    }
}
