"""Lists the processes on device 0 through nvidia-ml-py (pynvml), as nvitop
does, in every form of the compute list, and the memory NVML shows. Prints
key=value lines for the test to check:

    list.pids / list.used     pynvml's nvmlDeviceGetComputeRunningProcesses
    v1.pids, v2.pids, v3.pids the unversioned, _v2 and _v3 entry points,
                              called with NVML's two-step protocol
    graphics.pids             nvmlDeviceGetGraphicsRunningProcesses_v3
    util.pids                 nvmlDeviceGetProcessUtilization (asked twice,
                              a sampling period apart, so that samples exist)
    mem.used / mem.total      nvmlDeviceGetMemoryInfo

pids are sorted and comma-separated; used is the sum of the listed
processes' memory.
"""
import ctypes
import time

import pynvml as nvml

NVML_ERROR_INSUFFICIENT_SIZE = 7


class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def raw_list(name, record, handle):
    fn = nvml._nvmlGetFunctionPointer(name)
    count = ctypes.c_uint(0)
    rc = fn(handle, ctypes.byref(count), None)
    if rc == 0:
        return []
    if rc != NVML_ERROR_INSUFFICIENT_SIZE:
        raise RuntimeError(f"{name} returned {rc}")
    records = (record * count.value)()
    rc = fn(handle, ctypes.byref(count), records)
    if rc != 0:
        raise RuntimeError(f"{name} returned {rc}")
    return [(records[i].pid, records[i].usedGpuMemory) for i in range(count.value)]


def pids(entries):
    return ",".join(str(pid) for pid in sorted(pid for pid, _ in entries))


def utilization_pids(handle):
    try:
        nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    except nvml.NVMLError_NotFound:
        pass
    time.sleep(0.25)
    try:
        return pids((s.pid, 0) for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0))
    except nvml.NVMLError_NotFound:
        return ""


def main():
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    listed = [(p.pid, p.usedGpuMemory) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    print(f"list.pids={pids(listed)}")
    print(f"list.used={sum(used for _, used in listed)}")
    for label, name, record in [
        ("v1", "nvmlDeviceGetComputeRunningProcesses", ProcessInfoV1),
        ("v2", "nvmlDeviceGetComputeRunningProcesses_v2", ProcessInfoV2),
        ("v3", "nvmlDeviceGetComputeRunningProcesses_v3", ProcessInfoV2),
        ("graphics", "nvmlDeviceGetGraphicsRunningProcesses_v3", ProcessInfoV2),
    ]:
        print(f"{label}.pids={pids(raw_list(name, record, handle))}")
    print(f"util.pids={utilization_pids(handle)}")
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    print(f"mem.used={mem.used}\nmem.total={mem.total}")
    nvml.nvmlShutdown()
    print("done=1")


if __name__ == "__main__":
    main()
