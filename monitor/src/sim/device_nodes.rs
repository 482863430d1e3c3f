//! Placeholder NVIDIA device nodes for a command run on simgpu
//! (`gpuslice sim --device-nodes`).
//!
//! Some frameworks decide whether there is a GPU by looking at `/dev` before
//! they load the driver. JAX 0.10 registers its CUDA backend only when
//! `/dev/nvidia0` or `/dev/nvidiactl` exists: it `stat`s the first (traced:
//! it never opens, reads or `ioctl`s either; simgpu, loaded as
//! `libcuda.so.1`, needs no node at all). On a machine without a GPU, and in
//! CI, there are none, so JAX silently runs on the CPU.
//!
//! This process, just before it becomes the command, gives itself a `/dev`
//! that has them, without changing the host's:
//!
//! 1. a mount namespace of its own, every mount in it private, so nothing
//!    made below propagates back to the host;
//! 2. a small tmpfs, mounted on a fresh temporary directory, holding an
//!    overlay's upper layer that already has the placeholders: empty regular
//!    files, readable and writable by everyone (no character devices: on a
//!    host that has a GPU, a node with NVIDIA's major number would reach the
//!    real driver);
//! 3. that overlay mounted on `/dev`, the real `/dev` its lower layer: every
//!    real entry shows through and works as before, the placeholders are
//!    added, and anything the command creates in `/dev` lands in the tmpfs;
//! 4. the mounts below the real `/dev` (`/dev/shm`, `/dev/pts`,
//!    `/dev/mqueue`, …), which an overlay does not show, bound again over
//!    their places, reached through a descriptor of the covered `/dev`;
//! 5. the tmpfs detached from its directory (the overlay keeps it) and the
//!    directory removed: when the command ends, the namespace goes with it
//!    and nothing is left on the host.
//!
//! Making a mount namespace needs `CAP_SYS_ADMIN` (root); without it, or
//! without the overlay filesystem, this fails with a message that says so,
//! before the command starts.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most devices simgpu simulates (`SIMGPU_DEVICES`).
pub const MAX_DEVICES: u32 = 16;

/// What to do where it fails for want of privilege.
const NEEDS_PRIVILEGE: &str = "it makes a private mount namespace, which needs root or CAP_SYS_ADMIN: run gpuslice as root \
     (in a container: with CAP_SYS_ADMIN), or create /dev/nvidia0 yourself (JAX only checks that it exists)";

/// The placeholder nodes for `devices` simulated devices, by name in `/dev`.
pub fn placeholder_names(devices: u32) -> Vec<String> {
    let mut names: Vec<String> = (0..devices).map(|i| format!("nvidia{i}")).collect();
    names.extend(["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"].map(String::from));
    names
}

/// Gives this process (and so the command it becomes) a `/dev` with the
/// placeholders for `devices` devices, in a mount namespace of its own.
pub fn enter(devices: u32) -> Result<(), String> {
    // Read before anything is mounted: which mounts lie below /dev.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let below_dev = top_mounts_below(&mountinfo, "/dev");
    // SAFETY: unshare has no memory-safety preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(format!("unshare(CLONE_NEWNS) failed ({}); {NEEDS_PRIVILEGE}", io::Error::last_os_error()));
    }
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(|e| format!("cannot make the new mount namespace's mounts private ({e}); {NEEDS_PRIVILEGE}"))?;
    // The real /dev, still reachable once the overlay covers it.
    let old_dev = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open("/dev")
        .map_err(|e| format!("cannot open /dev: {e}"))?;
    let staging = make_temp_dir()?;
    let result = populate_and_mount(&staging, devices, &old_dev, &below_dev);
    // The tmpfs on it is detached, and the directory, empty on the host's
    // file system, goes, whether or not the overlay was made.
    // SAFETY: a NUL-terminated path; umount2 has no other preconditions.
    unsafe { libc::umount2(c_path(&staging)?.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(&staging);
    result
}

fn populate_and_mount(staging: &Path, devices: u32, old_dev: &File, below_dev: &[String]) -> Result<(), String> {
    mount(Some("tmpfs"), staging, Some("tmpfs"), libc::MS_NOSUID, Some("mode=755,size=1m"))
        .map_err(|e| format!("cannot mount a tmpfs on {} ({e}); {NEEDS_PRIVILEGE}", staging.display()))?;
    let (upper, work) = (staging.join("upper"), staging.join("work"));
    for dir in [&upper, &work] {
        std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // The upper layer's root is the overlay's root: /dev's own mode.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot set the mode of {}: {e}", upper.display()))?;
    for name in placeholder_names(devices) {
        let path = upper.join(&name);
        File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    }
    let options = format!("lowerdir=/dev,upperdir={},workdir={}", overlay_path(&upper)?, overlay_path(&work)?);
    mount(Some("overlay"), Path::new("/dev"), Some("overlay"), libc::MS_NOSUID, Some(&options)).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::ENODEV) {
            "this kernel has no overlay filesystem (modprobe overlay)"
        } else {
            NEEDS_PRIVILEGE
        };
        format!("cannot mount an overlay on /dev ({e}); {hint}")
    })?;
    for name in below_dev {
        let source = PathBuf::from(format!("/proc/self/fd/{}/{name}", old_dev.as_raw_fd()));
        let target = Path::new("/dev").join(name);
        mount(Some(&source.to_string_lossy()), &target, None, libc::MS_BIND | libc::MS_REC, None)
            .map_err(|e| format!("cannot bind {} again over the overlay ({e})", target.display()))?;
    }
    Ok(())
}

