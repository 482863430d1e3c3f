//! simgpu's own diagnostics on stderr, for questions like "which export
//! tables did libcudart ask for" or "which kernels did that image hold".
//!
//! `SIMGPU_LOG=debug` turns them on, `SIMGPU_LOG=trace` also names every
//! driver entry point as it is called; unset or `off` keeps simgpu silent
//! (errors that fail initialisation are printed regardless, by
//! [`crate::config`]), and another value says once that it is not valid. The level is read once; a disabled log costs one
//! relaxed load and formats nothing.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

const UNREAD: u8 = 0;
const OFF: u8 = 1;
const DEBUG: u8 = 2;
const TRACE: u8 = 3;

static LEVEL: AtomicU8 = AtomicU8::new(UNREAD);

#[inline]
fn level() -> u8 {
    match LEVEL.load(Relaxed) {
        UNREAD => {
            let level = match std::env::var_os("SIMGPU_LOG") {
                Some(v) if v == "trace" => TRACE,
                Some(v) if v == "debug" => DEBUG,
                Some(v) if v.is_empty() || v == "off" => OFF,
                None => OFF,
                Some(v) => {
                    // Diagnostics only: a typo must not stop the driver, but says so once.
                    eprintln!("simgpu: SIMGPU_LOG={v:?} is not valid: expected debug, trace or off; logging stays off");
                    OFF
                }
            };
            LEVEL.store(level, Relaxed);
            level
        }
        level => level,
    }
}

/// Whether debug lines are printed.
#[inline]
pub fn debug_enabled() -> bool {
    level() >= DEBUG
}

/// Whether every entry point's call is printed.
#[inline]
pub fn trace_enabled() -> bool {
    level() >= TRACE
}

/// `simgpu_debug!("format", args…)`: one line `simgpu[<pid>]: debug: …` on
/// stderr when `SIMGPU_LOG=debug`.
macro_rules! simgpu_debug {
    ($($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            eprintln!("simgpu[{}]: debug: {}", std::process::id(), format_args!($($arg)*));
        }
    };
}
pub(crate) use simgpu_debug;
