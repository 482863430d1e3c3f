"""Times back-to-back kernels between two events through NVIDIA's
cuda-bindings, for simgpu's execution tests.

    event_gaps.py HEAD_US KERNELS KERNEL_US

Launches one kernel of HEAD_US microseconds, so that everything after it is
queued before the device reaches it; then records a start event, launches
KERNELS kernels of KERNEL_US each, records an end event, waits, and prints
elapsed_us (between the two events) and expected_us (KERNELS * KERNEL_US).
On a GPU the two differ by the kernels' start-up only, however late the
host learns of their completion."""
import ctypes
import sys

from cuda.bindings import driver as cu

from driver_calls import check


def launch(func, stream, kernel_us):
    arg = ctypes.c_uint64(kernel_us)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    check(cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))


def main():
    head_us, kernels, kernel_us = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    func = check(cu.cuModuleGetFunction(check(cu.cuModuleLoadData(b"any image")), b"sim_sleep"))
    stream = check(cu.cuStreamCreate(0))
    start, end = check(cu.cuEventCreate(0)), check(cu.cuEventCreate(0))
    launch(func, stream, head_us)
    check(cu.cuEventRecord(start, stream))
    for _ in range(kernels):
        launch(func, stream, kernel_us)
    check(cu.cuEventRecord(end, stream))
    # Still queued behind the head kernel: nothing between the events could
    # wait for the host.
    print(f"queued_before_start={int(cu.cuEventQuery(start)[0]) == int(cu.CUresult.CUDA_ERROR_NOT_READY)}")
    check(cu.cuStreamSynchronize(stream))
    elapsed_ms = check(cu.cuEventElapsedTime(start, end))
    print(f"elapsed_us={elapsed_ms * 1000.0:.1f}")
    print(f"expected_us={kernels * kernel_us}")


main()
