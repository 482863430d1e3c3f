//! The DRA driver (`gpuslice-dra`), with the real thing on the other side of
//! every boundary that can run here:
//! - the kubelet's side is played over the plugin's own Unix sockets with
//!   the kubelet's gRPC definitions: registration, then NodePrepareResources
//!   and NodeUnprepareResources for two claims on one simulated GPU, with a
//!   restart of the plugin in between;
//! - the API server's side is played by ResourceClaim files, each checked
//!   against the Kubernetes 1.37 schema (`kubernetes-validate --strict`)
//!   before the plugin reads it; the ResourceSlice it builds is checked too;
//! - the CDI spec it writes is consumed by a real CDI consumer, podman
//!   (`--device gpuslice.dev/slice=<claim>`, the host's root as the
//!   container's read-only image), and a CUDA client on simgpu inside that
//!   container sees its claim's cap as the device's memory, is refused past
//!   it, and cannot raise it by editing its own environment;
//! - the monitor's side is the real monitor, in the `tenant-dirs` layout.
//!
//! NVIDIA's own CDI device (`nvidia.com/gpu=<uuid>`), which the plugin
//! names beside its own, is not handed to podman: there is no NVIDIA
//! container toolkit spec on this machine, and simgpu needs none.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_dra::proto::dra::dra_plugin_client::DraPluginClient;
use gpuslice_dra::proto::dra::{Claim, NodePrepareResourcesRequest, NodeUnprepareResourcesRequest};
use gpuslice_dra::proto::registration::registration_client::RegistrationClient;
use gpuslice_dra::proto::registration::{InfoRequest, RegistrationStatus};
use gpuslice_tests::{compile_c, poll, repo_root, shim_lib, sim_lib_dir, simgpu_lib, target_dir, Output, Running, Sim};
use monitor_support::{gpuslice_command, Monitor, MonitorOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const DRIVER: &str = "gpu.gpuslice.dev";
const NODE: &str = "node-1";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// The unprivileged user the containers run as (the `restricted` standard
/// forbids root).
const POD_UID: u32 = 1000;
/// Where podman reads CDI specs (it has no option for another directory).
const CDI_DIR: &str = "/var/run/cdi";

fn dra_bin() -> PathBuf {
    let path = target_dir().join("gpuslice-dra");
    assert!(path.is_file(), "{} is missing: build it first (`cargo build --workspace`)", path.display());
    path
}

/// `kubernetes-validate --strict` (schema 1.37) of `object`, written to a
/// file in `dir`: an unknown or misplaced field is an error.
fn validate_strictly(dir: &Path, name: &str, object: &Value) {
    let validate = repo_root().join(".deps/venv/bin/kubernetes-validate");
    assert!(validate.is_file(), "{} is missing: run `bash scripts/setup.sh`", validate.display());
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(object).unwrap()).unwrap();
    let out = Command::new(&validate).args(["--strict", "--quiet", "-k", "1.37.0"]).arg(&path).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("ERROR"), "{name} does not validate against Kubernetes 1.37:\n{text}\n{object:#}");
}

/// A claim UID as the API server makes them (a UUID), unique to this run.
fn claim_uid(n: u32) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    format!("{:08x}-{:04x}-4000-8000-{:012x}", std::process::id(), n, nanos & 0xffff_ffff_ffff)
}

/// A ResourceClaim the scheduler allocated on `device` of this node, with
/// `memory` and `compute` consumed, as the API server would serve it.
fn allocated_claim(namespace: &str, name: &str, uid: &str, device: &str, memory: &str, compute: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpuslice.dev",
            "capacity": {"requests": {"memory": memory, "compute": compute}}
        }}]}},
        "status": {"allocation": {
            "devices": {"results": [{
                "request": "gpu", "driver": DRIVER, "pool": NODE, "device": device,
                "shareID": uid, "consumedCapacity": {"memory": memory, "compute": compute}
            }]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
        }}
    })
}

/// One 4 GiB GPU.
const ONE_GPU: [(&str, &str); 3] = [("SIMGPU_DEVICES", "1"), ("SIMGPU_MEMORY", "4GiB"), ("SIMGPU_CONTEXT_MEMORY", "64MiB")];

/// One test at a time: the share test measures device time against wall
/// time, and the others' containers would take its CPU.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The directories of one simulated node.
struct Node {
    sim: Sim,
    /// The simulated GPUs' configuration, for the containers too.
    simgpu: Vec<(&'static str, &'static str)>,
    monitor: Option<Monitor>,
    kubelet_dir: PathBuf,
    claims_dir: PathBuf,
    /// The UIDs of the claims put, whose CDI specs go when the test ends,
    /// whatever became of it.
    uids: std::cell::RefCell<Vec<String>>,
}

impl Node {
    fn new() -> Node {
        Node::with_config(None)
    }

    /// A node whose monitor reads `config` (TOML).
    fn with_config(config: Option<&str>) -> Node {
        Node::build(&ONE_GPU, config)
    }

    /// A node whose simulated GPUs are `simgpu` (`SIMGPU_*` variables).
    fn build(simgpu: &[(&'static str, &'static str)], config: Option<&str>) -> Node {
        let mut sim = Sim::new();
        for (key, value) in simgpu {
            sim = sim.env(key, value);
        }
        sim.share_the_gpu();
        let config = config.map(|text| {
            let path = sim.dir().join("monitor.toml");
            std::fs::write(&path, text).unwrap();
            path
        });
        let options = MonitorOptions { args: vec!["--layout".into(), "tenant-dirs".into()], config, ..Default::default() };
        let monitor = Monitor::start(&sim, options);
        // Short: a socket's path holds at most 107 bytes.
        let kubelet_dir = std::env::temp_dir().join(format!("gs-kubelet-{}", claim_uid(0).rsplit('-').next().unwrap()));
        let claims_dir = sim.dir().join("claims");
        std::fs::create_dir_all(&claims_dir).unwrap();
        Node { sim, simgpu: simgpu.to_vec(), monitor: Some(monitor), kubelet_dir, claims_dir, uids: Default::default() }
    }

