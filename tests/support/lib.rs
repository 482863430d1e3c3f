//! Support for the end-to-end tests: where the built artefacts are, how C test
//! programs are compiled, and how a test runs real processes on simgpu or under
//! the shim, each test in its own directory with its own simulated GPU.
//!
//! Data flow of a typical test:
//!
//! ```text
//!  compile_c("memctl") ──► target/debug/e2e-c/memctl-<hash>   (gcc, linked against simgpu)
//!  Sim::new().memory("1GiB").shim().memory_limit("512MiB")
//!      │  own temp dir: SIMGPU_STATE=<dir>/simgpu.state, GPUSLICE_DIR=<dir>/ledger
//!      ▼
//!  sim.run(&mut sim.c("memctl").args([...]))  ──► Output { status, stdout, stderr, key=value pairs }
//! ```
//!
//! Test programs print machine-readable `key=value` lines on stdout; the test
//! parses them ([`Output::get`], [`Output::u64`]) and asserts on what the
//! application saw. Every child runs under a deadline: a hung child is killed
//! and fails its test instead of hanging CI.
//!
//! Environment overrides: `GS_TEST_TARGET_DIR` (where the built libraries and
//! the `gpuslice` binary are; default: derived from the test binary's path),
//! `GS_TEST_TIMEOUT_S` (deadline per child, default 60 s),
//! `GS_TEST_KEEP=1` (keep every test directory, not only failed ones).

pub mod driver;
pub mod kube;
pub mod poll;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `CUresult` values the tests assert on (from `cuda.h`).
pub mod cu {
    pub const SUCCESS: i64 = 0;
    pub const INVALID_VALUE: i64 = 1;
    pub const OUT_OF_MEMORY: i64 = 2;
    pub const NOT_INITIALIZED: i64 = 3;
    pub const INVALID_DEVICE: i64 = 101;
    pub const INVALID_CONTEXT: i64 = 201;
    pub const INVALID_HANDLE: i64 = 400;
    pub const NOT_PERMITTED: i64 = 800;
    pub const NOT_FOUND: i64 = 500;
    pub const NOT_READY: i64 = 600;
    pub const NOT_SUPPORTED: i64 = 801;
}

/// Sizes in bytes.
pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// The repository root (where `Cargo.toml`, `tests/` and `.deps/` are).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo profile directory holding the built artefacts: `target/debug`
/// for a test binary at `target/debug/deps/name-hash`, unless
/// `GS_TEST_TARGET_DIR` names another.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GS_TEST_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("cannot locate the running test binary");
    let mut dir = exe.parent().expect("test binary has no parent directory").to_path_buf();
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.pop();
    }
    dir
}

fn built_artefact(file_name: &str, crate_name: &str) -> PathBuf {
    let path = target_dir().join(file_name);
    let build_hint = format!(
        "build it first (`cargo build -p {crate_name}`, or `cargo build --workspace`; \
         for benchmarks `cargo build --release -p {crate_name}`), or set GS_TEST_TARGET_DIR"
    );
    assert!(path.is_file(), "{} is missing: {build_hint}", path.display());
    // `cargo test` rebuilds the test binaries but not the libraries they
    // load as real processes would: refuse to test a stale one. Cargo's
    // dep-info file beside the artefact lists the sources it was built from.
    if let Some(stale) = newer_source(&path) {
        panic!("{} is older than {}: {build_hint}", path.display(), stale.display());
    }
    path
}

/// A source that cargo's dep-info (`<artefact stem>.d`) lists for
/// `artefact` and that changed after it was built, if any.
fn newer_source(artefact: &Path) -> Option<PathBuf> {
    let built = std::fs::metadata(artefact).and_then(|m| m.modified()).ok()?;
    let dep_info = std::fs::read_to_string(artefact.with_extension("d")).ok()?;
    let (_, sources) = dep_info.lines().next()?.split_once(": ")?;
    sources
        .split_whitespace()
        .map(PathBuf::from)
        .find(|source| std::fs::metadata(source).and_then(|m| m.modified()).is_ok_and(|changed| changed > built))
}

/// `libgpuslice.so` as `scripts/build-shim-portable.sh` builds it, linked
/// against glibc 2.17's symbols (`target/glibc-floor/<triple>/debug/`,
/// beside this profile's directory), refused when older than its sources.
pub fn glibc_floor_shim_lib() -> PathBuf {
    glibc_floor_lib("libgpuslice.so", "")
}

