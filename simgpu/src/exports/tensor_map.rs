//! Tensor maps (`cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`,
//! `cuTensorMapReplaceAddress`): the descriptors sm_90 kernels use to copy
//! tiles with the tensor memory accelerator. The arguments are checked
//! against every rule cuda.h states, with `CUDA_ERROR_INVALID_VALUE` for a
//! broken one, as the driver answers. The 128-byte `CUtensorMap` is opaque
//! to the application; simgpu fills it with its own record of what was
//! encoded ([`Encoded`]), so that replacing the address can find and check
//! it. No kernel reads it: kernels compute nothing here.

use crate::driver::{driver, CuResult};
use crate::ffi::cu_export;
use abi::cuda::*;
use std::ffi::{c_int, c_uint, c_void};

/// `CU_TENSOR_MAP_NUM_QWORDS`: a `CUtensorMap` is 16 64-bit words.
const TENSOR_MAP_QWORDS: usize = 16;
/// A `CUtensorMap` must be 64-byte aligned (cuda.h).
const TENSOR_MAP_ALIGN_BYTES: u64 = 64;
/// Marks a map simgpu encoded ("SGTM").
const MAGIC: u64 = 0x5347_544d;
const MAX_RANK: u32 = 5;

// `CUtensorMapDataType`
const DATA_TYPE_LAST: c_uint = 15;
const DATA_TYPE_16U4_ALIGN8B: c_uint = 13;
const DATA_TYPE_16U4_ALIGN16B: c_uint = 14;
const DATA_TYPE_16U6_ALIGN16B: c_uint = 15;
// `CUtensorMapInterleave`
const INTERLEAVE_NONE: c_uint = 0;
const INTERLEAVE_32B: c_uint = 2;
// `CUtensorMapSwizzle`
const SWIZZLE_NONE: c_uint = 0;
const SWIZZLE_32B: c_uint = 1;
const SWIZZLE_LAST: c_uint = 6;
const L2_PROMOTION_LAST: c_uint = 3;
const OOB_FILL_NAN_REQUEST_ZERO_FMA: c_uint = 1;

/// Bytes of one element of `data_type`, for the types that have whole-byte
/// elements; `None` for the packed 4- and 6-bit types.
fn element_bytes(data_type: c_uint) -> Option<u64> {
    Some(match data_type {
        0 => 1,                   // UINT8
        1 | 6 | 9 => 2,           // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10..=12 => 4, // UINT32, INT32, FLOAT32, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ
        4 | 5 | 8 => 8,           // UINT64, INT64, FLOAT64
        _ => return None,
    })
}

fn is_float(data_type: c_uint) -> bool {
    matches!(data_type, 6..=12)
}

fn packed_16b(data_type: c_uint) -> bool {
    matches!(data_type, DATA_TYPE_16U4_ALIGN16B | DATA_TYPE_16U6_ALIGN16B)
}

/// Bytes the swizzle pattern spans along the inner dimension.
fn swizzle_span_bytes(swizzle: c_uint) -> u64 {
    match swizzle {
        SWIZZLE_32B => 32,
        2 => 64,
        _ => 128,
    }
}

