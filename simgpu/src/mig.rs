//! Multi-Instance GPU: `SIMGPU_MIG` partitions simulated devices into MIG
//! instances, each with its own memory, UUID, name and place in the state
//! file.
//!
//! # Profiles
//! The profiles are the H200 141GB's, from NVIDIA's MIG user guide
//! ("Supported MIG Profiles", H200 table): name, compute slices of 7,
//! memory slices of 8 and how many instances of the profile fit at most.
//! SM counts come from `nvidia-smi mig -lgip` on an H100 80GB, the same
//! GH100 die. The `+me` (media extension) variants are not simulated.
//!
//! An instance's memory is its memory slices' share of `SIMGPU_MEMORY`
//! (one eighth per slice), so the names are the H200's while the sizes scale
//! with the simulated device, as tests need small ones.
//!
//! # Slots
//! Every place in the state file that holds memory and a scheduler is a
//! *slot*: slots `0..SIMGPU_DEVICES` are the physical devices, and the MIG
//! instances follow, parent by parent, each parent's in the order
//! `SIMGPU_MIG` lists them. A partitioned parent keeps its slot (NVML still
//! shows it, with its whole memory) but CUDA never creates a context on it.
//!
//! # Placement
//! A partition is accepted when its compute slices fit in 7, its memory
//! slices in 8, and no profile is used more often than the guide allows.
//! The guide's finer placement rules (which slice each instance starts at)
//! are not modelled. Each instance is one GPU instance holding one compute
//! instance that spans it: GPU instance ids are 1, 2, … in list order, and
//! every compute instance id is 0.

use std::fmt;

/// An H200 MIG profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// `3g.71gb`: compute slices, then memory in GB.
    pub name: &'static str,
    pub compute_slices: u32,
    pub memory_slices: u32,
    /// How many instances of this profile one GPU can hold.
    pub max_instances: u32,
    /// Streaming multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`).
    pub sm_count: u32,
}

/// Compute and memory slices of a whole H200.
pub const COMPUTE_SLICES: u32 = 7;
pub const MEMORY_SLICES: u32 = 8;
/// `nvmlDeviceGetMaxMigDeviceCount` of an H200: seven 1g instances.
pub const MAX_INSTANCES_PER_GPU: u32 = 7;

pub const PROFILES: [Profile; 6] = [
    Profile { name: "1g.18gb", compute_slices: 1, memory_slices: 1, max_instances: 7, sm_count: 16 },
    Profile { name: "1g.35gb", compute_slices: 1, memory_slices: 2, max_instances: 4, sm_count: 26 },
    Profile { name: "2g.35gb", compute_slices: 2, memory_slices: 2, max_instances: 3, sm_count: 32 },
    Profile { name: "3g.71gb", compute_slices: 3, memory_slices: 4, max_instances: 2, sm_count: 60 },
    Profile { name: "4g.71gb", compute_slices: 4, memory_slices: 4, max_instances: 1, sm_count: 64 },
    Profile { name: "7g.141gb", compute_slices: 7, memory_slices: 8, max_instances: 1, sm_count: 132 },
];

impl Profile {
    pub fn by_name(name: &str) -> Option<&'static Profile> {
        PROFILES.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// The instance's memory on a device of `device_bytes`.
    pub fn memory_bytes(&self, device_bytes: u64) -> u64 {
        device_bytes / MEMORY_SLICES as u64 * self.memory_slices as u64
    }
}

/// One device's partition, as `SIMGPU_MIG` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Physical device index.
    pub device: u32,
    /// Its instances, in the order given.
    pub profiles: Vec<&'static Profile>,
}

