"""CuPy on simgpu, through NVIDIA's CUDA runtime (libcudart) and its export
tables. Prints key=value lines for tests/frameworks.rs.

usage: fw_cupy.py CHUNK_MIB

Allocates CHUNK_MIB blocks through CuPy's default memory pool until CuPy
raises OutOfMemoryError, frees them and allocates again (the process goes
on); then streams, events, a kernel CuPy compiles with NVRTC, and the same
allocation loop through cupy.cuda.MemoryAsyncPool (cudaMallocAsync).
"""
import os
import sys

# Reductions through CUB, whose kernels CuPy ships prebuilt in a
# Zstandard-compressed fatbin that the CUDA runtime registers.
os.environ["CUPY_ACCELERATORS"] = "cub"

import cupy  # noqa: E402
from cupy.cuda import runtime  # noqa: E402

MIB = 1 << 20
chunk = int(sys.argv[1]) * MIB


def fill_until_oom(label):
    """Allocates chunks until OutOfMemoryError; returns them."""
    held = []
    try:
        while len(held) < 4096:
            held.append(cupy.empty(chunk, dtype=cupy.uint8))
        print(f"{label}.oom=none")
    except cupy.cuda.memory.OutOfMemoryError:
        print(f"{label}.oom=OutOfMemoryError")
    print(f"{label}.chunks={len(held)}")
    return held


print(f"device_count={runtime.getDeviceCount()}")
free, total = runtime.memGetInfo()
print(f"info.free={free}")
print(f"info.total={total}")

# The default pool: cudaMalloc underneath.
pool = cupy.get_default_memory_pool()
held = fill_until_oom("pool")
del held
pool.free_all_blocks()
print(f"pool.after_free.used={pool.used_bytes()}")
again = cupy.zeros(chunk, dtype=cupy.uint8)
print("pool.after_oom=ok")
del again
pool.free_all_blocks()

# Streams and events.
stream = cupy.cuda.Stream(non_blocking=True)
start, end = cupy.cuda.Event(), cupy.cuda.Event()
with stream:
    start.record()
    a = cupy.empty(1 << 20, dtype=cupy.float32)
    a.fill(1.0)
    end.record()
end.synchronize()
stream.synchronize()
print(f"stream.done={int(stream.done)}")
print(f"events.elapsed_ms={cupy.cuda.get_elapsed_time(start, end)}")
cupy.cuda.Device(0).synchronize()
print("sync=ok")

# A kernel CuPy compiles with NVRTC and launches (it computes nothing on simgpu).
x = cupy.arange(1024, dtype=cupy.float32)
y = x * 2
raw = cupy.RawKernel(r"""
extern "C" __global__ void fw_add_one(const float *a, float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] + 1.0f;
}""", "fw_add_one")
raw((4,), (256,), (x, y, cupy.int32(1024)))
cupy.cuda.Device(0).synchronize()
print("kernel=ok")
# CUB (reduction) and Thrust (sort) kernels from CuPy's prebuilt fatbins.
total = cupy.ones(1 << 16, dtype=cupy.float32).sum()
ordered = cupy.sort(x)
cupy.cuda.Device(0).synchronize()
print("cub=ok")
del total, ordered
del a, x, y
pool.free_all_blocks()

# Stream-ordered allocation: cudaMallocAsync through the device's pool.
async_pool = cupy.cuda.MemoryAsyncPool()
cupy.cuda.set_allocator(async_pool.malloc)
held = fill_until_oom("async")
del held
cupy.cuda.Device(0).synchronize()
again = cupy.empty(chunk, dtype=cupy.uint8)
cupy.cuda.Device(0).synchronize()
print("async.after_oom=ok")
print("done=1")
