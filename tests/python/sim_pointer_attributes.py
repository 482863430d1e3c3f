"""Pointer attributes read through NVIDIA's CUDA runtime, and PyTorch's
is_pinned(), on simgpu. Prints key=value lines for
tests/simgpu_pointer_attributes.rs.

usage:
  sim_pointer_attributes.py runtime LIBCUDART
      For each kind of memory (cudaMalloc, cudaMallocHost, cudaHostAlloc,
      cudaHostRegister, cudaMallocManaged, cudaMallocAsync, plain malloc):
      cudaPointerGetAttributes, then every CUpointer_attribute through the
      driver's cuPointerGetAttribute as the runtime hands it out
      (cudaGetDriverEntryPointByVersion), each into a buffer filled with
      0xAB so that the width the driver wrote shows; then all of them at
      once through cuPointerGetAttributes.
  sim_pointer_attributes.py torch
      is_pinned() of pinned, registered, plain and CUDA tensors.
"""
import ctypes as C
import sys

MIB = 1 << 20
FILL = 0xAB
SLOT = 16

# CUpointer_attribute (cuda.h), and the width at which NVIDIA's own Python
# bindings read each one (cuda/bindings/_lib/utils.pxi): booleans into a
# C int, the memory type and access flags into an unsigned int, ordinals
# into an int, sizes into size_t, the rest into 64-bit values.
ATTRIBUTES = [
    ("context", 1, 8),
    ("memory_type", 2, 4),
    ("device_pointer", 3, 8),
    ("host_pointer", 4, 8),
    ("sync_memops", 6, 4),
    ("buffer_id", 7, 8),
    ("is_managed", 8, 4),
    ("device_ordinal", 9, 4),
    ("is_legacy_cuda_ipc_capable", 10, 4),
    ("range_start_addr", 11, 8),
    ("range_size", 12, 8),
    ("mapped", 13, 4),
    ("allowed_handle_types", 14, 8),
    ("is_gpu_direct_rdma_capable", 15, 4),
    ("access_flags", 16, 4),
    ("mempool_handle", 17, 8),
    ("mapping_size", 18, 8),
    ("mapping_base_addr", 19, 8),
    ("memory_block_id", 20, 8),
    ("is_hw_decompress_capable", 21, 4),
    ("locality_domain_ordinal", 22, 4),
]


def written_width(buf):
    """How many leading bytes of a FILL-filled slot the driver changed
    (the last changed byte, counted from the start)."""
    changed = [i for i in range(SLOT) if buf[i] != FILL]
    return changed[-1] + 1 if changed else 0


def value(buf, width, signed=False):
    return int.from_bytes(bytes(buf[:width]), "little", signed=signed)


class PointerAttributes(C.Structure):
    """cudaPointerAttributes (driver_types.h, CUDA 13): 88 bytes."""

    _fields_ = [
        ("type", C.c_int),
        ("device", C.c_int),
        ("devicePointer", C.c_void_p),
        ("hostPointer", C.c_void_p),
        ("localityDomainOrdinal", C.c_long),
        ("reserved", C.c_long * 7),
    ]


