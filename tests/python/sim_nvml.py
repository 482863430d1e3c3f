"""Reads the simulated GPU through nvidia-ml-py (pynvml), as monitoring tools
do. Prints key=value lines for the test to check.

    sim_nvml.py memory        device identity, memory and per-process memory
    sim_nvml.py utilization   utilization while another process keeps the device busy
"""
import ctypes
import sys
import time

import pynvml as nvml


def main():
    nvml.nvmlInit()
    count = nvml.nvmlDeviceGetCount()
    print(f"count={count}")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    print(f"name={nvml.nvmlDeviceGetName(handle)}")
    print(f"uuid={uuid}")
    print(f"driver={nvml.nvmlSystemGetDriverVersion()}")
    by_uuid = nvml.nvmlDeviceGetHandleByUUID(uuid)
    print(f"index_by_uuid={nvml.nvmlDeviceGetIndex(by_uuid)}")
    if sys.argv[1] == "memory":
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        print(f"mem.total={mem.total}\nmem.used={mem.used}\nmem.free={mem.free}")
        mem2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        print(f"mem2.total={mem2.total}\nmem2.used={mem2.used}\nmem2.free={mem2.free}\nmem2.reserved={mem2.reserved}")
        # What NCCL asks before it builds a communicator.
        state = nvml.nvmlSystemGetConfComputeState()
        print(f"cc.environment={state.environment}\ncc.feature={state.ccFeature}")
        for name, index in [("read", 0), ("write", 1), ("nvlink", 2)]:  # nvmlGpuP2PCapsIndex_t
            print(f"p2p.{name}={nvml.nvmlDeviceGetP2PStatus(handle, handle, ctypes.c_uint(index))}")
        print(f"pcie.max_speed={nvml.nvmlDeviceGetPcieLinkMaxSpeed(handle)}")
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        print(f"procs.count={len(procs)}")
        for p in procs:
            print(f"procs.pid.{p.pid}={p.usedGpuMemory}")
    else:
        time.sleep(float(sys.argv[2]))
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        print(f"util.gpu={rates.gpu}")
        since = 0
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
            print(f"putil.count={len(samples)}")
            for s in samples:
                print(f"putil.pid.{s.pid}={s.smUtil}")
                print(f"putil.ts.{s.pid}={s.timeStamp}")
        except nvml.NVMLError as e:
            print(f"putil.error={e}")
    nvml.nvmlShutdown()
    print("done=1")


main()
