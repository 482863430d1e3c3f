"""CuPy's library-backed calls on simgpu: cuBLAS (matmul, fp32 and fp16),
cuFFT (fft) and cuSOLVER (linalg.solve). Kernels compute nothing here, so
each section checks what the call returns (shape, dtype) and times the
library's work between two events on the stream: with SIMGPU_KERNEL_US set
long, the time shows that the library launched its kernels as simulated
work, in stream order (the second call of each is timed, so that loading
the library's modules is not).

Usage: models_cupy.py [--lib-dir=DIR] [section ...]. DIR holds NVIDIA's
libcublas, libcublasLt, libcufft and libcusolver; they are loaded from
there before CuPy asks for them by name.
Prints key=value lines; a failing section prints `<name>=error ...`."""
import ctypes
import os
import sys

args = sys.argv[1:]
lib_dir = None
if args and args[0].startswith("--lib-dir="):
    lib_dir = args.pop(0).split("=", 1)[1]
if lib_dir:
    for name in ["libcublasLt.so.13", "libcublas.so.13", "libcufft.so.12", "libcusparse.so.12", "libcusolver.so.12"]:
        ctypes.CDLL(os.path.join(lib_dir, name), mode=ctypes.RTLD_GLOBAL)

import cupy as cp  # noqa: E402 - the libraries above must be loaded first

from sections import report


def timed(name, call):
    """Runs `call` once to load the library's kernels and plan its work,
    then again between two events on the current stream, and prints the
    milliseconds between them."""
    call()
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    result = call()
    end.record()
    end.synchronize()
    print(f"{name}.elapsed_ms={cp.cuda.get_elapsed_time(start, end):.3f}", flush=True)
    return result


def matmul_of(dtype):
    def section(name):
        a = cp.ones((128, 64), dtype=dtype)
        b = cp.ones((64, 32), dtype=dtype)
        c = timed(name, lambda: a @ b)
        print(f"{name}.shape={c.shape[0]}x{c.shape[1]}\n{name}.dtype={c.dtype}", flush=True)

    return section


matmul = matmul_of(cp.float32)
matmul_fp16 = matmul_of(cp.float16)


def fft(name):
    x = cp.ones(1024, dtype=cp.complex64)
    y = timed(name, lambda: cp.fft.fft(x))
    print(f"{name}.len={y.size}\n{name}.dtype={y.dtype}", flush=True)


def solve(name):
    a = cp.eye(16, dtype=cp.float64) * 2
    b = cp.ones((16, 4), dtype=cp.float64)
    x = timed(name, lambda: cp.linalg.solve(a, b))
    print(f"{name}.shape={x.shape[0]}x{x.shape[1]}\n{name}.dtype={x.dtype}", flush=True)


for section in args or ["matmul", "matmul_fp16", "fft", "solve"]:
    report(section, globals()[section], section)
print("done=1", flush=True)