/// The mount points directly below `dir` (`shm`, `pts`: relative to it),
/// each once, from `/proc/self/mountinfo`'s text. A mount below another of
/// them (`/dev/shm/x`) comes along when its parent is bound recursively.
pub fn top_mounts_below(mountinfo: &str, dir: &str) -> Vec<String> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let mut found: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter_map(|point| point.strip_prefix(&prefix).map(str::to_string))
        .filter(|rest| !rest.is_empty())
        .collect();
    found.sort();
    found.dedup();
    let tops: Vec<String> = found.iter().filter(|p| !found.iter().any(|q| p.starts_with(&format!("{q}/")))).cloned().collect();
    tops
}

/// `/proc/self/mountinfo` writes space, tab, newline and backslash in a
/// path as octal escapes (`\040`).
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A fresh directory `gpuslice-dev-XXXXXX` in the temporary directory.
fn make_temp_dir() -> Result<PathBuf, String> {
    let template = std::env::temp_dir().join("gpuslice-dev-XXXXXX");
    let mut bytes = c_path(&template)?.into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template ending in XXXXXX, as mkdtemp requires.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(format!("cannot create a directory like {}: {}", template.display(), io::Error::last_os_error()));
    }
    bytes.pop();
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

/// A path for an overlay's options, which separate with ',' and ':'.
fn overlay_path(path: &Path) -> Result<String, String> {
    let text = path.to_str().filter(|t| !t.contains([',', ':', '\\'])).ok_or_else(|| {
        format!("the temporary directory {} cannot be named in an overlay's options (set TMPDIR to a plain path)", path.display())
    })?;
    Ok(text.to_string())
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{} holds a NUL byte", path.display()))
}

/// mount(2), its strings checked for NUL bytes.
fn mount(source: Option<&str>, target: &Path, fstype: Option<&str>, flags: libc::c_ulong, data: Option<&str>) -> io::Result<()> {
    let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let source = source.map(CString::new).transpose().map_err(invalid)?;
    let target = CString::new(target.as_os_str().as_bytes()).map_err(invalid)?;
    let fstype = fstype.map(CString::new).transpose().map_err(invalid)?;
    let data = data.map(CString::new).transpose().map_err(invalid)?;
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that lives
    // until the call returns.
    let rc = unsafe { libc::mount(ptr(&source), target.as_ptr(), ptr(&fstype), flags, ptr(&data).cast()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mounts_directly_below_dev_are_found_once_and_unescaped() {
        let mountinfo = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
23 22 0:5 / /dev rw,relatime - devtmpfs devtmpfs rw
24 23 0:21 / /dev/shm rw - tmpfs tmpfs rw
25 24 0:21 / /dev/shm rw - tmpfs tmpfs rw
26 23 0:22 / /dev/pts rw - devpts devpts rw
27 24 0:30 / /dev/shm/inner rw - tmpfs tmpfs rw
28 23 0:31 / /dev/odd\\040name rw - tmpfs tmpfs rw
29 22 0:32 / /devices rw - tmpfs tmpfs rw
";
        assert_eq!(top_mounts_below(mountinfo, "/dev"), ["odd name", "pts", "shm"]);
    }

    #[test]
    fn one_node_per_device_then_the_control_nodes() {
        assert_eq!(placeholder_names(2), ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]);
    }
}
