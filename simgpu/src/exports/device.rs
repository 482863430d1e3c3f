//! Device queries. An ordinal maps to a slot: a whole device or a MIG
//! instance ([`crate::mig`]); an instance answers with its own name, UUID,
//! memory and SM count, and its parent's PCI address.

use crate::driver::{driver, pci_bus_id, slot_name, slot_uuid, CuResult};
use crate::ffi::cu_export;
use crate::ffi::{out, write_cstr};
use abi::cuda::*;
use std::ffi::{c_char, c_int, c_uint};

cu_export!(cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
    let d = driver()?;
    d.check_device(ordinal)?;
    out(device, ordinal)
});

cu_export!(cuDeviceGetCount(count: *mut c_int) {
    let d = driver()?;
    out(count, d.device_count() as c_int)
});

cu_export!(cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    write_cstr(name, len, &slot_name(d.machine, i))
});

cu_export!(cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    let bytes = slot_uuid(d.machine, i);
    out(uuid, CUuuid { bytes: bytes.map(|b| b as c_char) })
}; cuDeviceGetUuid);

cu_export!(cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    out(bytes, d.machine.state.memory(i).0 as usize)
});

cu_export!(cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    out(bytes, d.machine.state.memory(i).0.min(u32::MAX as u64) as c_uint)
});

cu_export!(cuDeviceGetPCIBusId(pci: *mut c_char, len: c_int, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    write_cstr(pci, len, &pci_bus_id(d.machine.topology.physical(i)))
});

cu_export!(cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) {
    let d = driver()?;
    d.check_device(dev)?;
    out(major, 9)?;
    out(minor, 0)
});

cu_export!(cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    if value.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let t = &d.machine.topology;
    let value_of = attribute(attrib, t.physical(i))?;
    // MULTIPROCESSOR_COUNT: an instance has its profile's SMs.
    match t.instance(i) {
        Some(instance) if attrib == 16 => out(value, instance.profile.sm_count as c_int),
        _ => out(value, value_of),
    }
});