def runtime(path):
    rt = C.CDLL(path)
    rt.cudaPointerGetAttributes.argtypes = [C.POINTER(PointerAttributes), C.c_void_p]
    rt.cudaGetDriverEntryPointByVersion.argtypes = [C.c_char_p, C.POINTER(C.c_void_p), C.c_uint, C.c_ulonglong, C.POINTER(C.c_int)]

    def entry(name, version):
        fn, status = C.c_void_p(), C.c_int(-1)
        rc = rt.cudaGetDriverEntryPointByVersion(name.encode(), C.byref(fn), version, 0, C.byref(status))
        print(f"entry.{name}={rc}")
        print(f"entry.{name}.status={status.value}")
        return fn.value

    get_one = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_uint, C.c_ulonglong)(entry("cuPointerGetAttribute", 4000))
    get_many = C.CFUNCTYPE(C.c_int, C.c_uint, C.POINTER(C.c_uint), C.POINTER(C.c_void_p), C.c_ulonglong)(entry("cuPointerGetAttributes", 7000))

    def alloc(key, fn, *args):
        p = C.c_void_p()
        rc = fn(C.byref(p), *args)
        print(f"alloc.{key}={rc}")
        return p.value

    host_buffer = C.create_string_buffer(MIB)
    registered = C.addressof(host_buffer)
    print(f"alloc.registered={rt.cudaHostRegister(C.c_void_p(registered), C.c_size_t(MIB), 0)}")
    unregistered_buffer = C.create_string_buffer(MIB)
    stream = C.c_void_p()
    print(f"stream_create={rt.cudaStreamCreate(C.byref(stream))}")
    pointers = {
        "device": alloc("device", rt.cudaMalloc, C.c_size_t(MIB)),
        "pinned": alloc("pinned", rt.cudaMallocHost, C.c_size_t(MIB)),
        "host_alloc": alloc("host_alloc", rt.cudaHostAlloc, C.c_size_t(MIB), C.c_uint(0)),
        "registered": registered,
        "managed": alloc("managed", rt.cudaMallocManaged, C.c_size_t(MIB), C.c_uint(1)),
        "async": alloc("async", rt.cudaMallocAsync, C.c_size_t(MIB), stream),
        "unregistered": C.addressof(unregistered_buffer),
    }
    print(f"stream_sync={rt.cudaStreamSynchronize(stream)}")

    for kind, base in pointers.items():
        # An address inside the allocation, as PyTorch asks about a view.
        ptr = base + 4096
        attrs = PointerAttributes(-1, -99, None, None, -99)
        rc = rt.cudaPointerGetAttributes(C.byref(attrs), C.c_void_p(ptr))
        print(f"{kind}.runtime={rc}")
        print(f"{kind}.type={attrs.type}")
        print(f"{kind}.device={attrs.device}")
        print(f"{kind}.device_pointer_same={int((attrs.devicePointer or 0) == ptr)}")
        print(f"{kind}.host_pointer_same={int((attrs.hostPointer or 0) == ptr)}")
        print(f"{kind}.host_pointer_null={int(not attrs.hostPointer)}")

        for name, attribute, _ in ATTRIBUTES:
            buf = (C.c_ubyte * SLOT)(*([FILL] * SLOT))
            rc = get_one(C.addressof(buf), attribute, ptr)
            print(f"{kind}.{name}.rc={rc}")
            if rc == 0:
                print(f"{kind}.{name}.width={written_width(buf)}")
                print(f"{kind}.{name}.value={value(buf, 8 if written_width(buf) > 4 else 4, signed=name.endswith('ordinal'))}")

        # All at once, as the runtime itself asks.
        count = len(ATTRIBUTES)
        ids = (C.c_uint * count)(*[a for _, a, _ in ATTRIBUTES])
        slots = [(C.c_ubyte * SLOT)(*([FILL] * SLOT)) for _ in ATTRIBUTES]
        data = (C.c_void_p * count)(*[C.addressof(s) for s in slots])
        print(f"{kind}.many.rc={get_many(count, ids, data, ptr)}")
        widths_ok = all(written_width(s) <= w for s, (_, _, w) in zip(slots, ATTRIBUTES))
        print(f"{kind}.many.widths_ok={int(widths_ok)}")
        for (name, _, _), s in zip(ATTRIBUTES, slots):
            print(f"{kind}.many.{name}.width={written_width(s)}")

    print(f"free.device={rt.cudaFree(C.c_void_p(pointers['device']))}")
    print(f"free.pinned={rt.cudaFreeHost(C.c_void_p(pointers['pinned']))}")
    print(f"free.host_alloc={rt.cudaFreeHost(C.c_void_p(pointers['host_alloc']))}")
    print(f"free.registered={rt.cudaHostUnregister(C.c_void_p(registered))}")
    print(f"free.managed={rt.cudaFree(C.c_void_p(pointers['managed']))}")
    print(f"free.async={rt.cudaFreeAsync(C.c_void_p(pointers['async']), stream)}")
    print(f"device_sync={rt.cudaDeviceSynchronize()}")
    print("done=1")


def torch_pins():
    import torch

    print(f"cuda_available={int(torch.cuda.is_available())}")
    pinned = torch.empty(MIB, dtype=torch.uint8, pin_memory=True)
    print(f"torch.pinned={int(pinned.is_pinned())}")
    print(f"torch.pinned_view={int(pinned[4096:].is_pinned())}")
    plain = torch.empty(MIB, dtype=torch.uint8)
    print(f"torch.plain={int(plain.is_pinned())}")
    print(f"torch.pin_memory={int(plain.pin_memory().is_pinned())}")
    # Memory PyTorch did not allocate, registered as DALI and data loaders do.
    other = torch.empty(MIB, dtype=torch.uint8)
    cudart = torch.cuda.cudart()
    rc = cudart.cudaHostRegister(other.data_ptr(), other.numel(), 0)
    print(f"torch.register_rc={int(rc)}")
    print(f"torch.registered={int(other.is_pinned())}")
    print(f"torch.unregister_rc={int(cudart.cudaHostUnregister(other.data_ptr()))}")
    print(f"torch.unregistered={int(other.is_pinned())}")
    print(f"torch.cuda_tensor={int(torch.empty(16, device='cuda').is_pinned())}")
    # A pinned tensor copies to the device asynchronously and back intact.
    src = torch.arange(256, dtype=torch.uint8).repeat(16).pin_memory()
    back = src.to("cuda", non_blocking=True).to("cpu")
    print(f"torch.copy_equal={int(torch.equal(src, back))}")
    print("done=1")


if __name__ == "__main__":
    if sys.argv[1] == "runtime":
        runtime(sys.argv[2])
    else:
        torch_pins()
