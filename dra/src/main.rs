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
    let claims: Arc<dyn ClaimSource> = match &args.claims_dir {
        Some(dir) => Arc::new(ClaimDir(dir.clone())),
        None => {
            let api = Arc::new(ApiServer::in_cluster()?);
            publish_slices(Arc::clone(&api), args.driver_name.clone(), args.node_name.clone(), args.nvml_lib.clone(), args.slice_period_s);
            api
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
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(gpuslice_dra::server::serve(plugin, registration_socket))
}

/// Publishes the node's ResourceSlice now and after every period in which
/// NVML's device list changed (devices appearing, disappearing, MIG
/// reconfigured), on a thread of its own. Not yet run against a real API
/// server.
fn publish_slices(api: Arc<ApiServer>, driver: String, node: String, nvml_lib: Option<PathBuf>, period_s: u64) {
    std::thread::spawn(move || loop {
        let published = gpuslice_dra::devices::read_devices(nvml_lib.as_deref())
            .and_then(|devices| api.publish_slice(&gpuslice_dra::resourceslice::resource_slice(&driver, &node, 1, &devices)));
        match published {
            Ok(true) => gpuslice_dra::plugin::log("ResourceSlice published"),
            Ok(false) => {}
            Err(error) => gpuslice_dra::plugin::log(&format!("cannot publish the ResourceSlice: {error}")),
        }
        std::thread::sleep(std::time::Duration::from_secs(period_s.max(1)));
    });
}
