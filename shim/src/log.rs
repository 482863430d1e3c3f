//! Logging to stderr (never stdout: it belongs to the application).
//!
//! The level sits in one atomic, checked with a relaxed load before anything
//! is formatted, so a disabled message costs one load and a branch.

use crate::config::LogLevel;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Warn as u8);

/// Sets the level (once the configuration is known).
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether messages of `level` are written.
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Writes one line; errors writing stderr are ignored.
pub fn write(level: LogLevel, args: std::fmt::Arguments<'_>) {
    let tag = match level {
        LogLevel::Error => "error",
        LogLevel::Warn => "warning",
        LogLevel::Info => "info",
        LogLevel::Debug => "debug",
    };
    let line = format!("gpuslice[{}]: {tag}: {args}\n", std::process::id());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, format_args!($($arg)*));
        }
    };
}

macro_rules! warn { ($($arg:tt)*) => { log_at!($crate::config::LogLevel::Warn, $($arg)*) }; }
macro_rules! info { ($($arg:tt)*) => { log_at!($crate::config::LogLevel::Info, $($arg)*) }; }
macro_rules! debug { ($($arg:tt)*) => { log_at!($crate::config::LogLevel::Debug, $($arg)*) }; }
