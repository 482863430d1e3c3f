//! `gpuslice-dra`: the gpuslice DRA driver's kubelet plugin.
//!
//! ```text
//! gpuslice-dra serve --node-name NODE [--driver-name gpu.gpuslice.dev] [--dir /run/gpuslice]
//!                    [--kubelet-dir /var/lib/kubelet] [--cdi-dir /var/run/cdi] --shim PATH
//!                    [--claims-dir DIR] [--nvidia-cdi-kind nvidia.com/gpu]
//! gpuslice-dra resource-slice --node-name NODE [--nvml-lib PATH]
//! gpuslice-dra tenant-name NAMESPACE CLAIM
//! ```

use clap::{Parser, Subcommand};
use gpuslice_dra::admission::Monitor;
use gpuslice_dra::apiserver::ApiServer;
use gpuslice_dra::cdi::HostFiles;
use gpuslice_dra::claims::{ClaimDir, ClaimSource};
use gpuslice_dra::plugin::Plugin;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "gpuslice-dra", about = "The gpuslice DRA driver: a kubelet plugin", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the kubelet's registration and DRA services.
    Serve(ServeArgs),
    /// Print this node's ResourceSlice (JSON) from NVML.
    ResourceSlice(SliceArgs),
    /// Print the tenant name of a claim.
    TenantName { namespace: String, claim: String },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// This node's name (the pool of its ResourceSlice).
    #[arg(long)]
    node_name: String,
    /// The driver name, as in the DeviceClass and the ResourceSlice.
    #[arg(long, default_value = "gpu.gpuslice.dev")]
    driver_name: String,
    /// The monitor's ledger directory (its control socket is <DIR>/.monitor/control.sock).
    #[arg(long, default_value = "/run/gpuslice")]
    dir: PathBuf,
    /// The kubelet's directory: the registration socket goes in
    /// <DIR>/plugins_registry, the DRA socket, the shim and the preload
    /// file in <DIR>/plugins/<driver>.
    #[arg(long, default_value = "/var/lib/kubelet")]
    kubelet_dir: PathBuf,
    /// Where the container runtime reads CDI specs.
    #[arg(long, default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// The shim (libgpuslice.so) to copy to the host for containers to mount.
    #[arg(long, default_value = "/usr/local/lib/gpuslice/libgpuslice.so")]
    shim: PathBuf,
    /// Read ResourceClaims from <DIR>/<namespace>/<name>.json instead of the API server.
    #[arg(long, value_name = "DIR")]
    claims_dir: Option<PathBuf>,
    /// The CDI kind of NVIDIA's container toolkit specs; "" names no NVIDIA device.
    #[arg(long, default_value = "nvidia.com/gpu")]
    nvidia_cdi_kind: String,
    /// Load NVML from this file, for the ResourceSlice.
    #[arg(long)]
    nvml_lib: Option<PathBuf>,
    /// How often the node's devices are read again and its ResourceSlice
    /// updated when they changed, in seconds (with the API server only).
    #[arg(long, default_value_t = 60)]
    slice_period_s: u64,
}

#[derive(clap::Args)]
struct SliceArgs {
    #[arg(long)]
    node_name: String,
    #[arg(long, default_value = "gpu.gpuslice.dev")]
    driver_name: String,
    /// Load NVML from this file (simgpu's libsimgpu.so in tests).
    #[arg(long)]
    nvml_lib: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::ResourceSlice(args) => gpuslice_dra::devices::read_devices(args.nvml_lib.as_deref()).map(|devices| {
            let slice = gpuslice_dra::resourceslice::resource_slice(&args.driver_name, &args.node_name, 1, &devices);
            println!("{}", serde_json::to_string_pretty(&slice).unwrap_or_default());
        }),
        Command::TenantName { namespace, claim } => {
            println!("{}", gpuslice_dra::tenant::tenant_name(&namespace, &claim));
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gpuslice-dra: {error}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let plugin_dir = args.kubelet_dir.join("plugins").join(&args.driver_name);
    let registration_socket = args.kubelet_dir.join("plugins_registry").join(format!("{}-reg.sock", args.driver_name));
    let (registered, registrations) = std::sync::mpsc::channel();
    let (claims, registered): (Arc<dyn ClaimSource>, _) = match &args.claims_dir {
        Some(dir) => (Arc::new(ClaimDir(dir.clone())), None),
        None => {
            let api = Arc::new(ApiServer::in_cluster()?);
            let publisher = Publisher {
                api: Arc::clone(&api),
                driver: args.driver_name.clone(),
                node: args.node_name.clone(),
                nvml_lib: args.nvml_lib.clone(),
                period: Duration::from_secs(args.slice_period_s.max(1)),
            };
            std::thread::spawn(move || publisher.run(&registrations));
            (api, Some(registered))
        }
    };
    let plugin = Plugin {
        files: HostFiles::install(&plugin_dir, &args.shim)?,
        dra_socket: plugin_dir.join("dra.sock"),
        driver: args.driver_name,
        node: args.node_name,
        monitor: Monitor::of_dir(&args.dir),
        ledger_dir: args.dir,
        cdi_dir: args.cdi_dir,
        claims,
        nvidia_cdi_kind: args.nvidia_cdi_kind,
        registered,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(gpuslice_dra::server::serve(plugin, registration_socket))
}

/// Keeps this node's ResourceSlice published.
///
/// The kubelet deletes every ResourceSlice of its node when it starts, and
/// 30 s after a plugin unregisters: a slice lives only while the plugin is
/// registered with the kubelet that runs now. So the slice is written when
/// the kubelet registers the plugin (and checked again a few times after,
/// in case the kubelet's clean-up of its start comes after the
/// registration), and then once a period: created when it is missing,
/// replaced one generation up when NVML's device list changed (devices
/// appearing, disappearing, MIG reconfigured), left alone otherwise.
struct Publisher {
    api: Arc<ApiServer>,
    driver: String,
    node: String,
    nvml_lib: Option<PathBuf>,
    period: Duration,
}

/// When the slice is checked again after a registration.
const AFTER_REGISTRATION: [Duration; 4] =
    [Duration::from_secs(1), Duration::from_secs(3), Duration::from_secs(10), Duration::from_secs(30)];

impl Publisher {
    fn run(&self, registrations: &std::sync::mpsc::Receiver<()>) {
        let mut checks: Vec<Instant> = vec![Instant::now()];
        loop {
            let now = Instant::now();
            if checks.iter().any(|at| *at <= now) {
                checks.retain(|at| *at > now);
                self.publish();
            }
            let next = checks.iter().min().copied().unwrap_or(now + self.period);
            match registrations.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(()) => {
                    let now = Instant::now();
                    checks = std::iter::once(now).chain(AFTER_REGISTRATION.iter().map(|d| now + *d)).collect();
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if checks.is_empty() {
                        checks.push(Instant::now());
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn publish(&self) {
        let published = gpuslice_dra::devices::read_devices(self.nvml_lib.as_deref()).and_then(|devices| {
            self.api.publish_slice(&gpuslice_dra::resourceslice::resource_slice(&self.driver, &self.node, 1, &devices))
        });
        match published {
            Ok(true) => gpuslice_dra::plugin::log("ResourceSlice published"),
            Ok(false) => {}
            Err(error) => gpuslice_dra::plugin::log(&format!("cannot publish the ResourceSlice: {error}")),
        }
    }
}
