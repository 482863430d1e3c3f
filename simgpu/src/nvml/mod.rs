//! NVML, read from the same shared state as the driver.
//!
//! Each file holds one concern, so a reader finds an entry point by its area:
//! - [`system`]: init and shutdown, error strings, versions, device count and
//!   handles (by index, UUID and PCI bus id);
//! - [`identity`]: name, UUID, index, serial, brand, architecture, PCI info,
//!   compute capability;
//! - [`modes`]: compute, persistence, ECC, display, driver model and MIG
//!   modes, and MIG: a device that `SIMGPU_MIG` partitions has MIG enabled
//!   and MIG device handles, one per instance, that answer for their own
//!   name, UUID, memory and processes;
//! - [`memory`]: framebuffer and BAR1 memory;
//! - [`telemetry`]: utilization, temperature, power, fans, clocks,
//!   performance state, PCIe, field values;
//! - [`processes`]: running-process lists and per-process utilization.
//!
//! What the device says about itself (datasheet values, and how its sensors
//! follow its utilization) lives in [`spec`]; the C structs that `abi` does
//! not define are in [`types`].
//!
//! An NVML-only process (a monitor) maps the state file but claims no process
//! record. Every per-process query first reclaims dead processes, so a killed
//! process disappears from NVML as it does on a real GPU.
//!
//! Every entry point runs its core inside [`guard`], so no panic crosses the
//! C boundary; null out-pointers are `NVML_ERROR_INVALID_ARGUMENT`.

pub mod identity;
pub mod memory;
pub mod modes;
pub mod nvlink;
pub mod platform;
pub mod processes;
pub mod spec;
pub mod system;
pub mod telemetry;
pub mod types;

pub use processes::sample_process;

use crate::driver::{machine, Machine};
use abi::nvml::*;
use std::ffi::{c_char, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering::*};

type NvResult<T> = Result<T, nvmlReturn_t>;

/// `nvmlInit` calls not yet matched by `nvmlShutdown`.
static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Opaque device handles point into this table; they are validated by
/// address and never dereferenced.
static DEVICE_TOKENS: [u8; crate::state::MAX_DEVICES] = [0; crate::state::MAX_DEVICES];

/// Runs an entry point's core; a panic becomes `NVML_ERROR_UNKNOWN` instead
/// of unwinding into C.
fn guard(f: impl FnOnce() -> NvResult<()>) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// The simulated machine, once `nvmlInit` has succeeded.
fn ready() -> NvResult<&'static Machine> {
    if INIT_COUNT.load(Acquire) == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    machine().map_err(|_| NVML_ERROR_UNINITIALIZED)
}

/// The index of the device behind a handle this library gave out.
fn device(m: &Machine, dev: nvmlDevice_t) -> NvResult<usize> {
    let base = DEVICE_TOKENS.as_ptr() as usize;
    let addr = dev as usize;
    let index = addr.wrapping_sub(base);
    if addr < base || index >= m.state.device_count() as usize {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(index)
}

/// The slot behind any handle this library gave out: a device's, or a MIG
/// device's (see [`crate::mig`]). Only the entry points that answer for MIG
/// devices use it; the others take [`device`], which refuses MIG handles.
fn slot(m: &Machine, dev: nvmlDevice_t) -> NvResult<usize> {
    let base = DEVICE_TOKENS.as_ptr() as usize;
    let addr = dev as usize;
    let index = addr.wrapping_sub(base);
    if addr < base || index >= m.topology.slot_count() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(index)
}

/// `ready()` and `slot()` together.
fn ready_slot(dev: nvmlDevice_t) -> NvResult<(&'static Machine, usize)> {
    let m = ready()?;
    let s = slot(m, dev)?;
    Ok((m, s))
}

/// `ready()` and `device()` together: the machine and the handle's index.
fn ready_device(dev: nvmlDevice_t) -> NvResult<(&'static Machine, usize)> {
    let m = ready()?;
    let i = device(m, dev)?;
    Ok((m, i))
}

fn handle(index: usize) -> nvmlDevice_t {
    DEVICE_TOKENS.as_ptr().wrapping_add(index) as nvmlDevice_t
}

/// Writes an out-parameter; null is `NVML_ERROR_INVALID_ARGUMENT`.
unsafe fn out<T>(p: *mut T, v: T) -> NvResult<()> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and writable by nvml.h's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// The `version` word a caller sets first in a versioned struct (the
/// `NVML_STRUCT_VERSION` convention puts it at offset 0). Only that word is
/// read: the rest of the struct is output and may be uninitialised.
unsafe fn version_of<T>(p: *const T) -> NvResult<c_uint> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller set the leading version word by
    // nvml.h's contract for versioned structs.
    Ok(unsafe { p.cast::<c_uint>().read_unaligned() })
}

/// Copies `text` and its NUL into a caller buffer of `len` bytes; a buffer
/// too small is `NVML_ERROR_INSUFFICIENT_SIZE` (NVML never truncates).
unsafe fn write_str(buf: *mut c_char, len: c_uint, text: &str) -> NvResult<()> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < text.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller provides `len` >= text.len() + 1 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

/// `text` as a NUL-terminated fixed-size C char array (for struct fields),
/// truncated to leave room for the NUL.
fn c_chars<const N: usize>(text: &str) -> [c_char; N] {
    let mut chars = [0 as c_char; N];
    for (dst, &src) in chars.iter_mut().zip(text.as_bytes().iter().take(N.saturating_sub(1))) {
        *dst = src as c_char;
    }
    chars
}

/// Defines NVML entry points whose core returns `NvResult<()>`:
/// `nvml_export!(name(args) { body })`. The body runs inside [`guard`] in an
/// `unsafe` block under nvml.h's pointer contract (null is checked by
/// [`out`]/[`version_of`]/[`write_str`]; handles are only compared by address).
macro_rules! nvml_export {
    ($($name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block)*) => {$(
        #[no_mangle]
        #[allow(unused_unsafe)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> abi::nvml::nvmlReturn_t {
            $crate::nvml::guard(move || -> $crate::nvml::NvResult<()> {
                // SAFETY: pointer arguments come from the application under
                // nvml.h's contract; the helpers check null before any access.
                unsafe { $body }
            })
        }
    )*};
}
pub(crate) use nvml_export;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_chars_truncates_and_terminates() {
        let chars: [c_char; 4] = c_chars("abcdef");
        assert_eq!(chars, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
        let chars: [c_char; 4] = c_chars("a");
        assert_eq!(chars, [b'a' as c_char, 0, 0, 0]);
    }
}
