//! Who is in which team, as the monitor decides it, for the readers that
//! are not the monitor: `gpuslice status`, `top` and the history.
//!
//! The monitor decides membership each round from its effective
//! configuration alone ([`crate::config::Config::team_of`]: the file's
//! teams, among the tenants it governs, with the accounts its own
//! admission records name). [`Membership::decide`] writes that decision
//! down: each team's members (the governed tenants it holds now) and its
//! settings on each device. The monitor hands it to its history writer
//! (each interval records its tenants' teams) and publishes it in its own
//! directory ([`Publisher`], `<dir>/.monitor/teams.json`, rewritten only
//! when it changes), where `status` and `top` read it ([`read`]) instead of
//! deciding again from a file that may have changed since the monitor
//! read it. No reader ever puts a tenant in a team by its name: a tenant
//! is in a team when the monitor's list names it.

use crate::config::{Config, TenantConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name in the monitor's state directory.
pub const FILE_NAME: &str = "teams.json";

/// The largest file a reader accepts: a few thousand tenants' names.
const MAX_FILE_BYTES: u64 = 8 << 20;

/// A team's settings on one device (ratios × 10 000; 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Settings {
    pub memory_quota_bytes: Option<u64>,
    pub share_ratio_e4: u32,
    pub limit_ratio_e4: u32,
    pub priority: i32,
}

impl Settings {
    /// `team`'s settings on device `uuid` (host index `host_index` where NVML knows it).
    pub fn of(team: &TenantConfig, uuid: &str, host_index: Option<u32>) -> Settings {
        let compute = team.compute_for(uuid, host_index).unwrap_or_default();
        Settings {
            memory_quota_bytes: team.memory_for(uuid, host_index),
            share_ratio_e4: compute.share_ratio_e4,
            limit_ratio_e4: compute.limit_ratio_e4,
            priority: compute.priority,
        }
    }
}

/// One device's settings of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSettings {
    pub uuid: String,
    #[serde(flatten)]
    pub settings: Settings,
}

/// One team as the monitor holds it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    pub team: String,
    /// The governed tenants in it now, by name.
    pub members: Vec<String>,
    /// Its settings on each device the monitor saw.
    pub devices: Vec<DeviceSettings>,
    /// Its settings on a device not listed (the file's entry for all devices).
    pub other_devices: Settings,
}

/// Every team of the monitor's configuration and its members.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Membership {
    /// The monitor that decided it; a reader ignores the file of a
    /// monitor that is gone.
    pub pid: u32,
    pub teams: Vec<Team>,
}

impl Membership {
    /// The monitor's decision: `config` is its effective configuration (the
    /// file's tenants and its admissions, accounts resolved), the devices
    /// those of its round's `snapshot`.
    pub fn decide(config: &Config, snapshot: &crate::snapshot::Snapshot) -> Membership {
        let mut devices: Vec<(&str, Option<u32>)> =
            snapshot.devices.iter().map(|d| (d.uuid.as_str(), snapshot.nvml.then_some(d.index))).collect();
        for device in snapshot.tenants.iter().flat_map(|t| &t.devices) {
            if !devices.iter().any(|(uuid, _)| *uuid == device.uuid) {
                devices.push((device.uuid.as_str(), snapshot.nvml.then_some(device.index)));
            }
        }
        devices.sort_unstable();
        let mut teams: Vec<Team> = config
            .teams
            .iter()
            .map(|(name, team)| Team {
                team: name.clone(),
                members: Vec::new(),
                devices: devices
                    .iter()
                    .map(|(uuid, index)| DeviceSettings { uuid: uuid.to_string(), settings: Settings::of(&team.settings, uuid, *index) })
                    .collect(),
                // No device has an empty UUID: the entry for all devices.
                other_devices: Settings::of(&team.settings, "", None),
            })
            .collect();
        for tenant in config.tenants.keys() {
            if let Some((name, _)) = config.team_of(tenant) {
                if let Some(team) = teams.iter_mut().find(|t| t.team == name) {
                    team.members.push(tenant.clone());
                }
            }
        }
        Membership { pid: std::process::id(), teams }
    }

