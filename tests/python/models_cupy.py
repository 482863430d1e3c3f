"""CuPy's library-backed calls on simgpu: cuBLAS (matmul), cuFFT (fft) and
cuSOLVER (linalg.solve). Kernels compute nothing here, so each section
checks what the call returns (shape, dtype, where it lives), not values.
Prints key=value lines; a failing section prints `<name>=error ...`."""
import sys
import traceback

import cupy as cp


def report(name, fn):
    try:
        fn()
        print(f"{name}=ok", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        print(f"{name}=error {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)
        traceback.print_exc(file=sys.stderr)


def matmul():
    a = cp.ones((128, 64), dtype=cp.float32)
    b = cp.ones((64, 32), dtype=cp.float32)
    c = a @ b
    cp.cuda.Device().synchronize()
    print(f"matmul.shape={c.shape[0]}x{c.shape[1]} matmul.dtype={c.dtype}", flush=True)


def fft():
    x = cp.ones(1024, dtype=cp.complex64)
    y = cp.fft.fft(x)
    cp.cuda.Device().synchronize()
    print(f"fft.len={y.size} fft.dtype={y.dtype}", flush=True)


def solve():
    a = cp.eye(16, dtype=cp.float64) * 2
    b = cp.ones((16, 4), dtype=cp.float64)
    x = cp.linalg.solve(a, b)
    cp.cuda.Device().synchronize()
    print(f"solve.shape={x.shape[0]}x{x.shape[1]}", flush=True)


for section in sys.argv[1:] or ["matmul", "fft", "solve"]:
    report(section, globals()[section])
print("done=1", flush=True)
