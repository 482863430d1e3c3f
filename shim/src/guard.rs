//! The per-thread re-entrancy guard and the FFI boundary.
//!
//! A hook entered while this thread is already inside the shim (the driver
//! or our own initialisation calling back into an exported name) must not
//! account twice: it passes straight through. A thread whose thread-locals
//! are already destroyed (exit) passes through too.

use crate::thread;
use abi::cuda::{CUresult, CUDA_ERROR_UNKNOWN};

/// Held while the shim works on this thread's call.
pub struct Guard(());

impl Guard {
    /// `None` when the call must pass through.
    pub fn enter() -> Option<Guard> {
        thread::with(|t| if t.inside.replace(true) { None } else { Some(Guard(())) }).flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        thread::with(|t| t.inside.set(false));
    }
}

/// Runs a hook's core, turning a panic into `CUDA_ERROR_UNKNOWN`.
pub fn boundary(core: impl FnOnce() -> CUresult) -> CUresult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(core)).unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// Like [`boundary`] for NVML's return type.
pub fn boundary_nvml(core: impl FnOnce() -> abi::nvml::nvmlReturn_t) -> abi::nvml::nvmlReturn_t {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(core)).unwrap_or(abi::nvml::NVML_ERROR_UNKNOWN)
}
