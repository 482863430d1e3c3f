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
//! **Teams.** A job whose owner a team's `users` names is that team's
//! ([`Request::team`]), and a team may have a memory quota on a device
//! ([`TeamRoom`]). Such a job fits a device only when the device has room
//! *and* the team does: what the team has committed there plus what the job
//! would commit (its `--memory`, or for a job without it the whole device,
//! as the device's room counts it) is at most the quota. A device where the
//! team has no quota limits nothing. What a team has committed is the
//! caller's figure (see `daemon/queue.rs`); jobs started in the same look
//! add theirs.
//!
//! A job whose team lacks room on enough devices (of those that could ever
//! hold it) waits *for its team*: it reserves no device against other
//! teams' jobs, since those devices may be free and only its team is full;
//! it reserves its team's room instead, on the devices where the team lacks
//! the least, and no later job *of its team* may start on them (with too
//! few such devices, no later job of its team starts in this look). So the
//! same bound holds within a team, and a team that is full never idles a
//! device for anyone else. A job whose team has room on enough devices
//! waits for the devices as any job does, reserving only devices where its
//! team has room (where it could start once the device frees). Other teams
//! may fill a device while a team is full; when the team's room comes back,
//! its job then waits for that device like any other, by the rules above.
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

    /// What `ask` commits here once it runs: its cap, or the whole device.
    fn commits(&self, ask: Ask) -> u64 {
        match ask {
            Ask::Bytes(bytes) => bytes,
            Ask::WholeDevice => self.capacity_bytes,
        }
    }

    /// Whether `ask` could ever fit here (with nothing else committed).
    fn could_hold(&self, ask: Ask) -> bool {
        self.commits(ask) <= self.capacity_bytes
    }
}

/// A team as admission sees it: on each device, its quota and what it has
/// committed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamRoom {
    /// The team's name, for reasons.
    pub name: String,
    /// One per device given to [`look`], in the same order.
    pub devices: Vec<TeamDevice>,
}

/// A team on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TeamDevice {
    /// Its memory quota there; `None`: none (nothing is held for the team).
    pub quota_bytes: Option<u64>,
    /// What it has committed there (see `daemon/queue.rs` for the figure).
    pub committed_bytes: u64,
}

