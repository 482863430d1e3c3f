//! Who starts now, and where: the admission queue's decision, as a pure
//! function of the devices' room and the waiting jobs, so that it can be
//! tested without processes and every waiting job computes the same answer.
//!
//! **Order.** Higher priority first; within a priority, first come (lower
//! job id) first.
//!
//! **Fit.** A job asks for `gpus` devices and a memory cap per device. A
//! device's room is its capacity (physical memory × the overcommit ratio,
//! 1.0 unless configured) minus what is committed on it (the caps of
//! admitted jobs and of capped live tenants). A job fits a device when its
//! cap is at most the room; a job without a cap asks for whole devices and
//! fits only a device with nothing committed, then commits all of it.
//!
//! **Backfill (conservative).** Jobs are taken in order. A job that fits in
//! the devices not yet reserved starts. A job that does not fit *reserves*
//! the `gpus` unreserved devices on which it lacks the least memory (ties:
//! lower index), and no job after it may start on them. When a blocked job
//! finds fewer than `gpus` unreserved devices, nothing after it starts in
//! this look (no backfill past it at all).
//!
//! The bound: a job that passes an earlier one never starts on a device
//! that job reserves at that moment, so a blocked job waits only for what
//! runs on its reserved devices when it begins to wait, plus what started
//! before it. Reservations are not stored: every look recomputes them from
//! what is committed now. If memory freed elsewhere makes another device
//! the one a blocked job lacks least on, its reservation moves there, and
//! a job backfilled onto that device earlier can then delay it, by at most
//! that job's run time. Storing reservations would remove that case at the
//! cost of state that outlives its reasons; the queue keeps none.
//!
//! **Placement.** `binpack` (default) takes the fullest devices that fit
//! (least room left after placing), keeping other devices free for large
//! jobs; `spread` takes the emptiest.

use std::collections::HashSet;

/// How a job's devices are chosen among those that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// The fullest devices that fit.
    #[default]
    Binpack,
    /// The emptiest devices.
    Spread,
}

/// One device as admission sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRoom {
    /// `GPU-…`.
    pub uuid: String,
    /// What may be committed on it: physical memory × overcommit ratio.
    pub capacity_bytes: u64,
    /// What admitted jobs and capped live tenants hold now.
    pub committed_bytes: u64,
}

impl DeviceRoom {
    fn room_bytes(&self) -> u64 {
        self.capacity_bytes.saturating_sub(self.committed_bytes)
    }

    /// What `ask` would commit here, if it fits.
    fn fits(&self, ask: Ask) -> Option<u64> {
        match ask {
            Ask::Bytes(bytes) => (bytes <= self.room_bytes()).then_some(bytes),
            Ask::WholeDevice => (self.committed_bytes == 0).then_some(self.capacity_bytes),
        }
    }

    /// How far `ask` is from fitting here.
    fn lack_bytes(&self, ask: Ask) -> u64 {
        match ask {
            Ask::Bytes(bytes) => bytes.saturating_sub(self.room_bytes()),
            Ask::WholeDevice => self.committed_bytes,
        }
    }
}

/// Memory a job asks for on each of its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A cap of this many bytes.
    Bytes(u64),
    /// No cap: the whole device.
    WholeDevice,
}

/// A waiting job, as admission sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub priority: i32,
    pub gpus: u32,
    pub ask: Ask,
    pub placement: Placement,
}

/// A job that may start now, and the devices (UUIDs, in order) it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub id: u64,
    pub devices: Vec<String>,
}

/// Why a request can never start on this host, whatever ends.
pub fn never_fits(devices: &[DeviceRoom], gpus: u32, ask: Ask) -> Option<String> {
    if gpus as usize > devices.len() {
        return Some(format!("it asks for {gpus} GPUs and this host has {}", devices.len()));
    }
    let big_enough = devices
        .iter()
        .filter(|d| match ask {
            Ask::Bytes(bytes) => bytes <= d.capacity_bytes,
            Ask::WholeDevice => true,
        })
        .count();
    match ask {
        Ask::Bytes(bytes) if big_enough < gpus as usize => {
            let largest = devices.iter().map(|d| d.capacity_bytes).max().unwrap_or(0);
            Some(format!(
                "it asks for {} on each of {gpus} GPU(s), and {big_enough} device(s) have that much memory (the largest has {})",
                crate::text::human_bytes(bytes),
                crate::text::human_bytes(largest)
            ))
        }
        _ => None,
    }
}

/// Jobs in admission order: higher priority first, then lower id.
pub fn in_order(requests: &mut [Request]) {
    requests.sort_by_key(|r| (std::cmp::Reverse(r.priority), r.id));
}

/// The jobs among `requests` (any order) that start now, in admission order.
pub fn admit(devices: &[DeviceRoom], requests: &[Request]) -> Vec<Admission> {
    let mut ordered = requests.to_vec();
    in_order(&mut ordered);
    let mut rooms = devices.to_vec();
    let mut reserved: HashSet<usize> = HashSet::new();
    let mut admitted = Vec::new();
    for request in &ordered {
        match place(&rooms, &reserved, request) {
            Some(chosen) => {
                for (index, committed_bytes) in &chosen {
                    rooms[*index].committed_bytes = rooms[*index].committed_bytes.saturating_add(*committed_bytes);
                }
                let devices = chosen.iter().map(|(index, _)| rooms[*index].uuid.clone()).collect();
                admitted.push(Admission { id: request.id, devices });
            }
            None => {
                let Some(wanted) = reservation(&rooms, &reserved, request) else { break };
                reserved.extend(wanted);
            }
        }
    }
    admitted
}

