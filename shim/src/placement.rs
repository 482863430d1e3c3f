//! Where the driver puts memory whose location the caller names
//! (`cuMemCreate`'s `CUmemAllocationProp::location`, a pool's
//! `CU_MEMPOOL_ATTR_LOCATION_TYPE`/`_ID`), as far as a cap is concerned.
//!
//! The rule fails closed. Memory is charged to the device its location
//! names; it passes uncharged only when the location is host memory; and it
//! is refused when the shim cannot tie it to a device it knows: an ordinal
//! this process does not see, or a location type it cannot attribute (a
//! device's locality domain, an invisible device, a type newer than this
//! table). The refusal never relies on the driver refusing too: a driver
//! that accepts the call would otherwise hand out memory no cap counts.

use abi::cuda::*;
use core::ffi::{c_int, c_uint};

/// What a named location means for the tenant's caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Device memory on the device of this ordinal (`CUdevice`).
    Device(c_int),
    /// Host memory (pinned or NUMA-placed): not device memory, not charged.
    Host,
    /// A managed pool without a preferred location: its memory is charged
    /// where the work runs (the stream's device), as `cuMemAllocManaged` is.
    Unplaced,
    /// A location type the shim cannot tie to one device.
    Unattributable(c_uint),
}

fn host_or(location: CUmemLocation, other: Placement) -> Placement {
    match location.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => Placement::Device(location.id),
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Placement::Host,
        _ => other,
    }
}

/// A `cuMemCreate` location. An unspecified location (type 0) names no
/// device, so it cannot be charged either.
pub fn of_allocation(location: CUmemLocation) -> Placement {
    host_or(location, Placement::Unattributable(location.type_))
}

/// A memory pool's location. Type 0 (`CU_MEM_LOCATION_TYPE_NONE`) is a
/// managed pool with no preferred location.
pub fn of_pool(location: CUmemLocation) -> Placement {
    let other =
        if location.type_ == CU_MEM_LOCATION_TYPE_INVALID { Placement::Unplaced } else { Placement::Unattributable(location.type_) };
    host_or(location, other)
}

/// The name of a location type, for messages.
pub fn type_name(location_type: c_uint) -> &'static str {
    match location_type {
        CU_MEM_LOCATION_TYPE_INVALID => "CU_MEM_LOCATION_TYPE_NONE",
        CU_MEM_LOCATION_TYPE_DEVICE => "CU_MEM_LOCATION_TYPE_DEVICE",
        CU_MEM_LOCATION_TYPE_HOST => "CU_MEM_LOCATION_TYPE_HOST",
        CU_MEM_LOCATION_TYPE_HOST_NUMA => "CU_MEM_LOCATION_TYPE_HOST_NUMA",
        CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => "CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT",
        CU_MEM_LOCATION_TYPE_INVISIBLE => "CU_MEM_LOCATION_TYPE_INVISIBLE",
        CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN => "CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN",
        _ => "an unknown location type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(type_: c_uint, id: c_int) -> CUmemLocation {
        CUmemLocation { type_, id }
    }

    #[test]
    fn device_locations_name_their_ordinal() {
        assert_eq!(of_allocation(at(CU_MEM_LOCATION_TYPE_DEVICE, 3)), Placement::Device(3));
        assert_eq!(of_pool(at(CU_MEM_LOCATION_TYPE_DEVICE, 0)), Placement::Device(0));
    }

    #[test]
    fn host_locations_are_not_device_memory() {
        for t in [CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT] {
            assert_eq!(of_allocation(at(t, 1)), Placement::Host);
            assert_eq!(of_pool(at(t, 1)), Placement::Host);
        }
    }

    #[test]
    fn what_names_no_known_device_is_unattributable() {
        for t in [CU_MEM_LOCATION_TYPE_INVISIBLE, CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN, 7, 0x7FFF_FFFF] {
            assert_eq!(of_allocation(at(t, 0)), Placement::Unattributable(t));
            assert_eq!(of_pool(at(t, 0)), Placement::Unattributable(t));
        }
        assert_eq!(of_allocation(at(CU_MEM_LOCATION_TYPE_INVALID, 0)), Placement::Unattributable(0));
        assert_eq!(of_pool(at(CU_MEM_LOCATION_TYPE_INVALID, 0)), Placement::Unplaced);
    }
}
