//! Starved or idle: what a tenant that holds device memory but keeps its
//! GPU mostly unused is doing instead.
//!
//! Two figures decide, both observed by the monitor itself and never read
//! from a ledger: the device time of the tenant's processes on the device
//! (NVML's per-process SM utilization, or the time the monitor granted it
//! where it arbitrates the device), and the CPU time of its live processes
//! (`utime + stime` in `/proc/<pid>/stat`, for the host pids the kernel's
//! slot locks confirmed). A tenant that uses its GPU is *busy*; one that
//! barely does while its processes keep the CPU busy is *starved* (it
//! prepares its next input on the CPU and the GPU waits for it: more
//! data-loader workers, or faster input, would feed it); one that barely
//! uses either is *idle* (it holds memory for nothing: a smaller slice, or
//! releasing the memory between jobs, would free it for others).
//!
//! Only the processes that hold a slot in the tenant's ledger are counted:
//! a data-loader worker that never touches CUDA is not there, and its CPU
//! time is not seen.
//!
//! [`CpuClock`] turns each look's CPU times into a rate over the time since
//! its previous look at the same process. A process seen for the first
//! time has no rate yet (its start-up, which costs CPU, is no sign of what
//! it does), and neither has its tenant: a reader that looks once
//! (`top --once`) looks twice, a monitor round apart.

use crate::snapshot::Snapshot;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Instant;

/// Device time at or above which a tenant is busy, as a ratio of the device.
pub const GPU_BUSY_RATIO: f64 = 0.10;
/// CPU time at or above which a tenant with an unused GPU is starved, in
/// cores (a tenth of one: a process that prepares its input on the CPU
/// keeps a core busy, or what share of one a crowded host gives it; one
/// that waits keeps next to none).
pub const CPU_BUSY_CORES: f64 = 0.10;

/// What a tenant holding memory on a device does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activity {
    /// It uses the GPU.
    Busy,
    /// It barely uses the GPU and keeps the CPU busy: its GPU waits on input.
    Starved,
    /// It barely uses either: it holds memory for nothing.
    Idle,
}

impl Activity {
    pub fn name(self) -> &'static str {
        match self {
            Activity::Busy => "busy",
            Activity::Starved => "starved",
            Activity::Idle => "idle",
        }
    }
}

/// The rule: `None` where the tenant holds no memory there or a figure is
/// not known (no NVML, no look at `/proc` yet).
pub fn classify(memory_used_bytes: u64, gpu_ratio: Option<f64>, cpu_cores: Option<f64>) -> Option<Activity> {
    if memory_used_bytes == 0 {
        return None;
    }
    let (gpu, cpu) = (gpu_ratio?, cpu_cores?);
    Some(if gpu >= GPU_BUSY_RATIO {
        Activity::Busy
    } else if cpu >= CPU_BUSY_CORES {
        Activity::Starved
    } else {
        Activity::Idle
    })
}

/// What `report` advises for a tenant classified `activity` (`None` for a
/// busy one: the memory and compute advice say the rest).
pub fn advice(activity: Activity, gpu_ratio: f64, cpu_cores: f64, memory: &str) -> Option<String> {
    let gpu = format!("{:.0} %", gpu_ratio * 100.0);
    let cpu = format!("{:.0} %", cpu_cores * 100.0);
    match activity {
        Activity::Busy => None,
        Activity::Starved => Some(format!(
            "starved: the GPU ran {gpu} of the time while its processes kept {cpu} of a core busy: it waits on its input; \
             more data-loader workers (or faster input) would feed it"
        )),
        Activity::Idle => Some(format!(
            "idle: it held {memory} while the GPU ran {gpu} of the time and its processes used {cpu} of a core: \
             a smaller slice (or freeing the memory between jobs) would give it to others"
        )),
    }
}

/// The figures of `/proc/<pid>/stat` that [`CpuClock`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `utime + stime`, clock ticks.
    pub cpu_ticks: u64,
    /// When the process started, clock ticks after boot.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may hold anything, parentheses and spaces included: the fields are
/// counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15, starttime 22.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(ProcStat { cpu_ticks: field(14)?.saturating_add(field(15)?), start_ticks: field(22)? })
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// Each process's CPU time at the last look, to give the next one a rate.
#[derive(Default)]
pub struct CpuClock {
    /// (pid, start ticks) → (CPU ticks, when read).
    last: HashMap<(u32, u64), (u64, Instant)>,
}

impl CpuClock {
    /// Fills each tenant's CPU use and each of its devices' activity. Only
    /// live processes whose pid the kernel confirmed are read.
    pub fn fill(&mut self, snapshot: &mut Snapshot, now: Instant) {
        let tick = ticks_per_s();
        let mut seen = HashMap::new();
        for tenant in &mut snapshot.tenants {
            // `None` until every live process has a rate.
            let mut cores = Some(0.0);
            for process in tenant.processes.iter().filter(|p| p.alive && p.confirmed) {
                let Some(stat) = read_stat(process.pid) else { continue };
                let key = (process.pid, stat.start_ticks);
                let rate = match self.last.get(&key) {
                    Some((ticks, at)) if now > *at => {
                        Some(stat.cpu_ticks.saturating_sub(*ticks) as f64 / tick / now.duration_since(*at).as_secs_f64())
                    }
                    _ => None,
                };
                seen.insert(key, (stat.cpu_ticks, now));
                cores = cores.zip(rate).map(|(sum, rate)| sum + rate);
            }
            for device in &mut tenant.devices {
                device.cpu_cores = cores;
                let gpu = match (device.sm_utilization_ratio, device.compute_used_ratio) {
                    (Some(sm), Some(used)) => Some(sm.max(used)),
                    (sm, used) => sm.or(used),
                };
                device.activity = classify(device.memory_used_bytes, gpu, cores);
            }
        }
        self.last = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = "4242 (a) (b c) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 1 0 123456 1000 10 18446744073709551615";
        assert_eq!(parse_stat(line), Some(ProcStat { cpu_ticks: 300, start_ticks: 123456 }));
        assert_eq!(parse_stat("4242 (short) S 1"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn busy_starved_and_idle_by_the_rule() {
        assert_eq!(classify(1 << 30, Some(0.5), Some(0.0)), Some(Activity::Busy));
        assert_eq!(classify(1 << 30, Some(0.02), Some(0.9)), Some(Activity::Starved));
        assert_eq!(classify(1 << 30, Some(0.02), Some(0.01)), Some(Activity::Idle));
        assert_eq!(classify(0, Some(0.02), Some(0.01)), None);
        assert_eq!(classify(1 << 30, None, Some(0.9)), None);
        assert_eq!(classify(1 << 30, Some(0.0), None), None);
    }

    #[test]
    fn advice_names_what_to_change() {
        assert!(advice(Activity::Starved, 0.02, 0.95, "1.0 GiB").unwrap().contains("more data-loader workers"));
        assert!(advice(Activity::Idle, 0.0, 0.0, "1.0 GiB").unwrap().contains("a smaller slice"));
        assert_eq!(advice(Activity::Busy, 0.9, 0.1, "1.0 GiB"), None);
    }
}
