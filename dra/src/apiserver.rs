//! The in-cluster API server: ResourceClaims read, the node's
//! ResourceSlice written, with the pod's service account token over HTTPS.
//!
//! `tests/kubernetes.rs` runs it against kube-apiserver v1.37.2 (the
//! plugin in its DaemonSet, with its service account and the chart's
//! RBAC); `tests/dra.rs` also runs it against an HTTPS server of its own on
//! the loopback, for the answers a real API server gives rarely (409 on a
//! stale resourceVersion).

use crate::claims::ClaimSource;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Where a pod finds its service account's credentials.
const ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How long one request to the API server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A client of the API server of the cluster this pod runs in.
pub struct ApiServer {
    base: String,
    token_path: String,
    agent: ureq::Agent,
}

impl ApiServer {
    /// From the pod's environment (`KUBERNETES_SERVICE_HOST`/`_PORT`) and
    /// service account (CA and token; the token is re-read per request,
    /// since the kubelet rotates it).
    pub fn in_cluster() -> Result<ApiServer, String> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .map_err(|_| "KUBERNETES_SERVICE_HOST is not set: not in a pod? (--claims-dir reads claims from files)")?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        ApiServer::new(
            &format!("https://{host}:{port}"),
            Path::new(&format!("{ACCOUNT_DIR}/ca.crt")),
            Path::new(&format!("{ACCOUNT_DIR}/token")),
        )
    }

    /// The API server at `base` (`https://host:port`), trusting the CA
    /// certificates in `ca_path` (PEM), with the bearer token in `token_path`.
    pub fn new(base: &str, ca_path: &Path, token_path: &Path) -> Result<ApiServer, String> {
        let pem = std::fs::read(ca_path).map_err(|e| format!("cannot read the cluster's CA {}: {e}", ca_path.display()))?;
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(Result::ok)
            .filter_map(|item| match item {
                ureq::tls::PemItem::Certificate(cert) => Some(cert),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(format!("{} holds no certificate", ca_path.display()));
        }
        let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&certs)).build();
        let agent =
            ureq::Agent::config_builder().tls_config(tls).timeout_global(Some(REQUEST_TIMEOUT)).http_status_as_error(false).build().into();
        Ok(ApiServer { base: base.trim_end_matches('/').to_string(), token_path: token_path.display().to_string(), agent })
    }

    fn token(&self) -> Result<String, String> {
        std::fs::read_to_string(&self.token_path)
            .map(|t| t.trim().to_string())
            .map_err(|e| format!("cannot read the service account token {}: {e}", self.token_path))
    }

    /// Sends one request; the answer's status and JSON body.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.base);
        let bearer = format!("Bearer {}", self.token()?);
        let answer = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &bearer).header("Accept", "application/json").call(),
            ("POST", Some(body)) => {
                self.agent.post(&url).header("Authorization", &bearer).header("Content-Type", "application/json").send(body.to_string())
            }
            ("PUT", Some(body)) => {
                self.agent.put(&url).header("Authorization", &bearer).header("Content-Type", "application/json").send(body.to_string())
            }
            _ => return Err(format!("{method} {path}: not a request this client makes")),
        };
        let mut answer = answer.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string().map_err(|e| format!("{method} {url}: {e}"))?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// Creates the node's ResourceSlice, or replaces it when its devices
    /// changed (with the pool's generation one past the published one, and
    /// its resourceVersion); returns whether anything was written.
    pub fn publish_slice(&self, slice: &Value) -> Result<bool, String> {
        let name = slice.pointer("/metadata/name").and_then(Value::as_str).ok_or("a ResourceSlice without a name")?;
        let path = format!("/apis/resource.k8s.io/v1/resourceslices/{name}");
        let (status, current) = self.call("GET", &path, None)?;
        let (status, answer) = match status {
            404 => self.call("POST", "/apis/resource.k8s.io/v1/resourceslices", Some(slice))?,
            200 if current.pointer("/spec/devices") == slice.pointer("/spec/devices") => return Ok(false),
            200 => {
                let mut replacement = slice.clone();
                replacement["metadata"]["resourceVersion"] = current.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
                let generation = current.pointer("/spec/pool/generation").and_then(Value::as_i64).unwrap_or(0);
                replacement["spec"]["pool"]["generation"] = Value::from(generation.saturating_add(1));
                self.call("PUT", &path, Some(&replacement))?
            }
            other => return Err(format!("GET {path}: HTTP {other}: {current}")),
        };
        if (200..300).contains(&status) {
            Ok(true)
        } else {
            Err(format!("writing ResourceSlice {name}: HTTP {status}: {answer}"))
        }
    }
}

impl ClaimSource for ApiServer {
    fn get(&self, namespace: &str, name: &str) -> Result<Value, String> {
        let path = format!("/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}");
        match self.call("GET", &path, None)? {
            (200, claim) => Ok(claim),
            (status, answer) => Err(format!("GET {path}: HTTP {status}: {answer}")),
        }
    }

    fn namespace(&self, namespace: &str) -> Result<Value, String> {
        let path = format!("/api/v1/namespaces/{namespace}");
        match self.call("GET", &path, None)? {
            (200, object) => Ok(object),
            (status, answer) => Err(format!("GET {path}: HTTP {status}: {answer}")),
        }
    }
}
