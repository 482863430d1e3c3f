//! What the simulated device says about itself through NVML: the values an
//! H200 SXM board reports (`nvidia-smi -q` on one), and how its temperature,
//! power and clocks follow its utilization. Safe arithmetic only, so the
//! model can be read and tested without any C.
//!
//! The driver side agrees where both report the same thing: compute
//! capability 9.0, a 1980 MHz SM clock and a 2619 MHz memory clock
//! (`cuDeviceGetAttribute`), and PCI bus `0x18 + index`
//! (`cuDeviceGetPCIBusId`).

/// PCI vendor id of NVIDIA.
pub const PCI_VENDOR_ID: u32 = 0x10DE;
/// PCI device id of an H200 SXM 141GB.
pub const PCI_DEVICE_ID: u32 = 0x2335;
/// `pciDeviceId` as NVML packs it: device id in the high half, vendor low.
pub const PCI_COMBINED_ID: u32 = (PCI_DEVICE_ID << 16) | PCI_VENDOR_ID;
/// `pciSubSystemId` (subsystem device id high, subsystem vendor low).
pub const PCI_SUBSYSTEM_ID: u32 = 0x18BE_10DE;
/// PCI bus of device 0; device `i` is on bus `PCI_FIRST_BUS + i`, as in
/// `crate::driver::pci_bus_id`.
pub const PCI_FIRST_BUS: u32 = 0x18;
/// PCI class: display controller (0x03), 3D controller (0x02).
pub const PCI_BASE_CLASS: u32 = 0x03;
pub const PCI_SUB_CLASS: u32 = 0x02;
/// PCIe generation and lane count of the link.
pub const PCIE_GENERATION: u32 = 5;
pub const PCIE_WIDTH_LANES: u32 = 16;

/// CUDA compute capability (Hopper).
pub const COMPUTE_CAPABILITY: (i32, i32) = (9, 0);
/// `NVML_DEVICE_ARCH_HOPPER`.
pub const ARCHITECTURE_HOPPER: u32 = 9;
/// `NVML_BRAND_NVIDIA`, what data-centre boards since Hopper report.
pub const BRAND_NVIDIA: u32 = 14;

/// Power limits, in milliwatts, as NVML reports them.
pub const POWER_LIMIT_MW: u32 = 700_000;
pub const POWER_LIMIT_MIN_MW: u32 = 200_000;
/// Draw of an idle board, and the extra draw per percent of utilization.
pub const POWER_IDLE_MW: u32 = 75_000;
pub const POWER_PER_UTIL_PERCENT_MW: u32 = 6_000;

/// Temperatures in degrees Celsius.
pub const TEMPERATURE_IDLE_C: u32 = 30;
/// Degrees added at 100 % utilization.
pub const TEMPERATURE_LOAD_RISE_C: u32 = 45;
pub const TEMPERATURE_SHUTDOWN_C: u32 = 92;
pub const TEMPERATURE_SLOWDOWN_C: u32 = 89;
pub const TEMPERATURE_GPU_MAX_C: u32 = 87;
pub const TEMPERATURE_MEMORY_MAX_C: u32 = 95;

/// NVML clock domains (`nvmlClockType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    Graphics,
    Sm,
    Memory,
    Video,
}

impl Clock {
    /// The domain an `nvmlClockType_t` names, if it is one.
    pub fn from_nvml(value: u32) -> Option<Clock> {
        Some(match value {
            0 => Clock::Graphics,
            1 => Clock::Sm,
            2 => Clock::Memory,
            3 => Clock::Video,
            _ => return None,
        })
    }

    /// The highest clock of this domain, in MHz.
    pub fn max_mhz(self) -> u32 {
        match self {
            Clock::Graphics | Clock::Sm => 1980,
            Clock::Memory => 2619,
            Clock::Video => 1755,
        }
    }

    /// The clock of an idle device, in MHz (HBM stays at full speed).
    pub fn idle_mhz(self) -> u32 {
        match self {
            Clock::Graphics | Clock::Sm => 345,
            Clock::Memory => 2619,
            Clock::Video => 765,
        }
    }

    /// The current clock at `util_percent` utilization under a power limit
    /// of `limit_mw`: boosted when busy; where the load would draw more than
    /// the limit, the graphics and SM clocks come down in proportion to the
    /// power the limit leaves (never below idle), as the board's power
    /// controller does. HBM stays at full speed.
    pub fn current_mhz(self, util_percent: u32, limit_mw: u32) -> u32 {
        if util_percent == 0 {
            return self.idle_mhz();
        }
        let demand = power_demand_mw(util_percent);
        if demand <= limit_mw || !matches!(self, Clock::Graphics | Clock::Sm) {
            return self.max_mhz();
        }
        let allowed = u64::from(limit_mw.saturating_sub(POWER_IDLE_MW));
        let wanted = u64::from(demand - POWER_IDLE_MW).max(1);
        let scaled = u64::from(self.max_mhz()) * allowed / wanted;
        (scaled as u32).clamp(self.idle_mhz(), self.max_mhz())
    }
}

/// What a load at `util_percent` would draw with no limit, in milliwatts.
pub fn power_demand_mw(util_percent: u32) -> u32 {
    POWER_IDLE_MW + util_percent.min(100) * POWER_PER_UTIL_PERCENT_MW
}

/// Board power draw at `util_percent` utilization, in milliwatts, never
/// above the enforced limit `limit_mw`.
pub fn power_draw_mw(util_percent: u32, limit_mw: u32) -> u32 {
    power_demand_mw(util_percent).min(limit_mw)
}

