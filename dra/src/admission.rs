//! Admission through the monitor: the one way this driver makes a tenant.
//!
//! It speaks the monitor's control socket (`<dir>/.monitor/control.sock`)
//! directly, one JSON request and one JSON answer per connection, as
//! `gpuslice tenant admit|release|list --json` does: a long-running plugin
//! saves a process start per claim (NodePrepareResources has a budget of
//! milliseconds), gets the monitor's own error text, and needs no
//! `gpuslice` binary in its image.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the monitor has to answer one request.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One device of a tenant: the monitor's caps on it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceRequest {
    /// A `GPU-…` or `MIG-…` UUID.
    pub device: String,
    pub memory_bytes: Option<u64>,
    pub share_percent: Option<f64>,
    pub limit_percent: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Request<'a> {
    Admit { tenant: &'a str, owner_uid: Option<u32>, devices: &'a [DeviceRequest], priority: i32, labels: &'a BTreeMap<String, String> },
    Release { tenant: &'a str },
    List,
}

/// The monitor's answer about one tenant.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TenantAnswer {
    #[serde(default)]
    pub tenant: String,
    /// `admitted`, `released` (processes still live) or `gone`.
    #[serde(default)]
    pub state: Option<String>,
    /// The tenant's ledger directory on the host (`<dir>/tenants/<tenant>`).
    #[serde(default)]
    pub ledger_dir: Option<PathBuf>,
    #[serde(default)]
    pub live_processes: Option<u64>,
    #[serde(default)]
    pub held_bytes: Option<u64>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    tenant: Option<TenantAnswer>,
    #[serde(default)]
    tenants: Option<Vec<TenantAnswer>>,
}

/// A client of one monitor's control socket.
#[derive(Debug, Clone)]
pub struct Monitor {
    pub socket: PathBuf,
}

impl Monitor {
    /// The monitor of ledger directory `dir`.
    pub fn of_dir(dir: &Path) -> Monitor {
        Monitor { socket: dir.join(".monitor").join("control.sock") }
    }

    /// Admits (or re-admits with new settings) `tenant`; returns once its
    /// ledger exists with the caps written.
    pub fn admit(&self, tenant: &str, devices: &[DeviceRequest], labels: &BTreeMap<String, String>) -> Result<TenantAnswer, String> {
        let answer = self.ask(&Request::Admit { tenant, owner_uid: None, devices, priority: 0, labels })?;
        answer.tenant.filter(|t| t.tenant == tenant).ok_or_else(|| format!("the monitor's admit answer is not about {tenant}"))
    }

    /// Releases `tenant` (an unknown one is no error).
    pub fn release(&self, tenant: &str) -> Result<TenantAnswer, String> {
        Ok(self.ask(&Request::Release { tenant })?.tenant.unwrap_or_else(|| TenantAnswer {
            tenant: tenant.to_string(),
            state: None,
            ledger_dir: None,
            live_processes: None,
            held_bytes: None,
            message: None,
        }))
    }

    /// The admitted tenants.
    pub fn list(&self) -> Result<Vec<TenantAnswer>, String> {
        Ok(self.ask(&Request::List)?.tenants.unwrap_or_default())
    }

    fn ask(&self, request: &Request<'_>) -> Result<Answer, String> {
        let place = self.socket.display();
        let mut line = serde_json::to_vec(request).map_err(|e| format!("cannot encode the request: {e}"))?;
        line.push(b'\n');
        let (dir, name) = (self.socket.parent().unwrap_or(Path::new("/")), self.socket.file_name().unwrap_or_default().to_string_lossy());
        let mut stream = ledger::broker::with_short_socket_path(dir, &name, |p| UnixStream::connect(p))
            .map_err(|e| format!("cannot reach the gpuslice monitor at {place}: {e}"))?;
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(ANSWER_TIMEOUT)))
            .map_err(|e| format!("{place}: {e}"))?;
        stream.write_all(&line).map_err(|e| format!("cannot write to the gpuslice monitor at {place}: {e}"))?;
        let mut text = String::new();
        BufReader::new(stream).read_line(&mut text).map_err(|e| format!("no answer from the gpuslice monitor at {place}: {e}"))?;
        let answer: Answer = serde_json::from_str(text.trim_end())
            .map_err(|e| format!("the gpuslice monitor at {place} answered {:?}: {e}", text.trim_end()))?;
        if !answer.ok {
            return Err(format!("the gpuslice monitor refused: {}", answer.error.as_deref().unwrap_or("(no reason given)")));
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_contract_s() {
        let devices =
            [DeviceRequest { device: "GPU-1".into(), memory_bytes: Some(8 << 30), share_percent: Some(30.0), limit_percent: None }];
        let labels = BTreeMap::from([("origin".to_string(), "kubernetes".to_string())]);
        let admit =
            serde_json::to_value(Request::Admit { tenant: "a.b", owner_uid: None, devices: &devices, priority: 0, labels: &labels })
                .unwrap();
        assert_eq!(
            admit,
            serde_json::json!({"op": "admit", "tenant": "a.b", "owner_uid": null, "priority": 0, "labels": {"origin": "kubernetes"},
                "devices": [{"device": "GPU-1", "memory_bytes": 8589934592u64, "share_percent": 30.0, "limit_percent": null}]})
        );
        assert_eq!(
            serde_json::to_value(Request::Release { tenant: "a.b" }).unwrap(),
            serde_json::json!({"op": "release", "tenant": "a.b"})
        );
        assert_eq!(serde_json::to_value(Request::List).unwrap(), serde_json::json!({"op": "list"}));
    }

    #[test]
    fn answers_read_as_the_contract_writes_them() {
        let a: Answer = serde_json::from_str(r#"{"ok":true,"tenant":"a.b","ledger_dir":"/run/gpuslice/tenants/a.b","ledger":"x","devices":[],"live_processes":0,"held_bytes":0,"message":"admitted"}"#).unwrap();
        assert_eq!(a.tenant.unwrap().ledger_dir.unwrap(), PathBuf::from("/run/gpuslice/tenants/a.b"));
        let refused: Answer = serde_json::from_str(r#"{"ok":false,"error":"cap above the device's memory"}"#).unwrap();
        assert!(!refused.ok && refused.error.unwrap().contains("cap above"));
    }
}
