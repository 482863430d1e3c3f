//! A Rust library with nothing in it but one export. benches/startup.rs
//! preloads it beside the bare and shim runs: what loading a Rust cdylib
//! (its relocations and the standard library's start-up) costs a process
//! on the machine at hand, the floor under what the shim, a Rust cdylib,
//! can cost.

#[no_mangle]
pub static GPUSLICE_EMPTY_PRELOAD_MARKER: u8 = 0;