    fn registration_socket(&self) -> PathBuf {
        self.kubelet_dir.join("plugins_registry").join(format!("{DRIVER}-reg.sock"))
    }

    /// Starts the plugin and waits for its registration socket.
    fn start_plugin(&self) -> Running {
        let _ = std::fs::remove_file(self.registration_socket());
        let mut cmd = Command::new(dra_bin());
        cmd.arg("serve").args(["--node-name", NODE, "--driver-name", DRIVER]);
        cmd.arg("--dir").arg(self.sim.ledger_dir());
        cmd.arg("--kubelet-dir").arg(&self.kubelet_dir);
        cmd.args(["--cdi-dir", CDI_DIR]);
        cmd.arg("--shim").arg(shim_lib());
        cmd.arg("--claims-dir").arg(&self.claims_dir);
        cmd.env_remove("LD_PRELOAD");
        let running = self.sim.spawn(&mut cmd);
        let pid = running.pid();
        poll::until("the plugin's registration socket", || !monitor_support::pid_alive(pid) || self.registration_socket().exists());
        assert!(self.registration_socket().exists(), "the plugin exited:\n{}", running.wait());
        running
    }

    /// Publishes a ResourceClaim (checked against the schema first).
    fn put_claim(&self, claim: &Value) {
        let namespace = claim["metadata"]["namespace"].as_str().unwrap();
        let name = claim["metadata"]["name"].as_str().unwrap();
        self.uids.borrow_mut().push(claim["metadata"]["uid"].as_str().unwrap().to_string());
        validate_strictly(self.sim.dir(), &format!("claim-{namespace}-{name}"), claim);
        std::fs::create_dir_all(self.claims_dir.join(namespace)).unwrap();
        std::fs::write(self.claims_dir.join(namespace).join(format!("{name}.json")), claim.to_string()).unwrap();
    }

    /// `gpuslice tenant list --json`.
    fn tenants(&self) -> Vec<Value> {
        let mut cmd = gpuslice_command(&self.sim);
        cmd.args(["tenant", "list", "--json", "--dir"]).arg(self.sim.ledger_dir());
        let out = self.sim.run(&mut cmd);
        out.assert_success();
        let listed: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        listed["tenants"].as_array().cloned().unwrap_or_default()
    }

    /// `memctl ARGS` as the pod's user in a podman container that uses CDI
    /// device `gpuslice.dev/slice=<claim_uid>`, the host's root as its
    /// image (an overlay, so nothing the container does reaches the host).
    /// `pod_env` is what the pod's spec would set.
    fn in_container(&self, claim_uid: &str, pod_env: &[(&str, &str)], script: &str) -> Output {
        self.sim.run(&mut self.container(claim_uid, &[], pod_env, script))
    }

    /// The podman command of [`Node::in_container`], with more `podman run`
    /// options; `COMPUTE_LOAD` in `script` names tests/c/compute_load.c.
    fn container(&self, claim_uid: &str, run_options: &[&str], pod_env: &[(&str, &str)], script: &str) -> Command {
        let podman = Path::new("/usr/bin/podman");
        assert!(podman.is_file(), "podman is missing: run `bash scripts/setup.sh`");
        let mut cmd = Command::new(podman);
        // runc: crun refuses this machine's hybrid cgroup hierarchy.
        cmd.args(["--runtime", "runc", "run", "--rm", "--network=none", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=1024:1024"]);
        cmd.args(run_options);
        cmd.args(["--user", &format!("{POD_UID}:{POD_UID}")]);
        cmd.args(["--device", &format!("gpuslice.dev/slice={claim_uid}")]);
        // The simulated GPU (its state file) and the built programs.
        for shared in [self.sim.dir().to_path_buf(), target_dir()] {
            cmd.arg("-v").arg(format!("{0}:{0}", shared.display()));
        }
        cmd.arg("--env").arg(format!("LD_LIBRARY_PATH={}", sim_lib_dir().display()));
        cmd.arg("--env").arg(format!("SIMGPU_STATE={}", self.sim.state_file().display()));
        for (key, value) in &self.simgpu {
            cmd.arg("--env").arg(format!("{key}={value}"));
        }
        for (key, value) in pod_env {
            cmd.arg("--env").arg(format!("{key}={value}"));
        }
        let script = script.replace("MEMCTL", &compile_c("memctl").display().to_string());
        let script = script.replace("COMPUTE_LOAD", &compile_c("compute_load").display().to_string());
        cmd.args(["--rootfs", "/:O", "/bin/sh", "-c"]).arg(script);
        cmd
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.monitor.take());
        let _ = std::fs::remove_dir_all(&self.kubelet_dir);
        for uid in self.uids.borrow().iter() {
            let _ = std::fs::remove_file(Path::new(CDI_DIR).join(format!("gpuslice.dev-slice_{uid}.json")));
        }
    }
}

/// A gRPC call on a fresh current-thread runtime.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

fn claim_ref(namespace: &str, name: &str, uid: &str) -> Claim {
    Claim { namespace: namespace.into(), name: name.into(), uid: uid.into() }
}

/// Registration as the kubelet does it: GetInfo on the registry socket,
/// then NotifyRegistrationStatus. Returns the DRA endpoint.
fn register(node: &Node) -> PathBuf {
    block_on(async {
        let channel = gpuslice_dra::server::connect(&node.registration_socket()).await.unwrap();
        let mut client = RegistrationClient::new(channel);
        let info = client.get_info(InfoRequest {}).await.unwrap().into_inner();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, DRIVER);
        assert_eq!(info.supported_versions, vec!["v1.DRAPlugin".to_string()]);
        assert_eq!(PathBuf::from(&info.endpoint), node.kubelet_dir.join("plugins").join(DRIVER).join("dra.sock"));
        client.notify_registration_status(RegistrationStatus { plugin_registered: true, error: String::new() }).await.unwrap();
        PathBuf::from(info.endpoint)
    })
}

