//! Sensors and counters: utilization, temperature, power, fans, clocks,
//! performance state, PCIe traffic and field values. Temperature, power and
//! clocks follow the device's sampled utilization and its power limit
//! (`SIMGPU_POWER_LIMIT`) through [`spec`]; the
//! board is passively cooled (an SXM module), so it has no fan to report.

use super::spec::{self, *};
use super::types::{FieldValue, TemperatureV1, TEMPERATURE_V1};
use super::{nvml_export, out, ready_device, version_of, NvResult};
use crate::sys;
use abi::nvml::*;
use std::ffi::{c_int, c_uint};

/// `NVML_TEMPERATURE_GPU`, the only sensor `nvmlDeviceGetTemperature` reads.
const NVML_TEMPERATURE_GPU: c_uint = 0;
/// `nvmlTemperatureThresholds_t` values up to `NVML_TEMPERATURE_THRESHOLD_COUNT`.
const TEMPERATURE_THRESHOLD_COUNT: c_uint = 8;
/// `NVML_PSTATE_0`, maximum performance.
const NVML_PSTATE_0: c_uint = 0;
/// `NVML_FEATURE_ENABLED`.
const NVML_FEATURE_ENABLED: c_uint = 1;
/// How often the encoder/decoder utilization is sampled, in microseconds.
const CODEC_SAMPLING_PERIOD_US: c_uint = 167_000;
/// `NVML_PCIE_UTIL_TX_BYTES` and `NVML_PCIE_UTIL_RX_BYTES`.
const PCIE_UTIL_COUNTERS: c_uint = 2;
/// `NVML_FI_DEV_NVLINK_LINK_COUNT`.
const NVML_FI_DEV_NVLINK_LINK_COUNT: c_uint = 91;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const NVML_VALUE_TYPE_UNSIGNED_INT: c_uint = 1;

/// Device `i`'s GPU utilization over the last sample window, in percent.
fn utilization_percent(dev: nvmlDevice_t) -> NvResult<u32> {
    Ok(load(dev)?.0)
}

/// Device `i`'s utilization, in percent, and the power limit it runs
/// under, in milliwatts: what its temperature, power, clocks and clock
/// event reasons follow.
fn load(dev: nvmlDevice_t) -> NvResult<(u32, u32)> {
    let (m, i) = ready_device(dev)?;
    Ok((m.state.device_utilization_percent(i), m.config.sensors.power_limit_mw))
}

/// The enforced power limit of the handle's device, in milliwatts.
fn power_limit_mw(dev: nvmlDevice_t) -> NvResult<u32> {
    Ok(load(dev)?.1)
}

/// `nvmlTemperatureThresholds_t` -> degrees Celsius. The acoustic and GPS
/// thresholds are not reported by this board.
fn temperature_threshold_c(threshold: c_uint) -> NvResult<u32> {
    match threshold {
        0 => Ok(TEMPERATURE_SHUTDOWN_C),
        1 => Ok(TEMPERATURE_SLOWDOWN_C),
        2 => Ok(TEMPERATURE_MEMORY_MAX_C),
        3 => Ok(TEMPERATURE_GPU_MAX_C),
        t if t < TEMPERATURE_THRESHOLD_COUNT => Err(NVML_ERROR_NOT_SUPPORTED),
        _ => Err(NVML_ERROR_INVALID_ARGUMENT),
    }
}

fn clock(clock_type: c_uint) -> NvResult<Clock> {
    Clock::from_nvml(clock_type).ok_or(NVML_ERROR_INVALID_ARGUMENT)
}

