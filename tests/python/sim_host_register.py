"""Pins a buffer this process allocated itself with cuMemHostRegister, as
PyTorch's pin_memory and DALI do, through NVIDIA's cuda-bindings (resolved
by cuGetProcAddress_v2). Prints key=value lines for the test to check.
"""
import ctypes

from cuda.bindings import driver as cu

MIB = 1 << 20


def rc(key, result):
    """Prints `key=<CUresult>` and returns the call's other values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    print(f"{key}={int(err)}")
    return rest[0] if len(rest) == 1 else rest


def main():
    rc("init", cu.cuInit(0))
    dev = rc("device", cu.cuDeviceGet(0))
    ctx = rc("retain", cu.cuDevicePrimaryCtxRetain(dev))
    rc("set_current", cu.cuCtxSetCurrent(ctx))
    free_before, _ = rc("info_before", cu.cuMemGetInfo())

    buffer = ctypes.create_string_buffer(4 * MIB)
    base = ctypes.addressof(buffer)
    rc("register", cu.cuMemHostRegister(base, 4 * MIB, cu.CU_MEMHOSTREGISTER_DEVICEMAP))
    free_after, _ = rc("info_after", cu.cuMemGetInfo())
    print(f"device_bytes_charged={free_before - free_after}")
    rc("again", cu.cuMemHostRegister(base, 4 * MIB, 0))
    rc("overlap", cu.cuMemHostRegister(base + MIB, 4 * MIB, 0))
    dptr = rc("device_pointer", cu.cuMemHostGetDevicePointer(base + MIB, 0))
    print(f"device_pointer.same={int(int(dptr) == base + MIB)}")

    # Registered memory is a valid copy source and destination.
    data = bytes(range(256)) * 4096
    ctypes.memmove(base, data, len(data))
    ptr = rc("alloc", cu.cuMemAlloc(len(data)))
    rc("htod", cu.cuMemcpyHtoD(ptr, base, len(data)))
    back = bytearray(len(data))
    rc("dtoh", cu.cuMemcpyDtoH(back, ptr, len(back)))
    print(f"copy_ok={int(bytes(back) == data)}")
    rc("free", cu.cuMemFree(ptr))

    rc("unregister_inside", cu.cuMemHostUnregister(base + MIB))
    rc("unregister", cu.cuMemHostUnregister(base))
    rc("unregister_twice", cu.cuMemHostUnregister(base))
    rc("bad_flags", cu.cuMemHostRegister(base, MIB, 0x10))
    rc("iomemory", cu.cuMemHostRegister(base, MIB, cu.CU_MEMHOSTREGISTER_IOMEMORY))
    rc("null", cu.cuMemHostRegister(0, MIB, 0))
    rc("empty", cu.cuMemHostRegister(base, 0, 0))
    rc("unmapped", cu.cuMemHostRegister(0x10000, MIB, 0))
    rc("read_only", cu.cuMemHostRegister(base, MIB, cu.CU_MEMHOSTREGISTER_READ_ONLY))
    rc("unregister_read_only", cu.cuMemHostUnregister(base))

    pinned = rc("alloc_host", cu.cuMemAllocHost(MIB))
    rc("register_pinned", cu.cuMemHostRegister(pinned, MIB, 0))
    rc("free_host", cu.cuMemFreeHost(pinned))
    print("done=1")


main()