/// NodePrepareResources for `claims`; the answer and how long it took (ms).
fn prepare(
    endpoint: &Path,
    claims: Vec<Claim>,
) -> (std::collections::HashMap<String, gpuslice_dra::proto::dra::NodePrepareResourceResponse>, f64) {
    block_on(async {
        let mut client = DraPluginClient::new(gpuslice_dra::server::connect(endpoint).await.unwrap());
        let started = Instant::now();
        let answer = client.node_prepare_resources(NodePrepareResourcesRequest { claims }).await.unwrap().into_inner();
        (answer.claims, started.elapsed().as_secs_f64() * 1e3)
    })
}

fn unprepare(endpoint: &Path, claims: Vec<Claim>) -> std::collections::HashMap<String, String> {
    block_on(async {
        let mut client = DraPluginClient::new(gpuslice_dra::server::connect(endpoint).await.unwrap());
        let answer = client.node_unprepare_resources(NodeUnprepareResourcesRequest { claims }).await.unwrap().into_inner();
        answer.claims.into_iter().map(|(uid, r)| (uid, r.error)).collect()
    })
}

/// The node's ResourceSlice, as `gpuslice-dra resource-slice` builds it from NVML.
fn resource_slice(sim: &Sim) -> Value {
    let mut cmd = sim.command(dra_bin());
    cmd.args(["resource-slice", "--node-name", NODE, "--nvml-lib"]).arg(simgpu_lib());
    let out = sim.run(&mut cmd);
    out.assert_success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn the_resource_slice_lists_every_gpu_and_mig_device_and_validates() {
    let _serial = serial();
    let sim = Sim::new().devices(2).memory("8GiB").context_memory("64MiB").env("SIMGPU_MIG", "1=3g.71gb,1g.18gb");
    let slice = resource_slice(&sim);
    validate_strictly(sim.dir(), "resourceslice", &slice);
    let devices = slice["spec"]["devices"].as_array().unwrap();
    let gpus: Vec<&Value> = devices.iter().filter(|d| d["attributes"]["type"]["string"] == "gpu").collect();
    let migs: Vec<&Value> = devices.iter().filter(|d| d["attributes"]["type"]["string"] == "mig").collect();
    // The partitioned GPU is offered as its MIG devices, not itself.
    assert_eq!((gpus.len(), migs.len()), (1, 2), "{slice:#}");
    for device in devices {
        assert_eq!(device["allowMultipleAllocations"], true);
        let uuid = device["attributes"]["uuid"]["string"].as_str().unwrap();
        let name = device["name"].as_str().unwrap();
        assert_eq!(gpuslice_dra::claims::device_uuid(name).unwrap(), uuid, "the device name maps back to its UUID");
        assert_eq!(device["capacity"]["compute"]["value"], "100");
        let step = device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"].as_str().unwrap();
        assert_eq!(step, (256 * MIB).to_string());
    }
    assert_eq!(gpus[0]["capacity"]["memory"]["value"], (8 * GIB).to_string());
    let parent = migs[0]["attributes"]["parentUUID"]["string"].clone();
    assert!(parent.as_str().is_some_and(|p| p.starts_with("GPU-")) && parent != gpus[0]["attributes"]["uuid"]["string"], "{slice:#}");
    let profiles: Vec<&str> = migs.iter().map(|m| m["attributes"]["migProfile"]["string"].as_str().unwrap()).collect();
    assert_eq!(profiles, ["3g.71gb", "1g.18gb"], "{slice:#}");
    for mig in &migs {
        assert_eq!(mig["attributes"]["parentUUID"]["string"], parent, "{mig:#}");
    }
    eprintln!("ResourceSlice (a GPU, and a GPU split in 2 MIG devices) validates against Kubernetes 1.37, strictly");
}

#[test]
fn the_kubelet_prepares_two_claims_on_one_gpu_across_a_plugin_restart_and_unprepares_them() {
    let _serial = serial();
    let node = Node::new();
    let slice = resource_slice(&node.sim);
    let device = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let gpu_uuid = slice["spec"]["devices"][0]["attributes"]["uuid"]["string"].as_str().unwrap().to_string();
    // Same claim name in two namespaces: two tenants.
    let (uid_a, uid_b) = (claim_uid(1), claim_uid(2));
    node.put_claim(&allocated_claim("team-a", "train", &uid_a, &device, "1Gi", "30"));
    node.put_claim(&allocated_claim("team-b", "train", &uid_b, &device, "1536Mi", "50"));
    let (a, b) = (claim_ref("team-a", "train", &uid_a), claim_ref("team-b", "train", &uid_b));

    let mut plugin = node.start_plugin();
    let endpoint = register(&node);
    let (answer, first_ms) = prepare(&endpoint, vec![a.clone()]);
    let prepared = &answer[&uid_a];
    assert_eq!(prepared.error, "", "{answer:?}");
    assert_eq!(prepared.devices.len(), 1);
    assert_eq!(prepared.devices[0].device_name, device);
    assert_eq!(prepared.devices[0].pool_name, NODE);
    assert_eq!(prepared.devices[0].request_names, vec!["gpu".to_string()]);
    assert_eq!(prepared.devices[0].cdi_device_ids, vec![format!("gpuslice.dev/slice={uid_a}"), format!("nvidia.com/gpu={gpu_uuid}")]);

    // A restart of the plugin: it keeps nothing in memory.
    plugin.signal("TERM");
    let out = plugin.wait();
    assert!(!node.registration_socket().exists() && !endpoint.exists(), "a stopped plugin removes its sockets\n{out}");
    plugin = node.start_plugin();
    assert_eq!(register(&node), endpoint);
    let (answer, second_ms) = prepare(&endpoint, vec![b.clone()]);
    assert_eq!(answer[&uid_b].error, "", "{answer:?}");
    // Prepared again after the restart (the kubelet retries): the same answer.
    let (again, again_ms) = prepare(&endpoint, vec![a.clone()]);
    assert_eq!(again[&uid_a], *prepared, "preparing a prepared claim again answers the same");
    eprintln!(
        "NodePrepareResources, one claim each, as the kubelet sees it: {first_ms:.1} ms, {second_ms:.1} ms, {again_ms:.1} ms (again)"
    );

    let tenants = node.tenants();
    let names: Vec<&str> = tenants.iter().map(|t| t["tenant"].as_str().unwrap()).collect();
    assert!(names.contains(&"team-a.train") && names.contains(&"team-b.train"), "{tenants:#?}");
    let a_entry = tenants.iter().find(|t| t["tenant"] == "team-a.train").unwrap();
    assert_eq!(a_entry["devices"][0]["memory_bytes"], GIB, "{a_entry:#}");
    assert_eq!(a_entry["devices"][0]["share_percent"], 30.0, "{a_entry:#}");
    assert_eq!(a_entry["labels"]["claim-uid"], uid_a.as_str(), "{a_entry:#}");
    for uid in [&uid_a, &uid_b] {
        let spec_path = Path::new(CDI_DIR).join(format!("gpuslice.dev-slice_{uid}.json"));
        let spec: Value = serde_json::from_str(&std::fs::read_to_string(&spec_path).unwrap()).unwrap();
        assert_eq!(spec["kind"], "gpuslice.dev/slice");
        assert_eq!(spec["devices"][0]["name"], uid.as_str());
    }

    // In a container with claim A's CDI device: the cap is the device, and
    // one byte past it is refused.
    let out = node.in_container(&uid_a, &[], "exec MEMCTL init ctx info alloc:a:free alloc:past:64M");
    out.assert_rc("init", 0).assert_rc("ctx", 0).assert_rc("a", 0).assert_rc("past", 2);
    assert_eq!(out.u64("info.total"), GIB, "claim A's container sees its 1 GiB as the device\n{out}");
    let out = node.in_container(&uid_b, &[], "exec MEMCTL init ctx info");
    assert_eq!(out.u64("info.total"), 1536 * MIB, "claim B's container sees its 1.5 GiB\n{out}");

    // A pod that sets the variables in its spec, and a process that sets
    // them for itself, get no more: the CDI spec's environment wins over
    // the pod's, and the cap the monitor wrote wins over any variable.
    let lying = [("GPUSLICE_MEMORY_LIMIT", "3GiB"), ("GPUSLICE_TENANT", "team-b.train"), ("CUDA_DEVICE_MEMORY_LIMIT", "3g")];
    let out = node.in_container(&uid_a, &lying, "echo tenant=$GPUSLICE_TENANT; exec MEMCTL init ctx info alloc:big:2G");
    assert_eq!(out.get("tenant"), "team-a.train", "{out}");
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    out.assert_rc("big", 2);
    let out = node.in_container(&uid_a, &[], "GPUSLICE_MEMORY_LIMIT=3GiB exec MEMCTL init ctx info alloc:big:2G");
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    out.assert_rc("big", 2);

    // Unprepare, twice (idempotent), after one more restart.
    plugin.signal("TERM");
    plugin.wait();
    let plugin = node.start_plugin();
    register(&node);
    for _ in 0..2 {
        let errors = unprepare(&endpoint, vec![a.clone(), b.clone()]);
        assert_eq!(errors.len(), 2);
        assert!(errors.values().all(String::is_empty), "{errors:?}");
    }
    for uid in [&uid_a, &uid_b] {
        assert!(!Path::new(CDI_DIR).join(format!("gpuslice.dev-slice_{uid}.json")).exists(), "the spec of {uid} is removed");
    }
    poll::until("both tenants released and their directories removed", || {
        node.tenants().is_empty()
            && !node.sim.ledger_dir().join("tenants/team-a.train").exists()
            && !node.sim.ledger_dir().join("tenants/team-b.train").exists()
    });
    // Everything returned: a process without the shim takes the whole device.
    let mut cmd = node.sim.c("memctl");
    cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "info", "alloc:all:free"]);
    let out = node.sim.run(&mut cmd);
    out.assert_rc("all", 0);
    assert_eq!(out.u64("info.free"), 4 * GIB - 64 * MIB, "nothing is held once both claims are unprepared\n{out}");
    drop(plugin);
}

