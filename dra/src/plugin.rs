//! The kubelet plugin: the registration service and the DRA service.
//!
//! NodePrepareResources, per claim: fetch the ResourceClaim, read what the
//! scheduler allocated, admit the claim's tenant through the monitor with
//! the allocated memory and compute, write the claim's CDI spec, and answer
//! with the CDI devices: this driver's (the shim, the ledger directory, the
//! environment) and NVIDIA's for the GPU itself.
//! NodeUnprepareResources, per claim: release the tenant and remove the
//! spec. Both are idempotent, and neither keeps state in memory: what was
//! prepared is in the CDI directory and the monitor, so a restarted plugin
//! (or kubelet) carries on.

use crate::admission::{DeviceRequest, Monitor};
use crate::cdi::{self, HostFiles};
use crate::claims::{self, ClaimSource};
use crate::proto::dra::dra_plugin_server::DraPlugin;
use crate::proto::dra::{
    Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest, NodePrepareResourcesResponse, NodeUnprepareResourceResponse,
    NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use crate::proto::registration::registration_server::Registration;
use crate::proto::registration::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};
use crate::tenant::tenant_name;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The plugin type the kubelet's registration expects of a DRA driver.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The DRA service version this plugin serves, as registration names it.
pub const DRA_SERVICE: &str = "v1.DRAPlugin";

/// Everything a prepare or unprepare needs; cheap to share.
pub struct Plugin {
    /// The driver name (`gpu.gpuslice.dev`).
    pub driver: String,
    /// This node's name: the pool of its ResourceSlice.
    pub node: String,
    /// The monitor's ledger directory (the tenants' directories are under
    /// `<dir>/tenants/`).
    pub ledger_dir: PathBuf,
    pub cdi_dir: PathBuf,
    pub files: HostFiles,
    pub monitor: Monitor,
    pub claims: Arc<dyn ClaimSource>,
    /// The CDI kind of NVIDIA's device specs (`nvidia.com/gpu`); empty:
    /// none is named (a node whose runtime gets the GPU otherwise).
    pub nvidia_cdi_kind: String,
    /// The DRA service's socket, told to the kubelet at registration.
    pub dra_socket: PathBuf,
    /// Told each time the kubelet registers this plugin: a kubelet that
    /// starts deletes its node's ResourceSlices, so the slice is published
    /// again then (`None`: nothing publishes, as with `--claims-dir`).
    pub registered: Option<std::sync::mpsc::Sender<()>>,
}

impl Plugin {
    /// Prepares one claim; the devices for the kubelet, or what went wrong.
    pub fn prepare(&self, claim: &Claim) -> Result<Vec<Device>, String> {
        check_claim(claim)?;
        let object = self.claims.get(&claim.namespace, &claim.name)?;
        let allocation = claims::allocation(&object, &self.driver)?;
        if allocation.uid != claim.uid {
            return Err(format!(
                "ResourceClaim {}/{} has UID {}, not {} as the kubelet asked: the claim was replaced",
                claim.namespace, claim.name, allocation.uid, claim.uid
            ));
        }
        // One entry per device, its requests' amounts added up.
        let mut per_device: BTreeMap<String, DeviceRequest> = BTreeMap::new();
        let mut devices = Vec::new();
        for allocated in &allocation.devices {
            if allocated.pool != self.node {
                return Err(format!(
                    "device {}/{} is in pool {}, not this node's ({})",
                    allocated.pool, allocated.device, allocated.pool, self.node
                ));
            }
            let uuid = claims::device_uuid(&allocated.device)?;
            let entry = per_device.entry(uuid.clone()).or_insert(DeviceRequest {
                device: uuid.clone(),
                memory_bytes: Some(0),
                share_percent: Some(0.0),
                limit_percent: None,
            });
            // No amount in one request: that request has the whole device.
            entry.memory_bytes = entry.memory_bytes.zip(allocated.memory_bytes).map(|(a, b)| a.saturating_add(b));
            entry.share_percent = entry.share_percent.zip(allocated.compute_percent).map(|(a, b)| (a + b).min(100.0));
            // The lowest ceiling any of its requests asked for.
            entry.limit_percent = match (entry.limit_percent, allocated.limit_percent) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let mut ids = vec![cdi::device_id(&claim.uid)];
            if !self.nvidia_cdi_kind.is_empty() {
                ids.push(format!("{}={uuid}", self.nvidia_cdi_kind));
            }
            devices.push(Device {
                request_names: vec![allocated.request.clone()],
                pool_name: allocated.pool.clone(),
                device_name: allocated.device.clone(),
                cdi_device_ids: ids,
            });
        }
        let requests: Vec<DeviceRequest> = per_device
            .into_values()
            .map(|mut d| {
                // A share of 0 is no share: the tenant runs on idle time.
                // A floor above the claim's own ceiling is the ceiling.
                d.share_percent = d.share_percent.filter(|s| *s > 0.0).map(|s| d.limit_percent.map_or(s, |l| s.min(l)));
                d
            })
            .collect();
        let tenant = tenant_name(&claim.namespace, &claim.name);
        // The claim's team: its namespace's, as the monitor's `account`
        // (`account_teams`, or a team's `accounts`). Who may label a
        // Namespace (a cluster-scoped object) decides, never the pod.
        let team = claims::team_of(&claim.namespace, &self.claims.namespace(&claim.namespace)?)?;
        let labels = BTreeMap::from([
            ("origin".to_string(), "kubernetes".to_string()),
            ("namespace".to_string(), claim.namespace.clone()),
            ("account".to_string(), team),
            ("claim".to_string(), claim.name.clone()),
            ("claim-uid".to_string(), claim.uid.clone()),
        ]);
        let mut labels = labels;
        if !allocation.pods.is_empty() {
            // The pods the scheduler reserved the claim for: what `gpuslice
            // status` and the metrics name the tenant by.
            labels.insert("pod".to_string(), label_value(&allocation.pods.join(",")));
        }
        let admitted = self.monitor.admit(&tenant, &requests, &labels)?;
        let ledger_dir = admitted.ledger_dir.unwrap_or_else(|| self.ledger_dir.join("tenants").join(&tenant));
        cdi::write_spec(&self.cdi_dir, &cdi::claim_spec(&claim.uid, &tenant, &ledger_dir, &self.files))?;
        Ok(devices)
    }

