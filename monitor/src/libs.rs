//! Where the gpuslice libraries are, and how a child process is pointed at them.
//!
//! `libgpuslice.so` and `libsimgpu.so` are looked up next to the `gpuslice`
//! binary (where cargo puts them), then in `../lib` and `../lib/gpuslice`
//! beside it (where `scripts/install.sh` puts them: `PREFIX/bin/gpuslice`,
//! `PREFIX/lib/gpuslice/`); `GPUSLICE_SHIM_LIB` and `SIMGPU_LIB` override.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Finds a library by file name, next to the running binary or by override.
pub fn find_library(file_name: &str, override_var: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(override_var) {
        let path = PathBuf::from(path);
        return if path.is_file() { Ok(path) } else { Err(format!("{override_var}={} is not a file", path.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the gpuslice binary: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join(file_name), dir.join("../lib").join(file_name), dir.join("../lib/gpuslice").join(file_name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| format!("cannot find {file_name} next to {} (set {override_var} to its path)", exe.display()))
}

/// Makes a directory in which `libcuda.so.1` and `libnvidia-ml.so.1` (and
/// the unversioned names) are links to simgpu, and returns it. The dynamic
/// loader maps one file once, so both names share one simulated GPU.
pub fn simgpu_lib_dir() -> Result<PathBuf, String> {
    let simgpu = find_library("libsimgpu.so", "SIMGPU_LIB")?;
    let simgpu = simgpu.canonicalize().map_err(|e| format!("{}: {e}", simgpu.display()))?;
    let dir = simgpu.parent().unwrap_or(Path::new(".")).join("simgpu-libs");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for name in ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"] {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(simgpu.as_path()) {
            continue;
        }
        // Replace atomically so concurrent invocations never see a missing link.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&simgpu, &tmp).map_err(|e| format!("cannot link {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &link).map_err(|e| format!("cannot link {}: {e}", link.display()))?;
    }
    Ok(dir)
}

/// Puts `dir` first on the child's `LD_LIBRARY_PATH`.
pub fn prepend_library_path(cmd: &mut Command, dir: &Path) {
    prepend_to_list(cmd, "LD_LIBRARY_PATH", dir);
}

/// Adds `lib` to the front of the child's `LD_PRELOAD`.
pub fn prepend_preload(cmd: &mut Command, lib: &Path) {
    prepend_to_list(cmd, "LD_PRELOAD", lib);
}

/// The symbol only the shim exports (`shim/src/lib.rs`).
pub const SHIM_MARKER: &str = "gpuslice_shim_loaded";
/// The hidden verb that looks for it: `gpuslice shim-probe`.
pub const SHIM_PROBE_VERB: &str = "shim-probe";

/// Checks that the dynamic loader of this host really preloads `shim`: a
/// loader that cannot (a glibc older than the shim needs, another
/// architecture, an unreadable file) says so on stderr and runs the program
/// without it, uncapped. So this binary is started as the command will be,
/// with `shim` in its `LD_PRELOAD`, and looks for a symbol only the shim
/// exports; the loader's own words are the reason when it is not there.
pub fn check_shim_preloads(shim: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the gpuslice binary: {e}"))?;
    let mut probe = Command::new(&exe);
    probe.arg(SHIM_PROBE_VERB).env("LD_PRELOAD", shim).stdin(std::process::Stdio::null());
    let out = probe.output().map_err(|e| format!("cannot start {} to check the shim: {e}", exe.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let reason = said.lines().find(|l| l.contains("preload") || l.contains("ld.so")).unwrap_or_else(|| said.lines().next().unwrap_or(""));
    Err(format!(
        "the shim {} is not loaded into programs on this host ({}); refusing to run the command without its cap (a shim built by scripts/build-shim-portable.sh loads on glibc 2.17 and later)",
        shim.display(),
        if reason.trim().is_empty() { "the loader gave no reason".to_string() } else { reason.trim().to_string() }
    ))
}

/// `gpuslice shim-probe`: exit 0 when the shim is in this process (see
/// [`check_shim_preloads`]), 3 when it is not.
pub fn shim_probe() -> std::process::ExitCode {
    let name = std::ffi::CString::new(SHIM_MARKER).unwrap_or_default();
    // SAFETY: dlsym with the default handle and a NUL-terminated name; the
    // result is only compared with null.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if found.is_null() {
        std::process::ExitCode::from(3)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// Sets the child's `var`, a colon-separated list, to `first` followed by
/// this process's value of it.
fn prepend_to_list(cmd: &mut Command, var: &str, first: &Path) {
    let mut value = OsString::from(first);
    if let Some(old) = std::env::var_os(var).filter(|old| !old.is_empty()) {
        value.push(":");
        value.push(old);
    }
    cmd.env(var, value);
}

/// Why a command could not be started, and the exit code that says so.
#[derive(Debug)]
pub struct ExecError {
    pub message: String,
    /// 127 for a command that does not exist, 126 for one that cannot be
    /// executed, as shells, `env` and `timeout` say it; 2 otherwise.
    pub exit_code: u8,
}

/// The exit code of a command not found, as a shell gives it.
pub const EXIT_NOT_FOUND: u8 = 127;
/// The exit code of a command found but not executable.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;

/// Replaces this process with `cmd`; returns only on failure.
pub fn exec(mut cmd: Command) -> ExecError {
    use std::os::unix::process::CommandExt;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let err = cmd.exec();
    let exit_code = match err.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        std::io::ErrorKind::PermissionDenied => EXIT_NOT_EXECUTABLE,
        _ => crate::error::EXIT_USAGE,
    };
    ExecError { message: format!("cannot run {program}: {err}"), exit_code }
}

impl ExecError {
    /// Says why on stderr, as every verb does, and gives the exit code.
    pub fn report(self) -> std::process::ExitCode {
        eprintln!("gpuslice: {}", self.message);
        std::process::ExitCode::from(self.exit_code)
    }
}