#[test]
fn a_claim_the_plugin_cannot_prepare_says_why_and_admits_nothing() {
    let _serial = serial();
    let node = Node::new();
    let slice = resource_slice(&node.sim);
    let device = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let uid = claim_uid(3);
    // More memory than the device has: the monitor refuses, the kubelet hears why.
    node.put_claim(&allocated_claim("team-c", "huge", &uid, &device, "64Gi", "10"));
    let plugin = node.start_plugin();
    let endpoint = register(&node);
    let (stale, missing) = (claim_uid(4), claim_uid(5));
    let claims = vec![claim_ref("team-c", "huge", &uid), claim_ref("team-c", "huge", &stale), claim_ref("team-c", "missing", &missing)];
    let (answer, _) = prepare(&endpoint, claims);
    assert!(answer[&uid].error.contains("refused"), "{answer:?}");
    assert!(answer[&stale].error.contains("the claim was replaced"), "{answer:?}");
    assert!(answer[&missing].error.contains("team-c/missing"), "{answer:?}");
    assert!(node.tenants().is_empty(), "nothing admitted");
    assert!(!Path::new(CDI_DIR).join(format!("gpuslice.dev-slice_{uid}.json")).exists());
    drop(plugin);
}

/// The documents of a manifest in `deploy/kubernetes/`, as JSON (read by
/// PyYAML from the test environment).
fn manifest(name: &str) -> Vec<Value> {
    let python = repo_root().join(".deps/venv/bin/python");
    let path = repo_root().join("deploy/kubernetes").join(name);
    let script = "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))";
    let out =
        Command::new(&python).args(["-c", script]).arg(&path).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn find<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in {documents:#?}"))
}

#[test]
fn the_example_pod_asks_for_a_slice_with_nothing_but_its_claim() {
    // (tests/deploy.rs validates every manifest strictly against the schema.)
    let example = manifest("dra-example.yaml");
    let namespace = find(&example, "Namespace");
    assert_eq!(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted");
    let template = find(&example, "ResourceClaimTemplate");
    let request = &template["spec"]["spec"]["devices"]["requests"][0]["exactly"];
    assert_eq!(request["deviceClassName"], "gpuslice.dev");
    let amounts = &request["capacity"]["requests"];
    assert_eq!(gpuslice_dra::quantity::parse_bytes(amounts["memory"].as_str().unwrap()), Ok(8 * GIB));
    assert_eq!(gpuslice_dra::quantity::parse_percent(amounts["compute"].as_str().unwrap()), Ok(30.0));
    let pod = find(&example, "Pod");
    assert_eq!(pod["metadata"]["namespace"], namespace["metadata"]["name"]);
    assert_eq!(pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"], template["metadata"]["name"]);
    assert!(pod["spec"]["initContainers"].is_null() && pod["spec"]["volumes"].is_null(), "no init container, no volume: {pod:#}");
    for container in pod["spec"]["containers"].as_array().unwrap() {
        assert!(container["env"].is_null() && container["envFrom"].is_null() && container["volumeMounts"].is_null(), "{container:#}");
        assert_eq!(container["resources"]["claims"][0]["name"], "gpu");
    }

    // The chart that installs the driver (its DeviceClass, RBAC and
    // DaemonSet) is rendered and checked on a real API server by
    // tests/kubernetes.rs.
}

#[test]
fn two_claims_on_one_gpu_share_its_time_as_the_scheduler_allotted() {
    let _serial = serial();
    let node = Node::new();
    let slice = resource_slice(&node.sim);
    let device = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let (uid_a, uid_b) = (claim_uid(6), claim_uid(7));
    node.put_claim(&allocated_claim("team-a", "small", &uid_a, &device, "1Gi", "30"));
    node.put_claim(&allocated_claim("team-b", "large", &uid_b, &device, "1Gi", "50"));
    let plugin = node.start_plugin();
    let endpoint = register(&node);
    let (answer, _) = prepare(&endpoint, vec![claim_ref("team-a", "small", &uid_a), claim_ref("team-b", "large", &uid_b)]);
    assert!(answer.values().all(|r| r.error.is_empty()), "{answer:?}");
    // Both containers keep the device busy with 1 ms kernels for 4 s, from
    // the same moment (podman starts them apart); B's pod asks for the
    // whole device in its environment, and gets its 50.
    let start_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 6.0;
    let at = format!("{start_at:.3}");
    let load = "exec COMPUTE_LOAD kernel 1000 4";
    let small = node.sim.spawn(&mut node.container(&uid_a, &[], &[("GS_TEST_START_AT", &at)], load));
    let large = node.sim.spawn(&mut node.container(&uid_b, &[], &[("GPUSLICE_COMPUTE_SHARE", "100"), ("GS_TEST_START_AT", &at)], load));
    let (small, large) = (small.wait(), large.wait());
    small.assert_success();
    large.assert_success();
    for out in [&small, &large] {
        assert!(out.f64("late_ms") < 500.0, "a container started after the common start; the window is not shared\n{out}");
    }
    let (a, b) = (small.f64("share"), large.f64("share"));
    // Shares of 30 and 50, work-conserving: 37.5 % and 62.5 % of the time
    // the two got.
    let split = 100.0 * a / (a + b);
    eprintln!(
        "claims of compute 30 and 50 on one device: got {:.1} % and {:.1} % of the device, a split of {split:.1} / {:.1} (target 37.5 / 62.5)",
        a * 100.0,
        b * 100.0,
        100.0 - split
    );
    assert!((split - 37.5).abs() <= 2.0, "asked 30/50, got a split of {split:.1} / {:.1}\n{small}\n{large}", 100.0 - split);
    assert!(a + b > 0.6, "together they left the device idle: {a:.3} + {b:.3}\n{small}\n{large}");
    drop(plugin);
}

/// A process that points `GPUSLICE_DIR` somewhere of its own gets a ledger
/// the monitor does not accept, and the shim then caps it by nothing: the
/// monitor's bypass detection is what stands against it. With
/// `on_violation = "kill"` it is killed. (The container shares the host's
/// PID namespace here so that simgpu's NVML reports host pids, as the real
/// driver does.)
#[test]
fn a_process_that_moves_its_own_ledger_is_killed_by_the_monitor() {
    let _serial = serial();
    let node = Node::with_config(Some("on_violation = \"kill\"\nviolation_grace = \"1s\"\n"));
    let slice = resource_slice(&node.sim);
    let device = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let uid = claim_uid(8);
    node.put_claim(&allocated_claim("team-a", "sneaky", &uid, &device, "1Gi", "30"));
    let plugin = node.start_plugin();
    let endpoint = register(&node);
    let (answer, _) = prepare(&endpoint, vec![claim_ref("team-a", "sneaky", &uid)]);
    assert_eq!(answer[&uid].error, "", "{answer:?}");
    let script = "mkdir -p /tmp/own && GPUSLICE_DIR=/tmp/own exec MEMCTL init ctx info alloc:big:2G sleep:60000";
    let mut cmd = node.container(&uid, &["--pid=host"], &[], script);
    let started = Instant::now();
    let out = node.sim.run(&mut cmd);
    // The shim alone let it past its claim's cap ...
    assert_eq!(out.u64("info.total"), 4 * GIB, "{out}");
    out.assert_rc("big", 0);
    // ... and the monitor killed it, long before its minute was up.
    assert!(out.find("done").is_none() && !out.success(), "{out}");
    eprintln!("a process with its own GPUSLICE_DIR was killed after {:.1} s (grace 1 s)", started.elapsed().as_secs_f64());
    let metrics = node.monitor.as_ref().unwrap().metrics_after_this_round();
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0), "{metrics:#?}");
    drop(plugin);
}

/// A claim on a MIG device: the plugin names NVIDIA's CDI device for that
/// instance, and the container, seeing only the instance (as NVIDIA's CDI
/// device makes it), sees its claim's cap as the instance's memory.
#[test]
fn a_claim_on_a_mig_device_is_capped_inside_the_instance() {
    let _serial = serial();
    let simgpu =
        [("SIMGPU_DEVICES", "1"), ("SIMGPU_MEMORY", "8GiB"), ("SIMGPU_CONTEXT_MEMORY", "64MiB"), ("SIMGPU_MIG", "0=3g.71gb,1g.18gb")];
    let node = Node::build(&simgpu, None);
    let slice = resource_slice(&node.sim);
    let small = slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["attributes"]["migProfile"]["string"] == "1g.18gb")
        .unwrap_or_else(|| panic!("no 1g.18gb instance in {slice:#}"))
        .clone();
    assert_eq!(small["capacity"]["memory"]["value"], GIB.to_string(), "{small:#}");
    let (device, mig_uuid) = (small["name"].as_str().unwrap(), small["attributes"]["uuid"]["string"].as_str().unwrap());
    let uid = claim_uid(9);
    node.put_claim(&allocated_claim("team-m", "infer", &uid, device, "512Mi", "20"));
    let plugin = node.start_plugin();
    let endpoint = register(&node);
    let claim = claim_ref("team-m", "infer", &uid);
    let (answer, _) = prepare(&endpoint, vec![claim.clone()]);
    assert_eq!(answer[&uid].error, "", "{answer:?}");
    assert_eq!(answer[&uid].devices[0].cdi_device_ids[1], format!("nvidia.com/gpu={mig_uuid}"));
    let out = node.in_container(&uid, &[("CUDA_VISIBLE_DEVICES", mig_uuid)], "exec MEMCTL init ctx info alloc:a:free alloc:past:64M");
    out.assert_rc("ctx", 0).assert_rc("a", 0).assert_rc("past", 2);
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
    assert!(unprepare(&endpoint, vec![claim]).values().all(String::is_empty));
    drop(plugin);
}