/// GPU die temperature at `util_percent` utilization under `limit_mw`, in
/// degrees Celsius: it follows the power drawn, from idle to
/// [`TEMPERATURE_LOAD_RISE_C`] above it at full, unlimited load.
pub fn temperature_c(util_percent: u32, limit_mw: u32) -> u32 {
    let above_idle = power_draw_mw(util_percent, limit_mw).saturating_sub(POWER_IDLE_MW);
    let full = power_demand_mw(100) - POWER_IDLE_MW;
    TEMPERATURE_IDLE_C + above_idle * TEMPERATURE_LOAD_RISE_C / full
}

/// `nvmlClocksEventReasonGpuIdle`.
pub const CLOCKS_EVENT_GPU_IDLE: u64 = 0x1;
/// `nvmlClocksEventReasonSwPowerCap`.
pub const CLOCKS_EVENT_SW_POWER_CAP: u64 = 0x4;
/// `nvmlClocksEventReasonSwThermalSlowdown`.
pub const CLOCKS_EVENT_SW_THERMAL_SLOWDOWN: u64 = 0x20;

/// Why the clocks are where they are (`nvmlDeviceGetCurrentClocksEventReasons`):
/// idle with no work; the software power cap while a load would draw past
/// the limit; thermal slowdown at or above the slowdown threshold.
pub fn clocks_event_reasons(util_percent: u32, limit_mw: u32) -> u64 {
    if util_percent == 0 {
        return CLOCKS_EVENT_GPU_IDLE;
    }
    let mut reasons = 0;
    if power_demand_mw(util_percent) > limit_mw {
        reasons |= CLOCKS_EVENT_SW_POWER_CAP;
    }
    if temperature_c(util_percent, limit_mw) >= TEMPERATURE_SLOWDOWN_C {
        reasons |= CLOCKS_EVENT_SW_THERMAL_SLOWDOWN;
    }
    reasons
}

/// BAR1 aperture for a device of `memory_bytes`: the next power of two (an
/// H200's 141 GB gives 256 GiB), at least 256 MiB.
pub fn bar1_total_bytes(memory_bytes: u64) -> u64 {
    memory_bytes.checked_next_power_of_two().unwrap_or(1 << 63).max(256 << 20)
}

/// BAR1 in use on an idle board, as `nvidia-smi` shows it.
pub const BAR1_USED_BYTES: u64 = 1 << 20;

/// Serial number: 13 decimal digits derived from the device UUID, so it is
/// unique per device and stable for the life of the simulated machine.
pub fn serial(uuid: &[u8; 16]) -> String {
    let mut high = [0u8; 8];
    high.copy_from_slice(&uuid[..8]);
    format!("{:013}", u64::from_be_bytes(high) % 10_000_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_and_temperature_follow_utilization_within_limits() {
        let limit = POWER_LIMIT_MW;
        assert_eq!(power_draw_mw(0, limit), POWER_IDLE_MW);
        assert!(power_draw_mw(100, limit) <= POWER_LIMIT_MW);
        assert!(power_draw_mw(100, limit) > power_draw_mw(50, limit));
        assert_eq!(power_draw_mw(1000, limit), power_draw_mw(100, limit));
        assert_eq!(temperature_c(0, limit), TEMPERATURE_IDLE_C);
        assert_eq!(temperature_c(100, limit), TEMPERATURE_IDLE_C + TEMPERATURE_LOAD_RISE_C);
        assert!(temperature_c(100, limit) < TEMPERATURE_GPU_MAX_C);
        // Under a lower limit the draw stops there, and so does the heat.
        assert_eq!(power_draw_mw(100, 300_000), 300_000);
        assert!(temperature_c(100, 300_000) < temperature_c(100, limit));
    }

    #[test]
    fn clocks_boost_when_busy_and_never_pass_their_maximum() {
        for clock in [Clock::Graphics, Clock::Sm, Clock::Memory, Clock::Video] {
            assert!(clock.idle_mhz() <= clock.max_mhz());
            assert_eq!(clock.current_mhz(1, POWER_LIMIT_MW), clock.max_mhz());
            assert_eq!(clock.current_mhz(0, POWER_LIMIT_MW), clock.idle_mhz());
            let capped = clock.current_mhz(100, POWER_LIMIT_MIN_MW);
            assert!(capped >= clock.idle_mhz() && capped <= clock.max_mhz());
        }
        assert!(Clock::Sm.current_mhz(100, 300_000) < Clock::Sm.max_mhz());
        assert_eq!(Clock::Memory.current_mhz(100, 300_000), Clock::Memory.max_mhz());
        assert_eq!(Clock::from_nvml(4), None);
    }

    #[test]
    fn clock_event_reasons_follow_the_state() {
        assert_eq!(clocks_event_reasons(0, POWER_LIMIT_MW), CLOCKS_EVENT_GPU_IDLE);
        assert_eq!(clocks_event_reasons(100, POWER_LIMIT_MW), 0);
        assert_eq!(clocks_event_reasons(100, 300_000), CLOCKS_EVENT_SW_POWER_CAP);
        assert_eq!(clocks_event_reasons(10, 300_000), 0);
    }

    #[test]
    fn bar1_is_the_next_power_of_two() {
        assert_eq!(bar1_total_bytes(141 << 30), 256 << 30);
        assert_eq!(bar1_total_bytes(1 << 30), 1 << 30);
        assert_eq!(bar1_total_bytes(1), 256 << 20);
        assert_eq!(bar1_total_bytes(u64::MAX), 1 << 63);
    }

    #[test]
    fn serial_has_thirteen_digits() {
        assert_eq!(serial(&[0xff; 16]).len(), 13);
        assert_eq!(serial(&[0; 16]), "0000000000000");
    }
}
