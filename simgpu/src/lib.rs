//! simgpu: a CUDA driver and NVML that run on the CPU.
//!
//! `libsimgpu.so` is loaded as `libcuda.so.1` and as `libnvidia-ml.so.1` (two
//! links to one file, so the loader maps it once and the driver and NVML share
//! one in-process state). Its devices live in a shared state file
//! ([`state`]), so every process that names the same file contends for the
//! same memory and the same device time, as on a real GPU.
//!
//! Layers, from the C ABI inwards:
//! - [`exports`] and [`nvml`]: the `extern "C"` entry points, grouped by CUDA
//!   area. Each is a thin adapter: validate pointers, call a core, map the
//!   result to a `CUresult`/`nvmlReturn_t`. No panic crosses the boundary
//!   ([`ffi::guard`]) and nothing is ever written to stdout.
//! - [`procaddr`]: `cuGetProcAddress`'s table, generated from the same list
//!   of functions that are exported, so the two cannot drift.
//! - Safe cores: [`driver`] (handle registry, contexts), [`memory`]
//!   (charging, the per-device reservation, VMM, arrays), [`pool`]
//!   (stream-ordered pools: reserved and used memory, reuse, release), [`exec`] (queues,
//!   workers, streams, events), [`capture`] (stream capture modes: which
//!   calls a capture forbids, to which threads), [`sched`] (cross-process
//!   time slicing),
//!   [`state`] (the shared file), [`alloc`] (address arithmetic),
//!   [`config`] (environment), [`image`] (the kernels a PTX, cubin or
//!   fatbin image defines).
//! - [`exports::export_table`]: the private tables the CUDA runtime asks for
//!   with `cuGetExportTable`, so libcudart (CuPy, cuda.core) runs on simgpu.
//!
//! Configuration: `SIMGPU_DEVICES`, `SIMGPU_MEMORY`, `SIMGPU_STATE`,
//! `SIMGPU_CONTEXT_MEMORY`, `SIMGPU_SLICE_US`, `SIMGPU_KERNEL_US` (see
//! [`config`]), `SIMGPU_MIG`, which partitions devices into MIG
//! instances ([`mig`]), and `SIMGPU_LOG=debug|trace` for diagnostics
//! ([`log`]). The driver API honours `CUDA_VISIBLE_DEVICES` as the real
//! driver does, MIG instances included; NVML ignores it ([`visible`]).
//!
//! Streams: launches, event records, stream-ordered frees, copies and fills,
//! host functions and cross-context event waits are ops on their context's
//! queue, run in order by that context's worker ([`exec`]). A bad value makes `cuInit` return `CUDA_ERROR_INVALID_VALUE`
//! and `nvmlInit` `NVML_ERROR_UNKNOWN`, with a message on stderr naming the
//! variable, the value and the accepted format.
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod alloc;
pub mod capture;
pub mod config;
pub mod driver;
pub mod exec;
pub mod exports;
pub mod ffi;
pub mod image;
pub mod log;
pub mod memory;
pub mod mig;
pub mod nvml;
pub mod pool;
pub mod procaddr;
pub mod sched;
pub mod state;
pub mod sys;
pub mod visible;
