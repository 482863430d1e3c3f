"""Asks the simulated GPU, through nvidia-ml-py (pynvml), everything nvitop
and gpustat ask, plus the argument checks a C caller relies on. Prints
key=value lines for the test to check; an NVML error prints its code as the
value of `<key>.error`.
"""
import ctypes

import pynvml as nvml


def show(key, call, *args):
    """Prints `key=<value>` for a call that succeeds, `key.error=<code>` otherwise."""
    try:
        value = call(*args)
    except nvml.NVMLError as e:
        print(f"{key}.error={e.value}")
        return None
    print(f"{key}={getattr(value, 'value', value)}")
    return value


def raw(name):
    """The C entry point itself, for calls pynvml never makes with bad arguments."""
    return nvml._nvmlGetFunctionPointer(name)


def identity(h):
    pci = nvml.nvmlDeviceGetPciInfo_v3(h)
    print(f"pci.busId={pci.busId}\npci.busIdLegacy={pci.busIdLegacy}")
    print(f"pci.bus={pci.bus}\npci.domain={pci.domain}\npci.pciDeviceId={pci.pciDeviceId}")
    for i in range(nvml.nvmlDeviceGetCount()):
        bus_id = nvml.nvmlDeviceGetPciInfo_v3(nvml.nvmlDeviceGetHandleByIndex(i)).busId
        print(f"bus_id.{i}={bus_id}")
        by_bus = nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        print(f"index_by_bus_id.{i}={nvml.nvmlDeviceGetIndex(by_bus)}")
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    print(f"cc={major}.{minor}")
    show("serial", nvml.nvmlDeviceGetSerial, h)


def modes(h):
    current, pending = nvml.nvmlDeviceGetMigMode(h)
    print(f"mig.current={current}\nmig.pending={pending}")
    show("is_mig", nvml.nvmlDeviceIsMigDeviceHandle, h)
    show("max_mig", nvml.nvmlDeviceGetMaxMigDeviceCount, h)
    show("compute_mode", nvml.nvmlDeviceGetComputeMode, h)
    show("persistence", nvml.nvmlDeviceGetPersistenceMode, h)
    current, pending = nvml.nvmlDeviceGetEccMode(h)
    print(f"ecc.current={current}\necc.pending={pending}")
    show("ecc.uncorrected", nvml.nvmlDeviceGetTotalEccErrors, h,
         nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    show("driver_model", nvml.nvmlDeviceGetDriverModel, h)


def memory(h):
    bar1 = nvml.nvmlDeviceGetBAR1MemoryInfo(h)
    print(f"bar1.total={bar1.bar1Total}\nbar1.used={bar1.bar1Used}\nbar1.free={bar1.bar1Free}")
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    print(f"mem.total={mem.total}\nmem.used={mem.used}")


def telemetry(h):
    show("temperature", nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
    show("threshold.slowdown", nvml.nvmlDeviceGetTemperatureThreshold, h,
         nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    show("threshold.acoustic_min", nvml.nvmlDeviceGetTemperatureThreshold, h,
         nvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN)
    show("power.usage", nvml.nvmlDeviceGetPowerUsage, h)
    show("power.limit", nvml.nvmlDeviceGetPowerManagementLimit, h)
    show("power.enforced", nvml.nvmlDeviceGetEnforcedPowerLimit, h)
    low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
    print(f"power.min={low}\npower.max={high}")
    show("fan", nvml.nvmlDeviceGetFanSpeed, h)
    for name, kind in [("graphics", nvml.NVML_CLOCK_GRAPHICS), ("sm", nvml.NVML_CLOCK_SM),
                       ("mem", nvml.NVML_CLOCK_MEM), ("video", nvml.NVML_CLOCK_VIDEO)]:
        show(f"clock.{name}", nvml.nvmlDeviceGetClockInfo, h, kind)
        show(f"clock_max.{name}", nvml.nvmlDeviceGetMaxClockInfo, h, kind)
    show("pstate", nvml.nvmlDeviceGetPerformanceState, h)
    (link_count,) = nvml.nvmlDeviceGetFieldValues(h, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
    print(f"nvlink.rc={link_count.nvmlReturn}\nnvlink.count={link_count.value.uiVal}")


class ProcessInfoV1(ctypes.Structure):
    """`nvmlProcessInfo_v1_t`, what the unversioned C symbols fill."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def processes(h):
    for kind in ["Compute", "Graphics", "MPSCompute"]:
        for suffix in ["_v2", "_v3"]:
            key = f"procs.{kind}{suffix}"
            try:
                procs = getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses{suffix}")(h)
            except nvml.NVMLError as e:
                print(f"{key}.error={e.value}")
                continue
            print(f"{key}.count={len(procs)}")
            for p in procs:
                print(f"{key}.pid.{p.pid}={p.usedGpuMemory}")
        # pynvml maps the unversioned names to _v3; call the C symbol itself.
        key = f"procs.{kind}"
        infos = (ProcessInfoV1 * 8)()
        count = ctypes.c_uint(len(infos))
        print(f"{key}.rc={raw(f'nvmlDeviceGet{kind}RunningProcesses')(h, ctypes.byref(count), infos)}")
        print(f"{key}.count={count.value}")
        for p in infos[:count.value]:
            print(f"{key}.pid.{p.pid}={p.usedGpuMemory}")


def argument_checks(h):
    # The sizing call every client makes first: no room, no array.
    count = ctypes.c_uint(0)
    rc = raw("nvmlDeviceGetComputeRunningProcesses_v3")(h, ctypes.byref(count), None)
    print(f"sizing.rc={rc}\nsizing.count={count.value}")
    print(f"null.power={raw('nvmlDeviceGetPowerUsage')(h, None)}")
    print(f"null.mig={raw('nvmlDeviceGetMigMode')(h, None, None)}")
    print(f"null.pci={raw('nvmlDeviceGetPciInfo_v3')(h, None)}")
    print(f"null.count={raw('nvmlDeviceGetGraphicsRunningProcesses_v3')(h, None, None)}")
    print(f"bad_handle.temperature={raw('nvmlDeviceGetTemperature')(None, 0, ctypes.byref(count))}")


def main():
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    identity(h)
    modes(h)
    memory(h)
    telemetry(h)
    processes(h)
    argument_checks(h)
    nvml.nvmlShutdown()
    print("done=1")


main()
