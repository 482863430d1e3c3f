//! Which processes use a device, and how much: the running-process lists
//! (compute, graphics, MPS; each in its unversioned, `_v2` and `_v3` form)
//! and per-process SM utilization samples.
//!
//! Every simulated context is a compute context, so the compute list holds
//! each live process with a context on the device, with the device memory
//! it holds (its context included); simgpu has no graphics contexts and no
//! MPS server, so those lists are always empty, but their arguments are
//! checked as for the compute list.
//!
//! `nvmlDeviceGetConfComputeMemSizeInfo` is deliberately not exported
//! without `nvmlDeviceGetRunningProcessDetailList`: nvitop takes a library
//! with the first and not the second for one whose `_v3` process struct has
//! the short-lived confidential-computing field, and would misread the list.

use super::types::{ProcessInfoV1, ProcessInfoV2};
use super::{guard, out, ready_device, ready_slot, NvResult};
use crate::driver::Machine;
use crate::state::{SharedState, PROC_ALIVE, PROC_SAMPLES, SAMPLE_PERIOD_NS};
use crate::sys;
use abi::nvml::*;
use std::ffi::c_uint;
use std::sync::atomic::Ordering::*;

/// `gpuInstanceId`/`computeInstanceId` of a process on a GPU without MIG.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// A process using a device: its host pid, the device memory it holds, and
/// on a MIG device, where (GPU and compute instance ids; `NO_INSTANCE`
/// without MIG).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProcess {
    pub pid: u32,
    pub used_bytes: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

impl From<DeviceProcess> for ProcessInfoV1 {
    fn from(p: DeviceProcess) -> Self {
        ProcessInfoV1 { pid: p.pid, usedGpuMemory: p.used_bytes }
    }
}

impl From<DeviceProcess> for ProcessInfoV2 {
    fn from(p: DeviceProcess) -> Self {
        ProcessInfoV2 {
            pid: p.pid,
            usedGpuMemory: p.used_bytes,
            gpuInstanceId: p.gpu_instance_id,
            computeInstanceId: p.compute_instance_id,
        }
    }
}

/// Which of NVML's three process lists a query reads.
#[derive(Clone, Copy)]
enum ProcessKind {
    Compute,
    Graphics,
    Mps,
}

/// The live processes with a context on slot `i`.
fn slot_processes(st: &SharedState, i: usize, ids: (u32, u32)) -> Vec<DeviceProcess> {
    (0..crate::state::MAX_PROCS)
        .map(|s| (s, st.proc(s)))
        .filter(|(_, r)| r.state.load(Acquire) == PROC_ALIVE && r.devices[i].contexts.load(Acquire) > 0)
        .map(|(s, r)| DeviceProcess {
            pid: st.proc_pid(s),
            used_bytes: r.devices[i].used_bytes.load(Acquire),
            gpu_instance_id: ids.0,
            compute_instance_id: ids.1,
        })
        .collect()
}

/// The live processes with a context on what handle slot `s` names: a MIG
/// device's own; on a partitioned device, those of every instance, each
/// with its instance's ids (as NVML lists them on the parent).
fn compute_processes(m: &Machine, s: usize) -> Vec<DeviceProcess> {
    m.state.reclaim_dead(None);
    let ids =
        |slot: usize| m.topology.instance(slot).map_or((NO_INSTANCE, NO_INSTANCE), |i| (i.gpu_instance_id(), i.compute_instance_id()));
    let instances = m.topology.instance_slots(s);
    if instances.is_empty() {
        return slot_processes(&m.state, s, ids(s));
    }
    instances.into_iter().flat_map(|slot| slot_processes(&m.state, slot, ids(slot))).collect()
}

fn processes(m: &Machine, s: usize, kind: ProcessKind) -> Vec<DeviceProcess> {
    match kind {
        ProcessKind::Compute => compute_processes(m, s),
        ProcessKind::Graphics | ProcessKind::Mps => Vec::new(),
    }
}

/// The NVML process-list protocol: `*count` says how many entries `infos`
/// holds and gets back how many there are; too small an array (the usual
/// first call passes 0 and null) is `NVML_ERROR_INSUFFICIENT_SIZE` with the
/// needed count written.
unsafe fn running_processes<T: From<DeviceProcess>>(
    dev: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    kind: ProcessKind,
) -> NvResult<()> {
    let (m, s) = ready_slot(dev)?;
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let procs = processes(m, s, kind);
    // SAFETY: non-null in/out count by nvml.h's contract.
    let room = unsafe { count.read_unaligned() } as usize;
    // SAFETY: out-pointer, checked non-null.
    unsafe { out(count, procs.len() as c_uint)? };
    if procs.is_empty() {
        return Ok(());
    }
    if room < procs.len() {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if infos.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (k, p) in procs.into_iter().enumerate() {
        // SAFETY: the caller's array holds `room` >= k + 1 entries.
        unsafe { infos.add(k).write_unaligned(T::from(p)) };
    }
    Ok(())
}

/// Exports one process-list query per (name, struct, kind).
macro_rules! process_lists {
    ($($name:ident: $info:ty = $kind:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut $info) -> nvmlReturn_t {
            // SAFETY: the caller's pointers under nvml.h's contract; checked inside.
            guard(|| unsafe { running_processes(dev, count, infos, $kind) })
        }
    )*};
}