/// `CUdevice_attribute` values of an H200-like device (compute capability 9.0).
pub fn attribute(attrib: c_int, index: usize) -> CuResult<c_int> {
    Ok(match attrib {
        1 => 1024,                   // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,               // MAX_BLOCK_DIM_X/Y
        4 => 64,                     // MAX_BLOCK_DIM_Z
        5 => i32::MAX,               // MAX_GRID_DIM_X
        6 | 7 => 65535,              // MAX_GRID_DIM_Y/Z
        8 => 49152,                  // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,                  // TOTAL_CONSTANT_MEMORY
        10 => 32,                    // WARP_SIZE
        11 => i32::MAX,              // MAX_PITCH
        12 => 65536,                 // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,             // CLOCK_RATE (kHz)
        14 => 512,                   // TEXTURE_ALIGNMENT
        15 => 1,                     // GPU_OVERLAP
        16 => 132,                   // MULTIPROCESSOR_COUNT
        17 => 0,                     // KERNEL_EXEC_TIMEOUT
        18 => 0,                     // INTEGRATED
        19 => 1,                     // CAN_MAP_HOST_MEMORY
        20 => 0,                     // COMPUTE_MODE (default)
        21 => 131072,                // MAXIMUM_TEXTURE1D_WIDTH
        22 | 23 => 131072,           // MAXIMUM_TEXTURE2D_WIDTH/HEIGHT
        24..=26 => 16384,            // MAXIMUM_TEXTURE3D_*
        27 | 28 => 32768,            // MAXIMUM_TEXTURE2D_LAYERED_WIDTH/HEIGHT
        29 => 2048,                  // ..._LAYERS
        30 => 512,                   // SURFACE_ALIGNMENT
        31 => 1,                     // CONCURRENT_KERNELS
        32 => 1,                     // ECC_ENABLED
        33 => 0x18 + index as c_int, // PCI_BUS_ID
        34 => 0,                     // PCI_DEVICE_ID
        35 => 0,                     // TCC_DRIVER
        36 => 2_619_000,             // MEMORY_CLOCK_RATE (kHz)
        37 => 6144,                  // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800,            // L2_CACHE_SIZE
        39 => 2048,                  // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,                     // ASYNC_ENGINE_COUNT
        41 => 1,                     // UNIFIED_ADDRESSING
        42 => 32768,                 // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        43 => 2048,                  // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        44 => 1,                     // CAN_TEX2D_GATHER
        45 | 46 => 32768,            // MAXIMUM_TEXTURE2D_GATHER_*
        47 | 48 => 8192,             // MAXIMUM_TEXTURE3D_*_ALTERNATE
        49 => 32768,
        50 => 0,          // PCI_DOMAIN_ID
        51 => 32,         // TEXTURE_PITCH_ALIGNMENT
        52 | 53 => 32768, // TEXTURECUBEMAP widths
        54 => 2046,
        55..=60 => 32768, // SURFACE sizes
        61 => 32768,
        62 => 2048,
        63 | 64 => 32768,
        65 => 2048,
        66 | 67 => 32768,
        68 => 2046,
        69 => 268_435_456, // MAXIMUM_TEXTURE1D_LINEAR_WIDTH
        70 | 71 => 131072,
        72 => 2_097_120,
        73 | 74 => 32768,
        75 => 9, // COMPUTE_CAPABILITY_MAJOR
        76 => 0, // COMPUTE_CAPABILITY_MINOR
        77 => 32768,
        78 => 1,              // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,         // GLOBAL/LOCAL_L1_CACHE_SUPPORTED
        81 => 233_472,        // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,          // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,              // MANAGED_MEMORY
        84 => 0,              // MULTI_GPU_BOARD
        85 => index as c_int, // MULTI_GPU_BOARD_GROUP_ID
        86 => 0,              // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => 2,              // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,              // PAGEABLE_MEMORY_ACCESS
        89 => 1,              // CONCURRENT_MANAGED_ACCESS
        90 => 1,              // COMPUTE_PREEMPTION_SUPPORTED
        91 => 0,
        92..=94 => 1,  // stream mem ops v1
        95 => 1,       // COOPERATIVE_LAUNCH
        96 => 0,       // COOPERATIVE_MULTI_DEVICE_LAUNCH (deprecated)
        97 => 232_448, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 0,
        99 => 1, // HOST_REGISTER_SUPPORTED
        100 | 101 => 0,
        102 => 1,           // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1,           // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        104 | 105 => 0,     // WIN32 handles
        106 => 32,          // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 0,           // GENERIC_COMPRESSION_SUPPORTED
        108 => 32_505_856,  // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 134_213_632, // MAX_ACCESS_POLICY_WINDOW_SIZE
        110 => 0,
        111 => 1024, // RESERVED_SHARED_MEMORY_PER_BLOCK
        // Features simgpu answers as absent elsewhere (sparse and
        // deferred-mapping arrays, semaphore interop, exportable pools) are
        // reported absent here too.
        112 => 0,       // SPARSE_CUDA_ARRAY_SUPPORTED
        113 => 1,       // READ_ONLY_HOST_REGISTER_SUPPORTED
        114 => 0,       // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => 1,       // MEMORY_POOLS_SUPPORTED
        116..=118 => 0, // GPU_DIRECT_RDMA_*
        119 => 0,       // MEMPOOL_SUPPORTED_HANDLE_TYPES: none (pools cannot be exported)
        120 => 1,       // CLUSTER_LAUNCH
        121 => 0,       // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        122 | 123 => 1,
        124 => 0, // DMA_BUF_SUPPORTED
        125 => 0, // IPC_EVENT_SUPPORTED
        126 => 4, // MEM_SYNC_DOMAIN_COUNT
        127 => 1, // TENSOR_MAP_ACCESS_SUPPORTED
        128 => 0,
        129 => 1,       // UNIFIED_FUNCTION_POINTERS
        130 => 0,       // NUMA_CONFIG
        131 => -1,      // NUMA_ID
        132 => 0,       // MULTICAST_SUPPORTED
        133 => 0,       // MPS_ENABLED
        134 => -1,      // HOST_NUMA_ID
        135..=161 => 0, // newer capabilities: not present
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

// The device's current pool stays its default pool (what
// `cuDeviceGetMemPool` reports): making the default pool current again is
// accepted, as CuPy's `MemoryAsyncPool` does; another pool is a pool of
// the device but cannot become current here.
cu_export!(cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    let handle = super::h(pool);
    let objs = d.read();
    let p = objs.pools.get(&handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if p.device != i {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    if handle != d.devices[i].default_pool {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
});