/// A stand-in for the API server: HTTPS on the loopback, bearer token
/// checked, objects kept by path with a resourceVersion as the API server
/// keeps them (404 for none, 409 for a duplicate create or a stale
/// replace). It prints `port=N` and logs each request as one JSON line to
/// argv[4].
const FAKE_APISERVER: &str = r#"
import http.server, json, ssl, sys
cert, key, token, log_path, preload = sys.argv[1:6]
store, version = {}, [0]
for obj in json.load(open(preload)):
    m = obj["metadata"]
    store[f"/apis/resource.k8s.io/v1/namespaces/{m['namespace']}/resourceclaims/{m['name']}"] = obj
log = open(log_path, "a")

class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def status(self, code):
        self.answer(code, {"kind": "Status", "apiVersion": "v1", "code": code})

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        authorised = self.headers.get("Authorization") == "Bearer " + token
        log.write(json.dumps({"method": self.command, "path": self.path, "authorised": authorised, "body": body}) + "\n")
        log.flush()
        if not authorised:
            return self.status(401)
        if self.command == "GET":
            return self.answer(200, store[self.path]) if self.path in store else self.status(404)
        if self.command == "POST":
            path = self.path + "/" + body["metadata"]["name"]
            if path in store:
                return self.status(409)
        else:
            path = self.path
            if path not in store:
                return self.status(404)
            if body["metadata"].get("resourceVersion") != store[path]["metadata"]["resourceVersion"]:
                return self.status(409)
        version[0] += 1
        body["metadata"]["resourceVersion"] = str(version[0])
        store[path] = body
        return self.answer(201 if self.command == "POST" else 200, body)

    do_GET = do_POST = do_PUT = handle_any

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(f"port={server.server_address[1]}", flush=True)
server.serve_forever()
"#;

