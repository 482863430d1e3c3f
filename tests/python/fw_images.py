"""Real compiler output through simgpu's loaders, with NVIDIA's cuda-bindings:
NVRTC compiles two kernels and two device variables to PTX and to a cubin
on the CPU; the driver loads them as a module (PTX, cubin, a fatbin
wrapping the cubin), as a library, and through the linker, finds the
kernels and variables, and launches the kernels. Then the runtime
interface export table is called as older runtimes call it. Prints
key=value lines (CUresult codes) for tests/frameworks.rs.
"""
import struct

from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

SOURCE = b"""
__device__ int fw_counter;
__constant__ float fw_table[16];
extern "C" __global__ void fw_first(int *out) { if (out) out[0] = 1 + fw_counter; }
extern "C" __global__ void fw_second(float *out, int n) { if (out && n) out[0] = fw_table[n]; }
"""


def rc(key, result):
    err = result[0] if isinstance(result, tuple) else result
    print(f"{key}={int(err)}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def compile_to(kind):
    err, prog = nvrtc.nvrtcCreateProgram(SOURCE, b"fw.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    # Ask NVRTC for the names the driver knows the variables by.
    for variable in (b"fw_counter", b"fw_table"):
        (err,) = nvrtc.nvrtcAddNameExpression(prog, b"&" + variable)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    (err,) = nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=sm_90"])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    size_fn, get_fn = (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if kind == "cubin" else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
    err, size = size_fn(prog)
    buf = b" " * size
    (err,) = get_fn(prog, buf)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    lowered = {}
    for variable in (b"fw_counter", b"fw_table"):
        err, name = nvrtc.nvrtcGetLoweredName(prog, b"&" + variable)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        lowered[variable] = name
    return buf, lowered


ptx, names = compile_to("ptx")
cubin, _ = compile_to("cubin")
print(f"lowered.counter={names[b'fw_counter'].decode()}")
ELF_MAGIC = b"\x7fELF"
print(f"cubin.elf={int(cubin[:4] == ELF_MAGIC)}")

rc("init", cu.cuInit(0))
dev = rc("device", cu.cuDeviceGet(0))
ctx = rc("retain", cu.cuDevicePrimaryCtxRetain(dev))
rc("set_current", cu.cuCtxSetCurrent(ctx))


def launch(key, function):
    rc(f"{key}.launch", cu.cuLaunchKernel(function, 2, 1, 1, 64, 1, 1, 0, 0, 0, 0))


for kind, image in (("ptx", ptx), ("cubin", cubin)):
    module = rc(f"{kind}.load", cu.cuModuleLoadData(image))
    first = rc(f"{kind}.first", cu.cuModuleGetFunction(module, b"fw_first"))
    rc(f"{kind}.second", cu.cuModuleGetFunction(module, b"fw_second"))
    rc(f"{kind}.missing", cu.cuModuleGetFunction(module, b"fw_third"))
    launch(kind, first)
    rc(f"{kind}.unload", cu.cuModuleUnload(module))

module = rc("load_ex", cu.cuModuleLoadDataEx(cubin, 0, [], []))
rc("load_ex.first", cu.cuModuleGetFunction(module, b"fw_first"))


def check_globals(key, get_global, handle):
    """Device variables: their sizes, and real memory (a copy round-trips)."""
    err, counter, counter_bytes = get_global(handle, names[b"fw_counter"])
    print(f"{key}.counter={int(err)}")
    print(f"{key}.counter.bytes={counter_bytes}")
    err, table, table_bytes = get_global(handle, names[b"fw_table"])
    print(f"{key}.table={int(err)}")
    print(f"{key}.table.bytes={table_bytes}")
    err, _, _ = get_global(handle, b"fw_no_such_variable")
    print(f"{key}.missing_variable={int(err)}")
    value = struct.pack("<i", 4242)
    rc(f"{key}.write", cu.cuMemcpyHtoD(counter, value, 4))
    back = bytearray(4)
    rc(f"{key}.read", cu.cuMemcpyDtoH(back, counter, 4))
    print(f"{key}.round_trip={int(bytes(back) == value)}")


for kind, image in (("ptx", ptx), ("cubin", cubin)):
    check_globals(f"{kind}.globals", cu.cuModuleGetGlobal, rc(f"{kind}.globals.load", cu.cuModuleLoadData(image)))

# A fatbin as nvcc writes it: header, then one cubin entry.
payload = cubin + b"\0" * (-len(cubin) % 8)
entry = struct.pack("<HHIQ", 2, 0x101, 64, len(payload)) + b"\0" * 24 + struct.pack("<Q", 0x11) + b"\0" * 16
fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry) + len(payload)) + entry + payload
module = rc("fatbin.load", cu.cuModuleLoadFatBinary(fatbin))
launch("fatbin", rc("fatbin.second", cu.cuModuleGetFunction(module, b"fw_second")))

