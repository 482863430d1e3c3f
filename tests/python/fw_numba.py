"""A numba-cuda @cuda.jit kernel on simgpu: numba compiles it with NVVM and
links it with nvJitLink into a cubin, which the driver loads with
cuLibraryLoadData. The kernel runs as simulated work (it computes nothing).
Prints key=value lines for tests/frameworks.rs.
"""
import warnings

import numpy as np
from numba import cuda
from numba.cuda.core.errors import NumbaPerformanceWarning

warnings.simplefilter("ignore", NumbaPerformanceWarning)

print(f"available={int(cuda.is_available())}")
ctx = cuda.current_context()
free, total = ctx.get_memory_info()
print(f"info.free={free}")
print(f"info.total={total}")


@cuda.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


d = cuda.device_array(1 << 16, dtype=np.float32)
stream = cuda.stream()
add_one[256, 256, stream](d)
stream.synchronize()
print("launch=ok")
add_one[1, 32](d)
cuda.synchronize()
print("sync=ok")
print(f"kernels={len(add_one.overloads)}")
print("done=1")