/// `nvmlDeviceGetClock`: `nvmlClockId_t` picks the current clock, or one of
/// the targets, which are all the maximum on a board with default settings.
fn clock_by_id_mhz(clock: Clock, clock_id: c_uint, util_percent: u32, limit_mw: u32) -> NvResult<u32> {
    match clock_id {
        0 => Ok(clock.current_mhz(util_percent, limit_mw)),
        1..=3 => Ok(clock.max_mhz()),
        _ => Err(NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// One field of `nvmlDeviceGetFieldValues`: the simulated device has no
/// NVLink peers, so it reports zero links; every other field is not
/// supported (reported per field, as NVML does).
fn field_value(mut value: FieldValue, now_us: i64) -> FieldValue {
    value.timestamp = now_us;
    value.latencyUsec = 0;
    value.value = 0;
    if value.fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT {
        value.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        value.nvmlReturn = NVML_SUCCESS;
    } else {
        value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    value
}

nvml_export! {
    nvmlDeviceGetUtilizationRates(dev: nvmlDevice_t, util: *mut nvmlUtilization_t) {
        let gpu = utilization_percent(dev)?;
        out(util, nvmlUtilization_t { gpu, memory: 0 })
    }
    nvmlDeviceGetEncoderUtilization(dev: nvmlDevice_t, util_percent: *mut c_uint, sampling_period_us: *mut c_uint) {
        ready_device(dev)?;
        if util_percent.is_null() || sampling_period_us.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(util_percent, 0)?;
        out(sampling_period_us, CODEC_SAMPLING_PERIOD_US)
    }
    nvmlDeviceGetDecoderUtilization(dev: nvmlDevice_t, util_percent: *mut c_uint, sampling_period_us: *mut c_uint) {
        ready_device(dev)?;
        if util_percent.is_null() || sampling_period_us.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(util_percent, 0)?;
        out(sampling_period_us, CODEC_SAMPLING_PERIOD_US)
    }
    nvmlDeviceGetTemperature(dev: nvmlDevice_t, sensor: c_uint, temp_c: *mut c_uint) {
        let (util, limit) = load(dev)?;
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(temp_c, spec::temperature_c(util, limit))
    }
    nvmlDeviceGetTemperatureV(dev: nvmlDevice_t, temperature: *mut TemperatureV1) {
        let (util, limit) = load(dev)?;
        if version_of(temperature)? != TEMPERATURE_V1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        // SAFETY: non-null (checked by version_of); the caller set sensorType.
        let sensor = unsafe { std::ptr::addr_of!((*temperature).sensorType).read_unaligned() };
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let reading = TemperatureV1 { version: TEMPERATURE_V1, sensorType: sensor, temperature: spec::temperature_c(util, limit) as c_int };
        out(temperature, reading)
    }
    nvmlDeviceGetTemperatureThreshold(dev: nvmlDevice_t, threshold: c_uint, temp_c: *mut c_uint) {
        ready_device(dev)?;
        let value = temperature_threshold_c(threshold)?;
        out(temp_c, value)
    }
    nvmlDeviceGetPowerUsage(dev: nvmlDevice_t, power_mw: *mut c_uint) {
        let (util, limit) = load(dev)?;
        out(power_mw, spec::power_draw_mw(util, limit))
    }
    nvmlDeviceGetPowerManagementMode(dev: nvmlDevice_t, mode: *mut c_uint) {
        ready_device(dev)?;
        out(mode, NVML_FEATURE_ENABLED)
    }
    nvmlDeviceGetPowerManagementLimit(dev: nvmlDevice_t, limit_mw: *mut c_uint) {
        let limit = power_limit_mw(dev)?;
        out(limit_mw, limit)
    }
    nvmlDeviceGetPowerManagementDefaultLimit(dev: nvmlDevice_t, limit_mw: *mut c_uint) {
        ready_device(dev)?;
        out(limit_mw, POWER_LIMIT_MW)
    }
    nvmlDeviceGetEnforcedPowerLimit(dev: nvmlDevice_t, limit_mw: *mut c_uint) {
        let limit = power_limit_mw(dev)?;
        out(limit_mw, limit)
    }
    nvmlDeviceGetPowerManagementLimitConstraints(dev: nvmlDevice_t, min_limit_mw: *mut c_uint, max_limit_mw: *mut c_uint) {
        ready_device(dev)?;
        if min_limit_mw.is_null() || max_limit_mw.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(min_limit_mw, POWER_LIMIT_MIN_MW)?;
        out(max_limit_mw, POWER_LIMIT_MW)
    }
    nvmlDeviceGetFanSpeed(dev: nvmlDevice_t, speed_percent: *mut c_uint) {
        ready_device(dev)?;
        if speed_percent.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetFanSpeed_v2(dev: nvmlDevice_t, _fan: c_uint, speed_percent: *mut c_uint) {
        ready_device(dev)?;
        if speed_percent.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetNumFans(dev: nvmlDevice_t, fans: *mut c_uint) {
        ready_device(dev)?;
        out(fans, 0)
    }
    nvmlDeviceGetClockInfo(dev: nvmlDevice_t, clock_type: c_uint, clock_mhz: *mut c_uint) {
        let (util, limit) = load(dev)?;
        out(clock_mhz, clock(clock_type)?.current_mhz(util, limit))
    }
    nvmlDeviceGetMaxClockInfo(dev: nvmlDevice_t, clock_type: c_uint, clock_mhz: *mut c_uint) {
        ready_device(dev)?;
        out(clock_mhz, clock(clock_type)?.max_mhz())
    }
    nvmlDeviceGetMaxCustomerBoostClock(dev: nvmlDevice_t, clock_type: c_uint, clock_mhz: *mut c_uint) {
        ready_device(dev)?;
        out(clock_mhz, clock(clock_type)?.max_mhz())
    }
    nvmlDeviceGetApplicationsClock(dev: nvmlDevice_t, clock_type: c_uint, clock_mhz: *mut c_uint) {
        ready_device(dev)?;
        out(clock_mhz, clock(clock_type)?.max_mhz())
    }
    nvmlDeviceGetDefaultApplicationsClock(dev: nvmlDevice_t, clock_type: c_uint, clock_mhz: *mut c_uint) {
        ready_device(dev)?;
        out(clock_mhz, clock(clock_type)?.max_mhz())
    }
    nvmlDeviceGetClock(dev: nvmlDevice_t, clock_type: c_uint, clock_id: c_uint, clock_mhz: *mut c_uint) {
        let (util, limit) = load(dev)?;
        out(clock_mhz, clock_by_id_mhz(clock(clock_type)?, clock_id, util, limit)?)
    }
    nvmlDeviceGetCurrentClocksEventReasons(dev: nvmlDevice_t, reasons: *mut u64) {
        let (util, limit) = load(dev)?;
        out(reasons, spec::clocks_event_reasons(util, limit))
    }
    nvmlDeviceGetCurrentClocksThrottleReasons(dev: nvmlDevice_t, reasons: *mut u64) {
        let (util, limit) = load(dev)?;
        out(reasons, spec::clocks_event_reasons(util, limit))
    }
    nvmlDeviceGetPerformanceState(dev: nvmlDevice_t, pstate: *mut c_uint) {
        ready_device(dev)?;
        out(pstate, NVML_PSTATE_0)
    }
    nvmlDeviceGetPowerState(dev: nvmlDevice_t, pstate: *mut c_uint) {
        ready_device(dev)?;
        out(pstate, NVML_PSTATE_0)
    }
    nvmlDeviceGetPcieThroughput(dev: nvmlDevice_t, counter: c_uint, kib_per_s: *mut c_uint) {
        ready_device(dev)?;
        if counter >= PCIE_UTIL_COUNTERS {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(kib_per_s, 0)
    }
    nvmlDeviceGetFieldValues(dev: nvmlDevice_t, values_count: c_int, values: *mut FieldValue) {
        ready_device(dev)?;
        if values_count <= 0 || values.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let now_us = sys::realtime_us() as i64;
        for k in 0..values_count as usize {
            // SAFETY: the caller's array holds `values_count` entries whose
            // fieldId and scopeId it set.
            unsafe {
                let slot = values.add(k);
                let field_id = std::ptr::addr_of!((*slot).fieldId).read_unaligned();
                let scope_id = std::ptr::addr_of!((*slot).scopeId).read_unaligned();
                let asked = FieldValue { fieldId: field_id, scopeId: scope_id, timestamp: 0, latencyUsec: 0, valueType: 0, nvmlReturn: 0, value: 0 };
                slot.write_unaligned(field_value(asked, now_us));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_supported_invalid_or_not_supported_by_kind() {
        assert_eq!(temperature_threshold_c(0), Ok(TEMPERATURE_SHUTDOWN_C));
        assert_eq!(temperature_threshold_c(3), Ok(TEMPERATURE_GPU_MAX_C));
        assert_eq!(temperature_threshold_c(4), Err(NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(temperature_threshold_c(8), Err(NVML_ERROR_INVALID_ARGUMENT));
    }

    #[test]
    fn clock_ids_pick_current_or_maximum() {
        assert_eq!(clock_by_id_mhz(Clock::Sm, 0, 0, POWER_LIMIT_MW), Ok(Clock::Sm.idle_mhz()));
        assert_eq!(clock_by_id_mhz(Clock::Sm, 3, 0, POWER_LIMIT_MW), Ok(Clock::Sm.max_mhz()));
        assert_eq!(clock_by_id_mhz(Clock::Sm, 4, 0, POWER_LIMIT_MW), Err(NVML_ERROR_INVALID_ARGUMENT));
    }

    #[test]
    fn field_values_report_no_nvlink_and_nothing_else() {
        let ask = |id| FieldValue { fieldId: id, scopeId: 0, timestamp: 0, latencyUsec: 0, valueType: 0, nvmlReturn: 99, value: 7 };
        let links = field_value(ask(NVML_FI_DEV_NVLINK_LINK_COUNT), 5);
        assert_eq!((links.nvmlReturn, links.value, links.timestamp), (NVML_SUCCESS, 0, 5));
        assert_eq!(field_value(ask(1), 5).nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    }
}
