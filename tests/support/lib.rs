//! Support for the end-to-end tests: where the built artefacts are, compiling
//! C programs, running processes on simgpu and under the shim.
