//! simgpu: a CUDA driver and NVML that run on the CPU.