/// `libsimgpu.so` built the same way (`build-shim-portable.sh --with-simgpu`).
pub fn glibc_floor_simgpu_lib() -> PathBuf {
    glibc_floor_lib("libsimgpu.so", " --with-simgpu")
}

fn glibc_floor_lib(file: &str, option: &str) -> PathBuf {
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let profile = target_dir();
    let path = profile
        .parent()
        .map(|target| target.join("glibc-floor").join(triple).join(profile.file_name().unwrap_or_default()).join(file))
        .unwrap_or_default();
    let hint = format!("build it first: `bash scripts/build-shim-portable.sh{option}` (scripts/test.sh does)");
    assert!(path.is_file(), "{} is missing: {hint}", path.display());
    if let Some(stale) = newer_source(&path) {
        panic!("{} is older than {}: {hint}", path.display(), stale.display());
    }
    path
}

/// `libsimgpu.so`, the simulated GPU.
pub fn simgpu_lib() -> PathBuf {
    built_artefact("libsimgpu.so", "simgpu")
}

/// `libgpuslice.so`, the shim.
pub fn shim_lib() -> PathBuf {
    built_artefact("libgpuslice.so", "gpuslice-shim")
}

/// The `gpuslice` binary.
pub fn gpuslice_bin() -> PathBuf {
    built_artefact("gpuslice", "gpuslice-monitor")
}

/// The directory in which `libcuda.so.1`, `libcuda.so`, `libnvidia-ml.so.1`
/// and `libnvidia-ml.so` link to simgpu, laid out as `gpuslice sim` lays it
/// out (`target/<profile>/simgpu-libs/`). Put first on `LD_LIBRARY_PATH`, it
/// makes a program's driver and NVML the simulated GPU.
pub fn sim_lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let simgpu = simgpu_lib().canonicalize().expect("cannot resolve libsimgpu.so");
        let dir = simgpu.parent().expect("libsimgpu.so has no directory").join("simgpu-libs");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        for name in ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"] {
            let link = dir.join(name);
            if std::fs::read_link(&link).ok().as_deref() == Some(simgpu.as_path()) {
                continue;
            }
            // Link under a private name, then rename over: other test
            // binaries running at the same time never see a missing link.
            let tmp = dir.join(format!(".{name}.{}.{}", std::process::id(), unique()));
            std::os::unix::fs::symlink(&simgpu, &tmp).unwrap_or_else(|e| panic!("cannot link {}: {e}", tmp.display()));
            std::fs::rename(&tmp, &link).unwrap_or_else(|e| panic!("cannot link {}: {e}", link.display()));
        }
        dir
    })
    .clone()
}

/// The Python of the test virtualenv, which holds NVIDIA's `cuda-bindings`
/// and `nvidia-ml-py`.
pub fn python() -> PathBuf {
    let path = repo_root().join(".deps/venv/bin/python");
    assert!(path.is_file(), "{} is missing: run `bash scripts/setup.sh` to install the Python clients the tests drive", path.display());
    path
}

/// `tests/python/<name>`.
pub fn python_script(name: &str) -> PathBuf {
    let path = repo_root().join("tests/python").join(name);
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Compiles `tests/c/<name>.c` (with `tests/c/common.h`) against the real
/// `cuda.h`/`nvml.h` and links it to simgpu as `libcuda`/`libnvidia-ml`.
/// Returns the executable, cached under `target/<profile>/e2e-c/` by a hash
/// of its sources and flags. Safe to call from parallel tests: each build
/// goes to a private file that is renamed into place.
pub fn compile_c(name: &str) -> PathBuf {
    build_c(name, CBuild::Program)
}

/// Compiles `tests/c/<name>.c` into a shared library of no particular
/// name (an `LD_AUDIT` module, say) and returns its path.
pub fn compile_c_library(name: &str) -> PathBuf {
    build_c(name, CBuild::Library)
}

/// What [`build_c`] makes of a C file.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum CBuild {
    /// A program linked against simgpu's driver (and NVML where it uses it).
    Program,
    /// A CUDA driver, `libcuda.so.1`.
    Driver,
    /// A shared library linked against nothing but libc.
    Library,
}

