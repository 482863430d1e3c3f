//! The CDI spec of a prepared claim: what the container runtime adds to
//! each container that uses it.
//!
//! One file per claim, `<cdi-dir>/gpuslice.dev-slice_<claim-uid>.json`, of
//! kind `gpuslice.dev/slice` with one device named by the claim's UID.
//! Its edits:
//! - the shim, mounted read-only at [`SHIM_IN_CONTAINER`], and a file
//!   naming it mounted read-only at `/etc/ld.so.preload`, so the dynamic
//!   loader loads it into every process whatever the pod's environment;
//! - the tenant's own ledger directory (`<dir>/tenants/<tenant>`, made by
//!   the monitor) at [`LEDGER_DIR_IN_CONTAINER`];
//! - `GPUSLICE_TENANT` and `GPUSLICE_DIR`.
//!
//! The GPU itself (device nodes, driver libraries) is not here: the
//! kubelet gets NVIDIA's own CDI device for it beside this one.
//!
//! The spec directory is also this driver's memory across restarts: the
//! claims it has prepared are the files there ([`prepared`]).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The CDI vendor and class of this driver's devices.
pub const CDI_KIND: &str = "gpuslice.dev/slice";
/// The CDI specification version the files declare: 0.5.0, the oldest
/// that has every field used here (`containerEdits` with `env` and
/// `mounts` with options), so that older runtimes read them too.
pub const CDI_VERSION: &str = "0.5.0";
/// Where the shim appears inside the container.
pub const SHIM_IN_CONTAINER: &str = "/usr/local/lib/gpuslice/libgpuslice.so";
/// Where the tenant's ledger directory appears inside the container.
pub const LEDGER_DIR_IN_CONTAINER: &str = "/run/gpuslice";
/// File name prefix of this driver's spec files.
const FILE_PREFIX: &str = "gpuslice.dev-slice_";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    #[serde(rename = "cdiVersion")]
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<SpecDevice>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpecDevice {
    pub name: String,
    #[serde(rename = "containerEdits")]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ContainerEdits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Mount {
    #[serde(rename = "hostPath")]
    pub host_path: String,
    #[serde(rename = "containerPath")]
    pub container_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// The host files every claim's spec mounts.
#[derive(Debug, Clone)]
pub struct HostFiles {
    /// The shim (`libgpuslice.so`), on the host.
    pub shim: PathBuf,
    /// A file holding the line [`SHIM_IN_CONTAINER`], on the host.
    pub preload: PathBuf,
}

impl HostFiles {
    /// Puts the shim and the preload file into `state_dir` (the plugin's
    /// directory on the host), replacing older copies atomically: a
    /// container that already mounted one keeps it.
    pub fn install(state_dir: &Path, shim_source: &Path) -> Result<HostFiles, String> {
        std::fs::create_dir_all(state_dir).map_err(|e| format!("cannot create {}: {e}", state_dir.display()))?;
        let shim = state_dir.join("libgpuslice.so");
        let bytes = std::fs::read(shim_source).map_err(|e| format!("cannot read the shim {}: {e}", shim_source.display()))?;
        write_atomically(&shim, &bytes, 0o755)?;
        let preload = state_dir.join("ld.so.preload");
        write_atomically(&preload, format!("{SHIM_IN_CONTAINER}\n").as_bytes(), 0o644)?;
        Ok(HostFiles { shim, preload })
    }
}

/// The spec of claim `claim_uid` for `tenant`, whose ledger directory on
/// the host is `ledger_dir`.
pub fn claim_spec(claim_uid: &str, tenant: &str, ledger_dir: &Path, files: &HostFiles) -> Spec {
    let read_only = || ["ro", "nosuid", "nodev", "bind"].map(String::from).to_vec();
    Spec {
        cdi_version: CDI_VERSION.into(),
        kind: CDI_KIND.into(),
        devices: vec![SpecDevice {
            name: claim_uid.into(),
            container_edits: ContainerEdits {
                env: vec![format!("GPUSLICE_TENANT={tenant}"), format!("GPUSLICE_DIR={LEDGER_DIR_IN_CONTAINER}")],
                mounts: vec![
                    Mount { host_path: path_text(&files.shim), container_path: SHIM_IN_CONTAINER.into(), options: read_only() },
                    Mount { host_path: path_text(&files.preload), container_path: "/etc/ld.so.preload".into(), options: read_only() },
                    Mount {
                        host_path: path_text(ledger_dir),
                        container_path: LEDGER_DIR_IN_CONTAINER.into(),
                        options: ["rw", "nosuid", "nodev", "noexec", "bind"].map(String::from).to_vec(),
                    },
                ],
            },
        }],
    }
}

/// The qualified CDI name of claim `claim_uid`'s device.
pub fn device_id(claim_uid: &str) -> String {
    format!("{CDI_KIND}={claim_uid}")
}

/// The path of claim `claim_uid`'s spec file.
pub fn spec_path(cdi_dir: &Path, claim_uid: &str) -> PathBuf {
    cdi_dir.join(format!("{FILE_PREFIX}{claim_uid}.json"))
}

/// Writes the spec atomically (a runtime never reads half a file).
pub fn write_spec(cdi_dir: &Path, spec: &Spec) -> Result<PathBuf, String> {
    let uid = &spec.devices.first().ok_or("a spec without a device")?.name;
    std::fs::create_dir_all(cdi_dir).map_err(|e| format!("cannot create {}: {e}", cdi_dir.display()))?;
    let path = spec_path(cdi_dir, uid);
    let text = serde_json::to_vec_pretty(spec).map_err(|e| format!("cannot encode the CDI spec: {e}"))?;
    write_atomically(&path, &text, 0o644)?;
    Ok(path)
}

/// Removes claim `claim_uid`'s spec; a missing one is no error.
pub fn remove_spec(cdi_dir: &Path, claim_uid: &str) -> Result<(), String> {
    let path = spec_path(cdi_dir, claim_uid);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", path.display())),
        _ => Ok(()),
    }
}

