//! The one local path by which a cluster's node agent (Slurm's prolog, the
//! Kubernetes DRA plugin) turns an allocation into a monitor-owned tenant:
//! the requests, the answers, and the client that carries them.
//!
//! The monitor listens on `<dir>/.monitor/control.sock`, in its own 0700
//! directory, and answers root or its own uid only. A client writes one
//! JSON [`Request`] and a newline, and reads one JSON [`Answer`] and a
//! newline:
//!
//! ```text
//! {"op":"admit","tenant":"slurm-42","owner_uid":1000,
//!  "devices":[{"device":"0","memory_bytes":4294967296,"share_percent":25.0}],
//!  "labels":{"origin":"slurm","job":"42"}}
//! {"op":"release","tenant":"slurm-42"}
//! {"op":"list"}
//! ```
//!
//! An admitted tenant is governed like one the configuration file names:
//! the monitor writes its caps, share, limit and priority where its
//! processes cannot raise them, and it gets no memory on any device the
//! allocation does not name. `admit` answers once the tenant's ledger
//! exists with its caps written, so the job may start at once. Both verbs
//! are idempotent. The monitor keeps the allocations in its own directory
//! across its restarts (`daemon::allocations`).

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The control socket's file name in the monitor's state directory.
pub const SOCKET_NAME: &str = "control.sock";
/// The longest request or answer line accepted.
pub const MAX_LINE_BYTES: usize = 256 * 1024;
/// How many labels an allocation may carry, and how long each may be.
pub const MAX_LABELS: usize = 16;
pub const MAX_LABEL_KEY_BYTES: usize = 63;
pub const MAX_LABEL_VALUE_BYTES: usize = 253;

/// `<dir>/.monitor`: the monitor's own directory, 0700, which discovery
/// skips (a dot-name) and no tenant can write.
pub fn state_dir(dir: &Path) -> PathBuf {
    dir.join(".monitor")
}

/// Where the monitor of ledger directory `dir` listens.
pub fn socket_path(dir: &Path) -> PathBuf {
    state_dir(dir).join(SOCKET_NAME)
}

/// What a node agent asks of the monitor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Make `tenant` a monitor-owned tenant with these slices (replacing
    /// what it had, if it was admitted already).
    Admit(Admission),
    /// Stop treating `tenant` as allocated; its ledger goes once none of
    /// its processes lives.
    Release { tenant: String },
    /// Every admitted tenant, and every released one whose processes still live.
    List,
}

/// One allocation: a tenant and its slice of each device it may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    pub tenant: String,
    /// In the flat layout, the user whose processes may open the tenant's
    /// ledger (it is made theirs, mode 0600); `None`: root's.
    #[serde(default)]
    pub owner_uid: Option<u32>,
    /// The devices allocated; every other device is capped at 0 bytes.
    pub devices: Vec<DeviceSlice>,
    /// Priority on every allocated device (higher first), -1000 to 1000.
    #[serde(default)]
    pub priority: i32,
    /// Where the allocation came from (`origin`, `job`, `namespace`, `pod`, `claim`…).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A tenant's slice of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSlice {
    /// A host device index (as NVML and nvidia-smi number them) or a UUID
    /// (`GPU-…`, `MIG-…`).
    pub device: String,
    /// The memory cap; `None`: the whole device.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// The share of the device's time guaranteed while the tenant has work.
    #[serde(default)]
    pub share_percent: Option<f64>,
    /// The most of the device's time the tenant may have.
    #[serde(default)]
    pub limit_percent: Option<f64>,
}

/// The admission label that names a tenant's cluster account (the Slurm
/// Prolog's `--label account=$SLURM_JOB_ACCOUNT`), which puts it in the team
/// whose `accounts` name it.
pub const ACCOUNT_LABEL: &str = "account";

/// The monitor's answer. `ok` false: `error` says what was wrong and what
/// is accepted; nothing was changed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `admitted`, `released` (processes still live) or `gone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// What the tenant's processes take as their `GPUSLICE_DIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<GrantedDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_uid: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Processes of the tenant alive now, and the bytes they hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_processes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `list`: one answer per tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<Answer>>,
}

impl Answer {
    /// A refusal.
    pub fn refused(error: impl Into<String>) -> Answer {
        Answer { ok: false, error: Some(error.into()), ..Answer::default() }
    }
}