    /// The team `tenant` is in, by this list alone.
    pub fn team_of(&self, tenant: &str) -> Option<&Team> {
        self.teams.iter().find(|t| t.members.binary_search_by(|m| m.as_str().cmp(tenant)).is_ok())
    }

    /// Each member and its team.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.teams.iter().flat_map(|t| t.members.iter().map(move |m| (m.as_str(), t.team.as_str())))
    }
}

impl Team {
    /// Its settings on device `uuid`.
    pub fn settings(&self, uuid: &str) -> Settings {
        self.devices.iter().find(|d| d.uuid == uuid).map_or(self.other_devices, |d| d.settings)
    }
}

/// Where the monitor of ledger directory `dir` publishes its teams.
pub fn path(dir: &Path) -> PathBuf {
    crate::allocation::state_dir(dir).join(FILE_NAME)
}

/// Writes the monitor's membership where `status` and `top` read it, when
/// it changed; removes the file when the configuration has no teams, and
/// when the monitor stops (dropped).
pub struct Publisher {
    path: PathBuf,
    /// What the file holds now; `None`: no file.
    written: Option<Vec<u8>>,
    failing: bool,
}

impl Publisher {
    /// For the monitor of `dir`; a file a previous monitor left is replaced
    /// at the first round.
    pub fn new(dir: &Path) -> Publisher {
        let path = path(dir);
        let _ = std::fs::remove_file(&path);
        Publisher { path, written: None, failing: false }
    }

    pub fn publish(&mut self, membership: &Membership) {
        if membership.teams.is_empty() {
            if self.written.take().is_some() {
                let _ = std::fs::remove_file(&self.path);
            }
            return;
        }
        let Ok(mut bytes) = serde_json::to_vec(membership) else { return };
        bytes.push(b'\n');
        if self.written.as_ref() == Some(&bytes) {
            return;
        }
        let partial = self.path.with_extension("json.partial");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::remove_file(&partial);
            let mut file =
                std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&partial)?;
            file.write_all(&bytes)?;
            std::fs::rename(&partial, &self.path)
        };
        match write() {
            Ok(()) => {
                self.written = Some(bytes);
                self.failing = false;
            }
            Err(e) => {
                if !self.failing {
                    crate::daemon::log::warn(&format!(
                        "cannot write {}: {e}; `gpuslice status` and `top` show no teams until it is written",
                        self.path.display()
                    ));
                }
                self.failing = true;
            }
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.written.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The membership the monitor of `dir` published; `None` when there is
/// none to trust: no file (no monitor, no teams, or this user may not read
/// the monitor's directory), a file that is not the monitor's (the
/// directory open to group or others or not of the ledger directory's
/// owner, the file of another user than the directory's, a link, too
/// large), or one whose monitor is gone.
pub fn read(dir: &Path) -> Option<Membership> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // The monitor's directory is the ledger directory owner's (the monitor
    // runs as it): one another user made there while no monitor ran is not.
    let owner = std::fs::metadata(dir).ok()?.uid();
    let state = std::fs::symlink_metadata(crate::allocation::state_dir(dir)).ok()?;
    if !state.is_dir() || state.mode() & 0o022 != 0 || state.uid() != owner {
        return None;
    }
    let path = path(dir);
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != state.uid() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut text).ok()?;
    let mut membership: Membership = serde_json::from_slice(&text).ok()?;
    for team in &mut membership.teams {
        team.members.sort_unstable();
    }
    alive(membership.pid).then_some(membership)
}

