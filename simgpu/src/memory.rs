//! Device memory: what is charged, where the bytes live, how they come back.
//!
//! Each device gets, per process, one large `PROT_READ|PROT_WRITE`,
//! `MAP_NORESERVE` anonymous reservation (twice the capacity, so that
//! fragmentation never makes address space the limit), sub-allocated by
//! [`RangeAllocator`]. Device pointers are real host addresses, so copies and
//! fills are plain memory operations, and an untouched 16 GiB device costs
//! nothing. Freed blocks of 64 KiB or more give their pages back with
//! `madvise(MADV_DONTNEED)`.
//!
//! Charges go to the shared state before any address is handed out (CAS
//! admission against the capacity, across processes) and are returned on free,
//! on context destruction and, for a dead process, by whoever reclaims it.
//!
//! Virtual memory management (`cuMemCreate` & co.) backs each physical handle
//! with a memfd; `cuMemMap` maps it `MAP_SHARED|MAP_FIXED` into a
//! `cuMemAddressReserve` range, so two mappings of one handle share data.

use crate::alloc::{charge_size, RangeAllocator, GRANULE_BYTES};
use crate::driver::{ArrayRec, Context, CuResult, Driver, TAG_ARRAY, TAG_MIPMAP};
use crate::exec::{lock, Transfer};
use abi::cuda::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// `cuMemCreate`/`cuMemAddressReserve` granularity (minimum and recommended).
pub const VMM_GRANULARITY_BYTES: u64 = 2 << 20;
/// Frees at least this large return their pages to the host.
const RELEASE_PAGES_BYTES: u64 = 64 << 10;
/// `cuMemAllocPitch` pitch alignment.
pub const PITCH_ALIGN_BYTES: u64 = 512;

pub struct Block {
    pub ctx: u64,
    /// The pool it came from (stream-ordered allocations), or 0.
    pub pool: u64,
    /// Allocated with `cuMemAllocManaged`.
    pub managed: bool,
}

pub struct DeviceHeap {
    pub base: u64,
    pub size: u64,
    pub inner: Mutex<HeapInner>,
}

pub struct HeapInner {
    pub ranges: RangeAllocator,
    pub blocks: HashMap<u64, Block>,
}

impl DeviceHeap {
    fn reserve(capacity: u64) -> CuResult<DeviceHeap> {
        let size = capacity.saturating_mul(2);
        // SAFETY: a fresh anonymous private mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        Ok(DeviceHeap { base: p as u64, size, inner: Mutex::new(HeapInner { ranges: RangeAllocator::new(size), blocks: HashMap::new() }) })
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.size
    }
}

pub(crate) fn heap(d: &Driver, device: usize) -> CuResult<&DeviceHeap> {
    let rt = d.devices.get(device).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
    let cap = d.machine.state.device(device).capacity_bytes.load(std::sync::atomic::Ordering::Relaxed);
    rt.heap.get_or_init(|| DeviceHeap::reserve(cap)).as_ref().map_err(|e| *e)
}

/// Allocates device memory for `ctx`: charge first, then address space.
pub fn alloc_device(d: &Driver, ctx: &Context, bytes: u64) -> CuResult<u64> {
    alloc_block(d, ctx, bytes, false)
}

/// Allocates managed memory for `ctx`: device memory here (the simulated
/// device and the host share it), marked as managed for pointer queries.
pub fn alloc_managed(d: &Driver, ctx: &Context, bytes: u64) -> CuResult<u64> {
    alloc_block(d, ctx, bytes, true)
}