impl TeamDevice {
    /// How far committing `bytes` more here is past the quota.
    fn lack_bytes(&self, bytes: u64) -> u64 {
        self.quota_bytes.map_or(0, |quota| bytes.saturating_sub(quota.saturating_sub(self.committed_bytes)))
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
    /// Its team: an index into the teams given to [`look`]; `None`: none.
    pub team: Option<usize>,
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

/// Why a request of `team` can never start on this host, whatever ends:
/// fewer than `gpus` devices could hold it within the team's quota (with
/// nothing else committed). `devices` as for [`never_fits`], which is
/// asked first.
pub fn never_fits_in_team(devices: &[DeviceRoom], team: &TeamRoom, gpus: u32, ask: Ask) -> Option<String> {
    let within = |(room, quota): (&DeviceRoom, &TeamDevice)| room.could_hold(ask) && quota.lack_bytes(room.commits(ask)) == 0;
    let holding = devices.iter().zip(&team.devices).filter(|pair| within(*pair)).count();
    if holding >= gpus as usize {
        return None;
    }
    let largest = team.devices.iter().filter_map(|d| d.quota_bytes).max().unwrap_or(0);
    let name = &team.name;
    Some(match ask {
        Ask::Bytes(bytes) => format!(
            "it asks for {} on each of {gpus} GPU(s), and team {name}'s memory quota allows that much on {holding} device(s) \
             (the largest quota is {})",
            crate::text::human_bytes(bytes),
            crate::text::human_bytes(largest)
        ),
        Ask::WholeDevice => format!(
            "it asks for {gpus} whole GPU(s) (no --memory), and team {name}'s memory quota holds a whole GPU on {holding} \
             device(s) (the largest quota is {}): give --memory within the quota",
            crate::text::human_bytes(largest)
        ),
    })
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
    /// Its team (an index into the teams given) lacks room: the devices
    /// it waits for the team's room on (those where the team lacks the
    /// least), each with the team's quota and commitment there when the
    /// job was looked at.
    Team { team: usize, devices: Vec<TeamShort>, gpus: u32, ask: Ask },
}

/// One device a job's team is short of room on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamShort {
    /// Index into the devices given to [`look`].
    pub device: usize,
    pub quota_bytes: u64,
    pub committed_bytes: u64,
    /// What the job would commit there (its cap, or the whole device).
    pub asked_bytes: u64,
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

/// A team's room reserved on a device: (team, device) → as [`Reserved`].
type TeamReserved = HashMap<(usize, usize), (usize, u64)>;

/// The jobs among `requests` (any order) that start now, in admission order.
#[cfg(test)]
pub fn admit(devices: &[DeviceRoom], requests: &[Request]) -> Vec<Admission> {
    look(devices, &[], requests).admitted
}

/// What one look holds while it goes through the requests.
struct State {
    rooms: Vec<DeviceRoom>,
    teams: Vec<TeamRoom>,
    reserved: Reserved,
    team_reserved: TeamReserved,
}

impl State {
    /// `request`'s team on device `index`, if it has one there.
    fn team_on(&self, request: &Request, index: usize) -> Option<&TeamDevice> {
        self.teams.get(request.team?)?.devices.get(index)
    }

    /// How far `request`'s team is from room for it on device `index`.
    fn team_lack_bytes(&self, request: &Request, index: usize) -> u64 {
        self.team_on(request, index).map_or(0, |t| t.lack_bytes(self.rooms[index].commits(request.ask)))
    }

    /// Whether `request`'s team has room for it on device `index`: it has
    /// no quota there, or the job fits both the quota and the device.
    fn team_has_room(&self, request: &Request, index: usize) -> bool {
        match self.team_on(request, index) {
            Some(team) if team.quota_bytes.is_some() => {
                self.rooms[index].could_hold(request.ask) && team.lack_bytes(self.rooms[index].commits(request.ask)) == 0
            }
            _ => true,
        }
    }

    /// Whether an earlier job of `request`'s team holds its team's room on device `index`.
    fn team_reserved_for(&self, request: &Request, index: usize) -> Option<(usize, u64)> {
        self.team_reserved.get(&(request.team?, index)).copied()
    }

    /// Whether device `index` is closed to `request`: reserved by anyone,
    /// or its team's room there reserved by an earlier job of its team.
    fn closed_to(&self, request: &Request, index: usize) -> Option<(usize, u64)> {
        let device = self.reserved.get(&index).copied();
        let team = self.team_reserved_for(request, index);
        device.into_iter().chain(team).min()
    }
}

/// The jobs among `requests` (any order) that start now, and why each
/// other one waits; `teams` are the teams requests name, by index.
pub fn look(devices: &[DeviceRoom], teams: &[TeamRoom], requests: &[Request]) -> Look {
    let mut ordered = requests.to_vec();
    in_order(&mut ordered);
    let mut board = State { rooms: devices.to_vec(), teams: teams.to_vec(), reserved: HashMap::new(), team_reserved: HashMap::new() };
    let mut stopped_by: Option<u64> = None;
    let mut team_stopped_by: HashMap<usize, u64> = HashMap::new();
    let mut look = Look::default();
    for request in &ordered {
        if let Some(first) = stopped_by.or_else(|| request.team.and_then(|t| team_stopped_by.get(&t).copied())) {
            look.waiting.push((request.id, Wait::Behind(first)));
            continue;
        }
        if let Some(chosen) = place(&board, request) {
            for (index, committed_bytes) in &chosen {
                let room = &mut board.rooms[*index];
                room.committed_bytes = room.committed_bytes.saturating_add(*committed_bytes);
                if let Some(team) = request.team.and_then(|t| board.teams.get_mut(t)).and_then(|t| t.devices.get_mut(*index)) {
                    team.committed_bytes = team.committed_bytes.saturating_add(*committed_bytes);
                }
            }
            let devices = chosen.iter().map(|(index, _)| board.rooms[*index].uuid.clone()).collect();
            look.admitted.push(Admission { id: request.id, devices });
            continue;
        }
        let wanted = request.gpus as usize;
        let team_room: Vec<usize> = (0..board.rooms.len()).filter(|index| board.team_has_room(request, *index)).collect();
        if let Some(team) = request.team.filter(|_| team_room.len() < wanted) {
            // Its team is full: it holds its team's room, never a device.
            look.waiting.push((request.id, why_team_waiting(&board, request, team)));
            let order = look.waiting.len();
            let mut open: Vec<usize> = (0..board.rooms.len())
                .filter(|index| board.rooms[*index].could_hold(request.ask) && board.team_reserved_for(request, *index).is_none())
                .collect();
            if open.len() < wanted {
                team_stopped_by.insert(team, request.id);
            } else {
                open.sort_by_key(|index| (board.team_lack_bytes(request, *index), *index));
                open.truncate(wanted);
                board.team_reserved.extend(open.into_iter().map(|index| ((team, index), (order, request.id))));
            }
            continue;
        }
        look.waiting.push((request.id, why_waiting(&board, request, &team_room)));
        let order = look.waiting.len();
        // The devices where it could start once they free: its team has room there.
        let unreserved: Vec<usize> = team_room.iter().copied().filter(|index| !board.reserved.contains_key(index)).collect();
        let mut open: Vec<usize> = unreserved.iter().copied().filter(|index| board.team_reserved_for(request, *index).is_none()).collect();
        if unreserved.len() < wanted {
            stopped_by = Some(request.id);
        } else if open.len() < wanted {
            // Its team's room is held by an earlier job of its team: the
            // team waits, other teams go on.
            if let Some(team) = request.team {
                team_stopped_by.insert(team, request.id);
            }
        } else {
            open.sort_by_key(|index| (board.rooms[*index].lack_bytes(request.ask), *index));
            open.truncate(wanted);
            board.reserved.extend(open.into_iter().map(|index| (index, (order, request.id))));
        }
    }
    look
}

/// Why `request`, which does not fit, waits for devices: behind the
/// earliest job that holds one of the devices it would take if none were
/// held (among `candidates`, where its team has room), else short of
/// memory on those devices.
fn why_waiting(board: &State, request: &Request, candidates: &[usize]) -> Wait {
    let rooms = &board.rooms;
    let mut best: Vec<usize> = candidates.to_vec();
    // Where it lacks least; among equals, a device no one holds, then the lower index.
    best.sort_by_key(|index| (rooms[*index].lack_bytes(request.ask), board.closed_to(request, *index).is_some(), *index));
    best.truncate(request.gpus as usize);
    let ahead = best.iter().filter_map(|index| board.closed_to(request, *index)).min();
    if let Some((_, id)) = ahead {
        return Wait::Behind(id);
    }
    let devices = best
        .into_iter()
        .filter(|index| rooms[*index].lack_bytes(request.ask) > 0)
        .map(|index| Short { device: index, room_bytes: rooms[index].room_bytes(), committed_bytes: rooms[index].committed_bytes })
        .collect();
    Wait::Short { devices, gpus: request.gpus, ask: request.ask }
}

/// Why `request` of team `team`, which lacks room on too many devices,
/// waits: behind the earliest job of its team that holds the team's room
/// on one of the devices where the team lacks least, else for the team's
/// room on those devices.
fn why_team_waiting(board: &State, request: &Request, team: usize) -> Wait {
    let mut best: Vec<usize> = (0..board.rooms.len()).filter(|index| board.rooms[*index].could_hold(request.ask)).collect();
    best.sort_by_key(|index| (board.team_lack_bytes(request, *index), board.team_reserved_for(request, *index).is_some(), *index));
    best.truncate(request.gpus as usize);
    if let Some((_, id)) = best.iter().filter_map(|index| board.team_reserved_for(request, *index)).min() {
        return Wait::Behind(id);
    }
    let devices = best
        .into_iter()
        .filter(|index| board.team_lack_bytes(request, *index) > 0)
        .filter_map(|index| {
            let on = board.team_on(request, index)?;
            Some(TeamShort {
                device: index,
                quota_bytes: on.quota_bytes?,
                committed_bytes: on.committed_bytes,
                asked_bytes: board.rooms[index].commits(request.ask),
            })
        })
        .collect();
    Wait::Team { team, devices, gpus: request.gpus, ask: request.ask }
}

/// The open devices `request` gets and what it commits on each, if
/// enough of them fit, its team's room included.
fn place(board: &State, request: &Request) -> Option<Vec<(usize, u64)>> {
    let rooms = &board.rooms;
    let mut fitting: Vec<(usize, u64)> = rooms
        .iter()
        .enumerate()
        .filter(|(index, _)| board.closed_to(request, *index).is_none() && board.team_has_room(request, *index))
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
        Request { id, priority, gpus, ask: Ask::Bytes(gib * GIB), placement: Placement::Binpack, team: None }
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
        let look = look(&rooms, &[], &[job(2, 0, 1, 1), job(1, 5, 1, 2), job(3, 0, 2, 1), job(4, -1, 1, 1)]);
        assert_eq!(look.admitted, []);
        let short = Wait::Short {
            devices: vec![Short { device: 0, room_bytes: GIB, committed_bytes: 7 * GIB }],
            gpus: 1,
            ask: Ask::Bytes(2 * GIB),
        };
        assert_eq!(waits(&look), [(1, short), (2, Wait::Behind(1)), (3, Wait::Behind(1)), (4, Wait::Behind(3))]);
        // Two GPUs asked, one has room: short on the other only.
        let look = super::look(&devices(&[0, 7]), &[], &[job(1, 0, 2, 2)]);
        let short = Wait::Short {
            devices: vec![Short { device: 1, room_bytes: GIB, committed_bytes: 7 * GIB }],
            gpus: 2,
            ask: Ask::Bytes(2 * GIB),
        };
        assert_eq!(waits(&look), [(1, short)]);
        // A job started in the same look takes the room a later one is told of.
        let look = super::look(&devices(&[0]), &[], &[job(1, 0, 1, 6), job(2, 0, 1, 3)]);
        assert_eq!(started(&look.admitted), [(1, vec!["GPU-0"])]);
        assert!(matches!(&look.waiting[..], [(2, Wait::Short { devices, .. })] if devices[0].room_bytes == 2 * GIB));
    }

    /// A team with `quota_gib` on every one of `n` devices and `committed_gib` there.
    fn team(name: &str, quota_gib: Option<u64>, committed_gib: &[u64]) -> TeamRoom {
        TeamRoom {
            name: name.into(),
            devices: committed_gib
                .iter()
                .map(|c| TeamDevice { quota_bytes: quota_gib.map(|q| q * GIB), committed_bytes: c * GIB })
                .collect(),
        }
    }

    fn of(team: usize, request: Request) -> Request {
        Request { team: Some(team), ..request }
    }

    #[test]
    fn a_job_waits_for_its_teams_room_and_another_teams_job_passes_it() {
        // One 8 GiB device with 3 GiB committed, all by team 0 (quota 4 GiB).
        let rooms = devices(&[3]);
        let teams = [team("research", Some(4), &[3]), team("ops", Some(8), &[0])];
        let look = look(&rooms, &teams, &[of(0, job(1, 5, 1, 2)), of(1, job(2, 0, 1, 2))]);
        // The device is free enough; only team 0 is full: team 1's later,
        // lower-priority job starts on that very device.
        assert_eq!(started(&look.admitted), [(2, vec!["GPU-0"])]);
        let full = Wait::Team {
            team: 0,
            devices: vec![TeamShort { device: 0, quota_bytes: 4 * GIB, committed_bytes: 3 * GIB, asked_bytes: 2 * GIB }],
            gpus: 1,
            ask: Ask::Bytes(2 * GIB),
        };
        assert_eq!(waits(&look), [(1, full)]);
        // A job in no team is not held by the team either.
        assert_eq!(started(&admit(&rooms, &[of(0, job(1, 5, 1, 2)), job(2, 0, 1, 2)])), [(1, vec!["GPU-0"]), (2, vec!["GPU-0"])]);
        assert_eq!(started(&super::look(&rooms, &teams, &[of(0, job(1, 5, 1, 2)), job(2, 0, 1, 2)]).admitted), [(2, vec!["GPU-0"])]);
        // The team's room frees (its member's 3 GiB ends): the job starts.
        let freed = [team("research", Some(4), &[1]), team("ops", Some(8), &[0])];
        assert_eq!(started(&super::look(&devices(&[1]), &freed, &[of(0, job(1, 5, 1, 2))]).admitted), [(1, vec!["GPU-0"])]);
    }

    #[test]
    fn jobs_started_in_one_look_count_against_their_teams_quota() {
        // Quota 3 GiB, nothing committed: the first of two 2 GiB jobs starts.
        let teams = [team("research", Some(3), &[0, 0])];
        let look = look(&devices(&[0, 0]), &teams, &[of(0, job(1, 0, 1, 2)), of(0, job(2, 0, 1, 2))]);
        // The quota is by device: binpack would put the second beside the
        // first, where the team has 1 GiB left; it takes the other device...
        assert_eq!(started(&look.admitted), [(1, vec!["GPU-0"]), (2, vec!["GPU-1"])]);
        // ...and where there is one device, it waits for the team.
        let teams = [team("research", Some(3), &[0])];
        let look = super::look(&devices(&[0]), &teams, &[of(0, job(1, 0, 1, 2)), of(0, job(2, 0, 1, 2))]);
        assert_eq!(started(&look.admitted), [(1, vec!["GPU-0"])]);
        assert!(
            matches!(&look.waiting[..], [(2, Wait::Team { team: 0, devices, .. })] if devices[0].committed_bytes == 2 * GIB),
            "{look:?}"
        );
        // No quota on a device: the team limits nothing there.
        let free = [team("research", None, &[6])];
        assert_eq!(started(&super::look(&devices(&[0]), &free, &[of(0, job(1, 0, 1, 2))]).admitted), [(1, vec!["GPU-0"])]);
    }

    #[test]
    fn a_job_waiting_for_its_team_holds_its_teams_room_not_the_device() {
        // Two devices; team 0 (quota 4 GiB) has 3 GiB committed on GPU-0
        // and 4 on GPU-1. Job 1 (team 0, 2 GiB) waits for its team's room on
        // GPU-0, where it lacks least.
        let rooms = devices(&[3, 4]);
        let teams = [team("research", Some(4), &[3, 4]), team("ops", None, &[0, 0])];
        // A later 1 GiB job of team 0 would fit the team's room on GPU-0:
        // it waits behind job 1 there.
        let look = look(&rooms, &teams, &[of(0, job(1, 0, 1, 2)), of(0, job(2, 0, 1, 1))]);
        assert_eq!(look.admitted, []);
        assert_eq!(look.waiting[1], (2, Wait::Behind(1)));
        // Team 1's job takes GPU-0 all the same, and binpack (the fullest)
        // would have chosen GPU-1: it takes GPU-1, then another GPU-0.
        let look = super::look(&rooms, &teams, &[of(0, job(1, 0, 1, 2)), of(1, job(2, 0, 1, 4)), of(1, job(3, 0, 1, 4))]);
        assert_eq!(started(&look.admitted), [(2, vec!["GPU-1"]), (3, vec!["GPU-0"])]);
        // Job 1 wants two devices: it holds its team's room on both, so
        // team 0's later job waits behind it while team 1's starts.
        let look = super::look(&rooms, &teams, &[of(0, job(1, 0, 2, 2)), of(0, job(2, 0, 1, 1)), of(1, job(3, 0, 1, 1))]);
        assert_eq!(started(&look.admitted), [(3, vec!["GPU-1"])]);
        assert_eq!(look.waiting[1], (2, Wait::Behind(1)));
    }

    #[test]
    fn a_job_whose_team_has_room_waits_for_devices_only_where_its_team_could_start() {
        // Team 0 (quota 6 GiB) has 4 GiB committed on GPU-0 and none on
        // GPU-1: its 6 GiB job 1 could only ever start on GPU-1, though the
        // device lacks more there (2 GiB free against 4): it reserves GPU-1.
        let rooms = devices(&[4, 6]);
        let teams = [team("research", Some(6), &[4, 0])];
        let look = look(&rooms, &teams, &[of(0, job(1, 0, 1, 6)), job(2, 0, 1, 4), job(3, 0, 1, 2)]);
        // Job 2 (no team) fits GPU-0, unreserved; job 3 would fit GPU-1 only: behind job 1.
        assert_eq!(started(&look.admitted), [(2, vec!["GPU-0"])]);
        assert!(matches!(&look.waiting[0], (1, Wait::Short { devices, .. }) if devices[0].device == 1), "{look:?}");
        assert_eq!(look.waiting[1], (3, Wait::Behind(1)));
    }

    #[test]
    fn a_whole_device_job_counts_the_whole_device_against_its_teams_quota() {
        let whole = Request { ask: Ask::WholeDevice, ..job(1, 0, 1, 0) };
        let small = [team("research", Some(4), &[0])];
        assert!(never_fits_in_team(&devices(&[0]), &small[0], 1, Ask::WholeDevice).is_some());
        let big = [team("research", Some(8), &[0])];
        assert_eq!(started(&look(&devices(&[0]), &big, &[of(0, whole.clone())]).admitted), [(1, vec!["GPU-0"])]);
        // 1 GiB of the team committed elsewhere on the device's quota: waits for the team.
        let look = look(&devices(&[1]), &[team("research", Some(8), &[1])], &[of(0, whole)]);
        assert!(matches!(&look.waiting[..], [(1, Wait::Team { devices, .. })] if devices[0].asked_bytes == 8 * GIB), "{look:?}");
    }

    #[test]
    fn a_job_larger_than_its_teams_quota_everywhere_is_named() {
        let rooms = devices(&[0, 0]);
        let quota = |gib: &[Option<u64>]| TeamRoom {
            name: "research".into(),
            devices: gib.iter().map(|q| TeamDevice { quota_bytes: q.map(|g| g * GIB), committed_bytes: 0 }).collect(),
        };
        let e = never_fits_in_team(&rooms, &quota(&[Some(4), Some(2)]), 1, Ask::Bytes(5 * GIB)).unwrap();
        assert!(
            e.contains("team research's memory quota allows that much on 0 device(s)") && e.contains("largest quota is 4.0 GiB"),
            "{e}"
        );
        assert_eq!(never_fits_in_team(&rooms, &quota(&[Some(4), Some(2)]), 1, Ask::Bytes(4 * GIB)), None);
        assert!(never_fits_in_team(&rooms, &quota(&[Some(4), Some(2)]), 2, Ask::Bytes(3 * GIB)).is_some());
        // A device without a quota holds anything the device does.
        assert_eq!(never_fits_in_team(&rooms, &quota(&[Some(4), None]), 1, Ask::Bytes(8 * GIB)), None);
        let e = never_fits_in_team(&rooms, &quota(&[Some(4), Some(4)]), 1, Ask::WholeDevice).unwrap();
        assert!(e.contains("give --memory within the quota"), "{e}");
    }
}
