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
}

/// What this driver needs of a ResourceClaim: its UID and its devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub uid: String,
    pub devices: Vec<AllocatedDevice>,
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
        devices.push(AllocatedDevice {
            request: field("request")?,
            pool: field("pool")?,
            device: field("device")?,
            memory_bytes,
            compute_percent,
        });
    }
    if devices.is_empty() {
        return Err(format!("the ResourceClaim has no device allocated by driver {driver}"));
    }
    Ok(Allocation { uid, devices })
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
}