/// Why a `SIMGPU_MIG` value is refused; [`fmt::Display`] says what is
/// accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MigError {
    Syntax,
    Device { device: String, device_count: u32 },
    Repeated { device: u32 },
    Profile { name: String },
    TooMany { profile: &'static str, count: u32, max: u32 },
    Slices { device: u32, compute: u32, memory: u32 },
    TooSmall { profile: &'static str, instance_bytes: u64, context_bytes: u64 },
    Slots { slots: usize, max: usize },
}

impl fmt::Display for MigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        match self {
            MigError::Syntax => write!(f, "DEVICE=PROFILE,PROFILE,… per partitioned device, devices separated by ';' (for example 0=3g.71gb,2g.35gb,1g.18gb)"),
            MigError::Device { device, device_count } => write!(f, "a device index from 0 to {} before '=', not {device:?}", device_count.saturating_sub(1)),
            MigError::Repeated { device } => write!(f, "each device partitioned once; device {device} is listed twice"),
            MigError::Profile { name } => write!(f, "H200 MIG profile names ({}), not {name:?}", names.join(", ")),
            MigError::TooMany { profile, count, max } => write!(f, "at most {max} instance(s) of {profile} per GPU, not {count}"),
            MigError::Slices { device, compute, memory } => write!(
                f,
                "instances that fit one H200 ({COMPUTE_SLICES} compute and {MEMORY_SLICES} memory slices); device {device} asks for {compute} compute and {memory} memory slices"
            ),
            MigError::TooSmall { profile, instance_bytes, context_bytes } => write!(
                f,
                "instances larger than SIMGPU_CONTEXT_MEMORY ({context_bytes} bytes); {profile} has {instance_bytes} bytes of SIMGPU_MEMORY"
            ),
            MigError::Slots { slots, max } => write!(f, "at most {max} devices and MIG instances together, not {slots}"),
        }
    }
}

/// Parses `0=3g.71gb,2g.35gb,1g.18gb;1=7g.141gb`. An empty value partitions
/// nothing.
pub fn parse(text: &str, device_count: u32) -> Result<Vec<Partition>, MigError> {
    let mut partitions: Vec<Partition> = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (device, list) = part.split_once('=').ok_or(MigError::Syntax)?;
        let device_text = device.trim();
        let device = match device_text.parse::<u32>() {
            Ok(d) if d < device_count && device_text.bytes().all(|b| b.is_ascii_digit()) => d,
            _ => return Err(MigError::Device { device: device_text.to_string(), device_count }),
        };
        if partitions.iter().any(|p| p.device == device) {
            return Err(MigError::Repeated { device });
        }
        let mut profiles = Vec::new();
        for name in list.split(',').map(str::trim) {
            let name = name.strip_prefix("MIG ").unwrap_or(name);
            if name.is_empty() {
                return Err(MigError::Syntax);
            }
            profiles.push(Profile::by_name(name).ok_or_else(|| MigError::Profile { name: name.to_string() })?);
        }
        for profile in &PROFILES {
            let count = profiles.iter().filter(|p| p.name == profile.name).count() as u32;
            if count > profile.max_instances {
                return Err(MigError::TooMany { profile: profile.name, count, max: profile.max_instances });
            }
        }
        let compute: u32 = profiles.iter().map(|p| p.compute_slices).sum();
        let memory: u32 = profiles.iter().map(|p| p.memory_slices).sum();
        if compute > COMPUTE_SLICES || memory > MEMORY_SLICES {
            return Err(MigError::Slices { device, compute, memory });
        }
        partitions.push(Partition { device, profiles });
    }
    partitions.sort_by_key(|p| p.device);
    Ok(partitions)
}

/// The canonical text of a partition list (devices in order, profile names
/// in lower case): two values that mean the same thing give the same text.
pub fn canonical(partitions: &[Partition]) -> String {
    partitions
        .iter()
        .map(|p| format!("{}={}", p.device, p.profiles.iter().map(|x| x.name).collect::<Vec<_>>().join(",")))
        .collect::<Vec<_>>()
        .join(";")
}

/// A stable 64-bit digest of the partitions (FNV-1a of [`canonical`]); 0
/// when nothing is partitioned, so state files made before MIG existed
/// (whose digest word is zero) still match a configuration without it.
pub fn digest(partitions: &[Partition]) -> u64 {
    if partitions.is_empty() {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical(partitions).bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

/// A MIG instance in the slot table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Physical index of the partitioned device.
    pub parent: usize,
    /// Its index under the parent (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub position: u32,
    pub profile: &'static Profile,
}

impl Instance {
    /// `nvmlDeviceGetGpuInstanceId`.
    pub fn gpu_instance_id(&self) -> u32 {
        self.position + 1
    }

    /// `nvmlDeviceGetComputeInstanceId`: one compute instance spans the GPU
    /// instance, and it is the first.
    pub fn compute_instance_id(&self) -> u32 {
        0
    }
}

/// What each slot of the state file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    device_count: usize,
    /// Slot `device_count + k` is `instances[k]`.
    instances: Vec<Instance>,
}

impl Topology {
    pub fn new(device_count: u32, partitions: &[Partition]) -> Topology {
        let mut instances = Vec::new();
        for p in partitions {
            for (position, profile) in p.profiles.iter().enumerate() {
                instances.push(Instance { parent: p.device as usize, position: position as u32, profile });
            }
        }
        Topology { device_count: device_count as usize, instances }
    }

