"""Keeps one device busy with back-to-back kernels through NVIDIA's
cuda-bindings, which resolve every entry point through cuGetProcAddress_v2
(as the CUDA runtime does), for the compute limit tests.

    compute_load.py KERNEL_US SECONDS

Launches `sim_` kernels of KERNEL_US microseconds on a stream of its own for
SECONDS of wall time, waits for them, and prints kernels=K, wall_us=W (from
the first launch until the last kernel completed) and share=K*KERNEL_US/W."""
import ctypes
import sys
import time

from cuda.bindings import driver as cu

from driver_calls import check


def main():
    kernel_us, seconds = int(sys.argv[1]), float(sys.argv[2])
    print(f"init={int(cu.cuInit(0)[0])}")
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    module = check(cu.cuModuleLoadData(b"any image"))
    func = check(cu.cuModuleGetFunction(module, b"sim_sleep"))
    stream = check(cu.cuStreamCreate(0))
    arg = ctypes.c_uint64(kernel_us)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    kernels = 0
    start = time.monotonic()
    until = start + seconds
    while time.monotonic() < until:
        check(cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))
        kernels += 1
    check(cu.cuStreamSynchronize(stream))
    wall_us = (time.monotonic() - start) * 1e6
    print(f"kernels={kernels}")
    print(f"wall_us={wall_us:.0f}")
    print(f"share={kernels * kernel_us / wall_us:.4f}")


main()
