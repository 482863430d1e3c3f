//! libgpuslice.so: the per-process CUDA interception shim.