    /// Physical devices and MIG instances together.
    pub fn slot_count(&self) -> usize {
        self.device_count + self.instances.len()
    }

    /// The instance in `slot`, if it holds one.
    pub fn instance(&self, slot: usize) -> Option<&Instance> {
        slot.checked_sub(self.device_count).and_then(|k| self.instances.get(k))
    }

    /// The physical device a slot belongs to (itself, or its parent).
    pub fn physical(&self, slot: usize) -> usize {
        self.instance(slot).map_or(slot, |i| i.parent)
    }

    /// Whether physical device `device` is partitioned.
    pub fn is_partitioned(&self, device: usize) -> bool {
        self.instances.iter().any(|i| i.parent == device)
    }

    /// The slots of `device`'s instances, in position order.
    pub fn instance_slots(&self, device: usize) -> Vec<usize> {
        (self.device_count..self.slot_count()).filter(|&s| self.instance(s).is_some_and(|i| i.parent == device)).collect()
    }

    /// The slot of `device`'s instance at `position`.
    pub fn instance_slot(&self, device: usize, position: u32) -> Option<usize> {
        self.instance_slots(device).into_iter().find(|&s| self.instance(s).is_some_and(|i| i.position == position))
    }

    /// Each slot's memory capacity on devices of `device_bytes`.
    pub fn capacities(&self, device_bytes: u64) -> Vec<u64> {
        (0..self.slot_count()).map(|s| self.instance(s).map_or(device_bytes, |i| i.profile.memory_bytes(device_bytes))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &Partition) -> Vec<&str> {
        p.profiles.iter().map(|x| x.name).collect()
    }

    #[test]
    fn a_partition_is_parsed_and_laid_out_after_the_physical_devices() {
        let parts = parse(" 0 = 3g.71gb, 2G.35GB ,MIG 1g.18gb", 2).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!((parts[0].device, names(&parts[0])), (0, vec!["3g.71gb", "2g.35gb", "1g.18gb"]));
        let t = Topology::new(2, &parts);
        assert_eq!(t.slot_count(), 5);
        assert_eq!(t.instance(1), None);
        assert_eq!(t.instance(3).map(|i| (i.parent, i.position, i.gpu_instance_id())), Some((0, 1, 2)));
        assert_eq!(t.physical(4), 0);
        assert_eq!(t.physical(1), 1);
        assert_eq!(t.instance_slots(0), vec![2, 3, 4]);
        assert!(t.is_partitioned(0) && !t.is_partitioned(1));
        assert_eq!(t.capacities(8 << 30), vec![8 << 30, 8 << 30, 4 << 30, 2 << 30, 1 << 30]);
        assert_eq!(canonical(&parse("1=7g.141gb;0=1g.18gb", 2).unwrap()), "0=1g.18gb;1=7g.141gb");
        assert_eq!(digest(&[]), 0);
        assert_ne!(digest(&parts), digest(&parse("0=3g.71gb,2g.35gb", 2).unwrap()));
        assert_eq!(parse("", 1).unwrap(), vec![]);
    }

    #[test]
    fn bad_partitions_say_what_is_accepted() {
        let e = parse("0=3g.40gb", 1).unwrap_err();
        assert!(e.to_string().contains("1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"), "{e}");
        assert!(e.to_string().contains("3g.40gb"), "{e}");
        assert_eq!(parse("2=1g.18gb", 2).unwrap_err(), MigError::Device { device: "2".into(), device_count: 2 });
        assert_eq!(parse("0=1g.18gb;0=1g.18gb", 2).unwrap_err(), MigError::Repeated { device: 0 });
        assert_eq!(parse("3g.71gb", 1).unwrap_err(), MigError::Syntax);
        assert_eq!(parse("0=1g.18gb,,1g.18gb", 1).unwrap_err(), MigError::Syntax);
        assert_eq!(parse("0=3g.71gb,3g.71gb,3g.71gb", 1).unwrap_err(), MigError::TooMany { profile: "3g.71gb", count: 3, max: 2 });
        assert_eq!(parse("0=4g.71gb,3g.71gb,1g.18gb", 1).unwrap_err(), MigError::Slices { device: 0, compute: 8, memory: 9 });
        assert!(parse("0=4g.71gb,3g.71gb", 1).is_ok());
        assert!(parse("0=1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb", 1).is_ok());
    }
}