/// A device as the monitor holds the tenant to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantedDevice {
    /// NVML's UUID of the device (`MIG-…` for a MIG device).
    pub uuid: String,
    /// The cap written in the tenant's ledger; `None`: no cap.
    pub memory_bytes: Option<u64>,
    pub share_percent: Option<f64>,
    pub limit_percent: Option<f64>,
}

/// A percentage as ratio × 10 000 (`37.5` → 3750), if it is one from
/// 0.01 to 100 with at most two decimals' worth of precision (the rest is
/// rounded to the nearest hundredth).
pub fn percent_ratio_e4(percent: f64) -> Option<u32> {
    if !percent.is_finite() || !(0.01..=100.0).contains(&percent) {
        return None;
    }
    let ratio = (percent * 100.0).round();
    (1.0..=10_000.0).contains(&ratio).then_some(ratio as u32)
}

/// Ratio × 10 000 as a percentage.
pub fn ratio_percent(ratio_e4: u32) -> f64 {
    f64::from(ratio_e4) / 100.0
}

/// Sends `request` to the monitor of `dir` and waits at most `timeout` for
/// its answer.
pub fn call(dir: &Path, request: &Request, timeout: Duration) -> Result<Answer, Error> {
    let path = socket_path(dir);
    let connected = ledger::broker::with_short_socket_path(&state_dir(dir), SOCKET_NAME, |p| UnixStream::connect(p));
    let mut stream = connected.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            Error::Failed(format!("no monitor answers at {} ({e}): start `gpuslice monitor --dir {}` first", path.display(), dir.display()))
        }
        std::io::ErrorKind::PermissionDenied => {
            Error::Failed(format!("{}: {e}: only root or the monitor's own user may admit and release tenants", path.display()))
        }
        _ => Error::Failed(format!("cannot reach the monitor at {}: {e}", path.display())),
    })?;
    let io = |e: std::io::Error| Error::Failed(format!("the monitor at {} did not answer: {e}", path.display()));
    stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io)?;
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io)?;
    let mut line = serde_json::to_vec(request).map_err(|e| Error::Failed(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(stream, MAX_LINE_BYTES as u64)).read_line(&mut answer).map_err(|e| {
        if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
            Error::Failed(format!("the monitor at {} did not answer within {} ms", path.display(), timeout.as_millis()))
        } else {
            io(e)
        }
    })?;
    if answer.is_empty() {
        return Err(Error::Failed(format!("the monitor at {} closed the connection without an answer", path.display())));
    }
    serde_json::from_str(&answer).map_err(|e| Error::Failed(format!("the monitor's answer is not understood ({e}): {answer}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_the_wire_shows_them() {
        let admit: Request = serde_json::from_str(
            r#"{"op":"admit","tenant":"slurm-42","owner_uid":1000,
                "devices":[{"device":"0","memory_bytes":4294967296,"share_percent":25.0}],
                "labels":{"origin":"slurm"}}"#,
        )
        .unwrap();
        let Request::Admit(admission) = admit else { panic!("not an admission") };
        assert_eq!(admission.tenant, "slurm-42");
        assert_eq!(admission.owner_uid, Some(1000));
        assert_eq!(admission.devices[0].memory_bytes, Some(4 << 30));
        assert_eq!(admission.devices[0].share_percent, Some(25.0));
        assert_eq!(admission.devices[0].limit_percent, None);
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"release","tenant":"a"}"#).unwrap(), Request::Release { tenant: "a".into() });
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"list"}"#).unwrap(), Request::List);
        // A misspelt field is an error, not a silently absent setting.
        assert!(serde_json::from_str::<Request>(r#"{"op":"admit","tenant":"a","devices":[{"device":"0","memroy_bytes":1}]}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"grant","tenant":"a"}"#).is_err());
    }

    #[test]
    fn percentages_become_ratios_to_the_hundredth() {
        assert_eq!(percent_ratio_e4(25.0), Some(2500));
        assert_eq!(percent_ratio_e4(37.5), Some(3750));
        assert_eq!(percent_ratio_e4(12.345), Some(1235));
        assert_eq!(percent_ratio_e4(100.0), Some(10_000));
        assert_eq!(percent_ratio_e4(0.01), Some(1));
        for bad in [0.0, 0.004, -5.0, 100.01, f64::NAN, f64::INFINITY] {
            assert_eq!(percent_ratio_e4(bad), None, "{bad}");
        }
        assert_eq!(ratio_percent(3750), 37.5);
    }
}