    /// Unprepares one claim: releases its tenant, unless another prepared
    /// claim (a replaced claim of the same name) still names it, and
    /// removes its spec.
    pub fn unprepare(&self, claim: &Claim) -> Result<(), String> {
        check_claim(claim)?;
        let tenant = tenant_name(&claim.namespace, &claim.name);
        let others = cdi::prepared(&self.cdi_dir).into_iter().any(|(uid, t)| t == tenant && uid != claim.uid);
        if !others {
            self.monitor.release(&tenant)?;
        }
        cdi::remove_spec(&self.cdi_dir, &claim.uid)
    }
}

/// Refuses a claim reference that is no Kubernetes name: the namespace a
/// DNS label, the name a DNS subdomain, the UID letters, digits and dashes.
/// They become file names and URL paths.
pub fn check_claim(claim: &Claim) -> Result<(), String> {
    let label = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let ok = (1..=63).contains(&claim.namespace.len())
        && claim.namespace.chars().all(label)
        && (1..=253).contains(&claim.name.len())
        && claim.name.chars().all(|c| label(c) || c == '.')
        && !claim.name.starts_with('.')
        && (1..=64).contains(&claim.uid.len())
        && claim.uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "claim {:?}/{:?} (UID {:?}) is not a Kubernetes claim reference: a DNS-label namespace, a DNS-subdomain name and a UID of letters, digits and dashes are accepted",
            claim.namespace, claim.name, claim.uid
        ))
    }
}

