//! Texture and surface objects: what was described is checked as the
//! driver checks it and kept, so that the `Get…Desc` calls give it back.
//! Simulated kernels never sample, so nothing else uses them.
//!
//! Array queries that need an array's shape (`cuArrayGetDescriptor`,
//! `cuMipmappedArrayGetLevel`) are answered for arrays that exist, with
//! `CUDA_ERROR_NOT_SUPPORTED`: simgpu keeps an array's size, not its
//! descriptor.

use crate::driver::{driver, CuResult};
use crate::ffi::{cu_export, input, out};
use crate::memory::check_device_range;
use abi::cuda::*;
use std::collections::HashMap;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// `CUDA_RESOURCE_DESC`: the resource type, then a union of 128 bytes,
/// then flags.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ResourceDesc {
    pub res_type: c_uint,
    pub res: [u64; 16],
    pub flags: c_uint,
}

/// `CUDA_TEXTURE_DESC`, kept as it came.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TextureDesc {
    pub address_mode: [c_uint; 3],
    pub filter_mode: c_uint,
    pub flags: c_uint,
    pub rest: [c_uint; 21],
}

/// `CUDA_RESOURCE_VIEW_DESC`, kept as it came.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ResourceViewDesc {
    pub format: c_uint,
    pub words: [u64; 13],
}

const _: () = assert!(std::mem::size_of::<ResourceDesc>() == 144);
const _: () = assert!(std::mem::offset_of!(ResourceDesc, flags) == 136);
const _: () = assert!(std::mem::size_of::<TextureDesc>() == 104);
const _: () = assert!(std::mem::size_of::<ResourceViewDesc>() == 112);

/// `CUresourcetype`.
const RESOURCE_TYPE_ARRAY: c_uint = 0;
const RESOURCE_TYPE_MIPMAPPED_ARRAY: c_uint = 1;
const RESOURCE_TYPE_LINEAR: c_uint = 2;
const RESOURCE_TYPE_PITCH2D: c_uint = 3;

struct TexObject {
    resource: ResourceDesc,
    texture: Option<TextureDesc>,
    view: Option<ResourceViewDesc>,
}

/// Objects by value; a texture and a surface object never share one.
static OBJECTS: Mutex<Option<HashMap<u64, TexObject>>> = Mutex::new(None);
/// Object values start at 1 (0 is never a valid object).
static NEXT_OBJECT: AtomicU64 = AtomicU64::new(1);

fn objects<R>(f: impl FnOnce(&mut HashMap<u64, TexObject>) -> R) -> R {
    let mut guard = OBJECTS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Checks a resource description: the array exists, or the memory is
/// device memory of the size described; flags must be 0.
fn check_resource(r: &ResourceDesc, surface: bool) -> CuResult<()> {
    let d = driver()?;
    d.current()?;
    if r.flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let objs = d.read();
    match r.res_type {
        RESOURCE_TYPE_ARRAY => objs.arrays.contains_key(&r.res[0]).then_some(()).ok_or(CUDA_ERROR_INVALID_HANDLE),
        // A surface is always over one array.
        _ if surface => Err(CUDA_ERROR_INVALID_VALUE),
        RESOURCE_TYPE_MIPMAPPED_ARRAY => objs.mipmaps.contains_key(&r.res[0]).then_some(()).ok_or(CUDA_ERROR_INVALID_HANDLE),
        RESOURCE_TYPE_LINEAR => {
            // devPtr, format and channel count, size in bytes.
            let (ptr, channels, bytes) = (r.res[0], (r.res[1] >> 32) as u32, r.res[2]);
            if ![1, 2, 4].contains(&channels) || bytes == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            check_device_range(d, ptr, bytes)
        }
        RESOURCE_TYPE_PITCH2D => {
            // devPtr, format and channel count, width, height, pitch in bytes.
            let (ptr, channels, height, pitch) = (r.res[0], (r.res[1] >> 32) as u32, r.res[3], r.res[4]);
            if ![1, 2, 4].contains(&channels) || height == 0 || pitch == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            check_device_range(d, ptr, height.checked_mul(pitch).ok_or(CUDA_ERROR_INVALID_VALUE)?)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn create(object: *mut u64, resource: ResourceDesc, texture: Option<TextureDesc>, view: Option<ResourceViewDesc>) -> CuResult<()> {
    if object.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_resource(&resource, texture.is_none())?;
    let value = NEXT_OBJECT.fetch_add(1, Relaxed);
    objects(|o| o.insert(value, TexObject { resource, texture, view }));
    // SAFETY: checked non-null; writable by cuda.h's contract.
    unsafe { out(object, value) }
}

fn destroy(value: u64, surface: bool) -> CuResult<()> {
    driver()?;
    objects(|o| match o.get(&value) {
        Some(t) if t.texture.is_none() == surface => {
            o.remove(&value);
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

fn get<T>(value: u64, surface: bool, f: impl FnOnce(&TexObject) -> Option<T>) -> CuResult<T> {
    driver()?;
    objects(|o| match o.get(&value) {
        Some(t) if t.texture.is_none() == surface => f(t).ok_or(CUDA_ERROR_INVALID_VALUE),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

cu_export!(cuTexObjectCreate(object: *mut u64, resource: *const ResourceDesc, texture: *const TextureDesc, view: *const ResourceViewDesc) {
    driver()?;
    let r = input(resource)?;
    let t = input(texture)?;
    let v = if view.is_null() { None } else { Some(input(view)?) };
    create(object, r, Some(t), v)
});

cu_export!(cuTexObjectDestroy(object: u64) {
    destroy(object, false)
});

cu_export!(cuTexObjectGetResourceDesc(resource: *mut ResourceDesc, object: u64) {
    if resource.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(resource, get(object, false, |t| Some(t.resource))?)
});

cu_export!(cuTexObjectGetTextureDesc(texture: *mut TextureDesc, object: u64) {
    if texture.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(texture, get(object, false, |t| t.texture)?)
});

// An object made without a view has none to give back.
cu_export!(cuTexObjectGetResourceViewDesc(view: *mut ResourceViewDesc, object: u64) {
    if view.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(view, get(object, false, |t| t.view)?)
});

cu_export!(cuSurfObjectCreate(object: *mut u64, resource: *const ResourceDesc) {
    driver()?;
    create(object, input(resource)?, None, None)
});

cu_export!(cuSurfObjectDestroy(object: u64) {
    destroy(object, true)
});

cu_export!(cuSurfObjectGetResourceDesc(resource: *mut ResourceDesc, object: u64) {
    if resource.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(resource, get(object, true, |t| Some(t.resource))?)
});

// ---- array shapes -------------------------------------------------------------

fn known_array(array: u64, mipmapped: bool) -> CuResult<()> {
    let d = driver()?;
    let objs = d.read();
    let known = if mipmapped { objs.mipmaps.contains_key(&array) } else { objs.arrays.contains_key(&array) };
    if known {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

cu_export!(cuArrayGetDescriptor_v2(desc: *mut std::ffi::c_void, array: CUarray) {
    if desc.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    known_array(array as u64, false)
}; cuArrayGetDescriptor);

cu_export!(cuArray3DGetDescriptor_v2(desc: *mut std::ffi::c_void, array: CUarray) {
    if desc.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    known_array(array as u64, false)
}; cuArray3DGetDescriptor);

cu_export!(cuMipmappedArrayGetLevel(level_array: *mut CUarray, mipmap: CUmipmappedArray, level: c_uint) {
    let _ = level;
    if level_array.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    known_array(mipmap as u64, true)
});
