"""Asks numba-cuda for TOO_MUCH_MIB, expecting the tenant's cap to refuse
it (another process of the tenant holds the rest), then for FITS_MIB, and
holds that until its stdin closes (tests/frameworks.rs). Prints key=value
lines."""
import sys

from numba import cuda

too_much, fits = int(sys.argv[1]), int(sys.argv[2])
free, total = cuda.current_context().get_memory_info()
print(f"info.free_mib={free >> 20}", flush=True)
try:
    cuda.device_array(too_much << 20, dtype="u1")
    print("refused=0", flush=True)
except Exception as e:  # numba raises CudaAPIError / an out-of-memory error here
    print("refused=1", flush=True)
    print(f"error={type(e).__name__}:{str(e).splitlines()[0][:120]}", flush=True)
held = cuda.device_array(fits << 20, dtype="u1")
print(f"held_mib={held.nbytes >> 20}", flush=True)
print("ready=1", flush=True)
sys.stdin.read()
