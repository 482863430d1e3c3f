//! Modules, libraries, kernels, functions and the linker.
//!
//! An image (PTX, cubin, fatbin, or the runtime's fatbin wrapper) is read
//! for the kernels it defines ([`crate::image`]); `cuModuleGetFunction` and
//! `cuLibraryGetKernel` find those names and refuse others with
//! `CUDA_ERROR_NOT_FOUND`. Free text that is not PTX (the tests' `"any
//! image"`) defines every name. No kernel computes anything: a launch runs
//! for a simulated duration, `SIMGPU_KERNEL_US` (default 5 µs) whatever the
//! grid, or for a `sim_*` kernel its first argument in microseconds
//! ([`crate::exports::launch`]).
//!
//! A library (`cuLibraryLoadData`) is context-independent: it is a module
//! with no context, its handle is also its module's (`cuLibraryGetModule`),
//! and a `CUkernel` is the function handle itself, so it can be launched
//! directly (as CUDA 12 allows) and `cuKernelGetFunction` returns it.
//!
//! Device variables (`cuModuleGetGlobal_v2`, `cuLibraryGetGlobal`) are
//! real device memory of the size the image declares, allocated on first
//! request; no initialiser is copied (the memory holds what it held).
//!
//! The linker (`cuLinkCreate_v2` …) collects the kernels of what is added
//! (and their variables) and `cuLinkComplete` hands back a PTX image that
//! declares them; loading it gives a module with exactly those.

use super::{h, ptr};
use crate::driver::{driver, CuResult, Function, Module, TAG_FUNC, TAG_MODULE};
use crate::ffi::cu_export;
use crate::ffi::{cstr, out};
use crate::image::{self, Contents, Kernels};
use crate::log::simgpu_debug;
use abi::cuda::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// `CUlibrary` handles (modules without a context).
pub const TAG_LIBRARY: u64 = 0x60;
/// `CUlinkState` handles.
pub const TAG_LINK: u64 = 0x61;

fn contents_of(image: *const c_void) -> CuResult<Contents> {
    if image.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the image is complete and its headers are truthful (cuda.h's
    // contract for every loader entry point).
    match unsafe { image::contents_at(image.cast()) } {
        Ok(k) => Ok(k),
        Err(image::ImageError::Invalid(why)) => {
            simgpu_debug!("image refused: {why}");
            Err(CUDA_ERROR_INVALID_IMAGE)
        }
    }
}

fn describe(kernels: &Kernels) -> String {
    match kernels {
        Kernels::Named(names) => format!("{} kernel(s): {}", names.len(), names.iter().cloned().collect::<Vec<_>>().join(", ")),
        Kernels::Any => "kernels not listed (any name resolves)".to_string(),
    }
}

/// Loads `image` as a module of the current context (every `cuModuleLoad*`
/// entry point, and the runtime's fatbin registration).
///
/// # Safety
/// `module` is an out-parameter and `image` an image, under cuda.h's contract.
pub unsafe fn load_image(module: *mut CUmodule, image: *const c_void) -> CuResult<()> {
    let d = driver()?;
    let ctx = d.current()?;
    if module.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let Contents { kernels, globals } = contents_of(image)?;
    simgpu_debug!("module loaded: {}; {} variable(s)", describe(&kernels), globals.len());
    let hnd = d.new_handle(TAG_MODULE);
    d.write().modules.insert(hnd, Module { ctx: ctx.handle, functions: HashMap::new(), kernels, globals, global_ptrs: HashMap::new() });
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(module, ptr(hnd)) }
}

cu_export!(cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
    load_image(module, image)
});

cu_export!(cuModuleLoadDataEx(module: *mut CUmodule, image: *const c_void, num_options: c_uint, options: *mut c_uint, values: *mut *mut c_void) {
    if num_options > 0 && (options.is_null() || values.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    load_image(module, image)
});

cu_export!(cuModuleLoadFatBinary(module: *mut CUmodule, image: *const c_void) {
    load_image(module, image)
});

fn read_file(fname: *const c_char) -> CuResult<Vec<u8>> {
    // SAFETY: a NUL-terminated path by cuda.h's contract (null is checked).
    let path = unsafe { cstr(fname) }?;
    // SAFETY: the bytes come from a C string, which is what the OS takes.
    let path = std::path::Path::new(unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(path.to_bytes()) });
    if !path.is_file() {
        return Err(CUDA_ERROR_FILE_NOT_FOUND);
    }
    let mut bytes = std::fs::read(path).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
    // Text images are read up to a NUL; a file need not end with one.
    bytes.push(0);
    Ok(bytes)
}