process_lists! {
    nvmlDeviceGetComputeRunningProcesses_v3: ProcessInfoV2 = ProcessKind::Compute;
    nvmlDeviceGetComputeRunningProcesses_v2: ProcessInfoV2 = ProcessKind::Compute;
    nvmlDeviceGetComputeRunningProcesses: ProcessInfoV1 = ProcessKind::Compute;
    nvmlDeviceGetGraphicsRunningProcesses_v3: ProcessInfoV2 = ProcessKind::Graphics;
    nvmlDeviceGetGraphicsRunningProcesses_v2: ProcessInfoV2 = ProcessKind::Graphics;
    nvmlDeviceGetGraphicsRunningProcesses: ProcessInfoV1 = ProcessKind::Graphics;
    nvmlDeviceGetMPSComputeRunningProcesses_v3: ProcessInfoV2 = ProcessKind::Mps;
    nvmlDeviceGetMPSComputeRunningProcesses_v2: ProcessInfoV2 = ProcessKind::Mps;
    nvmlDeviceGetMPSComputeRunningProcesses: ProcessInfoV1 = ProcessKind::Mps;
}

/// Writes a per-process utilization sample for (record, device) if a sample
/// period has passed since the last one: SM busy share over that period.
pub fn sample_process(st: &SharedState, slot: usize, dev: usize, now_ns: u64) {
    let pd = &st.proc(slot).devices[dev];
    let last = pd.last_sample_ns.load(Acquire);
    if last != 0 && now_ns < last.saturating_add(SAMPLE_PERIOD_NS) {
        return;
    }
    if pd.last_sample_ns.compare_exchange(last, now_ns, AcqRel, Relaxed).is_err() {
        return;
    }
    let busy = pd.busy_ns_total.load(Acquire);
    let prev = pd.last_sample_busy_ns.swap(busy, AcqRel);
    if last == 0 {
        return;
    }
    let window = now_ns.saturating_sub(last).max(1);
    let util = (busy.saturating_sub(prev).saturating_mul(100) / window).min(100) as u32;
    let k = pd.sample_head.fetch_add(1, AcqRel) as usize % PROC_SAMPLES;
    let s = &pd.samples[k];
    s.at_us.store(0, Release);
    s.sm_util_percent.store(util, Release);
    s.at_us.store(sys::realtime_us(), Release);
}

/// One entry per live process with samples newer than `last_seen_us`: the
/// mean SM utilization of those samples, stamped with the newest.
fn process_samples(st: &SharedState, i: usize, last_seen_us: u64) -> Vec<nvmlProcessUtilizationSample_t> {
    st.reclaim_dead(None);
    let now = sys::now_ns();
    let mut out = Vec::new();
    for slot in 0..crate::state::MAX_PROCS {
        let r = st.proc(slot);
        if r.state.load(Acquire) != PROC_ALIVE || r.devices[i].contexts.load(Acquire) == 0 {
            continue;
        }
        sample_process(st, slot, i, now);
        let (mut n, mut sum, mut newest) = (0u64, 0u64, 0u64);
        for s in &r.devices[i].samples {
            let at = s.at_us.load(Acquire);
            if at > last_seen_us {
                n += 1;
                sum += s.sm_util_percent.load(Acquire) as u64;
                newest = newest.max(at);
            }
        }
        if let Some(mean) = sum.checked_div(n) {
            out.push(nvmlProcessUtilizationSample_t {
                pid: st.proc_pid(slot),
                timeStamp: newest,
                smUtil: mean as c_uint,
                memUtil: 0,
                encUtil: 0,
                decUtil: 0,
            });
        }
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    dev: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen_us: u64,
) -> nvmlReturn_t {
    guard(|| {
        let (m, i) = ready_device(dev)?;
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let samples = process_samples(&m.state, i, last_seen_us);
        if samples.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        // SAFETY: non-null in/out count by nvml.h's contract.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: out-pointer, checked non-null.
        unsafe { out(count, samples.len() as c_uint)? };
        if utilization.is_null() || room < samples.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (k, s) in samples.into_iter().enumerate() {
            // SAFETY: the caller's buffer holds `room` >= k + 1 entries.
            unsafe { utilization.add(k).write_unaligned(s) };
        }
        Ok(())
    })
}
