//! Where a claim's allocation comes from: the ResourceClaim object.
//!
//! The kubelet names a claim (namespace, name, UID); what the scheduler
//! allocated (device, pool, consumed `memory` and `compute`) is in the
//! object's `status.allocation`. [`ClaimSource`] fetches the object:
//! `crate::apiserver::ApiServer` from the API server, [`ClaimDir`] from a
//! directory of JSON files (the tests, or a node without an API server).

use crate::quantity::{parse_bytes, parse_percent};
use serde_json::Value;
use std::path::PathBuf;

/// Fetches ResourceClaim objects, as the API server serves them (JSON).
pub trait ClaimSource: Send + Sync {
    /// The ResourceClaim `name` in `namespace`.
    fn get(&self, namespace: &str, name: &str) -> Result<Value, String>;
    /// The Namespace object `namespace` (for its labels).
    fn namespace(&self, namespace: &str) -> Result<Value, String>;
}

/// The label on a Namespace that names its team; without it, the
/// namespace is its own team.
pub const TEAM_LABEL: &str = "gpuslice.dev/team";

/// The team of a claim in `namespace` whose Namespace object is `object`:
/// its [`TEAM_LABEL`], or the namespace's name. A label the monitor could
/// not take as an account (1 to 63 of `A-Z a-z 0-9 _ - .`) is refused
/// rather than ignored: a typo must not move the claim out of its team.
pub fn team_of(namespace: &str, object: &Value) -> Result<String, String> {
    let Some(label) = object.pointer("/metadata/labels").and_then(|l| l.get(TEAM_LABEL)) else { return Ok(namespace.to_string()) };
    let valid = |t: &str| (1..=63).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    match label.as_str() {
        Some(team) if valid(team) => Ok(team.to_string()),
        _ => {
            Err(format!("namespace {namespace}: label {TEAM_LABEL}={label} is not a team name (1 to 63 characters from A-Z a-z 0-9 _ - .)"))
        }
    }
}

/// ResourceClaims as files `<dir>/<namespace>/<name>.json`.
pub struct ClaimDir(pub PathBuf);

impl ClaimSource for ClaimDir {
    fn get(&self, namespace: &str, name: &str) -> Result<Value, String> {
        let path = self.0.join(namespace).join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read ResourceClaim {namespace}/{name} from {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
    }

    /// `<dir>/<namespace>/.namespace.json`; a namespace without one has no labels.
    fn namespace(&self, namespace: &str) -> Result<Value, String> {
        let path = self.0.join(namespace).join(".namespace.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(serde_json::json!({"metadata": {"name": namespace}})),
            Err(e) => Err(format!("cannot read Namespace {namespace} from {}: {e}", path.display())),
        }
    }
}

/// One device the scheduler allocated to a claim, for this driver.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatedDevice {
    /// The claim's request it serves.
    pub request: String,
    pub pool: String,
    /// The device's name in the ResourceSlice (`gpu-…`, `mig-…`).
    pub device: String,
    /// Consumed `memory`, bytes; `None` when the allocation names none
    /// (the device was allocated whole).
    pub memory_bytes: Option<u64>,
    /// Consumed `compute`, percent of the device's time; `None` when none.
    pub compute_percent: Option<f64>,
    /// A ceiling on the device's time the claim asked for in its opaque
    /// configuration ([`SliceParameters`]), percent; `None` when none.
    pub limit_percent: Option<f64>,
}

/// The API version and kind of this driver's opaque configuration, as a
/// claim (or a DeviceClass) writes it:
///
/// ```yaml
/// config:
///   - requests: [gpu]          # optional: every request of the claim
///     opaque:
///       driver: gpu.gpuslice.dev
///       parameters:
///         apiVersion: gpu.gpuslice.dev/v1
///         kind: SliceParameters
///         computeLimit: 50     # at most 50 % of the device's time, even when it is idle
/// ```
///
/// A limit can only lower what the claim gets, so a pod gains nothing by
/// writing one; what raises a tenant (its memory, its guaranteed share)
/// comes from the scheduler's allocation alone.
pub const PARAMETERS_KIND: &str = "SliceParameters";
/// The fields [`PARAMETERS_KIND`] accepts besides `apiVersion` and `kind`.
const PARAMETER_FIELDS: &[&str] = &["computeLimit"];

/// What this driver needs of a ResourceClaim: its UID and its devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub uid: String,
    pub devices: Vec<AllocatedDevice>,
    /// The pods the claim is reserved for (`status.reservedFor`), by name.
    pub pods: Vec<String>,
}