cu_export!(cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
    driver()?;
    let bytes = read_file(fname)?;
    load_image(module, bytes.as_ptr().cast())
});

/// The function handle for `name` in module (or library) `hmod`, made on
/// first request.
pub(crate) fn function_of(hmod: u64, name: &str) -> CuResult<u64> {
    let d = driver()?;
    let mut objs = d.write();
    let module = objs.modules.get_mut(&hmod).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if let Some(&f) = module.functions.get(name) {
        return Ok(f);
    }
    if !module.kernels.contains(name) {
        return Err(CUDA_ERROR_NOT_FOUND);
    }
    let f = d.new_handle(TAG_FUNC);
    module.functions.insert(name.to_string(), f);
    let c_name = CString::new(name).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    objs.functions.insert(
        f,
        Arc::new(Function { module: hmod, sim: name.starts_with("sim_"), name: name.to_string(), c_name, settable: Default::default() }),
    );
    Ok(f)
}

cu_export!(cuModuleGetFunction(hfunc: *mut CUfunction, hmod: CUmodule, name: *const c_char) {
    let d = driver()?;
    d.current()?;
    if hfunc.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let name = cstr(name)?.to_string_lossy().into_owned();
    out(hfunc, ptr(function_of(h(hmod), &name)?))
});

fn unload(handle: u64) -> CuResult<()> {
    let d = driver()?;
    let module = {
        let mut objs = d.write();
        let module = objs.modules.remove(&handle).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        for f in module.functions.values() {
            objs.functions.remove(f);
        }
        module
    };
    for &ptr in module.global_ptrs.values() {
        // Already gone if its context was destroyed first.
        let _ = crate::memory::free_device(d, ptr);
    }
    Ok(())
}

cu_export!(cuModuleUnload(hmod: CUmodule) {
    if h(hmod) >> 40 != TAG_MODULE {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    unload(h(hmod))
});

/// Names of a module's kernels when they are known.
pub(crate) fn named_kernels(hmod: u64) -> CuResult<Vec<String>> {
    let d = driver()?;
    let objs = d.read();
    match &objs.modules.get(&hmod).ok_or(CUDA_ERROR_INVALID_HANDLE)?.kernels {
        Kernels::Named(names) => Ok(names.iter().cloned().collect()),
        Kernels::Any => Err(CUDA_ERROR_NOT_SUPPORTED),
    }
}

cu_export!(cuModuleGetFunctionCount(count: *mut c_uint, hmod: CUmodule) {
    let n = named_kernels(h(hmod))?.len();
    out(count, n as c_uint)
});

/// Fills `list` with up to `len` function handles of the module's kernels.
unsafe fn enumerate(list: *mut CUfunction, len: c_uint, hmod: u64) -> CuResult<()> {
    if list.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let names = named_kernels(hmod)?;
    if (len as usize) < names.len() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for (i, name) in names.iter().enumerate() {
        let f = function_of(hmod, name)?;
        // SAFETY: the caller provides `len` slots; i < names.len() <= len.
        unsafe { list.add(i).write_unaligned(ptr(f)) };
    }
    Ok(())
}

cu_export!(cuModuleEnumerateFunctions(functions: *mut CUfunction, num_functions: c_uint, hmod: CUmodule) {
    enumerate(functions, num_functions, h(hmod))
});

/// The device address and size of variable `name` of module (or library)
/// `hmod`. Its memory is allocated on first request, in the module's
/// context (a library's: the current one), and lives until the module is
/// unloaded or that context destroyed.
fn global_of(hmod: u64, name: &str) -> CuResult<(u64, u64)> {
    let d = driver()?;
    let (owner, size, known) = {
        let objs = d.read();
        let module = objs.modules.get(&hmod).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let size = *module.globals.get(name).ok_or(CUDA_ERROR_NOT_FOUND)?;
        (module.ctx, size, module.global_ptrs.get(name).copied())
    };
    if let Some(ptr) = known.filter(|&p| crate::memory::is_live_allocation(d, p)) {
        return Ok((ptr, size));
    }
    let ctx = d.context(owner)?;
    let ptr = crate::memory::alloc_device(d, &ctx, size)?;
    let mut objs = d.write();
    match objs.modules.get_mut(&hmod) {
        Some(module) => {
            module.global_ptrs.insert(name.to_string(), ptr);
            Ok((ptr, size))
        }
        None => {
            drop(objs);
            let _ = crate::memory::free_device(d, ptr);
            Err(CUDA_ERROR_INVALID_HANDLE)
        }
    }
}

unsafe fn get_global(dptr: *mut CUdeviceptr, bytes: *mut usize, hmod: u64, name: *const c_char) -> CuResult<()> {
    // SAFETY: a NUL-terminated name by cuda.h's contract (null is checked).
    let name = unsafe { cstr(name) }?.to_string_lossy().into_owned();
    let (ptr, size) = global_of(hmod, &name)?;
    // SAFETY: both out-parameters are optional (cuda.h); null is skipped.
    unsafe {
        crate::ffi::out_opt(dptr, ptr);
        crate::ffi::out_opt(bytes, size as usize);
    }
    Ok(())
}

cu_export!(cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, hmod: CUmodule, name: *const c_char) {
    get_global(dptr, bytes, h(hmod), name)
});

