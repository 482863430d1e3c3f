"""Drives the simulated GPU through NVIDIA's cuda-bindings, which resolves
every driver entry point through cuGetProcAddress_v2 (as the CUDA runtime
does). Prints key=value lines for the test to check."""
import ctypes
import sys
import time

from cuda.bindings import driver as cu


def rc(key, result):
    """Prints `key=<CUresult>` and returns the call's other values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    print(f"{key}={int(err)}")
    return rest[0] if len(rest) == 1 else rest


def main():
    kernel_us = int(sys.argv[1])
    rc("init", cu.cuInit(0))
    print(f"driver_version={rc('version', cu.cuDriverGetVersion())}")
    count = rc("count", cu.cuDeviceGetCount())
    print(f"device_count={count}")
    dev = rc("device", cu.cuDeviceGet(0))
    name = rc("name", cu.cuDeviceGetName(128, dev))
    name = bytes(name).split(b"\x00")[0].decode()
    print(f"device_name={name}")
    major = rc("cc_major", cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    print(f"cc_major.value={major}")
    print(f"total_mem={rc('total', cu.cuDeviceTotalMem(dev))}")
    ctx = rc("retain", cu.cuDevicePrimaryCtxRetain(dev))
    rc("set_current", cu.cuCtxSetCurrent(ctx))

    free, total = rc("info", cu.cuMemGetInfo())
    print(f"info.free={free}\ninfo.total={total}")
    rc("over", cu.cuMemAlloc(free + 1))
    ptr = rc("all", cu.cuMemAlloc(free))
    rc("one", cu.cuMemAlloc(1))
    rc("free_all", cu.cuMemFree(ptr))
    free_after, _ = rc("info_after", cu.cuMemGetInfo())
    print(f"info_after.free={free_after}")

    # Copies through device memory.
    ptr = rc("alloc", cu.cuMemAlloc(1 << 20))
    data = bytes(range(256)) * 4096
    rc("htod", cu.cuMemcpyHtoD(ptr, data, len(data)))
    back = bytearray(len(data))
    rc("dtoh", cu.cuMemcpyDtoH(back, ptr, len(back)))
    print(f"copy_ok={int(bytes(back) == data)}")
    rc("free", cu.cuMemFree(ptr))

    # An asynchronous launch of a sim_ kernel, timed by events.
    module = rc("module", cu.cuModuleLoadData(b"any image"))
    func = rc("function", cu.cuModuleGetFunction(module, b"sim_sleep"))
    stream = rc("stream", cu.cuStreamCreate(0))
    start = rc("event_start", cu.cuEventCreate(0))
    end = rc("event_end", cu.cuEventCreate(0))
    arg = ctypes.c_uint64(kernel_us)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    rc("record_start", cu.cuEventRecord(start, stream))
    t0 = time.monotonic()
    rc("launch", cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))
    print(f"launch_us={(time.monotonic() - t0) * 1e6:.0f}")
    rc("record_end", cu.cuEventRecord(end, stream))
    print(f"query={int(cu.cuStreamQuery(stream)[0])}")
    rc("sync", cu.cuCtxSynchronize())
    print(f"run_us={(time.monotonic() - t0) * 1e6:.0f}")
    print(f"elapsed_ms={rc('elapsed', cu.cuEventElapsedTime(start, end)):.3f}")

    # Names the driver does not have.
    err, _, _ = cu.cuGetProcAddress(b"cuDoesNotExist", 13000, 0)
    print(f"proc_unknown={int(err)}")
    # The bindings return no status beside an error: the driver's own
    # out-parameter, through ctypes, says why the name was refused.
    pfn, status = ctypes.c_void_p(), ctypes.c_int(-1)
    ctypes.CDLL("libcuda.so.1").cuGetProcAddress_v2(
        b"cuDoesNotExist", ctypes.byref(pfn), 13000, ctypes.c_uint64(0), ctypes.byref(status))
    print(f"proc_unknown.status={status.value}")
    print("done=1")


main()
