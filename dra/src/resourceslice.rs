//! The node's ResourceSlice: what the scheduler allocates from.
//!
//! One slice per node, pool named after the node. Every GPU and MIG device
//! is a device named from its UUID (`gpu-<hex>`, `mig-<hex>`, a DNS label
//! the plugin maps back without a table), with `allowMultipleAllocations`
//! and two consumable capacities (KEP-5075):
//! - `memory`, bytes, requested in steps of [`MEMORY_STEP_BYTES`]; a claim
//!   that names none takes the whole device's;
//! - `compute`, percent of the device's time, in steps of 1; a claim that
//!   names none takes 0 (no share: it runs on the time others leave idle).

use crate::devices::GpuDevice;
use serde_json::{json, Map, Value};

/// The step of `memory` requests: 256 MiB. A request between steps is
/// rounded up to the next by the scheduler.
pub const MEMORY_STEP_BYTES: u64 = 256 << 20;

/// The ResourceSlice name of a device.
pub fn device_name(device: &GpuDevice) -> String {
    let (kind, rest) = device.uuid.split_at(4);
    format!("{}-{}", if kind.eq_ignore_ascii_case("MIG-") { "mig" } else { "gpu" }, rest.to_ascii_lowercase())
}

/// The ResourceSlice object (`resource.k8s.io/v1`) of `node`'s `devices`.
/// `generation` counts the pool's changes (a new device list, a new
/// generation).
pub fn resource_slice(driver: &str, node: &str, generation: i64, devices: &[GpuDevice]) -> Value {
    let devices: Vec<Value> = devices.iter().map(slice_device).collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-{}", driver.replace('.', "-"))},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        }
    })
}

fn slice_device(device: &GpuDevice) -> Value {
    let mut attributes = Map::new();
    attributes.insert("uuid".into(), json!({"string": device.uuid}));
    attributes.insert("productName".into(), json!({"string": device.product_name}));
    attributes.insert("type".into(), json!({"string": if device.parent_uuid.is_some() { "mig" } else { "gpu" }}));
    if let Some((major, minor)) = device.compute_capability {
        attributes.insert("computeCapability".into(), json!({"version": format!("{major}.{minor}.0")}));
    }
    if let Some(profile) = &device.mig_profile {
        attributes.insert("migProfile".into(), json!({"string": profile}));
    }
    if let Some(parent) = &device.parent_uuid {
        attributes.insert("parentUUID".into(), json!({"string": parent}));
    }
    let whole_steps = device.memory_bytes / MEMORY_STEP_BYTES * MEMORY_STEP_BYTES;
    json!({
        "name": device_name(device),
        "attributes": attributes,
        "capacity": {
            "memory": {
                "value": device.memory_bytes.to_string(),
                "requestPolicy": {
                    "default": whole_steps.to_string(),
                    "validRange": {"min": MEMORY_STEP_BYTES.to_string(), "max": whole_steps.to_string(), "step": MEMORY_STEP_BYTES.to_string()}
                }
            },
            "compute": {
                "value": "100",
                "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}
            }
        },
        "allowMultipleAllocations": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_back_to_uuids() {
        let gpu = GpuDevice {
            uuid: "GPU-5f1c0001-0203-0405-0607-08090a0b0c00".into(),
            product_name: "x".into(),
            compute_capability: Some((9, 0)),
            mig_profile: None,
            parent_uuid: None,
            memory_bytes: 80 << 30,
        };
        let name = device_name(&gpu);
        assert_eq!(crate::claims::device_uuid(&name).unwrap(), gpu.uuid);
        let slice = resource_slice("gpu.gpuslice.dev", "node-1", 1, &[gpu]);
        assert_eq!(slice["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["max"], (80u64 << 30).to_string());
        assert_eq!(slice["spec"]["devices"][0]["attributes"]["computeCapability"]["version"], "9.0.0");
    }
}