/// `CU_MODULE_EAGER_LOADING`, `CU_MODULE_LAZY_LOADING`.
const CU_MODULE_EAGER_LOADING: c_uint = 1;
const CU_MODULE_LAZY_LOADING: c_uint = 2;

cu_export!(cuModuleGetLoadingMode(mode: *mut c_uint) {
    driver()?;
    // As a driver: lazy unless CUDA_MODULE_LOADING=EAGER.
    let eager = std::env::var_os("CUDA_MODULE_LOADING").is_some_and(|v| v == "EAGER");
    out(mode, if eager { CU_MODULE_EAGER_LOADING } else { CU_MODULE_LAZY_LOADING })
});

// ---- libraries and kernels ------------------------------------------------

fn check_options(count: c_uint, options: *mut c_void, values: *mut *mut c_void) -> CuResult<()> {
    if count > 0 && (options.is_null() || values.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// `CUlibraryOption`: HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE, BINARY_IS_PRESERVED.
const CU_LIBRARY_BINARY_IS_PRESERVED: c_uint = 1;
const CU_LIBRARY_NUM_OPTIONS: c_uint = 2;

/// Library options: known ones only; `BINARY_IS_PRESERVED` takes no value,
/// so a list of only that option may come without a value array.
fn check_library_options(count: c_uint, options: *const c_uint, values: *mut *mut c_void) -> CuResult<()> {
    if count == 0 {
        return Ok(());
    }
    if options.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `options` holds `count` entries by cuda.h's contract (checked non-null).
    let options: Vec<c_uint> = (0..count as usize).map(|i| unsafe { options.add(i).read_unaligned() }).collect();
    if options.iter().any(|&o| o >= CU_LIBRARY_NUM_OPTIONS) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if values.is_null() && options.iter().any(|&o| o != CU_LIBRARY_BINARY_IS_PRESERVED) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

fn load_library(library: *mut CUlibrary, code: *const c_void) -> CuResult<()> {
    let d = driver()?;
    if library.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let Contents { kernels, globals } = contents_of(code)?;
    simgpu_debug!("library loaded: {}; {} variable(s)", describe(&kernels), globals.len());
    let hnd = d.new_handle(TAG_LIBRARY);
    d.write().modules.insert(hnd, Module { ctx: 0, functions: HashMap::new(), kernels, globals, global_ptrs: HashMap::new() });
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(library, ptr(hnd)) }
}

cu_export!(cuLibraryLoadData(library: *mut CUlibrary, code: *const c_void, jit_options: *mut c_uint, jit_values: *mut *mut c_void, num_jit_options: c_uint, library_options: *mut c_uint, library_values: *mut *mut c_void, num_library_options: c_uint) {
    driver()?;
    check_options(num_jit_options, jit_options.cast(), jit_values)?;
    check_library_options(num_library_options, library_options, library_values)?;
    load_library(library, code)
});

cu_export!(cuLibraryLoadFromFile(library: *mut CUlibrary, file_name: *const c_char, jit_options: *mut c_uint, jit_values: *mut *mut c_void, num_jit_options: c_uint, library_options: *mut c_uint, library_values: *mut *mut c_void, num_library_options: c_uint) {
    driver()?;
    check_options(num_jit_options, jit_options.cast(), jit_values)?;
    check_library_options(num_library_options, library_options, library_values)?;
    let bytes = read_file(file_name)?;
    load_library(library, bytes.as_ptr().cast())
});

fn library_handle(library: CUlibrary) -> CuResult<u64> {
    let handle = h(library);
    if handle >> 40 != TAG_LIBRARY {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    Ok(handle)
}

cu_export!(cuLibraryUnload(library: CUlibrary) {
    unload(library_handle(library)?)
});

cu_export!(cuLibraryGetKernel(kernel: *mut CUkernel, library: CUlibrary, name: *const c_char) {
    if kernel.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let name = cstr(name)?.to_string_lossy().into_owned();
    out(kernel, ptr(function_of(library_handle(library)?, &name)?))
});

cu_export!(cuLibraryGetKernelCount(count: *mut c_uint, library: CUlibrary) {
    let n = named_kernels(library_handle(library)?)?.len();
    out(count, n as c_uint)
});

cu_export!(cuLibraryEnumerateKernels(kernels: *mut CUkernel, num_kernels: c_uint, library: CUlibrary) {
    enumerate(kernels.cast(), num_kernels, library_handle(library)?)
});

cu_export!(cuLibraryGetModule(module: *mut CUmodule, library: CUlibrary) {
    let handle = library_handle(library)?;
    let d = driver()?;
    d.current()?;
    d.read().modules.get(&handle).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    out(module, ptr(handle))
});

cu_export!(cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, library: CUlibrary, name: *const c_char) {
    get_global(dptr, bytes, library_handle(library)?, name)
});

fn function(f: u64) -> CuResult<Arc<Function>> {
    driver()?.read().functions.get(&f).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)
}

cu_export!(cuKernelGetFunction(pfunc: *mut CUfunction, kernel: CUkernel) {
    let d = driver()?;
    d.current()?;
    function(h(kernel))?;
    out(pfunc, ptr(h(kernel)))
});

cu_export!(cuKernelGetLibrary(library: *mut CUlibrary, kernel: CUkernel) {
    let f = function(h(kernel))?;
    if f.module >> 40 != TAG_LIBRARY {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    out(library, ptr(f.module))
});

cu_export!(cuFuncGetModule(hmod: *mut CUmodule, func: CUfunction) {
    let f = function(h(func))?;
    out(hmod, ptr(f.module))
});

cu_export!(cuFuncGetName(name: *mut *const c_char, func: CUfunction) {
    let f = function(h(func))?;
    // The name lives as long as the function; the Arc in the registry holds it.
    out(name, f.c_name.as_ptr())
}; cuKernelGetName);

/// `CUfunction_attribute` values simgpu answers.
const ATTR_MAX_THREADS_PER_BLOCK: c_int = 0;
const ATTR_NUM_REGS: c_int = 4;
const ATTR_PTX_VERSION: c_int = 5;
const ATTR_BINARY_VERSION: c_int = 6;
const ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
const ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT: c_int = 9;
const ATTR_CLUSTER_SIZE_MUST_BE_SET: c_int = 10;
const ATTR_REQUIRED_CLUSTER_WIDTH: c_int = 11;
const ATTR_REQUIRED_CLUSTER_DEPTH: c_int = 13;
const ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: c_int = 14;
const ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE: c_int = 15;
const ATTR_SHARED_MEMORY_MODE: c_int = 17;

/// Largest dynamic shared memory a block may opt in to (sm_90: 227 KiB).
pub const MAX_SHARED_OPTIN_BYTES: c_int = 232_448;
/// Shared memory of one multiprocessor, and what the system reserves per block.
const SHARED_PER_SM_BYTES: u64 = 233_472;
const RESERVED_SHARED_PER_BLOCK_BYTES: u64 = 1024;
/// Threads and blocks one multiprocessor holds at once.
const THREADS_PER_SM: u64 = 2048;
const BLOCKS_PER_SM: u64 = 32;
/// Blocks a cluster may span: 8 portably, 16 with the non-portable opt-in.
const PORTABLE_CLUSTER_BLOCKS: u64 = 8;
const NON_PORTABLE_CLUSTER_BLOCKS: u64 = 16;
/// Multiprocessors per GPU processing cluster of a 132-SM device; a
/// thread-block cluster runs inside one.
const SMS_PER_GPC: [u64; 8] = [16, 16, 16, 16, 17, 17, 17, 17];

/// What a kernel reports about itself: a small kernel compiled for sm_90
/// that declares no static shared memory and no cluster shape, with the
/// settable attributes as last set.
fn function_attribute(f: &Function, attrib: c_int) -> CuResult<c_int> {
    let s = &f.settable;
    Ok(match attrib {
        ATTR_MAX_THREADS_PER_BLOCK => 1024,
        1..=3 => 0, // SHARED / CONST / LOCAL bytes
        ATTR_NUM_REGS => 32,
        ATTR_PTX_VERSION | ATTR_BINARY_VERSION => 90,
        7 => 0, // CACHE_MODE_CA
        ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES => s.max_dynamic_shared_bytes.load(Relaxed),
        ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT => s.carveout_percent.load(Relaxed),
        ATTR_CLUSTER_SIZE_MUST_BE_SET => 0,
        ATTR_REQUIRED_CLUSTER_WIDTH..=ATTR_REQUIRED_CLUSTER_DEPTH => {
            s.cluster_dims[(attrib - ATTR_REQUIRED_CLUSTER_WIDTH) as usize].load(Relaxed)
        }
        ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED => s.non_portable_cluster.load(Relaxed),
        ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE => s.cluster_scheduling.load(Relaxed),
        16 => 0, // DEVICE_NODE_UPDATE_SUPPORTED
        ATTR_SHARED_MEMORY_MODE => 0,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `cuFuncSetAttribute`: the attributes cuda.h documents as settable,
/// range-checked as the driver checks them; the read-only ones are refused.
fn set_function_attribute(f: &Function, attrib: c_int, value: c_int) -> CuResult<()> {
    let s = &f.settable;
    match attrib {
        ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES if (0..=MAX_SHARED_OPTIN_BYTES).contains(&value) => {
            s.max_dynamic_shared_bytes.store(value, Relaxed)
        }
        ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT if (-1..=100).contains(&value) => s.carveout_percent.store(value, Relaxed),
        ATTR_REQUIRED_CLUSTER_WIDTH..=ATTR_REQUIRED_CLUSTER_DEPTH if (0..=NON_PORTABLE_CLUSTER_BLOCKS as c_int).contains(&value) => {
            s.cluster_dims[(attrib - ATTR_REQUIRED_CLUSTER_WIDTH) as usize].store(value, Relaxed)
        }
        ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED if (0..=1).contains(&value) => s.non_portable_cluster.store(value, Relaxed),
        ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE if (0..=2).contains(&value) => s.cluster_scheduling.store(value, Relaxed),
        ATTR_SHARED_MEMORY_MODE if (0..=2).contains(&value) => {}
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    Ok(())
}

cu_export!(cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, func: CUfunction) {
    let f = function(h(func))?;
    out(pi, function_attribute(&f, attrib)?)
});

cu_export!(cuKernelGetAttribute(pi: *mut c_int, attrib: c_int, kernel: CUkernel, dev: CUdevice) {
    driver()?.check_device(dev)?;
    let f = function(h(kernel))?;
    out(pi, function_attribute(&f, attrib)?)
});

cu_export!(cuFuncSetAttribute(func: CUfunction, attrib: c_int, value: c_int) {
    let f = function(h(func))?;
    set_function_attribute(&f, attrib, value)
});

cu_export!(cuKernelSetAttribute(attrib: c_int, value: c_int, kernel: CUkernel, dev: CUdevice) {
    driver()?.check_device(dev)?;
    let f = function(h(kernel))?;
    set_function_attribute(&f, attrib, value)
});

cu_export!(cuFuncSetCacheConfig(func: CUfunction, config: c_int) {
    function(h(func))?;
    if !(0..=3).contains(&config) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
});

cu_export!(cuKernelSetCacheConfig(kernel: CUkernel, config: c_int, dev: CUdevice) {
    driver()?.check_device(dev)?;
    function(h(kernel))?;
    if !(0..=3).contains(&config) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
});

/// `CUfunctionLoadingState`: simgpu loads a module's functions with it.
const CU_FUNCTION_LOADING_STATE_LOADED: c_uint = 1;

cu_export!(cuFuncIsLoaded(state: *mut c_uint, func: CUfunction) {
    function(h(func))?;
    out(state, CU_FUNCTION_LOADING_STATE_LOADED)
});

cu_export!(cuFuncLoad(func: CUfunction) {
    function(h(func)).map(drop)
});

// Parameter layouts are not read from images, so simgpu cannot say where a
// kernel's parameters lie; a driver answers so for a function whose image
// carries no parameter information.
cu_export!(cuFuncGetParamInfo(func: CUfunction, index: usize, offset: *mut usize, size: *mut usize) {
    let _ = (index, offset, size);
    function(h(func))?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuKernelGetParamInfo);

/// Blocks of `block_threads` threads, each using `dynamic_shared_bytes`,
/// that fit on one multiprocessor at once (threads, block slots and shared
/// memory all limit it), as the occupancy calculator answers for a kernel
/// that uses no static shared memory and few registers.
fn blocks_per_sm(block_threads: c_int, dynamic_shared_bytes: usize) -> CuResult<c_int> {
    if !(1..=1024).contains(&block_threads) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if dynamic_shared_bytes > MAX_SHARED_OPTIN_BYTES as usize {
        return Ok(0);
    }
    // Threads are scheduled in whole warps.
    let warp_threads = (block_threads as u64).div_ceil(32) * 32;
    let by_threads = THREADS_PER_SM / warp_threads;
    let by_shared = SHARED_PER_SM_BYTES / (dynamic_shared_bytes as u64 + RESERVED_SHARED_PER_BLOCK_BYTES);
    Ok(by_threads.min(BLOCKS_PER_SM).min(by_shared) as c_int)
}

cu_export!(cuOccupancyMaxActiveBlocksPerMultiprocessor(num_blocks: *mut c_int, func: CUfunction, block_size: c_int, dynamic_smem: usize) {
    function(h(func))?;
    out(num_blocks, blocks_per_sm(block_size, dynamic_smem)?)
});

cu_export!(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks: *mut c_int, func: CUfunction, block_size: c_int, dynamic_smem: usize, flags: c_uint) {
    if flags > 1 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    function(h(func))?;
    out(num_blocks, blocks_per_sm(block_size, dynamic_smem)?)
});

type BlockToSmem = Option<unsafe extern "C" fn(c_int) -> usize>;

/// The block size (a multiple of the warp, at most `limit`) that keeps the
/// most threads resident, and the grid that fills the device with it.
unsafe fn potential_block_size(
    min_grid: *mut c_int,
    block: *mut c_int,
    func: CUfunction,
    to_smem: BlockToSmem,
    dynamic_smem: usize,
    limit: c_int,
) -> CuResult<()> {
    function(h(func))?;
    if min_grid.is_null() || block.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ceiling = if limit > 0 { limit.min(1024) } else { 1024 };
    let sms = crate::exports::device::attribute(16, 0)?;
    let mut best = (0, 0); // (resident threads, block size)
    let mut size = ceiling - ceiling % 32;
    while size >= 32 {
        let smem = match to_smem {
            // SAFETY: the caller's callback, which cuda.h says maps a block size to bytes.
            Some(f) => unsafe { f(size) },
            None => dynamic_smem,
        };
        let resident = blocks_per_sm(size, smem)? * size;
        if resident > best.0 {
            best = (resident, size);
        }
        size -= 32;
    }
    if best.1 == 0 {
        best.1 = ceiling.max(1);
    }
    let smem = match to_smem {
        // SAFETY: as above.
        Some(f) => unsafe { f(best.1) },
        None => dynamic_smem,
    };
    // SAFETY: checked non-null; out-parameters by cuda.h's contract.
    unsafe {
        out(block, best.1)?;
        out(min_grid, blocks_per_sm(best.1, smem)? * sms)
    }
}

cu_export!(cuOccupancyMaxPotentialBlockSize(min_grid: *mut c_int, block: *mut c_int, func: CUfunction, to_smem: BlockToSmem, dynamic_smem: usize, limit: c_int) {
    potential_block_size(min_grid, block, func, to_smem, dynamic_smem, limit)
});

cu_export!(cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid: *mut c_int, block: *mut c_int, func: CUfunction, to_smem: BlockToSmem, dynamic_smem: usize, limit: c_int, flags: c_uint) {
    if flags > 1 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    potential_block_size(min_grid, block, func, to_smem, dynamic_smem, limit)
});

// The dynamic shared memory each of `num_blocks` blocks of `block_size`
// threads can have while all of them stay resident on one multiprocessor:
// 0 when that many blocks cannot be resident at all.
cu_export!(cuOccupancyAvailableDynamicSMemPerBlock(dynamic_smem: *mut usize, func: CUfunction, num_blocks: c_int, block_size: c_int) {
    function(h(func))?;
    if dynamic_smem.is_null() || num_blocks <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let fits = blocks_per_sm(block_size, 0)? >= num_blocks;
    let per_block = (SHARED_PER_SM_BYTES / num_blocks as u64).saturating_sub(RESERVED_SHARED_PER_BLOCK_BYTES).min(MAX_SHARED_OPTIN_BYTES as u64);
    out(dynamic_smem, if fits { per_block as usize } else { 0 })
});

/// `CUDA_ERROR_INVALID_CLUSTER_SIZE`.
const CUDA_ERROR_INVALID_CLUSTER_SIZE: CUresult = 912;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_uint = 4;

/// The blocks per cluster a launch configuration asks for (its
/// `CLUSTER_DIMENSION` attribute, else the function's required shape, else
/// 1), checked against what the function may use.
unsafe fn cluster_blocks(f: &Function, config: *const CUlaunchConfig) -> CuResult<(CUlaunchConfig, u64)> {
    // SAFETY: a CUlaunchConfig by cuda.h's contract (null is checked).
    let c = unsafe { crate::ffi::input(config) }?;
    if c.numAttrs > 0 && c.attrs.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut dims: Option<[u64; 3]> = None;
    for i in 0..c.numAttrs as usize {
        // SAFETY: `attrs` holds numAttrs entries (checked non-null).
        let a = unsafe { c.attrs.add(i).read_unaligned() };
        if a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION {
            let v = a.value[0];
            dims = Some([v & 0xffff_ffff, v >> 32, a.value[1] & 0xffff_ffff]);
        }
    }
    let required = f.settable.cluster_dims.each_ref().map(|d| d.load(Relaxed).max(1) as u64);
    let [x, y, z] = dims.unwrap_or(required);
    if x == 0 || y == 0 || z == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let blocks = x * y * z;
    let allowed = if f.settable.non_portable_cluster.load(Relaxed) != 0 { NON_PORTABLE_CLUSTER_BLOCKS } else { PORTABLE_CLUSTER_BLOCKS };
    if blocks > allowed {
        return Err(CUDA_ERROR_INVALID_CLUSTER_SIZE);
    }
    Ok((c, blocks))
}

// Clusters of the configuration's shape that can be resident at once: a
// cluster's blocks share one processing cluster (GPC), so each GPC holds
// as many as its multiprocessors' block slots allow.
cu_export!(cuOccupancyMaxActiveClusters(num_clusters: *mut c_int, func: CUfunction, config: *const CUlaunchConfig) {
    let f = function(h(func))?;
    if num_clusters.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (c, blocks) = cluster_blocks(&f, config)?;
    let threads = (c.blockDimX as u64) * (c.blockDimY as u64) * (c.blockDimZ as u64);
    if threads == 0 || threads > 1024 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let per_sm = blocks_per_sm(threads as c_int, c.sharedMemBytes as usize)? as u64;
    let clusters: u64 = SMS_PER_GPC.iter().map(|sms| sms * per_sm / blocks).sum();
    out(num_clusters, clusters as c_int)
});

// The largest cluster the function can be launched with: 8 blocks, or 16
// once it has opted in to non-portable sizes.
cu_export!(cuOccupancyMaxPotentialClusterSize(cluster_size: *mut c_int, func: CUfunction, config: *const CUlaunchConfig) {
    let f = function(h(func))?;
    if cluster_size.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    crate::ffi::input(config)?;
    let allowed = if f.settable.non_portable_cluster.load(Relaxed) != 0 { NON_PORTABLE_CLUSTER_BLOCKS } else { PORTABLE_CLUSTER_BLOCKS };
    out(cluster_size, allowed as c_int)
});

// ---- the linker -------------------------------------------------------------

/// `CUjitInputType`.
const CU_JIT_INPUT_CUBIN: c_uint = 0;
const CU_JIT_INPUT_PTX: c_uint = 1;
const CU_JIT_INPUT_FATBINARY: c_uint = 2;
const CU_JIT_INPUT_OBJECT: c_uint = 3;
const CU_JIT_INPUT_LIBRARY: c_uint = 4;

type CUlinkState = *mut c_void;

struct Link {
    kernels: Kernels,
    globals: BTreeMap<String, u64>,
    /// What `cuLinkComplete` handed out; valid until `cuLinkDestroy`.
    output: Option<Vec<u8>>,
}

static LINKS: Mutex<Option<HashMap<u64, Link>>> = Mutex::new(None);

fn with_link<R>(state: CUlinkState, f: impl FnOnce(&mut Link) -> CuResult<R>) -> CuResult<R> {
    let mut links = crate::exec::lock(&LINKS);
    let link = links.get_or_insert_with(HashMap::new).get_mut(&h(state)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    f(link)
}

cu_export!(cuLinkCreate_v2(num_options: c_uint, options: *mut c_uint, values: *mut *mut c_void, state_out: *mut CUlinkState) {
    let d = driver()?;
    d.current()?;
    check_options(num_options, options.cast(), values)?;
    if state_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let hnd = d.new_handle(TAG_LINK);
    crate::exec::lock(&LINKS).get_or_insert_with(HashMap::new).insert(hnd, Link { kernels: Kernels::Named(BTreeSet::new()), globals: BTreeMap::new(), output: None });
    out(state_out, ptr(hnd))
}; cuLinkCreate);

/// The kernels and variables of one linker input of `kind`.
fn input_contents(kind: c_uint, data: &[u8]) -> CuResult<Contents> {
    let parsed = match kind {
        CU_JIT_INPUT_CUBIN | CU_JIT_INPUT_PTX | CU_JIT_INPUT_FATBINARY => image::contents(data),
        // Host objects and archives (libcudadevrt.a) bring device helpers,
        // not kernels the application will look up by name.
        CU_JIT_INPUT_OBJECT | CU_JIT_INPUT_LIBRARY => {
            return Ok(Contents { kernels: Kernels::Named(BTreeSet::new()), globals: BTreeMap::new() })
        }
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    parsed.map_err(|image::ImageError::Invalid(why)| {
        simgpu_debug!("linker input refused: {why}");
        CUDA_ERROR_INVALID_IMAGE
    })
}

fn add_input(state: CUlinkState, kind: c_uint, data: &[u8]) -> CuResult<()> {
    let Contents { kernels: found, globals } = input_contents(kind, data)?;
    simgpu_debug!("linker input: {}; {} variable(s)", describe(&found), globals.len());
    with_link(state, |link| {
        if link.output.is_some() {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        link.globals.extend(globals);
        link.kernels = match (std::mem::replace(&mut link.kernels, Kernels::Any), found) {
            (Kernels::Named(mut a), Kernels::Named(b)) => {
                a.extend(b);
                Kernels::Named(a)
            }
            _ => Kernels::Any,
        };
        Ok(())
    })
}

cu_export!(cuLinkAddData_v2(state: CUlinkState, kind: c_uint, data: *mut c_void, size: usize, name: *const c_char, num_options: c_uint, options: *mut c_uint, values: *mut *mut c_void) {
    let _ = name;
    driver()?;
    check_options(num_options, options.cast(), values)?;
    if data.is_null() || size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `data` holds `size` bytes by cuda.h's contract.
    let bytes = std::slice::from_raw_parts(data as *const u8, size);
    add_input(state, kind, bytes)
}; cuLinkAddData);

cu_export!(cuLinkAddFile_v2(state: CUlinkState, kind: c_uint, path: *const c_char, num_options: c_uint, options: *mut c_uint, values: *mut *mut c_void) {
    driver()?;
    check_options(num_options, options.cast(), values)?;
    let bytes = read_file(path)?;
    add_input(state, kind, &bytes)
}; cuLinkAddFile);

cu_export!(cuLinkComplete(state: CUlinkState, cubin_out: *mut *mut c_void, size_out: *mut usize) {
    driver()?;
    if cubin_out.is_null() || size_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (image_ptr, len) = with_link(state, |link| {
        let image = match &link.kernels {
            Kernels::Named(names) => image::linked_ptx(names, &link.globals),
            Kernels::Any => b"// linked by simgpu: kernels not listed\n\0".to_vec(),
        };
        let output = link.output.insert(image);
        Ok((output.as_mut_ptr(), output.len()))
    })?;
    out(cubin_out, image_ptr.cast())?;
    out(size_out, len)
});

cu_export!(cuLinkDestroy(state: CUlinkState) {
    crate::exec::lock(&LINKS).get_or_insert_with(HashMap::new).remove(&h(state)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    Ok(())
});
