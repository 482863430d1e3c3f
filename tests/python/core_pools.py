"""Frees and re-allocates stream-ordered memory through cuda.core, whose
DeviceMemoryResource takes it from the device's memory pool. Prints
key=value lines for the test to check:

    core_pools.py SIZE_MIB LOOPS
        first=ok|<error>        the first allocation of SIZE_MIB on a stream
        admitted=N refused=M    LOOPS times: free it on the stream, allocate again
        threshold=B             the pool's release threshold
        reserved=B used=B       what the pool reserves and what is in use
        free=B total=B          cuMemGetInfo
        ready=1                 then waits for a line on stdin
"""
import sys

from cuda.bindings import driver

try:
    from cuda.core import Device
except ImportError:  # cuda.core before 1.0
    from cuda.core.experimental import Device


def checked(result):
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err}")
    return values[0] if len(values) == 1 else values


def pool_bytes(pool, attr):
    return int(checked(driver.cuMemPoolGetAttribute(pool, attr)))


def main():
    size = int(sys.argv[1]) << 20
    loops = int(sys.argv[2])
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    try:
        buf = dev.allocate(size, stream=stream)
        print("first=ok")
    except Exception as e:  # noqa: BLE001 - the test reads what failed
        print(f"first={type(e).__name__}")
        return
    admitted = refused = 0
    for _ in range(loops):
        buf.close(stream)
        try:
            buf = dev.allocate(size, stream=stream)
            admitted += 1
        except Exception:  # noqa: BLE001 - counted
            refused += 1
            break
    print(f"admitted={admitted}\nrefused={refused}")
    pool = checked(driver.cuDeviceGetMemPool(dev.device_id))
    attr = driver.CUmemPool_attribute
    print(f"threshold={pool_bytes(pool, attr.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)}")
    print(f"reserved={pool_bytes(pool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)}")
    print(f"used={pool_bytes(pool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)}")
    free, total = checked(driver.cuMemGetInfo())
    print(f"free={free}\ntotal={total}")
    print("ready=1")
    sys.stdin.readline()
    print("done=1")


if __name__ == "__main__":
    main()