/// A CA and a server certificate for 127.0.0.1 signed by it (openssl), in
/// `dir`: (ca.pem, server.pem, server.key).
fn loopback_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca"]);
    run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kubernetes"]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// The API server client against the stand-in: a claim read, a missing
/// one, a wrong token, and the ResourceSlice created, left alone while the
/// devices stay, and replaced one generation up when they change.
#[test]
fn the_api_server_client_reads_claims_and_keeps_the_resource_slice() {
    let _serial = serial();
    let sim = Sim::new().devices(2).memory("8GiB").context_memory("64MiB");
    let (ca, cert, key) = loopback_certificates(sim.dir());
    let token = sim.dir().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let claim = allocated_claim("team-a", "train", &claim_uid(10), "gpu-00000000-0000-0000-0000-000000000000", "8Gi", "30");
    let preload = sim.dir().join("preload.json");
    std::fs::write(&preload, json!([claim]).to_string()).unwrap();
    let log = sim.dir().join("requests.log");
    let script = sim.dir().join("fake_apiserver.py");
    std::fs::write(&script, FAKE_APISERVER).unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(&cert).arg(&key).arg("s3cret-token").arg(&log).arg(&preload);
    let mut server = sim.spawn(&mut cmd);
    let base = format!("https://127.0.0.1:{}", server.wait_for("port"));

    let api = gpuslice_dra::apiserver::ApiServer::new(&base, &ca, &token).unwrap();
    use gpuslice_dra::claims::ClaimSource;
    assert_eq!(api.get("team-a", "train").unwrap(), claim);
    assert!(api.get("team-a", "nothing").unwrap_err().contains("HTTP 404"));
    let wrong = sim.dir().join("wrong-token");
    std::fs::write(&wrong, "guess").unwrap();
    let intruder = gpuslice_dra::apiserver::ApiServer::new(&base, &ca, &wrong).unwrap();
    assert!(intruder.get("team-a", "train").unwrap_err().contains("HTTP 401"));

    let slice = resource_slice(&sim);
    assert_eq!(api.publish_slice(&slice), Ok(true), "created");
    assert_eq!(api.publish_slice(&slice), Ok(false), "the same devices: nothing written");
    let mut fewer = slice.clone();
    fewer["spec"]["devices"].as_array_mut().unwrap().pop();
    assert_eq!(api.publish_slice(&fewer), Ok(true), "a device gone: replaced");
    let requests: Vec<Value> = std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let writes: Vec<&Value> = requests.iter().filter(|r| r["method"] != "GET").collect();
    assert_eq!(writes.len(), 2, "{requests:#?}");
    assert_eq!((writes[0]["method"].as_str(), writes[0]["path"].as_str()), (Some("POST"), Some("/apis/resource.k8s.io/v1/resourceslices")));
    assert_eq!(writes[1]["method"], "PUT");
    let replaced = &writes[1]["body"];
    assert_eq!(replaced["spec"]["pool"]["generation"], 2, "one generation up");
    assert_eq!(replaced["spec"]["devices"].as_array().map(Vec::len), Some(1));
    assert!(requests.iter().filter(|r| r["path"].as_str().unwrap().contains("resourceslices")).all(|r| r["authorised"] == true));
    // What was written is a valid ResourceSlice, server fields and all.
    validate_strictly(sim.dir(), "replaced-slice", replaced);
    drop(server);
}