/// The claims whose specs are in `cdi_dir`: (claim UID, tenant).
pub fn prepared(cdi_dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(cdi_dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(FILE_PREFIX) || !name.ends_with(".json") {
            continue;
        }
        let Ok(text) = std::fs::read(entry.path()) else { continue };
        let Ok(spec) = serde_json::from_slice::<Spec>(&text) else { continue };
        for device in spec.devices {
            let tenant = device.container_edits.env.iter().find_map(|e| e.strip_prefix("GPUSLICE_TENANT=").map(str::to_string));
            if let Some(tenant) = tenant {
                found.push((device.name, tenant));
            }
        }
    }
    found.sort();
    found
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    // A name of its own per write, even for writes of one path at once
    // (every claim's prepare copies the shim to the same path): a shared
    // temporary name let one write truncate the file another was about to
    // rename into place.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}.{n}", std::process::id()));
    write_through(path, &tmp, bytes, mode)
}

/// Writes `bytes` to `tmp`, made anew, and renames it onto `path`. A
/// temporary of that name already there was left by a write that died
/// (the same pid comes back after a restart, pid 1 in a container): it is
/// removed and the write tried once more.
fn write_through(path: &Path, tmp: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(tmp, path)
    };
    let written = match write() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::remove_file(tmp).and_then(|()| write()),
        other => other,
    };
    written.map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_left_by_a_write_that_died_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gpuslice-cdi-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (path, tmp) = (dir.join("spec.json"), dir.join("spec.tmp1.0"));
        // What a write that died left: read-only, and half written.
        std::fs::write(&tmp, b"{\"half").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o400)).unwrap();
        write_through(&path, &tmp, b"{\"whole\": true}", 0o644).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"whole\": true}");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        assert!(!tmp.exists(), "the temporary was renamed into place");
        // A temporary that cannot be made for another reason is still an error.
        let err = write_through(&path, &dir.join("missing/spec.tmp1.1"), b"x", 0o644).unwrap_err();
        assert!(err.contains("cannot write") && err.contains("spec.json"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"whole\": true}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_of_one_path_at_once_each_land_whole() {
        let dir = std::env::temp_dir().join(format!("gpuslice-dra-cdi-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shim.so");
        let contents: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 256 << 10]).collect();
        std::thread::scope(|scope| {
            for bytes in &contents {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..20 {
                        write_atomically(path, bytes, 0o644).unwrap();
                        let now = std::fs::read(path).unwrap();
                        assert!(contents_is_one_of(&now, 8), "a write landed torn or mixed");
                    }
                });
            }
        });
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("shim.so")], "temporary files were left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether `bytes` is one whole write of the test above.
    fn contents_is_one_of(bytes: &[u8], writers: u8) -> bool {
        bytes.len() == 256 << 10 && bytes.iter().all(|b| *b == bytes[0]) && (b'a'..b'a' + writers).contains(&bytes[0])
    }

    #[test]
    fn a_spec_round_trips_through_its_directory() {
        let dir = std::env::temp_dir().join(format!("gpuslice-dra-cdi-{}", std::process::id()));
        let files = HostFiles { shim: "/var/lib/x/libgpuslice.so".into(), preload: "/var/lib/x/ld.so.preload".into() };
        let spec = claim_spec("0d9c-11", "ns.claim", Path::new("/run/gpuslice/tenants/ns.claim"), &files);
        let path = write_spec(&dir, &spec).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["kind"], CDI_KIND);
        assert_eq!(value["devices"][0]["containerEdits"]["mounts"][1]["containerPath"], "/etc/ld.so.preload");
        assert_eq!(prepared(&dir), vec![("0d9c-11".to_string(), "ns.claim".to_string())]);
        remove_spec(&dir, "0d9c-11").unwrap();
        remove_spec(&dir, "0d9c-11").unwrap();
        assert!(prepared(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
