"""NVIDIA's CUDA runtime (libcudart 13.5) on simgpu, driven as nvcc-built
host code drives it: a fatbin registered with __cudaRegisterFatBinary, its
kernel registered with __cudaRegisterFunction and launched with
cudaLaunchKernel, plus cudaMalloc, cudaMemGetInfo, streams and events.
Prints key=value lines (cudaError_t codes) for tests/frameworks.rs.

usage: fw_cudart.py LIBCUDART CHUNK_MIB
"""
import ctypes as C
import struct
import sys

rt = C.CDLL(sys.argv[1])
MIB = 1 << 20
chunk = int(sys.argv[2]) * MIB


def call(key, rc):
    print(f"{key}={rc}")
    return rc


# A fatbin as nvcc embeds it: header (magic, version, header size, body
# size), then one PTX entry (kind 1, version, header size, payload size, ...).
PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .global .align 4 .u32 fw_flag[4];
.visible .entry fw_ping(.param .u64 out)
{
    ret;
}
""" + b"\0"
ptx = PTX + b"\0" * (-len(PTX) % 8)
entry = struct.pack("<HHIQ", 1, 0x101, 64, len(ptx)) + b"\0" * 24 + struct.pack("<Q", 0x11) + b"\0" * 16
body = entry + ptx
fatbin = C.create_string_buffer(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body)


class FatbinWrapper(C.Structure):
    _fields_ = [("magic", C.c_uint), ("version", C.c_uint), ("data", C.c_void_p), ("filename_or_fatbins", C.c_void_p)]


wrapper = FatbinWrapper(0x466243B1, 1, C.addressof(fatbin), None)
rt.__cudaRegisterFatBinary.restype = C.c_void_p
rt.__cudaRegisterFatBinary.argtypes = [C.c_void_p]
handle = rt.__cudaRegisterFatBinary(C.addressof(wrapper))
print(f"register.handle={int(bool(handle))}")
# The host-side stub the runtime maps to the device function: any address
# unique to this kernel will do.
host_stub = C.create_string_buffer(16)
rt.__cudaRegisterFunction.argtypes = [C.c_void_p, C.c_void_p, C.c_char_p, C.c_char_p, C.c_int] + [C.c_void_p] * 5
rt.__cudaRegisterFunction(handle, C.addressof(host_stub), b"fw_ping", b"fw_ping", -1, None, None, None, None, None)
# A __device__ variable, as nvcc registers one: the host shadow the program
# names it by, then the device name and size.
host_flag = C.create_string_buffer(16)
rt.__cudaRegisterVar.argtypes = [C.c_void_p, C.c_void_p, C.c_char_p, C.c_char_p, C.c_int, C.c_size_t, C.c_int, C.c_int]
rt.__cudaRegisterVar(handle, C.addressof(host_flag), b"fw_flag", b"fw_flag", 0, 16, 0, 0)
rt.__cudaRegisterFatBinaryEnd.argtypes = [C.c_void_p]
rt.__cudaRegisterFatBinaryEnd(handle)

count = C.c_int(-1)
call("get_device_count", rt.cudaGetDeviceCount(C.byref(count)))
print(f"device_count={count.value}")
free, total = C.c_size_t(), C.c_size_t()
call("mem_get_info", rt.cudaMemGetInfo(C.byref(free), C.byref(total)))
print(f"info.free={free.value}")
print(f"info.total={total.value}")

# cudaMalloc until the device (or the cap) is full, then free and go on.
held = []
while len(held) < 4096:
    p = C.c_void_p()
    rc = rt.cudaMalloc(C.byref(p), C.c_size_t(chunk))
    if rc != 0:
        call("malloc_over", rc)
        break
    held.append(p)
print(f"malloc.chunks={len(held)}")
for p in held:
    rt.cudaFree(p)
p = C.c_void_p()
call("malloc_after", rt.cudaMalloc(C.byref(p), C.c_size_t(chunk)))
rt.cudaFree(p)


class Dim3(C.Structure):
    _fields_ = [("x", C.c_uint), ("y", C.c_uint), ("z", C.c_uint)]


rt.cudaLaunchKernel.argtypes = [C.c_void_p, Dim3, Dim3, C.POINTER(C.c_void_p), C.c_size_t, C.c_void_p]
out = C.c_void_p(0)
args = (C.c_void_p * 1)(C.addressof(out))
stream = C.c_void_p()
call("stream_create", rt.cudaStreamCreate(C.byref(stream)))
start, end = C.c_void_p(), C.c_void_p()
call("event_create", rt.cudaEventCreate(C.byref(start)) or rt.cudaEventCreate(C.byref(end)))
rt.cudaEventRecord.argtypes = [C.c_void_p, C.c_void_p]
rt.cudaEventRecord(start, stream)
call("launch", rt.cudaLaunchKernel(C.addressof(host_stub), Dim3(8, 1, 1), Dim3(128, 1, 1), args, 0, stream))
rt.cudaEventRecord(end, stream)
rt.cudaStreamSynchronize.argtypes = [C.c_void_p]
call("stream_sync", rt.cudaStreamSynchronize(stream))
ms = C.c_float(-1)
rt.cudaEventElapsedTime.argtypes = [C.POINTER(C.c_float), C.c_void_p, C.c_void_p]
call("elapsed", rt.cudaEventElapsedTime(C.byref(ms), start, end))
print(f"elapsed_ms={ms.value}")
# cudaMemcpyToSymbol / FromSymbol reach the variable's device memory.
flag_in = (C.c_uint * 4)(7, 8, 9, 10)
flag_out = (C.c_uint * 4)()
rt.cudaMemcpyToSymbol.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t, C.c_size_t, C.c_int]
rt.cudaMemcpyFromSymbol.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t, C.c_size_t, C.c_int]
call("to_symbol", rt.cudaMemcpyToSymbol(C.addressof(host_flag), flag_in, 16, 0, 1))
call("from_symbol", rt.cudaMemcpyFromSymbol(flag_out, C.addressof(host_flag), 16, 0, 2))
print(f"symbol.round_trip={int(list(flag_out) == [7, 8, 9, 10])}")
size = C.c_size_t()
call("symbol_size", rt.cudaGetSymbolSize(C.byref(size), C.c_void_p(C.addressof(host_flag))))
print(f"symbol.bytes={size.value}")
# A host pointer the runtime never registered is no kernel.
unknown = C.create_string_buffer(16)
call("launch_unregistered", rt.cudaLaunchKernel(C.addressof(unknown), Dim3(1, 1, 1), Dim3(1, 1, 1), args, 0, None))
rt.cudaGetLastError()
call("device_sync", rt.cudaDeviceSynchronize())

# cudaDeviceReset destroys the primary context (the runtime's per-context
# state goes with it); the next call makes a new one.
call("reset", rt.cudaDeviceReset())
p = C.c_void_p()
call("malloc_after_reset", rt.cudaMalloc(C.byref(p), C.c_size_t(chunk)))
call("mem_get_info_after_reset", rt.cudaMemGetInfo(C.byref(free), C.byref(total)))
print(f"info_after_reset.free={free.value}")
call("launch_after_reset", rt.cudaLaunchKernel(C.addressof(host_stub), Dim3(1, 1, 1), Dim3(32, 1, 1), args, 0, None))
call("sync_after_reset", rt.cudaDeviceSynchronize())
rt.cudaFree(p)
print("done=1")
