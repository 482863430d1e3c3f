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
//! **Why a job waits** ([`look`]): a job that does not start is *behind*
//! the earliest job that reserves a device it would take (the devices it
//! lacks least on, reserved or not), or that stopped all backfill before
//! it was looked at; otherwise it is *short* of memory on the devices it
//! waits for, by what their room lacks. The monitor publishes that answer
//! for each waiting job.
//!
//! **Placement.** `binpack` (default) takes the fullest devices that fit
//! (least room left after placing), keeping other devices free for large
//! jobs; `spread` takes the emptiest.

use std::collections::HashMap;

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

/// Why a job does not start in this look: the monitor's answer, which
/// `gpuslice queue` and the waiting job print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// An earlier job (this request id) reserves a device this one would
    /// need, or stopped every later job (see the module docs).
    Behind(u64),
    /// Not enough memory is free: the devices the job waits for (indices
    /// into the devices given), each with its room when the job was
    /// looked at, and how many devices it needs.
    Short { devices: Vec<Short>, gpus: u32, ask: Ask },
}

/// One device a job is short of room on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Short {
    /// Index into the devices given to [`look`].
    pub device: usize,
    /// Its room (capacity less what is committed) at that point of the look.
    pub room_bytes: u64,
    /// What is committed on it then.
    pub committed_bytes: u64,
}

/// One look at the queue: who starts, and why each other job waits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Look {
    /// In admission order.
    pub admitted: Vec<Admission>,
    /// Request id and why it waits, in admission order.
    pub waiting: Vec<(u64, Wait)>,
}

/// Reserved devices (by index), each with the order in which its
/// reserving request was met and that request's id.
type Reserved = HashMap<usize, (usize, u64)>;

/// The jobs among `requests` (any order) that start now, in admission order.
#[cfg(test)]
pub fn admit(devices: &[DeviceRoom], requests: &[Request]) -> Vec<Admission> {
    look(devices, requests).admitted
}

/// The jobs among `requests` (any order) that start now, and why each
/// other one waits.
pub fn look(devices: &[DeviceRoom], requests: &[Request]) -> Look {
    let mut ordered = requests.to_vec();
    in_order(&mut ordered);
    let mut rooms = devices.to_vec();
    let mut reserved: Reserved = HashMap::new();
    let mut stopped_by: Option<u64> = None;
    let mut look = Look::default();
    for request in &ordered {
        if let Some(first) = stopped_by {
            look.waiting.push((request.id, Wait::Behind(first)));
            continue;
        }
        match place(&rooms, &reserved, request) {
            Some(chosen) => {
                for (index, committed_bytes) in &chosen {
                    rooms[*index].committed_bytes = rooms[*index].committed_bytes.saturating_add(*committed_bytes);
                }
                let devices = chosen.iter().map(|(index, _)| rooms[*index].uuid.clone()).collect();
                look.admitted.push(Admission { id: request.id, devices });
            }
            None => {
                look.waiting.push((request.id, why_waiting(&rooms, &reserved, request)));
                match reservation(&rooms, &reserved, request) {
                    Some(wanted) => {
                        let order = look.waiting.len();
                        reserved.extend(wanted.into_iter().map(|index| (index, (order, request.id))));
                    }
                    None => stopped_by = Some(request.id),
                }
            }
        }
    }
    look
}

/// Why `request`, which does not fit in the unreserved devices, waits:
/// behind the earliest job that reserves one of the devices it would
/// take if none were reserved, else short of memory on those devices.
fn why_waiting(rooms: &[DeviceRoom], reserved: &Reserved, request: &Request) -> Wait {
    let mut best: Vec<usize> = (0..rooms.len()).collect();
    // Where it lacks least; among equals, a device no one reserves, then the lower index.
    best.sort_by_key(|index| (rooms[*index].lack_bytes(request.ask), reserved.contains_key(index), *index));
    best.truncate(request.gpus as usize);
    let ahead = best.iter().filter_map(|index| reserved.get(index)).min();
    if let Some((_, id)) = ahead {
        return Wait::Behind(*id);
    }
    let devices = best
        .into_iter()
        .filter(|index| rooms[*index].lack_bytes(request.ask) > 0)
        .map(|index| Short { device: index, room_bytes: rooms[index].room_bytes(), committed_bytes: rooms[index].committed_bytes })
        .collect();
    Wait::Short { devices, gpus: request.gpus, ask: request.ask }
}

/// The unreserved devices `request` gets and what it commits on each, if
/// enough of them fit.
fn place(rooms: &[DeviceRoom], reserved: &Reserved, request: &Request) -> Option<Vec<(usize, u64)>> {
    let mut fitting: Vec<(usize, u64)> = rooms
        .iter()
        .enumerate()
        .filter(|(index, _)| !reserved.contains_key(index))
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
fn reservation(rooms: &[DeviceRoom], reserved: &Reserved, request: &Request) -> Option<Vec<usize>> {
    let mut free: Vec<usize> = (0..rooms.len()).filter(|index| !reserved.contains_key(index)).collect();
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

    fn waits(look: &Look) -> Vec<(u64, Wait)> {
        look.waiting.clone()
    }

    #[test]
    fn a_waiting_job_is_told_what_it_lacks_or_whom_it_is_behind() {
        // GPU-0 has 1 GiB free, GPU-1 none. Job 1 (priority 5) asks 2 GiB:
        // short on GPU-0. Job 2 asks 1 GiB: it would fit GPU-0, which job 1
        // reserves. Job 3 wants both GPUs: behind job 1 too, and it stops the look.
        let rooms = devices(&[7, 8]);
        let look = look(&rooms, &[job(2, 0, 1, 1), job(1, 5, 1, 2), job(3, 0, 2, 1), job(4, -1, 1, 1)]);
        assert_eq!(look.admitted, []);
        let short = Wait::Short {
            devices: vec![Short { device: 0, room_bytes: GIB, committed_bytes: 7 * GIB }],
            gpus: 1,
            ask: Ask::Bytes(2 * GIB),
        };
        assert_eq!(waits(&look), [(1, short), (2, Wait::Behind(1)), (3, Wait::Behind(1)), (4, Wait::Behind(3))]);
        // Two GPUs asked, one has room: short on the other only.
        let look = super::look(&devices(&[0, 7]), &[job(1, 0, 2, 2)]);
        let short = Wait::Short {
            devices: vec![Short { device: 1, room_bytes: GIB, committed_bytes: 7 * GIB }],
            gpus: 2,
            ask: Ask::Bytes(2 * GIB),
        };
        assert_eq!(waits(&look), [(1, short)]);
        // A job started in the same look takes the room a later one is told of.
        let look = super::look(&devices(&[0]), &[job(1, 0, 1, 6), job(2, 0, 1, 3)]);
        assert_eq!(started(&look.admitted), [(1, vec!["GPU-0"])]);
        assert!(matches!(&look.waiting[..], [(2, Wait::Short { devices, .. })] if devices[0].room_bytes == 2 * GIB));
    }
}
