//! Modules and functions. Any image is accepted; a function is known by the
//! name asked for, which decides how long its kernels run (`sim_*`).

use super::{h, ptr};
use crate::ffi::cu_export;
use crate::driver::{driver, CuResult, Function, Module, TAG_FUNC, TAG_MODULE};
use crate::ffi::{cstr, out};
use abi::cuda::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Arc;

fn load(module: *mut CUmodule) -> CuResult<()> {
    let d = driver()?;
    let ctx = d.current()?;
    if module.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let hnd = d.new_handle(TAG_MODULE);
    d.write().modules.insert(hnd, Module { ctx: ctx.handle, functions: HashMap::new() });
    // SAFETY: checked non-null; valid for writes by cuda.h's contract.
    unsafe { out(module, ptr(hnd)) }
}

cu_export!(cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
    if image.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    load(module)
});

cu_export!(cuModuleLoadDataEx(module: *mut CUmodule, image: *const c_void, num_options: c_uint, options: *mut c_uint, values: *mut *mut c_void) {
    if image.is_null() || (num_options > 0 && (options.is_null() || values.is_null())) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    load(module)
});

cu_export!(cuModuleLoadFatBinary(module: *mut CUmodule, image: *const c_void) {
    if image.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    load(module)
});

cu_export!(cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
    let path = cstr(fname)?;
    driver()?;
    let path = std::path::Path::new(std::ffi::OsStr::from_encoded_bytes_unchecked(path.to_bytes()));
    if !path.is_file() {
        return Err(CUDA_ERROR_FILE_NOT_FOUND);
    }
    load(module)
});

cu_export!(cuModuleGetFunction(hfunc: *mut CUfunction, hmod: CUmodule, name: *const c_char) {
    let d = driver()?;
    d.current()?;
    if hfunc.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let name = cstr(name)?.to_string_lossy().into_owned();
    let mut objs = d.write();
    let module = objs.modules.get_mut(&h(hmod)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let fh = match module.functions.get(&name) {
        Some(&f) => f,
        None => {
            let f = d.new_handle(TAG_FUNC);
            module.functions.insert(name.clone(), f);
            let sim = name.starts_with("sim_");
            objs.functions.insert(f, Arc::new(Function { module: h(hmod), name, sim }));
            f
        }
    };
    out(hfunc, ptr(fh))
});

cu_export!(cuModuleUnload(hmod: CUmodule) {
    let d = driver()?;
    let mut objs = d.write();
    let module = objs.modules.remove(&h(hmod)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    for f in module.functions.values() {
        objs.functions.remove(f);
    }
    Ok(())
});