/// `text` cut to the monitor's longest label value, on a character boundary.
fn label_value(text: &str) -> String {
    const MAX_LABEL_VALUE_BYTES: usize = 253;
    let mut end = text.len().min(MAX_LABEL_VALUE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The gRPC face of a [`Plugin`].
#[derive(Clone)]
pub struct Service(pub Arc<Plugin>);

async fn each_claim<T: Send + 'static>(
    plugin: &Arc<Plugin>,
    claims: Vec<Claim>,
    work: fn(&Plugin, &Claim) -> T,
) -> Result<Vec<(String, T)>, Status> {
    let mut tasks = Vec::new();
    for claim in claims {
        let plugin = Arc::clone(plugin);
        tasks.push(tokio::task::spawn_blocking(move || {
            let answer = work(&plugin, &claim);
            (claim.uid, answer)
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.map_err(|e| Status::internal(format!("a claim's task failed: {e}")))?);
    }
    Ok(answers)
}

#[tonic::async_trait]
impl DraPlugin for Service {
    async fn node_prepare_resources(
        &self,
        request: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let started = std::time::Instant::now();
        let answers = each_claim(&self.0, request.into_inner().claims, Plugin::prepare).await?;
        let mut claims = HashMap::new();
        for (uid, answer) in answers {
            let response = match answer {
                Ok(devices) => {
                    log(&format!("prepared claim {uid}"));
                    NodePrepareResourceResponse { devices, error: String::new() }
                }
                Err(error) => {
                    log(&format!("cannot prepare claim {uid}: {error}"));
                    NodePrepareResourceResponse { devices: Vec::new(), error }
                }
            };
            claims.insert(uid, response);
        }
        log(&format!("NodePrepareResources: {} claim(s) in {:.1} ms", claims.len(), started.elapsed().as_secs_f64() * 1e3));
        Ok(Response::new(NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let answers = each_claim(&self.0, request.into_inner().claims, Plugin::unprepare).await?;
        let mut claims = HashMap::new();
        for (uid, answer) in answers {
            let error = answer.err().unwrap_or_default();
            if error.is_empty() {
                log(&format!("unprepared claim {uid}"));
            } else {
                log(&format!("cannot unprepare claim {uid}: {error}"));
            }
            claims.insert(uid, NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(NodeUnprepareResourcesResponse { claims }))
    }
}

#[tonic::async_trait]
impl Registration for Service {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: self.0.driver.clone(),
            endpoint: self.0.dra_socket.to_string_lossy().into_owned(),
            supported_versions: vec![DRA_SERVICE.into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            log("registered with the kubelet");
            if let Some(publisher) = &self.0.registered {
                let _ = publisher.send(());
            }
        } else {
            log(&format!("the kubelet did not register this plugin: {}", status.error));
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// One line on stderr.
pub fn log(line: &str) {
    eprintln!("gpuslice-dra: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_references_that_would_escape_a_path_are_refused() {
        let claim = |ns: &str, name: &str, uid: &str| Claim { namespace: ns.into(), name: name.into(), uid: uid.into() };
        assert!(check_claim(&claim("team-a", "train.v2", "0d9c0000-1111-4000-8000-000000000001")).is_ok());
        for bad in [
            claim("..", "x", "u"),
            claim("a", "../../etc", "u"),
            claim("a", "b", "../x"),
            claim("a", "b", ""),
            claim("A", "b", "u"),
            claim("a", ".b", "u"),
        ] {
            assert!(check_claim(&bad).unwrap_err().contains("is not a Kubernetes claim reference"), "{bad:?}");
        }
    }

    use crate::cdi;
    use crate::tenant::valid_tenant;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    /// Names near the grammar (DNS-ish, dots, dashes, long) and anything
    /// at all (`/`, `..`, NUL, unicode).
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?",
            "[a-z0-9.-]{1,300}",
            "(\\.\\./){0,3}[a-z./-]{0,20}",
            any::<String>(),
            prop::collection::vec(prop::sample::select(vec!["a", "-", ".", "..", "/", "\0", "é", "\u{202e}", "x"]), 0..40)
                .prop_map(|parts| parts.concat()),
        ]
    }

    fn claim() -> impl Strategy<Value = Claim> {
        (name(), name(), prop_oneof!["[A-Za-z0-9-]{1,64}", name()]).prop_map(|(namespace, name, uid)| Claim { namespace, name, uid })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        /// Every reference the plugin accepts puts its spec in the CDI
        /// directory itself (one plain file name), names a tenant in the
        /// monitor's grammar, and only a reference of Kubernetes names is
        /// accepted.
        #[test]
        fn an_accepted_claim_stays_in_the_cdi_directory(claim in claim()) {
            if check_claim(&claim).is_err() {
                return Ok(());
            }
            let dir = Path::new("/var/run/cdi");
            let path = cdi::spec_path(dir, &claim.uid);
            prop_assert_eq!(path.parent(), Some(dir));
            prop_assert!(path.components().skip(dir.components().count()).all(|c| matches!(c, Component::Normal(_))), "{path:?}");
            prop_assert!(!claim.uid.contains(['/', '\0', '.']), "{claim:?}");
            let tenant = tenant_name(&claim.namespace, &claim.name);
            prop_assert!(valid_tenant(&tenant), "{claim:?} -> {tenant:?}");
            prop_assert!(!claim.namespace.contains(['.', '/']) && !claim.name.contains('/'), "{claim:?}");
        }

        /// Two different accepted (namespace, name) pairs never share a
        /// tenant, among them pairs built to look alike: one split at
        /// another dot, one sharing a long prefix.
        #[test]
        fn distinct_claims_never_share_a_tenant(
            a in claim(),
            b in claim(),
            prefix in "[a-z0-9]{40,250}",
            tails in ("[a-z0-9]{0,10}", "[a-z0-9]{0,10}"),
        ) {
            let long = |tail: &str| Claim { namespace: "ns".into(), name: format!("{prefix}{tail}"), uid: "u".into() };
            let moved_dot = |c: &Claim| Claim { namespace: format!("{}.{}", c.namespace, c.name), name: "x".into(), uid: c.uid.clone() };
            let pairs = [(a.clone(), b.clone()), (long(&tails.0), long(&tails.1)), (a.clone(), moved_dot(&a))];
            for (one, two) in pairs {
                if check_claim(&one).is_err() || check_claim(&two).is_err() || (&one.namespace, &one.name) == (&two.namespace, &two.name) {
                    continue;
                }
                prop_assert_ne!(
                    tenant_name(&one.namespace, &one.name),
                    tenant_name(&two.namespace, &two.name),
                    "{:?} and {:?}", one, two
                );
            }
        }

        /// The kubelet's request, from any bytes: decoded or refused by
        /// prost, never a panic; what decodes is checked claim by claim.
        #[test]
        fn any_request_bytes_decode_or_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            use prost::Message;
            if let Ok(request) = NodePrepareResourcesRequest::decode(bytes.as_slice()) {
                for claim in &request.claims {
                    let _ = check_claim(claim);
                }
            }
        }
    }
}
