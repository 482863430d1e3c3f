"""JAX on simgpu: the backend it picked, a jitted matmul, and what its
allocator reports. Kernels compute nothing here, so the checks are on what
JAX returns (shape, dtype, where it lives) and on memory, not on values.
Prints key=value lines; a failing section prints `<name>=error ...`.

Sections (in the order given on the command line, all by default):
  devices   the default backend and its devices
  matmul    a jitted matmul of two 256x256 float32 arrays, run twice
  memory    memory_stats() at start, and after a 64 MiB array is made
  oversize  a 1.5 GiB array: refused where the device (or slice) is 1 GiB
  step_oom  a jitted step whose result (4 GiB) is larger than the device:
            JAX's own out-of-memory error, how long it took to come, and
            what XLA's allocator holds before and after (nothing is lost)
  after     a small jitted step (a matmul and a reduction), which runs
  blas      the library calls XLA compiled a jitted matmul into (its custom
            calls: `__cublas$lt$matmul` where the dot goes to cuBLASLt, as
            it does with XLA_FLAGS=--xla_gpu_enable_triton_gemm=false), and
            the matmul run
  hold      prints holding=1 and waits for a line on stdin (a test reads
            the monitor meanwhile)
"""
import re
import sys
import time

import jax
import jax.numpy as jnp

from sections import report

MIB = 1 << 20
GIB = 1 << 30


def devices():
    backend = jax.default_backend()
    devs = jax.devices()
    print(f"devices.backend={backend}", flush=True)
    print(f"devices.count={len(devs)}", flush=True)
    print(f"devices.kind={devs[0].device_kind}", flush=True)


def matmul():
    f = jax.jit(lambda a, b: a @ b)
    a = jnp.ones((256, 256), dtype=jnp.float32)
    b = jnp.ones((256, 256), dtype=jnp.float32)
    c = f(a, b).block_until_ready()
    c = f(c, b).block_until_ready()
    where = ",".join(str(d) for d in c.devices())
    print(f"matmul.shape={c.shape[0]}x{c.shape[1]}", flush=True)
    print(f"matmul.dtype={c.dtype}", flush=True)
    print(f"matmul.device={where}", flush=True)


def blas():
    f = jax.jit(lambda a, b: a @ b)
    a = jnp.ones((256, 256), dtype=jnp.float32)
    compiled = f.lower(a, a).compile()
    targets = sorted(set(re.findall(r'custom_call_target="([^"]+)"', compiled.as_text())))
    print(f"blas.targets={','.join(targets) or 'none'}", flush=True)
    c = compiled(a, a).block_until_ready()
    print(f"blas.shape={c.shape[0]}x{c.shape[1]}", flush=True)


def stats():
    return jax.devices()[0].memory_stats() or {}


def memory():
    before = stats()
    for key in ("bytes_limit", "pool_bytes", "bytes_in_use"):
        print(f"memory.{key}={before.get(key, -1)}", flush=True)
    x = jnp.zeros((64 * MIB // 4,), dtype=jnp.float32).block_until_ready()
    after = stats()
    print(f"memory.array_bytes={x.nbytes}", flush=True)
    print(f"memory.in_use_growth={after.get('bytes_in_use', 0) - before.get('bytes_in_use', 0)}", flush=True)
    print(f"memory.pool_bytes_after={after.get('pool_bytes', -1)}", flush=True)
    del x


def oversize():
    try:
        y = jnp.zeros((1536 * MIB // 4,), dtype=jnp.float32).block_until_ready()
        print(f"oversize.result=allocated {y.nbytes}", flush=True)
        del y
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        print(f"oversize.result=refused {type(e).__name__}", flush=True)
        print(f"oversize.message={' '.join(str(e).split())[:200]}", flush=True)


def step_oom():
    @jax.jit
    def step(scale):
        return jnp.ones((4 * GIB // 4,), dtype=jnp.float32) * scale

    print(f"step_oom.bytes_limit={stats().get('bytes_limit', -1)}", flush=True)
    before = stats().get("bytes_in_use", -1)
    start = time.monotonic()
    try:
        y = step(jnp.float32(2)).block_until_ready()
        print(f"step_oom.result=ran {y.nbytes}", flush=True)
        del y
    except Exception as e:  # noqa: BLE001 - the error is the answer
        print(f"step_oom.result=raised {type(e).__name__}", flush=True)
        print(f"step_oom.message={' '.join(str(e).split())[:200]}", flush=True)
    print(f"step_oom.seconds={time.monotonic() - start:.1f}", flush=True)
    print(f"step_oom.in_use_before={before}", flush=True)
    print(f"step_oom.in_use_after={stats().get('bytes_in_use', -1)}", flush=True)


def after():
    f = jax.jit(lambda a, b: (a @ b).sum(axis=0))
    a = jnp.ones((256, 256), dtype=jnp.float32)
    c = f(a, a).block_until_ready()
    print(f"after.shape={c.shape[0]}", flush=True)
    print(f"after.device={','.join(str(d) for d in c.devices())}", flush=True)


def hold():
    print("holding=1", flush=True)
    sys.stdin.readline()


SECTIONS = {
    "devices": devices,
    "matmul": matmul,
    "memory": memory,
    "oversize": oversize,
    "blas": blas,
    "step_oom": step_oom,
    "after": after,
    "hold": hold,
}

for section in sys.argv[1:] or ["devices", "matmul", "memory", "oversize"]:
    report(section, SECTIONS[section])
print("done=1", flush=True)
