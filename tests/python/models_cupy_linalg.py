"""CuPy's cuSOLVER-backed linear algebra on simgpu: solve, inv, cholesky,
qr, svd, eigh and lstsq, each a factorisation (getrf, potrf, geqrf,
gesvd, syevd) with its workspace query, device info word and kernels.
Kernels compute nothing here, so each section checks what the call
returns (shapes, dtype) after the stream has synchronised, not values.

Usage: models_cupy_linalg.py --lib-dir=DIR [section ...]. DIR holds
NVIDIA's libcublas, libcublasLt, libcusparse and libcusolver (the wheels
a framework installs); they are loaded from there before CuPy asks for
them by name, and the cuSOLVER version loaded is printed.
Prints key=value lines; a failing section prints `<name>=error ...`."""
import ctypes
import os
import sys

args = sys.argv[1:]
lib_dir = args.pop(0).split("=", 1)[1]
for name in ["libcublasLt.so.13", "libcublas.so.13", "libcusparse.so.12", "libcusolver.so.12"]:
    lib = ctypes.CDLL(os.path.join(lib_dir, name), mode=ctypes.RTLD_GLOBAL)
    if name == "libcusolver.so.12":
        version = [ctypes.c_int() for _ in range(3)]
        for part, v in zip((0, 1, 2), version):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            lib.cusolverGetProperty(part, ctypes.byref(v))
        print(f"cusolver.version={'.'.join(str(v.value) for v in version)}", flush=True)

import cupy as cp  # noqa: E402 - the libraries above must be loaded first

from sections import report

N = 32


def tall(cols):
    """An N x cols matrix (built without cuRAND, which CuPy's wheel does
    not bring)."""
    return cp.sin(cp.arange(N * cols, dtype=cp.float64).reshape(N, cols))


def spd():
    a = tall(N)
    return a @ a.T + N * cp.eye(N)


def shape(x):
    return "x".join(str(d) for d in x.shape)


def done(name, *arrays):
    cp.cuda.Device().synchronize()
    print(f"{name}.shapes={','.join(shape(a) for a in arrays)}", flush=True)
    print(f"{name}.dtype={arrays[0].dtype}", flush=True)


def resources():
    """The SM resource cuSOLVER 12.4 asks for, straight from the driver."""
    cu = ctypes.CDLL("libcuda.so.1")
    cp.cuda.Device().synchronize()  # the runtime has made its context
    buf = (ctypes.c_ubyte * 144)(*([0xAB] * 144))
    print(f"resources.device_rc={cu.cuDeviceGetDevResource(0, buf, 1)}", flush=True)
    print(f"resources.device_type={int.from_bytes(bytes(buf[:4]), 'little')}", flush=True)
    print(f"resources.device_sm_count={int.from_bytes(bytes(buf[96:100]), 'little')}", flush=True)
    ctx = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(ctx))
    buf = (ctypes.c_ubyte * 144)()
    print(f"resources.ctx_rc={cu.cuCtxGetDevResource(ctx, buf, 1)}", flush=True)
    print(f"resources.ctx_sm_count={int.from_bytes(bytes(buf[96:100]), 'little')}", flush=True)
    print(f"resources.unknown_type_rc={cu.cuCtxGetDevResource(ctx, buf, 7)}", flush=True)
    print(f"resources.bad_device_rc={cu.cuDeviceGetDevResource(99, buf, 1)}", flush=True)


SECTIONS = {
    "resources": resources,
    "solve": lambda: done("solve", cp.linalg.solve(spd(), cp.ones((N, 4)))),
    "inv": lambda: done("inv", cp.linalg.inv(spd())),
    "cholesky": lambda: done("cholesky", cp.linalg.cholesky(spd())),
    "qr": lambda: done("qr", *cp.linalg.qr(tall(16))),
    "svd": lambda: done("svd", *cp.linalg.svd(tall(16), full_matrices=False)),
    "eigh": lambda: done("eigh", *cp.linalg.eigh(spd())),
    "lstsq": lambda: done("lstsq", cp.linalg.lstsq(tall(16), cp.ones(N), rcond=None)[0]),
}

for section in args or list(SECTIONS):
    report(section, SECTIONS[section])
print("done=1", flush=True)