/// Reads the allocation of `claim` for `driver`: every result of
/// `status.allocation.devices.results` whose driver is `driver`.
pub fn allocation(claim: &Value, driver: &str) -> Result<Allocation, String> {
    let text = |v: &Value, what: &str| v.get(what).and_then(Value::as_str).map(str::to_string);
    let metadata = claim.get("metadata").ok_or("the ResourceClaim has no metadata")?;
    let uid = text(metadata, "uid").ok_or("the ResourceClaim has no metadata.uid")?;
    let results = claim
        .pointer("/status/allocation/devices/results")
        .and_then(Value::as_array)
        .ok_or("the ResourceClaim is not allocated (no status.allocation.devices.results)")?;
    let mut devices = Vec::new();
    for (i, result) in results.iter().enumerate() {
        if result.get("driver").and_then(Value::as_str) != Some(driver) {
            continue;
        }
        let field = |name: &str| text(result, name).ok_or_else(|| format!("allocation result {i} has no {name}"));
        let consumed = result.get("consumedCapacity");
        let amount =
            |name: &str| consumed.and_then(|c| c.get(name)).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()));
        let memory_bytes = amount("memory")
            .map(|q| parse_bytes(&q).map_err(|e| format!("allocation result {i}: consumedCapacity.memory: {e}")))
            .transpose()?;
        let compute_percent = amount("compute")
            .map(|q| parse_percent(&q).map_err(|e| format!("allocation result {i}: consumedCapacity.compute: {e}")))
            .transpose()?;
        let request = field("request")?;
        let limit_percent = compute_limit(claim, driver, &request)?;
        devices.push(AllocatedDevice {
            request,
            pool: field("pool")?,
            device: field("device")?,
            memory_bytes,
            compute_percent,
            limit_percent,
        });
    }
    if devices.is_empty() {
        return Err(format!("the ResourceClaim has no device allocated by driver {driver}"));
    }
    let pods = claim
        .pointer("/status/reservedFor")
        .and_then(Value::as_array)
        .map(|consumers| {
            consumers.iter().filter(|c| c.get("resource").and_then(Value::as_str) == Some("pods")).filter_map(|c| text(c, "name")).collect()
        })
        .unwrap_or_default();
    Ok(Allocation { uid, devices, pods })
}

/// The lowest `computeLimit` that the allocation's opaque configuration
/// for `driver` gives `request` (an entry without `requests` applies to
/// every request), or what is wrong with it.
fn compute_limit(claim: &Value, driver: &str, request: &str) -> Result<Option<f64>, String> {
    let Some(configs) = claim.pointer("/status/allocation/devices/config").and_then(Value::as_array) else { return Ok(None) };
    let mut limit: Option<f64> = None;
    for (i, config) in configs.iter().enumerate() {
        let Some(opaque) = config.get("opaque") else { continue };
        if opaque.get("driver").and_then(Value::as_str) != Some(driver) {
            continue;
        }
        let applies = match config.get("requests").and_then(Value::as_array) {
            None => true,
            Some(names) => names.is_empty() || names.iter().any(|n| n.as_str() == Some(request)),
        };
        if !applies {
            continue;
        }
        let bad = |what: String| format!("configuration {i} for {driver}: {what}");
        let parameters = opaque.get("parameters").and_then(Value::as_object).ok_or_else(|| bad("parameters is not an object".into()))?;
        let api_version = format!("{driver}/v1");
        if parameters.get("apiVersion").and_then(Value::as_str) != Some(&api_version)
            || parameters.get("kind").and_then(Value::as_str) != Some(PARAMETERS_KIND)
        {
            return Err(bad(format!(
                "apiVersion {} and kind {} are not known: apiVersion {api_version} with kind {PARAMETERS_KIND} is accepted",
                parameters.get("apiVersion").unwrap_or(&Value::Null),
                parameters.get("kind").unwrap_or(&Value::Null)
            )));
        }
        if let Some(unknown) =
            parameters.keys().find(|k| !["apiVersion", "kind"].contains(&k.as_str()) && !PARAMETER_FIELDS.contains(&k.as_str()))
        {
            return Err(bad(format!("field {unknown:?} is not known; accepted: {}", PARAMETER_FIELDS.join(", "))));
        }
        if let Some(value) = parameters.get("computeLimit") {
            let percent = value
                .as_f64()
                .or_else(|| value.as_str().and_then(|q| parse_percent(q).ok()))
                .filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0)
                .ok_or_else(|| bad(format!("computeLimit {value} is not a percentage: a number above 0 and at most 100 is accepted")))?;
            limit = Some(limit.map_or(percent, |l: f64| l.min(percent)));
        }
    }
    Ok(limit)
}

