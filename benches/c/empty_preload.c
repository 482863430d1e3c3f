/* A C library with nothing in it. benches/startup.rs preloads it beside the
 * bare and shim runs: what preloading any library costs a process on the
 * machine at hand, the floor under what the shim can cost. */
int gpuslice_empty_preload_marker;
