"""Drives MIG devices through NVIDIA's cuda-bindings. Prints key=value lines
for the test to check.

    mig_cuda.py enum           every device CUDA enumerates: name, UUID, memory, SMs
    mig_cuda.py alloc [hold]   on ordinal 0: the memory views, then allocations
                               past the free memory, all of it, and one more
                               byte; with `hold`, keeps 100MiB and waits for
                               stdin to close
"""
import sys

from cuda.bindings import driver as cu


def rc(key, result):
    """Prints `key=<CUresult>` and returns the call's other values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    print(f"{key}={int(err)}")
    return rest[0] if len(rest) == 1 else rest


def uuid_hex(dev):
    uuid = rc("uuid_rc", cu.cuDeviceGetUuid(dev))
    raw = bytes(b & 0xFF for b in uuid.bytes) if not isinstance(uuid.bytes, bytes) else uuid.bytes
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def main():
    mode = sys.argv[1]
    rc("init", cu.cuInit(0))
    count = rc("count_rc", cu.cuDeviceGetCount())
    print(f"count={count}")
    if mode == "enum":
        for i in range(count):
            dev = rc("get", cu.cuDeviceGet(i))
            name = bytes(rc("name_rc", cu.cuDeviceGetName(128, dev))).split(b"\x00")[0].decode()
            print(f"dev.{i}.name={name}")
            print(f"dev.{i}.uuid={uuid_hex(dev)}")
            print(f"dev.{i}.total={rc('total_rc', cu.cuDeviceTotalMem(dev))}")
            sms = rc("sm_rc", cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
            print(f"dev.{i}.sms={sms}")
        print("done=1")
        return
    dev = rc("get", cu.cuDeviceGet(0))
    print(f"uuid={uuid_hex(dev)}")
    print(f"total_mem={rc('total_rc', cu.cuDeviceTotalMem(dev))}")
    ctx = rc("retain", cu.cuDevicePrimaryCtxRetain(dev))
    rc("set_current", cu.cuCtxSetCurrent(ctx))
    free, total = rc("info", cu.cuMemGetInfo())
    print(f"info.free={free}\ninfo.total={total}")
    if len(sys.argv) > 2 and sys.argv[2] == "hold":
        held = rc("hold_alloc", cu.cuMemAlloc(100 << 20))
        print("ready=1")
        sys.stdin.read()
        rc("hold_free", cu.cuMemFree(held))
    else:
        rc("over", cu.cuMemAlloc(free + 1))
        ptr = rc("all", cu.cuMemAlloc(free))
        rc("one", cu.cuMemAlloc(1))
        rc("free_all", cu.cuMemFree(ptr))
    print("done=1")


main()
