//! The per-thread re-entrancy guard and the FFI panic boundary.
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

/// What a function of the shim returns instead of unwinding when its core
/// panicked: a panic never crosses the FFI boundary (unwinding into C is
/// undefined behaviour, or an abort of the tenant's process).
pub trait OnPanic {
    /// The function's return type.
    type Value;
    /// The value returned after a panic.
    fn value(self) -> Self::Value;
}

/// A driver API hook: `CUDA_ERROR_UNKNOWN`.
pub struct Cuda;

impl OnPanic for Cuda {
    type Value = CUresult;
    fn value(self) -> CUresult {
        CUDA_ERROR_UNKNOWN
    }
}

/// An NVML hook: `NVML_ERROR_UNKNOWN`.
pub struct Nvml;

impl OnPanic for Nvml {
    type Value = abi::nvml::nvmlReturn_t;
    fn value(self) -> abi::nvml::nvmlReturn_t {
        abi::nvml::NVML_ERROR_UNKNOWN
    }
}

/// Nothing to return: the loader's and `fork`'s callbacks.
impl OnPanic for () {
    type Value = ();
    fn value(self) {}
}

/// A value known before the core runs: `dlsym`'s real answer, the refusal
/// of an initialisation that panicked.
pub struct Or<T>(pub T);

impl<T> OnPanic for Or<T> {
    type Value = T;
    fn value(self) -> T {
        self.0
    }
}

/// The one panic boundary: runs `core`, and returns `on_panic`'s value if
/// it panicked. Catching allocates nothing unless a panic happens.
#[inline]
pub fn boundary<P: OnPanic>(on_panic: P, core: impl FnOnce() -> P::Value) -> P::Value {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(core)).unwrap_or_else(|_| on_panic.value())
}
