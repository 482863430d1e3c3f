//! The CUDA driver API entry points, grouped by area. Each one is a thin
//! adapter around the safe cores; see `cu_export!` in [`crate::ffi`].

pub mod array;
pub mod context;
pub mod cupti;
pub mod dev_resource;
pub mod device;
pub mod device_extra;
pub mod event;
pub mod export_table;
pub mod graph;
pub mod graph_nodes;
pub mod host_register;
pub mod init;
pub mod interop;
pub mod launch;
pub mod memcpy3d;
pub mod memory;
pub mod module;
pub mod peer;
pub mod pointer;
pub mod pool;
pub mod stream;
pub mod tensor_map;
pub mod texture;
pub mod unsupported;
pub mod vmm;

/// A handle as the number it is.
#[inline]
pub(crate) fn h<T>(p: *mut T) -> u64 {
    p as u64
}

/// A number as the opaque handle type the API expects.
#[inline]
pub(crate) fn ptr<T>(v: u64) -> *mut T {
    v as *mut T
}