/// The GPU or MIG UUID of a device named as this driver's ResourceSlices
/// name them (`gpu-<hex>` is `GPU-<hex>`, `mig-<hex>` is `MIG-<hex>`).
pub fn device_uuid(device_name: &str) -> Result<String, String> {
    let bad = || format!("device {device_name:?} is not one of this driver's: gpu-<uuid> or mig-<uuid> are accepted");
    let (prefix, rest) = device_name.split_at_checked(4).ok_or_else(bad)?;
    let kind = match prefix {
        "gpu-" => "GPU-",
        "mig-" => "MIG-",
        _ => return Err(bad()),
    };
    let uuid = abi::uuid::parse_uuid(&format!("{kind}{rest}")).ok_or_else(bad)?;
    Ok(uuid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(results: Value) -> Value {
        json!({"metadata": {"name": "c", "namespace": "n", "uid": "u-1"}, "status": {"allocation": {"devices": {"results": results}}}})
    }

    #[test]
    fn a_namespace_is_its_own_team_unless_its_label_names_another() {
        assert_eq!(team_of("ml-dev", &json!({"metadata": {"name": "ml-dev"}})).unwrap(), "ml-dev");
        assert_eq!(team_of("ml-dev", &json!({"metadata": {"labels": {"other": "x"}}})).unwrap(), "ml-dev");
        let labelled = json!({"metadata": {"labels": {"gpuslice.dev/team": "research"}}});
        assert_eq!(team_of("ml-dev", &labelled).unwrap(), "research");
        for bad in [json!(""), json!("a/b"), json!(7), json!("x".repeat(64))] {
            let e = team_of("ml-dev", &json!({"metadata": {"labels": {"gpuslice.dev/team": bad}}})).unwrap_err();
            assert!(e.contains("namespace ml-dev") && e.contains("gpuslice.dev/team"), "{e}");
        }
    }

    #[test]
    fn reads_consumed_capacity_as_quantities() {
        let c = claim(json!([
            {"request": "gpu", "driver": "gpu.gpuslice.dev", "pool": "node-1", "device": "gpu-5f1c0001-0203-0405-0607-08090a0b0c00",
             "consumedCapacity": {"memory": "8Gi", "compute": "30"}},
            {"request": "nic", "driver": "other.example.com", "pool": "p", "device": "d"}
        ]));
        let a = allocation(&c, "gpu.gpuslice.dev").unwrap();
        assert_eq!(a.uid, "u-1");
        assert_eq!(a.devices.len(), 1);
        assert_eq!(a.devices[0].memory_bytes, Some(8 << 30));
        assert_eq!(a.devices[0].compute_percent, Some(30.0));
        assert_eq!(a.devices[0].limit_percent, None);
        assert!(a.pods.is_empty());
    }

    #[test]
    fn reads_the_pods_and_the_compute_limit_of_this_driver() {
        let mut c = claim(json!([
            {"request": "gpu", "driver": "gpu.gpuslice.dev", "pool": "n", "device": "gpu-5f1c0001-0203-0405-0607-08090a0b0c00",
             "consumedCapacity": {"memory": "4Gi", "compute": "30"}},
            {"request": "other", "driver": "gpu.gpuslice.dev", "pool": "n", "device": "gpu-5f1c0001-0203-0405-0607-08090a0b0c00"}
        ]));
        let parameters = |limit: Value| json!({"apiVersion": "gpu.gpuslice.dev/v1", "kind": "SliceParameters", "computeLimit": limit});
        c["status"]["allocation"]["devices"]["config"] = json!([
            {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.gpuslice.dev", "parameters": parameters(json!(50))}},
            {"source": "FromClass", "opaque": {"driver": "gpu.gpuslice.dev", "parameters": parameters(json!("70"))}},
            {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"anything": 1}}}
        ]);
        c["status"]["reservedFor"] =
            json!([{"resource": "pods", "name": "train-0", "uid": "p-1"}, {"resource": "jobs", "name": "j", "uid": "j-1"}]);
        let a = allocation(&c, "gpu.gpuslice.dev").unwrap();
        assert_eq!(a.devices[0].limit_percent, Some(50.0), "the lower of the two that apply");
        assert_eq!(a.devices[1].limit_percent, Some(70.0), "the entry for every request");
        assert_eq!(a.pods, vec!["train-0".to_string()]);
    }

    #[test]
    fn refuses_configuration_it_does_not_know() {
        let mut c = claim(json!([{"request": "gpu", "driver": "gpu.gpuslice.dev", "pool": "n", "device": "d"}]));
        for (parameters, expected) in [
            (
                json!({"apiVersion": "gpu.gpuslice.dev/v1", "kind": "SliceParameters", "computeLimit": 150}),
                "a number above 0 and at most 100",
            ),
            (
                json!({"apiVersion": "gpu.gpuslice.dev/v1", "kind": "SliceParameters", "computeLimt": 50}),
                "\"computeLimt\" is not known; accepted: computeLimit",
            ),
            (
                json!({"apiVersion": "v1", "kind": "SliceParameters"}),
                "apiVersion gpu.gpuslice.dev/v1 with kind SliceParameters is accepted",
            ),
            (json!("50"), "parameters is not an object"),
        ] {
            c["status"]["allocation"]["devices"]["config"] = json!([{"opaque": {"driver": "gpu.gpuslice.dev", "parameters": parameters}}]);
            let error = allocation(&c, "gpu.gpuslice.dev").unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let none = claim(json!([{"request": "r", "driver": "other", "pool": "p", "device": "d"}]));
        assert!(allocation(&none, "gpu.gpuslice.dev").unwrap_err().contains("no device allocated by driver gpu.gpuslice.dev"));
        let bad = claim(json!([{"request": "r", "driver": "x", "pool": "p", "device": "d", "consumedCapacity": {"memory": "8GB"}}]));
        assert!(allocation(&bad, "x").unwrap_err().contains("consumedCapacity.memory"));
        assert!(allocation(&json!({"metadata": {"uid": "u"}}), "x").unwrap_err().contains("not allocated"));
    }

    #[test]
    fn device_names_map_to_uuids() {
        assert_eq!(device_uuid("gpu-5f1c0001-0203-0405-0607-08090a0b0c00").unwrap(), "GPU-5f1c0001-0203-0405-0607-08090a0b0c00");
        assert!(device_uuid("mig-5f1c0001-0203-0405-0607-08090a0b0c01").unwrap().starts_with("MIG-"));
        assert!(device_uuid("gpu-0").unwrap_err().contains("accepted"));
        assert!(device_uuid("nvme-1").is_err());
    }

    use proptest::prelude::*;

    /// Any JSON up to a few levels deep.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "metadata",
                        "uid",
                        "status",
                        "allocation",
                        "devices",
                        "results",
                        "driver",
                        "request",
                        "pool",
                        "device",
                        "consumedCapacity",
                        "memory",
                        "compute",
                        "config",
                        "opaque",
                        "parameters",
                        "apiVersion",
                        "kind",
                        "computeLimit",
                        "requests",
                        "reservedFor",
                        "resource",
                        "name"
                    ])
                    .prop_map(String::from),
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// An allocated claim whose amounts and configuration are anything.
    fn hostile_claim() -> impl Strategy<Value = Value> {
        (any_json(), any_json(), any_json(), prop_oneof![".{0,20}", "-?[0-9]{0,30}(\\.[0-9]{0,30})?(Gi|Ei|m|e[0-9]{1,3})?"]).prop_map(
            |(memory, compute, limit, text)| {
                let mut c = claim(json!([{"request": "gpu", "driver": "gpu.gpuslice.dev", "pool": "n", "device": "d",
                    "consumedCapacity": {"memory": memory, "compute": text}}]));
                c["status"]["allocation"]["devices"]["config"] = json!([{"opaque": {"driver": "gpu.gpuslice.dev",
                    "parameters": {"apiVersion": "gpu.gpuslice.dev/v1", "kind": "SliceParameters", "computeLimit": limit}}}]);
                if compute.is_string() {
                    c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = compute;
                }
                c
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// Any object as a ResourceClaim, and allocated claims with any
        /// amounts: no panic, and whatever is accepted is in bounds: a
        /// share 0 to 100, a limit above 0 and at most 100.
        #[test]
        fn any_claim_is_read_within_bounds_or_refused(claim in prop_oneof![any_json(), hostile_claim()]) {
            if let Ok(allocation) = allocation(&claim, "gpu.gpuslice.dev") {
                for d in allocation.devices {
                    prop_assert!(d.compute_percent.is_none_or(|p| p.is_finite() && (0.0..=100.0).contains(&p)), "{d:?}");
                    prop_assert!(d.limit_percent.is_none_or(|p| p.is_finite() && p > 0.0 && p <= 100.0), "{d:?}");
                }
            }
        }
    }
}
