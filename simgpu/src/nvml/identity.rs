//! Who a device is: name, UUID, index, serial, brand, architecture, compute
//! capability, and where it sits on the PCI bus.

use super::spec::{self, *};
use super::types::*;
use super::{c_chars, nvml_export, out, ready_device, ready_slot, version_of, write_str};
use crate::driver::{device_uuid, slot_name, slot_uuid_string};
use abi::nvml::*;
use std::ffi::{c_char, c_int, c_uint};

/// A device's PCI address (function 0 always).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl PciAddress {
    /// Where simulated device `index` sits: the bus `cuDeviceGetPCIBusId`
    /// reports for it.
    pub fn of_device(index: usize) -> PciAddress {
        PciAddress { domain: 0, bus: PCI_FIRST_BUS + index as u32, device: 0 }
    }

    /// `NVML_DEVICE_PCI_BUS_ID_FMT`: `00000000:18:00.0`.
    pub fn bus_id(self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    /// `NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT`: `0000:18:00.0`.
    pub fn bus_id_legacy(self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    /// Parses `[domain:]bus:device[.function]` in hexadecimal, any case, as
    /// `nvmlDeviceGetHandleByPciBusId` accepts it.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let hex = |s: &str| if s.is_empty() { None } else { u32::from_str_radix(s, 16).ok() };
        let (rest, function) = text.rsplit_once('.').map_or((text, "0"), |(r, f)| (r, f));
        if hex(function)? != 0 {
            return None;
        }
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => (0, hex(bus)?, hex(device)?),
            [domain, bus, device] => (hex(domain)?, hex(bus)?, hex(device)?),
            _ => return None,
        };
        Some(PciAddress { domain, bus, device })
    }
}

fn pci_info(index: usize) -> PciInfo {
    let at = PciAddress::of_device(index);
    PciInfo {
        busIdLegacy: c_chars(&at.bus_id_legacy()),
        domain: at.domain,
        bus: at.bus,
        device: at.device,
        pciDeviceId: PCI_COMBINED_ID,
        pciSubSystemId: PCI_SUBSYSTEM_ID,
        busId: c_chars(&at.bus_id()),
    }
}

fn pci_info_v1(index: usize) -> PciInfoV1 {
    let at = PciAddress::of_device(index);
    PciInfoV1 {
        busId: c_chars(&at.bus_id_legacy()),
        domain: at.domain,
        bus: at.bus,
        device: at.device,
        pciDeviceId: PCI_COMBINED_ID,
        pciSubSystemId: PCI_SUBSYSTEM_ID,
        reserved: [0; 4],
    }
}

fn pci_info_ext(index: usize) -> PciInfoExt {
    let at = PciAddress::of_device(index);
    PciInfoExt {
        version: PCI_INFO_EXT_V1,
        domain: at.domain,
        bus: at.bus,
        device: at.device,
        pciDeviceId: PCI_COMBINED_ID,
        pciSubSystemId: PCI_SUBSYSTEM_ID,
        baseClass: PCI_BASE_CLASS,
        subClass: PCI_SUB_CLASS,
        busId: c_chars(&at.bus_id()),
    }
}

nvml_export! {
    nvmlDeviceGetName(dev: nvmlDevice_t, name: *mut c_char, length: c_uint) {
        let (m, s) = ready_slot(dev)?;
        write_str(name, length, &slot_name(m, s))
    }
    nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) {
        let (m, s) = ready_slot(dev)?;
        write_str(uuid, length, &slot_uuid_string(m, s))
    }
    nvmlDeviceGetSerial(dev: nvmlDevice_t, serial: *mut c_char, length: c_uint) {
        let (m, i) = ready_device(dev)?;
        write_str(serial, length, &spec::serial(&device_uuid(&m.state, i)))
    }
    nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) {
        let (_, i) = ready_device(dev)?;
        out(index, i as c_uint)
    }
    nvmlDeviceGetMinorNumber(dev: nvmlDevice_t, minor_number: *mut c_uint) {
        let (_, i) = ready_device(dev)?;
        out(minor_number, i as c_uint)
    }
    nvmlDeviceGetBrand(dev: nvmlDevice_t, brand: *mut c_uint) {
        ready_device(dev)?;
        out(brand, BRAND_NVIDIA)
    }
    nvmlDeviceGetArchitecture(dev: nvmlDevice_t, arch: *mut c_uint) {
        ready_device(dev)?;
        out(arch, ARCHITECTURE_HOPPER)
    }
    nvmlDeviceGetCudaComputeCapability(dev: nvmlDevice_t, major: *mut c_int, minor: *mut c_int) {
        ready_device(dev)?;
        if major.is_null() || minor.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(major, COMPUTE_CAPABILITY.0)?;
        out(minor, COMPUTE_CAPABILITY.1)
    }
    nvmlDeviceGetPciInfo_v3(dev: nvmlDevice_t, pci: *mut PciInfo) {
        let (_, i) = ready_device(dev)?;
        out(pci, pci_info(i))
    }
    nvmlDeviceGetPciInfo_v2(dev: nvmlDevice_t, pci: *mut PciInfoV1) {
        let (_, i) = ready_device(dev)?;
        out(pci, pci_info_v1(i))
    }
    nvmlDeviceGetPciInfo(dev: nvmlDevice_t, pci: *mut PciInfoV1) {
        let (_, i) = ready_device(dev)?;
        out(pci, pci_info_v1(i))
    }
    nvmlDeviceGetPciInfoExt(dev: nvmlDevice_t, pci: *mut PciInfoExt) {
        let (_, i) = ready_device(dev)?;
        if version_of(pci)? != PCI_INFO_EXT_V1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        out(pci, pci_info_ext(i))
    }
    nvmlDeviceGetCurrPcieLinkGeneration(dev: nvmlDevice_t, generation: *mut c_uint) {
        ready_device(dev)?;
        out(generation, PCIE_GENERATION)
    }
    nvmlDeviceGetMaxPcieLinkGeneration(dev: nvmlDevice_t, generation: *mut c_uint) {
        ready_device(dev)?;
        out(generation, PCIE_GENERATION)
    }
    nvmlDeviceGetCurrPcieLinkWidth(dev: nvmlDevice_t, width_lanes: *mut c_uint) {
        ready_device(dev)?;
        out(width_lanes, PCIE_WIDTH_LANES)
    }
    nvmlDeviceGetMaxPcieLinkWidth(dev: nvmlDevice_t, width_lanes: *mut c_uint) {
        ready_device(dev)?;
        out(width_lanes, PCIE_WIDTH_LANES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_match_the_driver_and_parse_back() {
        for i in 0..4 {
            let at = PciAddress::of_device(i);
            assert!(at.bus_id_legacy().eq_ignore_ascii_case(&crate::driver::pci_bus_id(i)));
            assert_eq!(PciAddress::parse(&at.bus_id()), Some(at));
            assert_eq!(PciAddress::parse(&at.bus_id_legacy().to_lowercase()), Some(at));
        }
        assert_eq!(PciAddress::parse("18:00.0"), Some(PciAddress::of_device(0)));
        assert_eq!(PciAddress::parse("0000:18:00.1"), None);
        assert_eq!(PciAddress::parse("zz:00.0"), None);
        assert_eq!(PciAddress::parse(""), None);
        assert_eq!(PciAddress::parse("0:0:0:0.0"), None);
    }
}
