"""A tenant of the fairness benchmark, through NVIDIA's cuda-bindings.

    fairness_load.py saturate KERNEL_US SECONDS [DEVICE]
    fairness_load.py burst KERNEL_US COUNT PERIOD_MS SECONDS [ON_S OFF_S]
    fairness_load.py steps KERNEL_US PER_STEP HOST_US SECONDS [sync|copy]

`saturate` launches `sim_sleep` kernels of KERNEL_US back to back on a
stream of its own for SECONDS and prints, for every 100 ms of wall time
since its first launch (or since FAIRNESS_EPOCH, seconds since the Unix
epoch, when set: one time base for several clients), how many launches
returned in it (`bin=I n=N`): the
shim holds launches while the tenant's work in flight is at its bound, so
launches return at the pace kernels complete, to within that bound.

`burst` launches COUNT kernels every PERIOD_MS, waits for each burst to
complete, and prints each burst's latency in microseconds (`burst_us=L`).
With ON_S and OFF_S it bursts only in the first ON_S of every ON_S + OFF_S
seconds (counted from FAIRNESS_EPOCH when set), so that a client beside it
runs with and without bursts in turn, in the same spell of the host.

`steps` is a training loop that synchronises every step, as `loss.item()`
does: PER_STEP kernels of KERNEL_US, then cuStreamSynchronize, then
HOST_US of host work (a data loader's time; the CPU is busy meanwhile), for
SECONDS. It prints the same `bin=I n=N` lines as `saturate` (the kernels of
each step counted in the bin where the step ended), then `steps=S`. With
`copy`, each step ends instead in a synchronous cuMemcpyDtoH of 4 bytes,
which waits for the step's kernels (their stream is a blocking one): the
loop of a program that calls `cudaMemcpy` after its kernels, or numba's
`copy_to_host`.
"""
import ctypes
import os
import sys
import time

from cuda.bindings import driver as cu

from driver_calls import check


def setup(kernel_us, device=0):
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(device))))
    check(cu.cuCtxSetCurrent(ctx))
    func = check(cu.cuModuleGetFunction(check(cu.cuModuleLoadData(b"any image")), b"sim_sleep"))
    stream = check(cu.cuStreamCreate(0))
    arg = ctypes.c_uint64(kernel_us)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    return func, stream, (arg, params)


def saturate(kernel_us, seconds, device=0):
    func, stream, keep = setup(kernel_us, device)
    params = keep[1]
    bins = {}
    start = time.monotonic()
    epoch = os.environ.get("FAIRNESS_EPOCH")
    # Bins count from the shared epoch, in this process's monotonic clock.
    origin = start - (time.time() - float(epoch)) if epoch else start
    print("started=1", flush=True)
    until = start + seconds
    while True:
        now = time.monotonic()
        if now >= until:
            break
        check(cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))
        b = int((time.monotonic() - origin) * 10)
        if b >= 0:
            bins[b] = bins.get(b, 0) + 1
    check(cu.cuStreamSynchronize(stream))
    for b in sorted(bins):
        print(f"bin={b} n={bins[b]}")
    print("done=1", flush=True)


def burst(kernel_us, count, period_ms, seconds, on_s=None, off_s=None):
    func, stream, keep = setup(kernel_us)
    params = keep[1]
    start = time.monotonic()
    epoch = os.environ.get("FAIRNESS_EPOCH")
    origin = start - (time.time() - float(epoch)) if epoch else start
    print("started=1", flush=True)
    next_at = start
    while time.monotonic() < start + seconds:
        if on_s is not None:
            # Outside the first ON_S of each cycle: wait for the next one.
            now = time.monotonic()
            into = (now - origin) % (on_s + off_s)
            if now < origin or into >= on_s:
                time.sleep((origin - now) if now < origin else (on_s + off_s - into))
                next_at = time.monotonic()
                continue
        t0 = time.monotonic()
        for _ in range(count):
            check(cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))
        check(cu.cuStreamSynchronize(stream))
        print(f"burst_us={(time.monotonic() - t0) * 1e6:.0f}")
        next_at += period_ms / 1000
        time.sleep(max(0.0, next_at - time.monotonic()))
    print("done=1", flush=True)


def steps(kernel_us, per_step, host_us, seconds, wait="sync"):
    func, stream, keep = setup(kernel_us)
    params = keep[1]
    if wait not in ("sync", "copy"):
        sys.exit(f"steps: the wait is sync or copy, not {wait!r}")
    readback = check(cu.cuMemAlloc(4)) if wait == "copy" else None
    value = ctypes.c_uint32(0)
    bins = {}
    start = time.monotonic()
    epoch = os.environ.get("FAIRNESS_EPOCH")
    origin = start - (time.time() - float(epoch)) if epoch else start
    print("started=1", flush=True)
    until = start + seconds
    done = 0
    while time.monotonic() < until:
        for _ in range(per_step):
            check(cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))
        if readback is None:
            check(cu.cuStreamSynchronize(stream))
        else:
            check(cu.cuMemcpyDtoH(ctypes.addressof(value), readback, 4))
        done += 1
        b = int((time.monotonic() - origin) * 10)
        if b >= 0:
            bins[b] = bins.get(b, 0) + per_step
        host_until = time.monotonic() + host_us / 1e6
        while time.monotonic() < host_until:
            pass
    for b in sorted(bins):
        print(f"bin={b} n={bins[b]}")
    print(f"steps={done}")
    print("done=1", flush=True)


mode = sys.argv[1]
if mode == "steps":
    steps(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), *sys.argv[6:7])
elif mode == "saturate":
    saturate(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
else:
    on_off = [float(a) for a in sys.argv[6:8]] if len(sys.argv) > 7 else [None, None]
    burst(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), *on_off)
