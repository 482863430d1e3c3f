//! `CUDA_VISIBLE_DEVICES`: which physical devices and MIG instances the
//! driver API shows, and in what order.
//!
//! The value is a comma-separated list of device indices or UUIDs
//! (`GPU-8932f937-…`, or any prefix of it, `GPU-` included, that names exactly
//! one device). Visible devices are numbered in list order: the first entry is
//! ordinal 0. An entry that names no device (out of range, negative,
//! malformed, an ambiguous UUID prefix, or a device already listed) ends the
//! list: only the entries before it are visible. An empty value hides every
//! device. Unset, every device is visible in index order.
//!
//! # MIG
//! The rules are those of NVIDIA's MIG user guide ("MIG Device Names",
//! section "CUDA Device Enumeration", for CUDA 12/R570 and later drivers;
//! simgpu reports driver 580 and CUDA 13.0):
//! - CUDA enumerates one compute instance per GPU instance and can use
//!   several GPU instances; here each instance is one GPU instance holding
//!   one compute instance, so each MIG instance is one CUDA device.
//! - A non-MIG GPU is enumerated even when a compute instance of another
//!   GPU is.
//! - CUDA supports at most 64 MIG instances across all GPUs: instances past
//!   the 64th are not enumerated.
//! - `CUDA_VISIBLE_DEVICES` accepts compute instance UUIDs, `MIG-<UUID>`
//!   (drivers ≥ R470), and the older `MIG-<GPU-UUID>/<GPU instance
//!   ID>/<compute instance ID>` form. A `MIG-` prefix that names exactly
//!   one instance is accepted as `GPU-` prefixes are.
//! - Unset, "CUDA will pick one from each GPU instance": every instance of
//!   a partitioned GPU is a device.
//!
//! The guide does not state the order, nor what an index or `GPU-` UUID of
//! a partitioned GPU means. simgpu lists a partitioned GPU's instances in
//! its place, in `nvidia-smi -L` order (NVML's MIG device index), and reads
//! an index or `GPU-` UUID of a partitioned GPU as all its instances, so
//! that an unset variable and `0,1,…` agree. A partitioned GPU itself is
//! never a CUDA device.
//!
//! Only the driver API applies the variable; NVML, as on a real system,
//! always shows every device.

/// The most MIG instances CUDA enumerates, across all GPUs.
pub const MAX_MIG_DEVICES: usize = 64;

/// A MIG instance as enumeration sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigUnit {
    /// Its slot (what the driver's ordinals map to).
    pub slot: usize,
    /// `MIG-…`.
    pub uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// A physical device as enumeration sees it: whole, or partitioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Physical {
    /// Its slot (the same as its index).
    pub slot: usize,
    /// `GPU-…`.
    pub uuid: String,
    /// Its MIG instances, in NVML index order; empty when it is whole.
    pub instances: Vec<MigUnit>,
}

impl Physical {
    /// The CUDA devices it stands for.
    fn slots(&self) -> Vec<usize> {
        if self.instances.is_empty() {
            vec![self.slot]
        } else {
            self.instances.iter().map(|i| i.slot).collect()
        }
    }
}

/// Maps the variable's value to the slots it makes visible, in ordinal
/// order.
pub fn visible_slots(spec: Option<&str>, devices: &[Physical]) -> Vec<usize> {
    let is_mig = |slot: usize| devices.iter().any(|d| d.instances.iter().any(|i| i.slot == slot));
    let mut visible: Vec<usize> = Vec::new();
    let push = |slots: Vec<usize>, visible: &mut Vec<usize>| {
        for slot in slots {
            if is_mig(slot) && visible.iter().filter(|&&s| is_mig(s)).count() >= MAX_MIG_DEVICES {
                continue;
            }
            visible.push(slot);
        }
    };
    let Some(spec) = spec else {
        for d in devices {
            push(d.slots(), &mut visible);
        }
        return visible;
    };
    for entry in spec.split(',') {
        match resolve(entry.trim(), devices) {
            Some(slots) if !slots.iter().any(|s| visible.contains(s)) => push(slots, &mut visible),
            _ => break,
        }
    }
    visible
}

/// Maps the variable's value to the physical indices it makes visible, on a
/// machine without MIG. `uuids` are the devices' UUID strings (`GPU-…`), by
/// index.
pub fn visible_devices(spec: Option<&str>, uuids: &[String]) -> Vec<usize> {
    let devices: Vec<Physical> =
        uuids.iter().enumerate().map(|(slot, uuid)| Physical { slot, uuid: uuid.clone(), instances: Vec::new() }).collect();
    visible_slots(spec, &devices)
}

fn has_prefix(text: &str, prefix: &str) -> bool {
    text.len() > prefix.len() && text.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// The one item whose UUID starts with `entry` (any case), if exactly one.
fn unique<'a, T>(entry: &str, items: impl Iterator<Item = (&'a str, T)>) -> Option<T> {
    let mut matches = items.filter(|(u, _)| u.len() >= entry.len() && u.get(..entry.len()).is_some_and(|p| p.eq_ignore_ascii_case(entry)));
    match (matches.next(), matches.next()) {
        (Some((_, t)), None) => Some(t),
        _ => None,
    }
}