/// Compiles `tests/c/<name>.c` into a CUDA driver of the tests' own, a
/// shared library named `libcuda.so.1` in a directory of its own, and
/// returns that directory: [`Sim::driver`] puts it first on
/// `LD_LIBRARY_PATH`, so programs and the shim load it as the driver.
pub fn compile_c_driver(name: &str) -> PathBuf {
    let built = build_c(name, CBuild::Driver);
    let dir = built.with_extension("driver");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let link = dir.join("libcuda.so.1");
    if std::fs::read_link(&link).ok().as_deref() != Some(built.as_path()) {
        let tmp = dir.join(format!(".libcuda.so.1.{}.{}", std::process::id(), unique()));
        std::os::unix::fs::symlink(&built, &tmp).unwrap_or_else(|e| panic!("cannot link {}: {e}", tmp.display()));
        std::fs::rename(&tmp, &link).unwrap_or_else(|e| panic!("cannot link {}: {e}", link.display()));
    }
    dir
}

fn build_c(name: &str, kind: CBuild) -> PathBuf {
    static BUILDS: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    let include = repo_root().join(".deps/include");
    for header in ["cuda.h", "nvml.h"] {
        assert!(
            include.join(header).is_file(),
            "{} is missing: run `bash scripts/setup.sh` to install NVIDIA's headers",
            include.join(header).display()
        );
    }
    let c_dir = repo_root().join("tests/c");
    let source_path = c_dir.join(format!("{name}.c"));
    let source = std::fs::read(&source_path).unwrap_or_else(|e| panic!("cannot read {}: {e}", source_path.display()));
    let common = std::fs::read(c_dir.join("common.h")).unwrap_or_default();
    let uses_nvml = String::from_utf8_lossy(&source).contains("<nvml.h>");

    let lib_dir = sim_lib_dir();
    let mut args: Vec<OsString> = vec![
        "-std=gnu11".into(),
        "-O1".into(),
        "-g".into(),
        "-Wall".into(),
        "-Wno-deprecated-declarations".into(),
        "-I".into(),
        include.into(),
        "-I".into(),
        c_dir.clone().into(),
        source_path.clone().into(),
    ];
    match kind {
        // A real libcuda binds its own names to itself (an LD_PRELOADed
        // library does not interpose on what its cuGetProcAddress hands out).
        CBuild::Driver => args.extend(["-shared".into(), "-fPIC".into(), "-Wl,-soname,libcuda.so.1".into(), "-Wl,-Bsymbolic".into()]),
        CBuild::Library => args.extend(["-shared".into(), "-fPIC".into()]),
        CBuild::Program => {
            args.extend(["-L".into(), lib_dir.into(), "-lcuda".into()]);
            if uses_nvml {
                args.push("-lnvidia-ml".into());
            }
        }
    }
    args.push("-lpthread".into());
    // dlopen and dlvsym (tests/c/skip_gate.c): in libc since glibc 2.34,
    // in libdl before.
    args.push("-ldl".into());

    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&source, &mut hasher);
    std::hash::Hash::hash(&common, &mut hasher);
    std::hash::Hash::hash(&args, &mut hasher);
    let key = std::hash::Hasher::finish(&hasher);
    let cache = target_dir().join("e2e-c");
    std::fs::create_dir_all(&cache).unwrap_or_else(|e| panic!("cannot create {}: {e}", cache.display()));
    let out = cache.join(format!("{name}-{key:016x}{}", if kind == CBuild::Program { "" } else { ".so" }));

    let lock = {
        let mut map = BUILDS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        map.entry(name.to_string()).or_default().clone()
    };
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    if out.is_file() {
        return out;
    }
    let tmp = cache.join(format!(".{name}-{key:016x}.{}.{}", std::process::id(), unique()));
    let result = Command::new("gcc")
        .args(&args)
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc, which builds the C test programs ({e}): `bash scripts/setup.sh` installs it"));
    if !result.status.success() {
        let _ = std::fs::remove_file(&tmp);
        panic!(
            "compiling {} failed ({}):\n{}{}",
            source_path.display(),
            result.status,
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
    }
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("cannot move {} into place: {e}", out.display()));
    out
}

/// The deadline for one child process.
pub fn child_timeout() -> Duration {
    let secs = std::env::var("GS_TEST_TIMEOUT_S").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    Duration::from_secs(secs)
}

