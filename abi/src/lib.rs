//! The C ABI that gpuslice speaks on both sides: the CUDA driver API (`cuda.h`)
//! and NVML (`nvml.h`), as far as gpuslice and simgpu use them.
//!
//! One source of truth for result codes, handle types and struct layouts, so
//! that the shim and the simulated GPU can never disagree. Every value here is
//! transcribed from the headers of the `nvidia-cuda-runtime` and
//! `nvidia-nvml-dev` wheels (13.5); `scripts/setup.sh` fetches them and
//! the end-to-end tests compile C programs against them, which checks the
//! layouts from the other side.
#![no_std]

pub mod cuda;
pub mod nvml;
pub mod uuid;