fn resolve(entry: &str, devices: &[Physical]) -> Option<Vec<usize>> {
    if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<usize>().ok().and_then(|i| devices.get(i)).map(Physical::slots);
    }
    if has_prefix(entry, "GPU-") {
        return unique(entry, devices.iter().map(|d| (d.uuid.as_str(), d))).map(Physical::slots);
    }
    if has_prefix(entry, "MIG-GPU-") {
        // MIG-<GPU-UUID>/<GPU instance ID>/<compute instance ID>
        let mut parts = entry.get(4..)?.split('/');
        let (gpu, gi, ci) = (parts.next()?, parts.next()?.parse::<u32>().ok()?, parts.next()?.parse::<u32>().ok()?);
        if parts.next().is_some() {
            return None;
        }
        let device = devices.iter().find(|d| d.uuid.eq_ignore_ascii_case(gpu))?;
        return device.instances.iter().find(|i| i.gpu_instance_id == gi && i.compute_instance_id == ci).map(|i| vec![i.slot]);
    }
    if has_prefix(entry, "MIG-") {
        return unique(entry, devices.iter().flat_map(|d| d.instances.iter()).map(|i| (i.uuid.as_str(), i.slot))).map(|s| vec![s]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuids() -> Vec<String> {
        vec![
            "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6".into(),
            "GPU-89aa0000-0000-4000-8000-000000000001".into(),
            "GPU-12345678-0000-4000-8000-000000000002".into(),
        ]
    }

    #[test]
    fn unset_shows_all_and_empty_shows_none() {
        assert_eq!(visible_devices(None, &uuids()), vec![0, 1, 2]);
        assert_eq!(visible_devices(Some(""), &uuids()), Vec::<usize>::new());
    }

    #[test]
    fn indices_reorder_and_an_invalid_entry_truncates() {
        assert_eq!(visible_devices(Some("2,1"), &uuids()), vec![2, 1]);
        assert_eq!(visible_devices(Some("0,2,-1,1"), &uuids()), vec![0, 2]);
        assert_eq!(visible_devices(Some("3,0"), &uuids()), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("1,1,0"), &uuids()), vec![1]);
        assert_eq!(visible_devices(Some("0,,1"), &uuids()), vec![0]);
        assert_eq!(visible_devices(Some(" 1 , 0 "), &uuids()), vec![1, 0]);
        assert_eq!(visible_devices(Some("1x"), &uuids()), Vec::<usize>::new());
    }

    #[test]
    fn uuids_and_unique_prefixes_name_devices() {
        let u = uuids();
        assert_eq!(visible_devices(Some(&format!("{},0", u[2])), &u), vec![2, 0]);
        assert_eq!(visible_devices(Some("GPU-1234"), &u), vec![2]);
        assert_eq!(visible_devices(Some("gpu-8932F937"), &u), vec![0]);
        // "GPU-89" is shared by two devices: ambiguous, so invalid.
        assert_eq!(visible_devices(Some("1,GPU-89,0"), &u), vec![1]);
        assert_eq!(visible_devices(Some("GPU-"), &u), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("8932f937"), &u), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("MIG-GPU-8932f937/1/2"), &u), Vec::<usize>::new());
    }

    fn machine() -> Vec<Physical> {
        let u = uuids();
        let mig = |slot: usize, uuid: &str, gi: u32| MigUnit { slot, uuid: uuid.into(), gpu_instance_id: gi, compute_instance_id: 0 };
        vec![
            Physical {
                slot: 0,
                uuid: u[0].clone(),
                instances: vec![
                    mig(3, "MIG-aaaa0000-0000-5000-8000-000000000001", 1),
                    mig(4, "MIG-abbb0000-0000-5000-8000-000000000002", 2),
                ],
            },
            Physical { slot: 1, uuid: u[1].clone(), instances: Vec::new() },
            Physical { slot: 2, uuid: u[2].clone(), instances: vec![mig(5, "MIG-cccc0000-0000-5000-8000-000000000003", 1)] },
        ]
    }

    #[test]
    fn mig_instances_replace_their_gpu_and_whole_gpus_stay() {
        let m = machine();
        assert_eq!(visible_slots(None, &m), vec![3, 4, 1, 5]);
        assert_eq!(visible_slots(Some("1,0"), &m), vec![1, 3, 4]);
        assert_eq!(visible_slots(Some(&m[2].uuid), &m), vec![5]);
        assert_eq!(visible_slots(Some("MIG-abbb0000-0000-5000-8000-000000000002"), &m), vec![4]);
        assert_eq!(visible_slots(Some("mig-CCCC,1"), &m), vec![5, 1]);
        // "MIG-a" is shared by two instances: ambiguous, so the list ends.
        assert_eq!(visible_slots(Some("1,MIG-a"), &m), vec![1]);
        assert_eq!(visible_slots(Some(&format!("MIG-{}/2/0,2", m[0].uuid)), &m), vec![4, 5]);
        assert_eq!(visible_slots(Some(&format!("MIG-{}/3/0", m[0].uuid)), &m), Vec::<usize>::new());
        // An instance already listed through its GPU ends the list.
        assert_eq!(visible_slots(Some("0,MIG-aaaa"), &m), vec![3, 4]);
    }

    #[test]
    fn at_most_64_mig_instances_are_enumerated() {
        let devices: Vec<Physical> = (0..10)
            .map(|d| Physical {
                slot: d,
                uuid: format!("GPU-{d:08x}"),
                instances: (0..7)
                    .map(|k| MigUnit {
                        slot: 10 + d * 7 + k,
                        uuid: format!("MIG-{d:04x}{k:04x}"),
                        gpu_instance_id: k as u32 + 1,
                        compute_instance_id: 0,
                    })
                    .collect(),
            })
            .collect();
        let v = visible_slots(None, &devices);
        assert_eq!(v.len(), 64);
        assert_eq!(v[63], 10 + 63);
    }
}