/// The unreserved devices `request` gets and what it commits on each, if
/// enough of them fit.
fn place(rooms: &[DeviceRoom], reserved: &HashSet<usize>, request: &Request) -> Option<Vec<(usize, u64)>> {
    let mut fitting: Vec<(usize, u64)> = rooms
        .iter()
        .enumerate()
        .filter(|(index, _)| !reserved.contains(index))
        .filter_map(|(index, room)| room.fits(request.ask).map(|bytes| (index, bytes)))
        .collect();
    if fitting.len() < request.gpus as usize {
        return None;
    }
    let left_after = |(index, bytes): &(usize, u64)| rooms[*index].room_bytes().saturating_sub(*bytes);
    match request.placement {
        Placement::Binpack => fitting.sort_by_key(|f| (left_after(f), f.0)),
        Placement::Spread => fitting.sort_by_key(|f| (std::cmp::Reverse(left_after(f)), f.0)),
    }
    fitting.truncate(request.gpus as usize);
    Some(fitting)
}

/// The unreserved devices a blocked `request` waits for: those where it
/// lacks the least. `None` when fewer than it needs are unreserved.
fn reservation(rooms: &[DeviceRoom], reserved: &HashSet<usize>, request: &Request) -> Option<Vec<usize>> {
    let mut free: Vec<usize> = (0..rooms.len()).filter(|index| !reserved.contains(index)).collect();
    if free.len() < request.gpus as usize {
        return None;
    }
    free.sort_by_key(|index| (rooms[*index].lack_bytes(request.ask), *index));
    free.truncate(request.gpus as usize);
    Some(free)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn devices(committed_gib: &[u64]) -> Vec<DeviceRoom> {
        committed_gib
            .iter()
            .enumerate()
            .map(|(i, c)| DeviceRoom { uuid: format!("GPU-{i}"), capacity_bytes: 8 * GIB, committed_bytes: c * GIB })
            .collect()
    }

    fn job(id: u64, priority: i32, gpus: u32, gib: u64) -> Request {
        Request { id, priority, gpus, ask: Ask::Bytes(gib * GIB), placement: Placement::Binpack }
    }

    fn started(admissions: &[Admission]) -> Vec<(u64, Vec<&str>)> {
        admissions.iter().map(|a| (a.id, a.devices.iter().map(String::as_str).collect())).collect()
    }

    #[test]
    fn priority_first_then_first_come() {
        // Room for one 6 GiB job: the higher priority wins, then the older.
        let rooms = devices(&[0]);
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 1, 6), job(2, 5, 1, 6), job(3, 5, 1, 6)])), [(2, vec!["GPU-0"])]);
        assert_eq!(started(&admit(&rooms, &[job(3, 0, 1, 6), job(1, 0, 1, 6)])), [(1, vec!["GPU-0"])]);
    }

    #[test]
    fn binpack_takes_the_fullest_device_and_spread_the_emptiest() {
        let rooms = devices(&[4, 1, 6]);
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 1, 2)])), [(1, vec!["GPU-2"])]);
        let spread = Request { placement: Placement::Spread, ..job(1, 0, 1, 2) };
        assert_eq!(started(&admit(&rooms, &[spread])), [(1, vec!["GPU-1"])]);
        // Two GPUs: the two fullest that fit 3 GiB.
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 2, 3)])), [(1, vec!["GPU-0", "GPU-1"])]);
    }

    #[test]
    fn admitted_jobs_take_room_from_later_ones() {
        let rooms = devices(&[0]);
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 1, 5), job(2, 0, 1, 3), job(3, 0, 1, 1)])), [(1, vec!["GPU-0"]), (2, vec!["GPU-0"])]);
    }

    #[test]
    fn backfill_never_uses_a_device_an_earlier_job_waits_for() {
        // Job 1 needs 6 GiB; GPU-0 has 4 left, GPU-1 has 2: it reserves GPU-0.
        let rooms = devices(&[4, 6]);
        let small_fits_reserved = job(2, 0, 1, 1);
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 1, 6), small_fits_reserved])), [(2, vec!["GPU-1"])]);
        // A 3 GiB job fits only GPU-0, which job 1 waits for: it waits too.
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 1, 6), job(2, 0, 1, 3)])), []);
        // A blocked job that wants every device stops all backfill.
        assert_eq!(started(&admit(&rooms, &[job(1, 0, 2, 6), job(2, 0, 1, 1)])), []);
    }

    #[test]
    fn whole_device_jobs_need_an_empty_device() {
        let rooms = devices(&[1, 0]);
        let whole = Request { ask: Ask::WholeDevice, ..job(1, 0, 1, 0) };
        assert_eq!(started(&admit(&rooms, &[whole.clone(), job(2, 0, 1, 1)])), [(1, vec!["GPU-1"]), (2, vec!["GPU-0"])]);
        assert_eq!(started(&admit(&devices(&[1, 1]), &[whole])), []);
    }

    #[test]
    fn impossible_requests_are_named() {
        let rooms = devices(&[0, 0]);
        assert!(never_fits(&rooms, 3, Ask::Bytes(GIB)).unwrap().contains("3 GPUs and this host has 2"));
        assert!(never_fits(&rooms, 1, Ask::Bytes(9 * GIB)).unwrap().contains("largest has"));
        assert_eq!(never_fits(&rooms, 2, Ask::Bytes(8 * GIB)), None);
        assert_eq!(never_fits(&rooms, 2, Ask::WholeDevice), None);
    }
}