fn alloc_block(d: &Driver, ctx: &Context, bytes: u64, managed: bool) -> CuResult<u64> {
    let charged = charge_size(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let h = heap(d, ctx.device)?;
    let st = &d.machine.state;
    if !st.charge(ctx.device, d.own_slot(), charged) {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let mut inner = lock(&h.inner);
    match inner.ranges.alloc(charged) {
        Some(off) => {
            inner.blocks.insert(off, Block { ctx: ctx.handle, pool: 0, managed });
            Ok(h.base + off)
        }
        None => {
            drop(inner);
            st.uncharge(ctx.device, d.own_slot(), charged);
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }
}

/// Gives the block at heap offset `off` back to device `device`: its
/// address range, its pages and its charge. Returns its length.
pub(crate) fn return_to_device(d: &Driver, device: usize, h: &DeviceHeap, off: u64) -> Option<u64> {
    let len = lock(&h.inner).ranges.free(off)?;
    if len >= RELEASE_PAGES_BYTES {
        release_pages(h.base + off, len);
    }
    d.machine.state.uncharge(device, d.own_slot(), len);
    Some(len)
}

pub(crate) fn heap_of(d: &Driver, addr: u64) -> Option<(usize, &DeviceHeap)> {
    d.devices.iter().enumerate().find_map(|(i, rt)| match rt.heap.get() {
        Some(Ok(h)) if h.contains(addr) => Some((i, h)),
        _ => None,
    })
}

/// Frees a device allocation by its start address; a pool's allocation
/// leaves its pool with it.
pub fn free_device(d: &Driver, ptr: u64) -> CuResult<()> {
    let (device, h) = heap_of(d, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let off = ptr - h.base;
    let block = lock(&h.inner).blocks.remove(&off).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let len = return_to_device(d, device, h, off).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if block.pool != 0 {
        crate::pool::forget_block(d, block.pool, len);
    }
    Ok(())
}

fn release_pages(ptr: u64, len: u64) {
    let page = 4096u64;
    let start = (ptr + page - 1) & !(page - 1);
    let end = (ptr + len) & !(page - 1);
    if end > start {
        // SAFETY: the range lies inside our own anonymous reservation and no
        // live allocation overlaps it (it was just freed); DONTNEED only drops
        // its contents.
        unsafe { libc::madvise(start as *mut libc::c_void, (end - start) as usize, libc::MADV_DONTNEED) };
    }
}

/// Whether a device allocation with this exact start address is live.
pub fn is_live_allocation(d: &Driver, ptr: u64) -> bool {
    heap_of(d, ptr).is_some_and(|(_, h)| lock(&h.inner).blocks.contains_key(&(ptr - h.base)))
}

/// Base and size of the allocation containing `ptr` (device heaps and VMM mappings).
pub fn address_range(d: &Driver, ptr: u64) -> CuResult<(u64, u64)> {
    if let Some((_, h)) = heap_of(d, ptr) {
        let inner = lock(&h.inner);
        if let Some((start, len)) = inner.ranges.containing(ptr - h.base) {
            if inner.blocks.contains_key(&start) {
                return Ok((h.base + start, len));
            }
        }
        return Err(CUDA_ERROR_NOT_FOUND);
    }
    let v = lock(&d.vmm);
    if let Some((&start, m)) = v.mappings.range(..=ptr).next_back() {
        if ptr < start + m.size {
            return Ok((start, m.size));
        }
    }
    Err(CUDA_ERROR_NOT_FOUND)
}

/// What the driver knows of device memory at an address: the allocation
/// (or VMM mapping) that holds it, for pointer attribute queries.
pub struct DeviceMemoryInfo {
    /// The physical device (slot) it lives on.
    pub device: usize,
    pub base: u64,
    pub size: u64,
    /// The owning context, or 0 for a VMM mapping.
    pub ctx: u64,
    pub pool: u64,
    pub managed: bool,
    pub vmm: bool,
}

/// The device allocation or VMM mapping containing `ptr`, if any.
pub fn device_memory_info(d: &Driver, ptr: u64) -> Option<DeviceMemoryInfo> {
    if let Some((device, h)) = heap_of(d, ptr) {
        let inner = lock(&h.inner);
        let (start, len) = inner.ranges.containing(ptr - h.base)?;
        let block = inner.blocks.get(&start)?;
        return Some(DeviceMemoryInfo {
            device,
            base: h.base + start,
            size: len,
            ctx: block.ctx,
            pool: block.pool,
            managed: block.managed,
            vmm: false,
        });
    }
    let v = lock(&d.vmm);
    let (&start, m) = v.mappings.range(..=ptr).next_back()?;
    if ptr >= start + m.size {
        return None;
    }
    let device = v.handles.get(&m.handle)?.device?;
    Some(DeviceMemoryInfo { device, base: start, size: m.size, ctx: 0, pool: 0, managed: false, vmm: true })
}

/// Checks that `[ptr, ptr+len)` is memory a device pointer may address:
/// a live device/managed allocation, a mapped VMM range or pinned host memory.
pub fn check_device_range(d: &Driver, ptr: u64, len: u64) -> CuResult<()> {
    if ptr == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let end = ptr.checked_add(len).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Ok((base, size)) = address_range(d, ptr) {
        return if end <= base + size { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) };
    }
    let objs = d.read();
    if let Some((&base, &size)) = objs.host_allocs.iter().find(|(&b, &s)| ptr >= b && ptr < b + s as u64) {
        return if end <= base + size as u64 { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) };
    }
    Err(CUDA_ERROR_INVALID_VALUE)
}

/// Performs a stream-ordered copy or fill (on the worker), if the device
/// memory it touches is still there.
pub fn run_transfer(d: &Driver, t: &Transfer) {
    let ok = |p: u64, n: usize| n == 0 || check_device_range(d, p, n as u64).is_ok();
    match *t {
        Transfer::Copy { dst, src, n, dst_host, src_host } => {
            if (dst_host || ok(dst, n)) && (src_host || ok(src, n)) && n > 0 {
                // SAFETY: device and pinned sides checked just now; a host
                // side is the application's n-byte buffer, whose caller is
                // waiting for this copy (cuda.h's contract).
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
            }
        }
        Transfer::Write { dst, ref data } => {
            if ok(dst, data.len()) && !data.is_empty() {
                // SAFETY: destination checked just now; the source is our own buffer.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
            }
        }
        Transfer::Fill8 { dst, value, n } => {
            if ok(dst, n) && n > 0 {
                // SAFETY: range checked just now.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, n) };
            }
        }
        Transfer::Fill32 { dst, value, n } => {
            if n > 0 && dst % 4 == 0 && n.checked_mul(4).is_some_and(|b| ok(dst, b)) {
                // SAFETY: range checked just now and 4-byte aligned.
                unsafe { std::slice::from_raw_parts_mut(dst as *mut u32, n) }.fill(value);
            }
        }
    }
}

/// Frees everything a context owned (allocations and arrays).
pub fn free_all_of_context(d: &Driver, ctx: &Context) {
    crate::pool::forget_context(d, ctx);
    if let Some(Ok(h)) = d.devices.get(ctx.device).and_then(|rt| rt.heap.get()) {
        let owned: Vec<u64> = lock(&h.inner).blocks.iter().filter(|(_, b)| b.ctx == ctx.handle).map(|(off, _)| *off).collect();
        for off in owned {
            let _ = free_device(d, h.base + off);
        }
    }
    let mut objs = d.write();
    let mut freed = 0;
    objs.arrays.retain(|_, a| {
        let keep = a.ctx != ctx.handle;
        if !keep {
            freed += a.charged_bytes;
        }
        keep
    });
    objs.mipmaps.retain(|_, a| {
        let keep = a.ctx != ctx.handle;
        if !keep {
            freed += a.charged_bytes;
        }
        keep
    });
    drop(objs);
    if freed > 0 {
        d.machine.state.uncharge(ctx.device, d.own_slot(), freed);
    }
}

// ---- host memory (not charged) ----

pub fn alloc_host(d: &Driver, bytes: usize) -> CuResult<u64> {
    if bytes == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    d.write().host_allocs.insert(p as u64, bytes);
    Ok(p as u64)
}

pub fn free_host(d: &Driver, ptr: u64) -> CuResult<()> {
    let len = d.write().host_allocs.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: unmapping a mapping we created with exactly this address and length.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
    Ok(())
}

// ---- arrays ----

/// Bytes per element of a `CUarray_format`, or `None` if unknown.
pub fn format_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,               // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2,        // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4,        // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        0xc0 | 0xc3 => 1,               // UNORM_INT8X1, SNORM_INT8X1
        0xc1 | 0xc4 | 0xc6 | 0xc9 => 2, // UNORM_INT8X2, SNORM_INT8X2, UNORM_INT16X1, SNORM_INT16X1
        0xc2 | 0xc5 | 0xc7 | 0xca => 4, // UNORM_INT8X4, SNORM_INT8X4, UNORM_INT16X2, SNORM_INT16X2
        0xc8 | 0xcb => 8,               // UNORM_INT16X4, SNORM_INT16X4
        _ => return None,
    })
}

