//! Kernel launches (`cuLaunchKernel`, `cuLaunchKernelEx`, graphs).
//!
//! Not hooked: memory caps do not need them, and an unhooked launch goes
//! straight from the application to the driver, so the shim adds nothing to
//! the launch path. Compute time slices will hook them here.