fn check(ok: bool) -> CuResult<()> {
    if ok {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

/// The parts of an encoding every form shares.
struct Common {
    data_type: c_uint,
    rank: u32,
    address: u64,
    dims: Vec<u64>,
    strides: Vec<u64>,
    element_strides: Vec<u32>,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
}

/// Reads `count` values from a caller array.
///
/// # Safety
/// `p` is null or points to `count` readable values (cuda.h's contract).
unsafe fn read_array<T: Copy>(p: *const T, count: usize) -> CuResult<Vec<T>> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and `count` long by this function's contract.
    Ok((0..count).map(|i| unsafe { p.add(i).read_unaligned() }).collect())
}

impl Common {
    /// Checks the rules that concern the tensor itself (cuda.h, for both forms).
    fn check(&self, min_rank: u32) -> CuResult<()> {
        let c = self;
        check(c.data_type <= DATA_TYPE_LAST)?;
        check((min_rank..=MAX_RANK).contains(&c.rank))?;
        check(c.interleave == INTERLEAVE_NONE || c.rank >= 3)?;
        check(c.interleave <= INTERLEAVE_32B && c.swizzle <= SWIZZLE_LAST && c.l2_promotion <= L2_PROMOTION_LAST)?;
        check(c.interleave != INTERLEAVE_32B || c.swizzle == SWIZZLE_32B)?;
        check(c.oob_fill <= OOB_FILL_NAN_REQUEST_ZERO_FMA && (c.oob_fill == 0 || is_float(c.data_type)))?;
        let address_align = if c.interleave == INTERLEAVE_32B || packed_16b(c.data_type) { 32 } else { 16 };
        check(c.address != 0 && c.address.is_multiple_of(address_align))?;
        check(c.dims.iter().all(|&d| (1..=1 << 32).contains(&d)))?;
        check(c.data_type != DATA_TYPE_16U4_ALIGN8B || c.dims[0].is_multiple_of(2))?;
        check(!packed_16b(c.data_type) || c.dims[0].is_multiple_of(128))?;
        let stride_align = if c.interleave == INTERLEAVE_32B || packed_16b(c.data_type) { 32 } else { 16 };
        check(c.strides.iter().all(|&s| s.is_multiple_of(stride_align) && s < 1 << 40))?;
        check(c.element_strides.iter().all(|&e| (1..=8).contains(&e)))
    }

    fn encode(&self, map: *mut u64, boxes: [u64; 3]) -> CuResult<()> {
        check(!map.is_null() && (map as u64).is_multiple_of(TENSOR_MAP_ALIGN_BYTES))?;
        let mut words = [0u64; TENSOR_MAP_QWORDS];
        words[0] = self.address;
        words[1] = MAGIC << 32
            | u64::from(self.data_type)
            | u64::from(self.rank) << 8
            | u64::from(self.interleave) << 12
            | u64::from(self.swizzle) << 16
            | u64::from(self.l2_promotion) << 20
            | u64::from(self.oob_fill) << 24;
        for (i, &d) in self.dims.iter().enumerate() {
            words[2 + i] = d;
        }
        for (i, &s) in self.strides.iter().enumerate() {
            words[7 + i] = s;
        }
        words[11..14].copy_from_slice(&boxes);
        words[14] = self.element_strides.iter().enumerate().fold(0, |acc, (i, &e)| acc | u64::from(e) << (8 * i));
        for (i, w) in words.iter().enumerate() {
            // SAFETY: `map` is a CUtensorMap of 16 words (cuda.h), checked
            // non-null and aligned.
            unsafe { map.add(i).write(*w) };
        }
        Ok(())
    }
}

/// Reads the arguments both encoders share.
///
/// # Safety
/// The arrays hold `rank` (strides: `rank - 1`) values when `rank` is in
/// range, as cuda.h requires; a null array is refused.
#[allow(clippy::too_many_arguments)]
unsafe fn common(
    data_type: c_uint,
    rank: u32,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    element_strides: *const u32,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
) -> CuResult<Common> {
    check((1..=MAX_RANK).contains(&rank))?;
    let n = rank as usize;
    // SAFETY: each array holds the number of values cuda.h gives it (this
    // function's contract); null is refused.
    let (dims, strides, element_strides) =
        unsafe { (read_array(dims, n)?, if n > 1 { read_array(strides, n - 1)? } else { Vec::new() }, read_array(element_strides, n)?) };
    Ok(Common { data_type, rank, address: address as u64, dims, strides, element_strides, interleave, swizzle, l2_promotion, oob_fill })
}

cu_export!(cuTensorMapEncodeTiled(tensor_map: *mut c_void, data_type: c_uint, rank: u32, address: *mut c_void, global_dim: *const u64, global_strides: *const u64, box_dim: *const u32, element_strides: *const u32, interleave: c_uint, swizzle: c_uint, l2_promotion: c_uint, oob_fill: c_uint) {
    driver()?;
    let c = common(data_type, rank, address, global_dim, global_strides, element_strides, interleave, swizzle, l2_promotion, oob_fill)?;
    c.check(1)?;
    let boxes = read_array(box_dim, rank as usize)?;
    check(boxes.iter().all(|&b| (1..=256).contains(&b)))?;
    if packed_16b(data_type) {
        check(boxes[0] == 128)?;
    }
    if interleave == INTERLEAVE_NONE {
        if let Some(bytes) = element_bytes(data_type) {
            let inner_bytes = u64::from(boxes[0]) * bytes;
            check(inner_bytes.is_multiple_of(16))?;
            check(swizzle == SWIZZLE_NONE || inner_bytes <= swizzle_span_bytes(swizzle))?;
        }
    }
    let mut packed = [0u64; 3];
    for (i, &b) in boxes.iter().enumerate() {
        packed[i / 2] |= u64::from(b) << (32 * (i % 2));
    }
    c.encode(tensor_map.cast(), packed)
});

cu_export!(cuTensorMapEncodeIm2col(tensor_map: *mut c_void, data_type: c_uint, rank: u32, address: *mut c_void, global_dim: *const u64, global_strides: *const u64, lower_corner: *const c_int, upper_corner: *const c_int, channels_per_pixel: u32, pixels_per_column: u32, element_strides: *const u32, interleave: c_uint, swizzle: c_uint, l2_promotion: c_uint, oob_fill: c_uint) {
    driver()?;
    let c = common(data_type, rank, address, global_dim, global_strides, element_strides, interleave, swizzle, l2_promotion, oob_fill)?;
    // Im2col maps are of 3- to 5-dimensional tensors: channels, the spatial
    // dimensions (whose bounding box the corners give) and the batch.
    c.check(3)?;
    let spatial = rank as usize - 2;
    let lower = read_array(lower_corner, spatial)?;
    let upper = read_array(upper_corner, spatial)?;
    // The corner range shrinks as the spatial rank grows (cuda.h: 2^15,
    // 2^7 and 2^3 for one, two and three spatial dimensions).
    let bound = [1i32 << 15, 1 << 7, 1 << 3][spatial - 1];
    check(lower.iter().chain(&upper).all(|&v| (-bound..bound).contains(&v)))?;
    check((1..=256).contains(&channels_per_pixel) && (1..=1024).contains(&pixels_per_column))?;
    if interleave == INTERLEAVE_NONE {
        if let Some(bytes) = element_bytes(data_type) {
            check((u64::from(channels_per_pixel) * bytes).is_multiple_of(16))?;
        }
    }
    c.encode(tensor_map.cast(), [u64::from(channels_per_pixel) | u64::from(pixels_per_column) << 32, 0, 0])
});

// Points an encoded map at another tensor with the same layout.
cu_export!(cuTensorMapReplaceAddress(tensor_map: *mut c_void, address: *mut c_void) {
    driver()?;
    let map: *mut u64 = tensor_map.cast();
    check(!map.is_null() && (map as u64).is_multiple_of(TENSOR_MAP_ALIGN_BYTES))?;
    let tag = map.add(1).read();
    check(tag >> 32 == MAGIC)?;
    let data_type = (tag & 0xff) as c_uint;
    let interleave = ((tag >> 12) & 0xf) as c_uint;
    let align = if interleave == INTERLEAVE_32B || packed_16b(data_type) { 32 } else { 16 };
    check(!address.is_null() && (address as u64).is_multiple_of(align))?;
    map.write(address as u64);
    Ok(())
});
