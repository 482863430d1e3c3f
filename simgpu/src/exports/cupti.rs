//! The CUPTI export table (`7CB63F9B…`), served by `cuGetExportTable`
//! ([`super::export_table`] registers it).
//!
//! NVIDIA's profiling library, libcupti, asks the driver for this table
//! (after the device-extended and tools-context ones) the first time any
//! of its functions runs, and fails that function when the driver does not
//! have it. `cuptiGetVersion`, the one thing JAX's CUDA plugin asks of
//! CUPTI before it will take the GPU, needs no more than that the table
//! comes back: traced with libcupti 13.5 and JAX 0.10.2, neither calls a
//! slot of it to start, to compile or to run. So JAX without this table
//! reads the failure as "CUPTI is not installed" and falls back to the CPU.
//!
//! simgpu has no profiler to attach, so the table answers as a driver does
//! for a device without the feature: every slot logs its call (debug level,
//! `SIMGPU_LOG=debug`) and returns `CUDA_ERROR_NOT_SUPPORTED`. A profiling
//! session (`jax.profiler.trace`) then records no device activity, and
//! CUPTI reports its own error for it; the program goes on.
//!
//! What the slots mean is not known, and neither is the real table's
//! length. It is served with 128 words, the first its size in bytes as in
//! the other tables, so a reader that walks it by its size stays inside,
//! and one that indexes a slot past the ones it was seen to use still finds
//! a function, never a stray word.

use crate::log::simgpu_debug;
use abi::cuda::{CUresult, CUDA_ERROR_NOT_SUPPORTED};
use std::ffi::c_void;

/// Words in the table, the size word included.
const WORDS: usize = 128;

/// The table as libcupti reads it: its size, then function addresses.
#[repr(transparent)]
struct Table([*const c_void; WORDS]);

// SAFETY: the words are immutable addresses of functions and a constant.
unsafe impl Sync for Table {}

static TABLE: Table = Table(words());

/// The table's start, for `cuGetExportTable`.
pub fn table() -> *const c_void {
    TABLE.0.as_ptr().cast()
}

/// A slot: profiling is not supported on this device. Extra arguments a
/// caller passes are harmless in the C calling convention.
extern "C" fn not_supported<const SLOT: usize>() -> CUresult {
    simgpu_debug!("CUPTI export table slot {SLOT} called: not supported (no profiler on simgpu)");
    CUDA_ERROR_NOT_SUPPORTED
}

macro_rules! slots {
    ($words:ident; $($slot:literal)*) => {
        $( $words[$slot] = not_supported::<$slot> as *const c_void; )*
    };
}

const fn words() -> [*const c_void; WORDS] {
    let mut words = [std::ptr::null(); WORDS];
    words[0] = (WORDS * std::mem::size_of::<usize>()) as *const c_void;
    slots!(words; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
        96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_starts_with_its_size_and_every_slot_is_a_function() {
        assert_eq!(TABLE.0[0] as usize, WORDS * 8);
        assert!(TABLE.0[1..].iter().all(|w| !w.is_null()));
        let slot: extern "C" fn() -> CUresult =
            // SAFETY: every slot past the size word holds a `not_supported` instance.
            unsafe { std::mem::transmute::<*const c_void, extern "C" fn() -> CUresult>(TABLE.0[WORDS - 1]) };
        assert_eq!(slot(), CUDA_ERROR_NOT_SUPPORTED);
    }

    #[test]
    fn cuda_get_export_table_serves_it_by_its_guid() {
        let guid = [0x7C, 0xB6, 0x3F, 0x9B, 0x9C, 0xA4, 0x8E, 0x42, 0xA4, 0x84, 0xBE, 0xB6, 0x6E, 0x6A, 0xED, 0x7F];
        let (name, start) = super::super::export_table::find(&guid).expect("the CUPTI table is served");
        assert_eq!((name, start), ("CUPTI", table()));
    }
}