/// Environment variables a test child must not inherit from whoever runs
/// the tests, so that each test states its own configuration.
fn is_configuration_variable(name: &str) -> bool {
    name.starts_with("SIMGPU_")
        || name.starts_with("GPUSLICE_")
        || name.starts_with("CUDA_DEVICE_MEMORY_LIMIT")
        || name.starts_with("CUDA_DEVICE_SM_LIMIT")
        || matches!(name, "CUDA_TASK_PRIORITY" | "CUDA_VISIBLE_DEVICES" | "LD_PRELOAD")
}

/// One test's simulated machine: its own directory, simgpu state file and
/// (optionally) shim configuration. Every process started from one `Sim`
/// shares the same simulated GPU and the same ledger directory.
pub struct Sim {
    dir: PathBuf,
    envs: Vec<(OsString, Option<OsString>)>,
    shim: bool,
    /// A directory whose `libcuda.so.1` replaces simgpu's as the driver.
    driver: Option<PathBuf>,
    timeout: Duration,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

/// `cmd` run as `uid` (its own gid, no supplementary groups) through
/// `setpriv`, with the same program, arguments and environment.
pub fn wrap_as_user(uid: u32, cmd: &Command) -> Command {
    let mut wrapped = Command::new("setpriv");
    wrapped.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}")).args(["--clear-groups", "--"]);
    wrapped.arg(cmd.get_program()).args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

impl Sim {
    /// `program` run by `setpriv` as `uid`:`gid` with exactly the
    /// supplementary `groups`, in this test's environment.
    pub fn as_user(&self, uid: u32, gid: u32, groups: &[u32], program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.command("setpriv");
        cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}"));
        if groups.is_empty() {
            cmd.arg("--clear-groups");
        } else {
            let list: Vec<String> = groups.iter().map(u32::to_string).collect();
            cmd.arg(format!("--groups={}", list.join(",")));
        }
        cmd.arg("--").arg(program);
        cmd
    }

    /// Creates the simulated GPU's state file as root and opens it to
    /// every user, as a shared machine's would be.
    pub fn share_the_gpu(&self) {
        use std::os::unix::fs::PermissionsExt;
        let mut cmd = self.c("memctl");
        cmd.env_remove("LD_PRELOAD").args(["init"]);
        self.run(&mut cmd).assert_success();
        std::fs::set_permissions(self.state_file(), std::fs::Permissions::from_mode(0o666))
            .unwrap_or_else(|e| panic!("cannot open {} to every user: {e}", self.state_file().display()));
    }