/// Whether process `pid` lives (a monitor that was killed leaves its file).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 checks the process exists; nothing is sent.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixtures::{one_tenant, tenant_device};

    #[test]
    fn the_decision_lists_governed_members_and_settings_by_device() {
        let config = crate::config::parse(
            "[teams.lab]\ntenants = [\"lab-*\"]\nmemory = { all = \"4GiB\", 0 = \"2GiB\" }\nshare = 40\n\
             [tenants.lab-1]\n[tenants.lab-2]\n[tenants.other]\n",
        )
        .unwrap();
        let mut snapshot = one_tenant(true, tenant_device(1, None, None), vec![]);
        // A tenant that named itself `lab-squat` is in no team.
        snapshot.tenants[0].name = "lab-squat".into();
        let decided = Membership::decide(&config, &snapshot);
        assert_eq!(decided.teams.len(), 1);
        let lab = &decided.teams[0];
        assert_eq!(lab.members, ["lab-1", "lab-2"]);
        assert!(decided.team_of("lab-squat").is_none() && decided.team_of("other").is_none());
        assert_eq!(decided.team_of("lab-2").map(|t| t.team.as_str()), Some("lab"));
        let device = &snapshot.tenants[0].devices[0].uuid;
        assert_eq!(lab.settings(device).memory_quota_bytes, Some(2 << 30), "device 0's entry");
        assert_eq!(
            lab.settings("GPU-elsewhere"),
            Settings { memory_quota_bytes: Some(4 << 30), share_ratio_e4: 4000, ..Settings::default() }
        );
        assert_eq!(decided.pairs().collect::<Vec<_>>(), [("lab-1", "lab"), ("lab-2", "lab")]);
    }

    #[test]
    fn the_file_is_written_on_change_read_back_and_refused_when_not_the_monitors() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gpuslice-teams-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = crate::allocation::state_dir(&dir);
        std::fs::create_dir_all(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let config = crate::config::parse("[teams.lab]\ntenants = [\"lab-1\"]\n[tenants.lab-1]\n").unwrap();
        let snapshot = one_tenant(true, tenant_device(1, None, None), vec![]);
        let decided = Membership::decide(&config, &snapshot);
        let mut publisher = Publisher::new(&dir);
        publisher.publish(&decided);
        assert_eq!(read(&dir), Some(decided.clone()));
        assert_eq!(std::fs::metadata(path(&dir)).unwrap().permissions().mode() & 0o777, 0o600);
        // Unchanged: not written again.
        let written = std::fs::metadata(path(&dir)).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        publisher.publish(&decided);
        assert_eq!(std::fs::metadata(path(&dir)).unwrap().modified().unwrap(), written);
        // A monitor that is gone: its file is not believed.
        let gone = Membership { pid: u32::MAX / 2, ..decided.clone() };
        std::fs::write(path(&dir), serde_json::to_vec(&gone).unwrap()).unwrap();
        assert_eq!(read(&dir), None);
        // A directory others may write: nothing in it is believed.
        publisher.written = None;
        publisher.publish(&decided);
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(read(&dir), None);
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A monitor directory (and file) of another user than the ledger
        // directory's: made by someone else while no monitor ran.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::lchown(&state, Some(4242), None).unwrap();
            std::os::unix::fs::lchown(path(&dir), Some(4242), None).unwrap();
            assert_eq!(read(&dir), None);
            std::os::unix::fs::lchown(&state, Some(0), None).unwrap();
            std::os::unix::fs::lchown(path(&dir), Some(0), None).unwrap();
            assert!(read(&dir).is_some());
        }
        // A link is not followed.
        std::fs::remove_file(path(&dir)).unwrap();
        let elsewhere = dir.join("elsewhere.json");
        std::fs::write(&elsewhere, serde_json::to_vec(&decided).unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, path(&dir)).unwrap();
        assert_eq!(read(&dir), None);
        std::fs::remove_file(path(&dir)).unwrap();
        // No teams: no file; the monitor stopping removes it.
        publisher.written = None;
        publisher.publish(&decided);
        assert!(read(&dir).is_some());
        publisher.publish(&Membership::default());
        assert!(!path(&dir).exists());
        publisher.publish(&decided);
        drop(publisher);
        assert!(!path(&dir).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