/// What a hostile or broken request can carry, over the kubelet's socket:
/// claim references that would escape the CDI directory or collide (`..`,
/// `/`, NUL, unicode, a name past 253 bytes), amounts the API server would
/// never write (negative, past 64 bits, a fraction of a byte, a share over
/// 100), the same claim twice in one request, and the unprepare of a claim
/// never prepared. Each is refused or answered alone; nothing is written
/// outside the CDI directory; the plugin goes on serving.
#[test]
fn hostile_claims_are_refused_one_by_one_and_the_same_claim_twice_is_prepared_once() {
    let _serial = serial();
    let node = Node::new();
    let slice = resource_slice(&node.sim);
    let device = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let plugin = node.start_plugin();
    let endpoint = register(&node);
    let cdi_before: std::collections::BTreeSet<_> = std::fs::read_dir(CDI_DIR).into_iter().flatten().flatten().map(|e| e.path()).collect();

    // References that are no Kubernetes names.
    let long = "n".repeat(254);
    let refs = [
        ("../../etc", "passwd", "u-1"),
        ("team-a", "../../../tmp/x", "u-2"),
        ("team-a", "x", "../../../tmp/gs-escape"),
        ("team-a", "x/y", "u-3"),
        ("team-a", "x\0y", "u-4"),
        ("team-a", "x", "u\0-5"),
        ("tëam", "x", "u-6"),
        ("team-a", "trâin", "u-7"),
        ("team-a", &long, "u-8"),
        ("team-a", "x", "/abs"),
        ("", "x", "u-9"),
        ("team-a", "", "u-10"),
        ("team-a", "x", ""),
    ];
    let claims: Vec<Claim> = refs.iter().map(|(ns, name, uid)| claim_ref(ns, name, uid)).collect();
    let (answer, _) = prepare(&endpoint, claims.clone());
    for (ns, name, uid) in refs {
        let error = answer.get(uid).map(|r| r.error.as_str()).unwrap_or_else(|| panic!("no answer for {uid:?}: {answer:?}"));
        assert!(error.contains("is not a Kubernetes claim reference"), "{ns:?}/{name:?} ({uid:?}): {error}");
    }
    let errors = unprepare(&endpoint, claims);
    assert!(errors.values().all(|e| e.contains("is not a Kubernetes claim reference")), "{errors:?}");
    assert!(!Path::new("/tmp/gs-escape").exists() && !Path::new("/tmp/gs-escape.json").exists());

    // Amounts: each claim alone is refused with what is accepted, or
    // admitted with the amount read as the API server means it.
    let amounts = [
        ("negative-memory", "-1Gi", "30", Err("is negative")),
        ("negative-compute", "1Gi", "-5", Err("is negative")),
        ("past-64-bits", "99999999Ei", "30", Err("64 bits")),
        ("past-the-device", "1Gi", "100.5", Err("0 to 100")),
        ("exponent", "1e400", "30", Err("is not a Kubernetes quantity")),
        ("hex", "0x10", "30", Err("is not a Kubernetes quantity")),
        ("a-fraction-of-a-byte", "0.5", "37.5", Ok((1, 37.5))),
        ("milli-percent", "1536Mi", "2500m", Ok((1536 * MIB, 2.5))),
    ];
    let mut uids = Vec::new();
    for (i, (name, memory, compute, _)) in amounts.iter().enumerate() {
        let uid = claim_uid(20 + i as u32);
        let mut claim = allocated_claim("team-h", name, &uid, &device, "1Gi", "30");
        // Written as the scheduler never would: past the schema's check.
        claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = json!({"memory": memory, "compute": compute});
        node.uids.borrow_mut().push(uid.clone());
        std::fs::create_dir_all(node.claims_dir.join("team-h")).unwrap();
        std::fs::write(node.claims_dir.join("team-h").join(format!("{name}.json")), claim.to_string()).unwrap();
        uids.push(uid);
    }
    let claims: Vec<Claim> = amounts.iter().zip(&uids).map(|((name, ..), uid)| claim_ref("team-h", name, uid)).collect();
    let (answer, _) = prepare(&endpoint, claims.clone());
    let tenants = node.tenants();
    for ((name, memory, compute, expected), uid) in amounts.iter().zip(&uids) {
        let error = &answer[uid].error;
        let tenant = tenants.iter().find(|t| t["tenant"] == format!("team-h.{name}"));
        match expected {
            Err(why) => {
                assert!(error.contains(why), "{memory} / {compute}: {error}");
                assert!(tenant.is_none(), "{memory} / {compute} admitted: {tenant:?}");
            }
            Ok((bytes, share)) => {
                assert_eq!(error, "", "{memory} / {compute}");
                let tenant = tenant.unwrap_or_else(|| panic!("{name} not admitted: {tenants:#?}"));
                assert_eq!(tenant["devices"][0]["memory_bytes"], *bytes, "{tenant:#}");
                assert_eq!(tenant["devices"][0]["share_percent"], *share, "{tenant:#}");
            }
        }
    }
    assert!(unprepare(&endpoint, claims).values().all(String::is_empty));

    // The same claim four times in one request, ten times over: one
    // answer, no error, one spec that parses, one tenant.
    let uid = claim_uid(40);
    node.put_claim(&allocated_claim("team-h", "twice", &uid, &device, "1Gi", "30"));
    let claim = claim_ref("team-h", "twice", &uid);
    let spec_path = Path::new(CDI_DIR).join(format!("gpuslice.dev-slice_{uid}.json"));
    for round in 0..10 {
        let (answer, _) = prepare(&endpoint, vec![claim.clone(); 4]);
        assert_eq!(answer.len(), 1, "{answer:?}");
        assert_eq!(answer[&uid].error, "", "round {round}: the same claim twice in one request: {answer:?}");
        let spec: Value = serde_json::from_str(&std::fs::read_to_string(&spec_path).unwrap())
            .unwrap_or_else(|e| panic!("round {round}: the spec does not parse: {e}"));
        assert_eq!(spec["devices"][0]["name"], uid.as_str());
    }
    assert_eq!(node.tenants().iter().filter(|t| t["tenant"] == "team-h.twice").count(), 1);

    // Unprepare of a claim never prepared is no error, and releases
    // nothing that another claim prepared.
    let never = claim_uid(41);
    let errors = unprepare(&endpoint, vec![claim_ref("team-h", "never", &never), claim_ref("team-h", "twice", &claim_uid(42))]);
    assert!(errors.values().all(String::is_empty), "{errors:?}");
    assert!(
        node.tenants().iter().any(|t| t["tenant"] == "team-h.twice"),
        "a stale UID of the same name released the prepared claim's tenant"
    );
    assert!(unprepare(&endpoint, vec![claim]).values().all(String::is_empty));

    // Nothing left behind in the CDI directory, and nothing but spec files written there.
    let cdi_after: std::collections::BTreeSet<_> = std::fs::read_dir(CDI_DIR).into_iter().flatten().flatten().map(|e| e.path()).collect();
    let new: Vec<_> = cdi_after.difference(&cdi_before).collect();
    assert!(new.is_empty(), "left in {CDI_DIR}: {new:?}");
    assert!(monitor_support::pid_alive(plugin.pid()), "the plugin is still serving");
    drop(plugin);
}