    /// A fresh directory named after the running test, holding the simgpu
    /// state file `simgpu.state` and the ledger directory `ledger/`.
    pub fn new() -> Sim {
        let test = std::thread::current().name().unwrap_or("test").replace("::", ".");
        let test: String = test.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
        let dir = std::env::temp_dir().join(format!("gpuslice-e2e-{test}-{}-{}", std::process::id(), unique()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ledger")).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut sim = Sim { dir, envs: Vec::new(), shim: false, driver: None, timeout: child_timeout() };
        let state = sim.state_file();
        sim.envs.push(("SIMGPU_STATE".into(), Some(state.into())));
        sim
    }

    /// This test's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The simgpu state file shared by this test's processes.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join("simgpu.state")
    }

    /// The ledger directory (`GPUSLICE_DIR`) of this test's shim processes.
    pub fn ledger_dir(&self) -> PathBuf {
        self.dir.join("ledger")
    }

    /// Sets an environment variable for every child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Sim {
        self.envs.push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from every child.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Sim {
        self.envs.push((key.as_ref().to_owned(), None));
        self
    }

    /// `SIMGPU_MEMORY`: memory of each simulated device.
    pub fn memory(self, size: &str) -> Sim {
        self.env("SIMGPU_MEMORY", size)
    }

    /// `SIMGPU_CONTEXT_MEMORY`: device memory each context costs.
    pub fn context_memory(self, size: &str) -> Sim {
        self.env("SIMGPU_CONTEXT_MEMORY", size)
    }

    /// `SIMGPU_DEVICES`: number of simulated devices.
    pub fn devices(self, count: u32) -> Sim {
        self.env("SIMGPU_DEVICES", count.to_string())
    }

    /// Runs every child under the shim: `LD_PRELOAD=libgpuslice.so` and
    /// `GPUSLICE_DIR` set to this test's ledger directory.
    pub fn shim(mut self) -> Sim {
        self.shim = true;
        let ledger = self.ledger_dir();
        self.env("GPUSLICE_DIR", ledger)
    }

    /// `GPUSLICE_MEMORY_LIMIT` (implies [`Sim::shim`]).
    pub fn memory_limit(self, limit: &str) -> Sim {
        let sim = if self.shim { self } else { self.shim() };
        sim.env("GPUSLICE_MEMORY_LIMIT", limit)
    }

    /// `GPUSLICE_TENANT`.
    pub fn tenant(self, name: &str) -> Sim {
        self.env("GPUSLICE_TENANT", name)
    }

    /// Makes `tests/c/<name>.c` the CUDA driver of every child (see
    /// [`compile_c_driver`]) in place of simgpu's; NVML stays simgpu's.
    pub fn driver(mut self, name: &str) -> Sim {
        self.driver = Some(compile_c_driver(name));
        self
    }

    /// Deadline for each child of this test.
    pub fn timeout(mut self, timeout: Duration) -> Sim {
        self.timeout = timeout;
        self
    }

    /// Applies this test's environment to `cmd`: no inherited gpuslice or
    /// simgpu configuration, simgpu first on `LD_LIBRARY_PATH`, and the shim
    /// preloaded when asked for.
    pub fn configure(&self, cmd: &mut Command) {
        for (key, _) in std::env::vars_os() {
            if is_configuration_variable(&key.to_string_lossy()) {
                cmd.env_remove(&key);
            }
        }
        let mut library_path = OsString::new();
        if let Some(driver) = &self.driver {
            library_path.push(driver);
            library_path.push(":");
        }
        library_path.push(sim_lib_dir());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            library_path.push(":");
            library_path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", library_path);
        if self.shim {
            cmd.env("LD_PRELOAD", shim_lib());
        }
        for (key, value) in &self.envs {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        // Python must not buffer the key=value lines a test waits for.
        cmd.env("PYTHONUNBUFFERED", "1");
    }

    /// A configured command running `program`.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.configure(&mut cmd);
        cmd
    }

    /// A configured command running the C program `tests/c/<name>.c`.
    pub fn c(&self, name: &str) -> Command {
        self.command(compile_c(name))
    }

    /// A configured command running `tests/python/<script>` with the test
    /// virtualenv's Python.
    pub fn py(&self, script: &str) -> Command {
        let mut cmd = self.command(python());
        cmd.arg(python_script(script));
        cmd
    }

    /// A configured command running the `gpuslice` binary.
    pub fn gpuslice(&self) -> Command {
        self.command(gpuslice_bin())
    }

    /// Starts `cmd` with piped stdin, stdout and stderr.
    pub fn spawn(&self, cmd: &mut Command) -> Running {
        Running::spawn(cmd, self.timeout)
    }

    /// Runs `cmd` to completion (or its deadline) and returns what it printed.
    pub fn run(&self, cmd: &mut Command) -> Output {
        self.spawn(cmd).wait()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("GS_TEST_KEEP").is_some() {
            eprintln!("test directory kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A child process being run by a test. Dropping it kills the child.
pub struct Running {
    child: Option<Child>,
    program: String,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout_seen: Vec<String>,
    stdout_reader: Option<JoinHandle<()>>,
    stderr_reader: Option<JoinHandle<String>>,
    /// What the child wrote to stderr so far (the reader appends as it reads).
    stderr_so_far: Arc<Mutex<Vec<u8>>>,
    deadline: Instant,
}

impl Running {
    fn spawn(cmd: &mut Command, timeout: Duration) -> Running {
        let program = format!("{:?}", cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = channel();
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr_so_far = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr_so_far);
        let stderr_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match stderr.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => sink.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let buf = sink.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&buf).into_owned()
        });
        Running {
            stdin: child.stdin.take(),
            child: Some(child),
            program,
            lines,
            stdout_seen: Vec::new(),
            stdout_reader: Some(stdout_reader),
            stderr_reader: Some(stderr_reader),
            stderr_so_far,
            deadline: Instant::now() + timeout,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Waits until the child prints a line `key=value` and returns the value.
    /// Fails the test (killing the child) if the child exits or the deadline
    /// passes first.
    pub fn wait_for(&mut self, key: &str) -> String {
        loop {
            if let Some(value) = self.stdout_seen.iter().rev().find_map(|l| value_of(l, key)) {
                return value.to_string();
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stdout_seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    let out = self.kill_and_collect();
                    panic!("timed out waiting for `{key}=` from the child\n{out}");
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let out = self.finish(false);
                    panic!("child ended before printing `{key}=`\n{out}");
                }
            }
        }
    }

    /// Waits until the child has written `text` to stderr. Fails the test
    /// (killing the child) if the deadline passes first.
    pub fn wait_for_stderr(&mut self, text: &str) {
        loop {
            let seen = String::from_utf8_lossy(&self.stderr_so_far.lock().unwrap_or_else(|p| p.into_inner())).contains(text);
            if seen {
                return;
            }
            if Instant::now() >= self.deadline {
                let out = self.kill_and_collect();
                panic!("timed out waiting for {text:?} on the child's stderr\n{out}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the child has printed a line `key=...` so far (does not wait).
    pub fn has_printed(&mut self, key: &str) -> bool {
        while let Ok(line) = self.lines.try_recv() {
            self.stdout_seen.push(line);
        }
        self.stdout_seen.iter().any(|l| value_of(l, key).is_some())
    }

    /// Writes one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    /// Closes the child's stdin (programs that hold resources until EOF go on).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `SIGKILL` to the child and reaps it.
    pub fn kill9(mut self) -> Output {
        self.kill_and_collect()
    }

    /// Sends a signal (a name like `TERM` or a number) to the child.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Closes stdin and waits for the child to exit, up to the deadline.
    pub fn wait(mut self) -> Output {
        self.close_stdin();
        self.finish(true)
    }

    fn kill_and_collect(&mut self) -> Output {
        if let Some(child) = self.child.as_mut() {
            kill_tree(child);
        }
        self.finish(false)
    }

    fn finish(&mut self, enforce_deadline: bool) -> Output {
        self.stdin = None;
        let mut timed_out = false;
        let status = match self.child.as_mut() {
            None => None,
            Some(child) => loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if enforce_deadline && Instant::now() >= self.deadline => {
                        timed_out = true;
                        kill_tree(child);
                        break child.wait().ok();
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                    Err(_) => break None,
                }
            },
        };
        self.child = None;
        // The readers end when the pipes close: with the child gone that is
        // at once, unless a grandchild kept them open (then give up on it).
        if let Some(handle) = self.stdout_reader.take() {
            join_with_deadline(handle, Duration::from_secs(5));
        }
        while let Ok(line) = self.lines.try_recv() {
            self.stdout_seen.push(line);
        }
        let stderr = self.stderr_reader.take().and_then(|h| join_with_deadline(h, Duration::from_secs(5))).unwrap_or_default();
        let output = Output { program: self.program.clone(), status, stdout: self.stdout_seen.join("\n"), stderr };
        if timed_out {
            panic!("child did not finish within its deadline and was killed\n{output}");
        }
        output
    }
}

fn join_with_deadline<T: Send + 'static>(handle: JoinHandle<T>, limit: Duration) -> Option<T> {
    let until = Instant::now() + limit;
    while !handle.is_finished() {
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    handle.join().ok()
}

impl Drop for Running {
    /// A child still running when its test ends, passed or failed, is
    /// killed with everything it started, and reaped.
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            kill_tree(child);
            let _ = child.wait();
        }
    }
}

/// Kills `child` and every process descended from it (a monitor a demo
/// started, a command behind `sh -c`), descendants first so that none is
/// handed to init on the way. `child` is not reaped yet, so no pid here
/// can have been reused.
fn kill_tree(child: &mut Child) {
    for pid in descendants(child.id()).into_iter().rev() {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let _ = child.kill();
}

/// The processes descended from `pid` (its children, theirs, …), as
/// `/proc` lists them now.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(process) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`: the command may hold spaces and ')'.
        let Some((_, fields)) = stat.rsplit_once(')') else { continue };
        if let Some(parent) = fields.split_whitespace().nth(1).and_then(|f| f.parse::<u32>().ok()) {
            parent_of.push((process, parent));
        }
    }
    let mut found = vec![pid];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(parent_of.iter().filter(|(_, p)| *p == parent).map(|(child, _)| *child));
        next += 1;
    }
    found.split_off(1)
}

fn value_of<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?;
    rest.strip_prefix('=')
}

/// What a finished child printed, and how it ended.
pub struct Output {
    pub program: String,
    /// `None` when the child could not be reaped.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The lines the shim wrote to stderr (`gpuslice[<pid>]: <level>: …`).
    pub fn shim_log_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("gpuslice[")).collect()
    }

    /// Asserts what the README promises of a process the shim refuses: GPU
    /// access fails with `CUDA_ERROR_NOT_PERMITTED` from `cuInit` (printed
    /// as `init`) and from the allocation printed as `alloc_key`, and the
    /// shim explains it in exactly one error line, which contains each of
    /// `explains`.
    pub fn assert_fails_closed(&self, alloc_key: &str, explains: &[&str]) -> &Self {
        self.assert_rc("init", cu::NOT_PERMITTED).assert_rc(alloc_key, cu::NOT_PERMITTED);
        let lines = self.shim_log_lines();
        assert_eq!(lines.len(), 1, "one line on stderr explains the refusal\n{self}");
        assert!(lines[0].contains(": error: "), "the refusal is logged as an error\n{self}");
        for text in explains {
            assert!(lines[0].contains(text), "the refusal must say {text:?}\n{self}");
        }
        self
    }

    /// The last value printed for `key` (a line `key=value`), if any.
    pub fn find(&self, key: &str) -> Option<&str> {
        self.stdout.lines().rev().find_map(|l| value_of(l, key))
    }

    /// Every value printed for `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.stdout.lines().filter_map(|l| value_of(l, key)).collect()
    }

    /// The last value printed for `key`; fails the test if there is none.
    pub fn get(&self, key: &str) -> &str {
        match self.find(key) {
            Some(v) => v,
            None => panic!("the child printed no `{key}=` line\n{self}"),
        }
    }

    /// The value of `key` as an integer.
    pub fn i64(&self, key: &str) -> i64 {
        let v = self.get(key);
        v.trim().parse().unwrap_or_else(|_| panic!("`{key}={v}` is not an integer\n{self}"))
    }

    /// The value of `key` as an unsigned integer.
    pub fn u64(&self, key: &str) -> u64 {
        let v = self.get(key);
        v.trim().parse().unwrap_or_else(|_| panic!("`{key}={v}` is not an unsigned integer\n{self}"))
    }

    /// The value of `key` as a float.
    pub fn f64(&self, key: &str) -> f64 {
        let v = self.get(key);
        v.trim().parse().unwrap_or_else(|_| panic!("`{key}={v}` is not a number\n{self}"))
    }

    /// Asserts that `key` was printed with the `CUresult`/`nvmlReturn_t` `expected`.
    pub fn assert_rc(&self, key: &str, expected: i64) -> &Self {
        let actual = self.i64(key);
        assert_eq!(actual, expected, "`{key}`: expected {expected}, got {actual}\n{self}");
        self
    }

    /// The exit code, if the child exited normally.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    pub fn success(&self) -> bool {
        self.code() == Some(0)
    }

    /// Fails the test, showing everything the child printed, unless it
    /// exited with status 0.
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "the child failed\n{self}");
        self
    }

    /// Fails the test unless the child exited with a non-zero status (not a signal).
    pub fn assert_failure(&self) -> &Self {
        assert!(matches!(self.code(), Some(c) if c != 0), "expected a non-zero exit\n{self}");
        self
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "--- program: {}", self.program)?;
        match self.status {
            Some(s) => writeln!(f, "--- status: {s}")?,
            None => writeln!(f, "--- status: unknown")?,
        }
        writeln!(f, "--- stdout:\n{}", self.stdout)?;
        write!(f, "--- stderr:\n{}", self.stderr)
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Waits until `condition` holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Fails the calling test with a clear message unless this machine lets us
/// start processes in their own PID namespace (`unshare --pid --fork`, as
/// root or with CAP_SYS_ADMIN), which the tests of reclaim across PID
/// namespaces need.
pub fn require_pid_namespaces() {
    let probe = Command::new("unshare").args(["--pid", "--fork", "true"]).output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "this test needs a new PID namespace, and `unshare --pid --fork true` failed ({}): {}\
             run the tests as root or with CAP_SYS_ADMIN",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("this test needs `unshare` (util-linux) to make a PID namespace ({e}): `bash scripts/setup.sh` installs it"),
    }
}
