//! Peer access between simulated devices: `cuDeviceCanAccessPeer`,
//! `cuDeviceGetP2PAttribute`, `cuCtxEnablePeerAccess`,
//! `cuCtxDisablePeerAccess`. simgpu's devices are boards of one machine
//! joined as NVLink joins them, so any two distinct whole devices may
//! access each other; a device never is its own peer, and MIG instances
//! have no peer access (as on real MIG devices).
//!
//! Device memory is host memory here, so a kernel could always reach a
//! peer's memory; what peer access changes is only what the driver
//! reports and allows. The copies between devices (`cuMemcpyPeer*`) are
//! in [`super::memory`].

use super::h;
use crate::driver::{driver, CuResult, Driver};
use crate::exec::lock;
use crate::ffi::{cu_export, out};
use abi::cuda::*;
use std::ffi::{c_int, c_uint};

/// `CUresult` values from cuda.h that `abi` does not name.
const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: CUresult = 217;
const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: CUresult = 705;

// `CUdevice_P2PAttribute`
const P2P_PERFORMANCE_RANK: c_int = 1;
const P2P_ACCESS_SUPPORTED: c_int = 2;
const P2P_NATIVE_ATOMIC_SUPPORTED: c_int = 3;
const P2P_CUDA_ARRAY_ACCESS_SUPPORTED: c_int = 4;
const P2P_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: c_int = 5;

/// Whether physical slot `a` can access slot `b`'s memory directly.
pub fn can_access(d: &Driver, a: usize, b: usize) -> bool {
    let t = &d.machine.topology;
    a != b && t.instance(a).is_none() && t.instance(b).is_none()
}

cu_export!(cuDeviceCanAccessPeer(can_access_peer: *mut c_int, dev: CUdevice, peer_dev: CUdevice) {
    let d = driver()?;
    let a = d.check_device(dev)?;
    let b = d.check_device(peer_dev)?;
    out(can_access_peer, c_int::from(can_access(d, a, b)))
});

cu_export!(cuDeviceGetP2PAttribute(value: *mut c_int, attribute: c_int, src_dev: CUdevice, dst_dev: CUdevice) {
    let d = driver()?;
    let a = d.check_device(src_dev)?;
    let b = d.check_device(dst_dev)?;
    if a == b {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    let linked = c_int::from(can_access(d, a, b));
    let v = match attribute {
        P2P_PERFORMANCE_RANK => 0,
        P2P_ACCESS_SUPPORTED | P2P_NATIVE_ATOMIC_SUPPORTED | P2P_CUDA_ARRAY_ACCESS_SUPPORTED => linked,
        P2P_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED => 0,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    out(value, v)
});

fn peer_context(d: &Driver, peer: CUcontext) -> CuResult<std::sync::Arc<crate::driver::Context>> {
    if peer.is_null() {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    d.read().contexts.get(&h(peer)).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

cu_export!(cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint) {
    let d = driver()?;
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ctx = d.current()?;
    let peer = peer_context(d, peer)?;
    if !can_access(d, ctx.device, peer.device) {
        return Err(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    }
    let mut peers = lock(&ctx.settings.peers);
    if peers.contains(&peer.handle) {
        return Err(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    }
    peers.push(peer.handle);
    Ok(())
});

cu_export!(cuCtxDisablePeerAccess(peer: CUcontext) {
    let d = driver()?;
    let ctx = d.current()?;
    let peer = peer_context(d, peer)?;
    let mut peers = lock(&ctx.settings.peers);
    let at = peers.iter().position(|&p| p == peer.handle).ok_or(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)?;
    peers.swap_remove(at);
    Ok(())
});
