"""Reads MIG devices through nvidia-ml-py (pynvml), as monitoring tools do.
Prints key=value lines for the test to check.

    mig_nvml.py    every device, its MIG mode, and each MIG device under it:
                   UUID, name, memory, ids, processes
"""
import pynvml as nvml


def value(x):
    """pynvml returns some numbers as ctypes values."""
    return getattr(x, "value", x)


def err_name(e):
    return type(e).__name__.replace("NVMLError_", "")


def main():
    nvml.nvmlInit()
    count = nvml.nvmlDeviceGetCount()
    print(f"count={count}")
    for i in range(count):
        dev = nvml.nvmlDeviceGetHandleByIndex(i)
        p = f"dev.{i}"
        print(f"{p}.uuid={nvml.nvmlDeviceGetUUID(dev)}")
        current, pending = nvml.nvmlDeviceGetMigMode(dev)
        print(f"{p}.mig_mode={current}/{pending}")
        print(f"{p}.is_mig={value(nvml.nvmlDeviceIsMigDeviceHandle(dev))}")
        mem = nvml.nvmlDeviceGetMemoryInfo(dev)
        print(f"{p}.total={mem.total}\n{p}.used={mem.used}")
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(dev)
        print(f"{p}.procs={len(procs)}")
        for proc in procs:
            print(f"{p}.proc.{proc.pid}={proc.usedGpuMemory}/{proc.gpuInstanceId}/{proc.computeInstanceId}")
        max_mig = nvml.nvmlDeviceGetMaxMigDeviceCount(dev)
        print(f"{p}.max_mig={max_mig}")
        for k in range(max_mig):
            m = f"{p}.mig.{k}"
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, k)
            except nvml.NVMLError as e:
                print(f"{m}.error={err_name(e)}")
                continue
            uuid = nvml.nvmlDeviceGetUUID(mig)
            print(f"{m}.uuid={uuid}")
            print(f"{m}.name={nvml.nvmlDeviceGetName(mig)}")
            print(f"{m}.is_mig={value(nvml.nvmlDeviceIsMigDeviceHandle(mig))}")
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            print(f"{m}.parent={nvml.nvmlDeviceGetUUID(parent)}")
            print(f"{m}.gi={nvml.nvmlDeviceGetGpuInstanceId(mig)}")
            print(f"{m}.ci={nvml.nvmlDeviceGetComputeInstanceId(mig)}")
            mem = nvml.nvmlDeviceGetMemoryInfo(mig)
            print(f"{m}.total={mem.total}\n{m}.used={mem.used}")
            by_uuid = nvml.nvmlDeviceGetHandleByUUID(uuid)
            print(f"{m}.by_uuid={nvml.nvmlDeviceGetUUID(by_uuid)}")
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(mig)
            print(f"{m}.procs={len(procs)}")
            for proc in procs:
                print(f"{m}.proc.{proc.pid}={proc.usedGpuMemory}/{proc.gpuInstanceId}/{proc.computeInstanceId}")
        try:
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, max(max_mig, 7))
            print(f"{p}.past_end=ok")
        except nvml.NVMLError as e:
            print(f"{p}.past_end={err_name(e)}")
    nvml.nvmlShutdown()
    print("done=1")


main()