/// Bytes of a (width, height, depth) array; height/depth 0 mean 1-D/2-D.
pub fn array_bytes(width: usize, height: usize, depth: usize, format: u32, channels: u32) -> CuResult<u64> {
    let elem = format_bytes(format).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if width == 0 || !matches!(channels, 1 | 2 | 4) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    (width as u64)
        .checked_mul(height.max(1) as u64)
        .and_then(|b| b.checked_mul(depth.max(1) as u64))
        .and_then(|b| b.checked_mul(elem * channels as u64))
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

pub fn create_array(d: &Driver, bytes: u64, mipmapped: bool) -> CuResult<u64> {
    let ctx = d.current()?;
    let charged = charge_size(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if !d.machine.state.charge(ctx.device, d.own_slot(), charged) {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let rec = ArrayRec { device: ctx.device, ctx: ctx.handle, charged_bytes: charged };
    let mut objs = d.write();
    let h = d.new_handle(if mipmapped { TAG_MIPMAP } else { TAG_ARRAY });
    if mipmapped {
        objs.mipmaps.insert(h, rec);
    } else {
        objs.arrays.insert(h, rec);
    }
    Ok(h)
}

pub fn destroy_array(d: &Driver, handle: u64, mipmapped: bool) -> CuResult<()> {
    let rec = {
        let mut objs = d.write();
        if mipmapped {
            objs.mipmaps.remove(&handle)
        } else {
            objs.arrays.remove(&handle)
        }
    }
    .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    d.machine.state.uncharge(rec.device, d.own_slot(), rec.charged_bytes);
    Ok(())
}

// ---- virtual memory management ----

pub struct PhysHandle {
    pub device: Option<usize>,
    pub size: u64,
    pub memfd: i32,
    pub mappings: u32,
    /// `cuMemCreate` and each `cuMemRetainAllocationHandle` hold one;
    /// `cuMemRelease` drops one. The memory goes back when no reference and
    /// no mapping is left.
    pub refs: u32,
}

pub struct Mapping {
    pub size: u64,
    pub handle: u64,
}

#[derive(Default)]
pub struct VmmState {
    pub handles: HashMap<u64, PhysHandle>,
    /// reserved ranges: start -> size
    pub reservations: BTreeMap<u64, u64>,
    /// mapped ranges: start -> mapping
    pub mappings: BTreeMap<u64, Mapping>,
}

/// Validates a `CUmemAllocationProp`; returns the device for device memory,
/// `None` for host-located memory.
pub fn check_prop(d: &Driver, prop: &CUmemAllocationProp) -> CuResult<Option<usize>> {
    if prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match prop.location.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => d.check_device(prop.location.id).map(Some).map_err(|_| CUDA_ERROR_INVALID_DEVICE),
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Ok(None),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

pub fn vmm_create(d: &Driver, size: u64, device: Option<usize>) -> CuResult<u64> {
    if size == 0 || !size.is_multiple_of(VMM_GRANULARITY_BYTES) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if let Some(dev) = device {
        if !d.machine.state.charge(dev, d.own_slot(), size) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    let uncharge = || {
        if let Some(dev) = device {
            d.machine.state.uncharge(dev, d.own_slot(), size);
        }
    };
    // SAFETY: the name is a valid C string; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"simgpu-vmm".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        uncharge();
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: fd is our fresh memfd.
    if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        // SAFETY: closing our own fd.
        unsafe { libc::close(fd) };
        uncharge();
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let h = d.new_handle(crate::driver::TAG_VMM);
    lock(&d.vmm).handles.insert(h, PhysHandle { device, size, memfd: fd, mappings: 0, refs: 1 });
    Ok(h)
}

fn vmm_destroy_handle(d: &Driver, ph: PhysHandle) {
    // SAFETY: closing the memfd this handle owned; no mapping uses the fd itself.
    unsafe { libc::close(ph.memfd) };
    if let Some(dev) = ph.device {
        d.machine.state.uncharge(dev, d.own_slot(), ph.size);
    }
}

/// The device a live physical handle's memory is on (`None`: host memory).
pub fn vmm_device(d: &Driver, handle: u64) -> CuResult<Option<usize>> {
    let v = lock(&d.vmm);
    let ph = v.handles.get(&handle).filter(|ph| ph.refs > 0 || ph.mappings > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(ph.device)
}

pub fn vmm_release(d: &Driver, handle: u64) -> CuResult<()> {
    let mut v = lock(&d.vmm);
    let ph = v.handles.get_mut(&handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if ph.refs == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    ph.refs -= 1;
    if ph.refs == 0 && ph.mappings == 0 {
        if let Some(ph) = v.handles.remove(&handle) {
            drop(v);
            vmm_destroy_handle(d, ph);
        }
    }
    Ok(())
}

pub fn vmm_reserve(d: &Driver, size: u64, alignment: u64) -> CuResult<u64> {
    if size == 0 || !size.is_multiple_of(VMM_GRANULARITY_BYTES) || (alignment != 0 && !alignment.is_power_of_two()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let align = alignment.max(VMM_GRANULARITY_BYTES);
    let total = size.checked_add(align).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: fresh inaccessible reservation.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let raw = p as u64;
    let start = (raw + align - 1) & !(align - 1);
    // SAFETY: trimming the unaligned head and the tail of our own reservation.
    unsafe {
        if start > raw {
            libc::munmap(raw as *mut libc::c_void, (start - raw) as usize);
        }
        let end = raw + total;
        if end > start + size {
            libc::munmap((start + size) as *mut libc::c_void, (end - start - size) as usize);
        }
    }
    lock(&d.vmm).reservations.insert(start, size);
    Ok(start)
}

pub fn vmm_free_reservation(d: &Driver, ptr: u64, size: u64) -> CuResult<()> {
    let mut v = lock(&d.vmm);
    if v.reservations.get(&ptr) != Some(&size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if v.mappings.range(ptr..ptr + size).next().is_some() {
        // Real drivers refuse to free a range that is still mapped.
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    v.reservations.remove(&ptr);
    // SAFETY: unmapping exactly a reservation we made.
    unsafe { libc::munmap(ptr as *mut libc::c_void, size as usize) };
    Ok(())
}

pub fn vmm_map(d: &Driver, ptr: u64, size: u64, offset: u64, handle: u64) -> CuResult<()> {
    let mut v = lock(&d.vmm);
    if size == 0
        || !size.is_multiple_of(VMM_GRANULARITY_BYTES)
        || !offset.is_multiple_of(VMM_GRANULARITY_BYTES)
        || !ptr.is_multiple_of(VMM_GRANULARITY_BYTES)
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (&rstart, &rsize) = v.reservations.range(..=ptr).next_back().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if end > rstart + rsize {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let overlaps = v.mappings.range(..end).next_back().is_some_and(|(&s, m)| s + m.size > ptr);
    if overlaps {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ph = v.handles.get_mut(&handle).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if ph.refs == 0 || offset.checked_add(size).is_none_or(|e| e > ph.size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the target range lies inside our own reservation and is not
    // mapped to anything else (checked above); MAP_FIXED replaces only it.
    let p = unsafe {
        libc::mmap(
            ptr as *mut libc::c_void,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            ph.memfd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    ph.mappings += 1;
    v.mappings.insert(ptr, Mapping { size, handle });
    Ok(())
}

pub fn vmm_unmap(d: &Driver, ptr: u64, size: u64) -> CuResult<()> {
    let mut v = lock(&d.vmm);
    let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let inside: Vec<u64> = v.mappings.range(ptr..end).filter(|(&s, m)| s + m.size <= end).map(|(&s, _)| s).collect();
    if inside.is_empty() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut to_destroy = Vec::new();
    for s in inside {
        let Some(m) = v.mappings.remove(&s) else { continue };
        // SAFETY: replacing our own mapping with an inaccessible anonymous one,
        // keeping the reservation in place.
        unsafe {
            libc::mmap(
                s as *mut libc::c_void,
                m.size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if let Some(ph) = v.handles.get_mut(&m.handle) {
            ph.mappings = ph.mappings.saturating_sub(1);
            if ph.refs == 0 && ph.mappings == 0 {
                to_destroy.push(m.handle);
            }
        }
    }
    let handles: Vec<PhysHandle> = to_destroy.into_iter().filter_map(|h| v.handles.remove(&h)).collect();
    drop(v);
    for ph in handles {
        vmm_destroy_handle(d, ph);
    }
    Ok(())
}

/// `cuMemRetainAllocationHandle`: the handle mapped at any address inside a
/// mapping, with one more reference taken.
pub fn vmm_retain(d: &Driver, addr: u64) -> CuResult<u64> {
    let mut v = lock(&d.vmm);
    let handle = match v.mappings.range(..=addr).next_back() {
        Some((&start, m)) if addr < start + m.size => m.handle,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    let ph = v.handles.get_mut(&handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    ph.refs = ph.refs.checked_add(1).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(handle)
}

pub fn vmm_check_mapped(d: &Driver, ptr: u64, size: u64) -> CuResult<()> {
    let v = lock(&d.vmm);
    let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (&rstart, &rsize) = v.reservations.range(..=ptr).next_back().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if size == 0 || end > rstart + rsize {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Granule check helper used by pitch allocations.
pub fn pitch_for(width: u64) -> Option<u64> {
    width.checked_add(PITCH_ALIGN_BYTES - 1).map(|w| w & !(PITCH_ALIGN_BYTES - 1))
}

const _: () = assert!(GRANULE_BYTES <= PITCH_ALIGN_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_sizes() {
        assert_eq!(array_bytes(100, 0, 0, 0x20, 4), Ok(1600));
        assert_eq!(array_bytes(10, 10, 10, 0x01, 1), Ok(1000));
        assert_eq!(array_bytes(10, 10, 10, 0x77, 1), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(array_bytes(10, 1, 1, 0x01, 3), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(array_bytes(0, 1, 1, 0x01, 1), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(array_bytes(usize::MAX, 2, 1, 0x01, 1), Err(CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn pitch_rounds_to_512() {
        assert_eq!(pitch_for(1), Some(512));
        assert_eq!(pitch_for(1000), Some(1024));
        assert_eq!(pitch_for(u64::MAX), None);
    }
}