library = rc("library.load", cu.cuLibraryLoadData(cubin, [], [], 0, [], [], 0))
print(f"library.count={rc('library.count_rc', cu.cuLibraryGetKernelCount(library))}")
kernel = rc("library.kernel", cu.cuLibraryGetKernel(library, b"fw_second"))
rc("library.missing", cu.cuLibraryGetKernel(library, b"fw_third"))
function = rc("library.function", cu.cuKernelGetFunction(kernel))
check_globals("library.globals", cu.cuLibraryGetGlobal, library)
launch("library", function)
rc("library.launch_kernel_handle", cu.cuLaunchKernel(cu.CUfunction(int(kernel)), 1, 1, 1, 32, 1, 1, 0, 0, 0, 0))

state = rc("link.create", cu.cuLinkCreate(0, [], []))
rc("link.add_ptx", cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, ptx, len(ptx), b"fw.ptx", 0, [], []))
err, linked, size = cu.cuLinkComplete(state)
print(f"link.complete={int(err)}")
module = rc("link.load", cu.cuModuleLoadData(linked))
launch("link", rc("link.first", cu.cuModuleGetFunction(module, b"fw_first")))
check_globals("link.globals", cu.cuModuleGetGlobal, module)
rc("link.missing", cu.cuModuleGetFunction(module, b"fw_third"))
rc("link.destroy", cu.cuLinkDestroy(state))

rc("garbage.load", cu.cuModuleLoadData(b"\x01\x02\x03\x04 not an image"))

# The runtime interface export table, called as older runtimes call it to
# load the fatbins they registered.
import ctypes as C

libcuda = C.CDLL("libcuda.so.1")
table = C.c_void_p()
guid = (C.c_ubyte * 16)(*bytes.fromhex("6BD5FB6C5BF4E74A8987D93912FD9DF9"))
rc("table.get", libcuda.cuGetExportTable(C.byref(table), guid))
words = C.cast(table, C.POINTER(C.c_size_t))
print(f"table.size={words[0]}")
fatbin_buf = C.create_string_buffer(fatbin, len(fatbin))


class FatbinWrapper(C.Structure):
    _fields_ = [("magic", C.c_uint), ("version", C.c_uint), ("data", C.c_void_p), ("filename_or_fatbins", C.c_void_p)]


wrapper = FatbinWrapper(0x466243B1, 1, C.addressof(fatbin_buf), None)
from_wrapper = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_void_p)(words[1])
module = C.c_void_p()
rc("table.module", from_wrapper(C.byref(module), C.addressof(wrapper)))
rc("table.module.first", cu.cuModuleGetFunction(cu.CUmodule(module.value), b"fw_first"))
from_header = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_void_p, C.c_void_p, C.c_uint)(words[8])
rc("table.module_ext", from_header(C.addressof(fatbin_buf), C.byref(module), None, None, 0))
rc("table.module_ext.second", cu.cuModuleGetFunction(cu.CUmodule(module.value), b"fw_second"))
primary = C.c_void_p()
rc("table.primary", C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_int)(words[2])(C.byref(primary), 0))
print(f"table.primary_is_retained={int(primary.value == int(ctx))}")
rc("table.unknown_slot", C.CFUNCTYPE(C.c_int)(words[3])())
unknown = (C.c_ubyte * 16)(*([0x42] * 16))
table = C.c_void_p(1)
rc("table.unknown_guid", libcuda.cuGetExportTable(C.byref(table), unknown))
print(f"table.unknown_guid.null={int(table.value is None)}")
# The tools context table's slot 4 is a context's id, as cuCtxGetId.
tools = C.c_void_p()
rc("tools.get", libcuda.cuGetExportTable(C.byref(tools), (C.c_ubyte * 16)(*bytes.fromhex("21318C60971432488CA641FF7324C8F2"))))
slot4 = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_ulonglong))(C.cast(tools, C.POINTER(C.c_size_t))[4])
via_table = C.c_ulonglong()
rc("tools.context_id", slot4(C.c_void_p(int(ctx)), C.byref(via_table)))
ctx_id = rc("ctx_id", cu.cuCtxGetId(ctx))
print(f"tools.context_id.same={int(via_table.value == ctx_id and ctx_id != 0)}")

rc("sync", cu.cuCtxSynchronize())
print("done=1")
