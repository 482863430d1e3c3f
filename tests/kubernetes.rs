//! gpuslice on a real Kubernetes cluster: everything on the other side of
//! the boundary is upstream's own, built at the versions of
//! scripts/k8s/versions.env: kube-apiserver, kube-scheduler,
//! kube-controller-manager (its ResourceClaim controller makes the claims of
//! pods' templates), two kubelets, containerd 2 (which applies the CDI
//! specs), runc, kube-proxy, etcd. Each node is a host of its own (network
//! and mount namespaces, scripts/k8s-cluster.sh) with a simulated GPU whose
//! driver its containers get through a CDI spec, as NVIDIA's CDI spec gives
//! them the real one. gpuslice is installed with its Helm chart from the
//! image deploy/Dockerfile builds; the pods run a client image on Debian 11
//! (glibc 2.31).
//!
//! The tests are ignored in the README's test command (no cluster runs
//! there): `bash scripts/test-kubernetes.sh` builds the components and the
//! images, brings a two-node cluster up and runs them one at a time, as CI's
//! second step does. Against a cluster already up (`scripts/k8s-cluster.sh up
//! --nodes 2`): `cargo test --test kubernetes -- --ignored --test-threads=1`.

use gpuslice_tests::kube::{items, text, value, wait_until, Kube};
use serde_json::Value;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const DRIVER: &str = "gpu.gpuslice.dev";
const CLASS: &str = "gpuslice.dev";
const GIB: u64 = 1 << 30;
/// The simulated GPU of each node (scripts/k8s-cluster.sh's default).
const DEVICE_BYTES: u64 = 40 * GIB;
const CLIENT_IMAGE: &str = "localhost/gpuslice-client:dev";

/// The cluster, with gpuslice installed once per test run.
struct Cluster {
    kube: Kube,
    nodes: Vec<String>,
}

impl std::ops::Deref for Cluster {
    type Target = Kube;
    fn deref(&self) -> &Kube {
        &self.kube
    }
}

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let kube = Kube::running();
        let nodes = items(&kube.json(&["get", "nodes"])).iter().map(|n| text(n, "/metadata/name")).collect();
        let cluster = Cluster { kube, nodes };
        cluster.install();
        cluster
    })
}

impl Cluster {
    /// `helm upgrade --install` of the chart, as a platform engineer would
    /// run it, with the values of a simgpu node (deploy/helm/gpuslice/ci),
    /// processes that run outside their slice killed after 1 s, and whole
    /// GPUs asked for as `nvidia.com/gpu` served by the DeviceClass; then
    /// waits until every node's plugin has published its ResourceSlice.
    fn install(&self) {
        let started = Instant::now();
        self.helm(&[
            "upgrade",
            "--install",
            "gpuslice",
            "deploy/helm/gpuslice",
            "--namespace",
            "gpuslice",
            "--create-namespace",
            "-f",
            "deploy/helm/gpuslice/ci/simgpu-values.yaml",
            "--set",
            "monitor.onViolation=kill",
            "--set",
            "monitor.violationGrace=1s",
            "--set",
            "deviceClass.extendedResourceName=nvidia.com/gpu",
            // Namespaces are teams (the chart's default); one of them has a
            // memory quota over all its pods on a node.
            "--set-string",
            "monitor.extraConfig=[teams.team-y]\nmemory = \"3GiB\"\n",
            "--wait",
            "--timeout",
            "180s",
        ]);
        self.kubectl(&["rollout", "status", "-n", "gpuslice", "daemonset/gpuslice", "--timeout=180s"]);
        for node in &self.nodes {
            wait_until(&format!("{node}'s ResourceSlice"), Duration::from_secs(60), || self.slice_of(node));
        }
        eprintln!("gpuslice installed with Helm on {} node(s), every ResourceSlice published, in {:.1} s", self.nodes.len(), secs(started));
    }

    /// The ResourceSlice of `node` for this driver, once there is one.
    fn slice_of(&self, node: &str) -> Option<Value> {
        let slices = self.json(&["get", "resourceslices"]);
        items(&slices)
            .into_iter()
            .find(|s| s.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node) && text(s, "/spec/driver") == DRIVER)
    }

    /// The gpuslice pod (monitor and plugin) on `node`.
    fn gpuslice_pod(&self, node: &str) -> String {
        let pods = self.json(&["get", "pods", "-n", "gpuslice", "--field-selector", &format!("spec.nodeName={node}")]);
        let running: Vec<String> = items(&pods)
            .iter()
            .filter(|p| text(p, "/status/phase") == "Running" && p.pointer("/metadata/deletionTimestamp").is_none())
            .map(|p| text(p, "/metadata/name"))
            .collect();
        running.into_iter().next().unwrap_or_else(|| panic!("no gpuslice pod runs on {node}: {pods}"))
    }

    /// `gpuslice ARGS` in the monitor's container on `node`, as an operator
    /// runs it there.
    fn gpuslice(&self, node: &str, args: &[&str]) -> String {
        let pod = self.gpuslice_pod(node);
        let mut all = vec!["exec", "-n", "gpuslice", &pod, "-c", "monitor", "--", "gpuslice"];
        all.extend(args);
        self.kubectl(&all)
    }

    fn tenants_of(&self, node: &str, namespace: &str) -> Vec<Value> {
        let list: Value = serde_json::from_str(&self.gpuslice(node, &["tenant", "list", "--json"])).unwrap();
        list["tenants"].as_array().cloned().unwrap_or_default().into_iter().filter(|t| t["labels"]["namespace"] == namespace).collect()
    }

    fn pod(&self, namespace: &str, name: &str) -> Value {
        self.json(&["get", "pod", "-n", namespace, name])
    }

    /// Waits until the pod's container has printed `key=…`; the log.
    fn wait_for_line(&self, namespace: &str, pod: &str, key: &str, within: Duration) -> String {
        wait_until(&format!("{key}= in the log of {namespace}/{pod}"), within, || {
            let log = self.try_kubectl(&["logs", "-n", namespace, pod]).ok()?;
            value(&log, key).is_some().then_some(log)
        })
    }

    /// Applies `pod`, waits for its end and checks that it was killed
    /// (SIGKILL: exit code 137), saying how long that took; its log.
    fn run_until_killed(&self, pod: &Pod, what: &str) -> String {
        let started = Instant::now();
        self.apply(&pod.manifest());
        let (phase, log) = self.wait_done(pod.namespace, pod.name, Duration::from_secs(120));
        let state = self.pod(pod.namespace, pod.name);
        let terminated = &state["status"]["containerStatuses"][0]["state"]["terminated"];
        eprintln!("{what}: {phase} after {:.1} s, exit code {} ({})\n{log}", secs(started), terminated["exitCode"], terminated["reason"]);
        assert_eq!(terminated["exitCode"], 137, "{what}: not killed: {terminated}\n{log}");
        log
    }

    /// Waits until the pod ran to its end; its phase and log.
    fn wait_done(&self, namespace: &str, pod: &str, within: Duration) -> (String, String) {
        let phase = wait_until(&format!("{namespace}/{pod} to finish"), within, || {
            let phase = text(&self.pod(namespace, pod), "/status/phase");
            matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
        });
        (phase, self.kubectl(&["logs", "-n", namespace, pod]))
    }
}

/// A namespace of one test, enforcing the `restricted` Pod Security level,
/// deleted at the end (whatever became of the test) and then checked to
/// have left nothing on any node: no tenant, no byte held or committed, no
/// CDI spec.
struct Namespace {
    name: String,
}

impl Namespace {
    fn new(name: &str) -> Namespace {
        let c = cluster();
        let _ = c.try_kubectl(&["delete", "namespace", name, "--wait=true", "--timeout=120s"]);
        c.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/enforce-version: latest\n"
        ));
        wait_until("the namespace's default ServiceAccount", Duration::from_secs(30), || {
            c.try_kubectl(&["get", "serviceaccount", "default", "-n", name]).ok()
        });
        Namespace { name: name.to_string() }
    }

    /// Deletes the namespace and waits until every node has let go of it.
    fn delete_and_check_released(&self) {
        Namespace::delete_all_and_check_released(&[self]);
    }

    /// Deletes the namespaces and waits until every node has let go of
    /// them all: no tenant, no byte held or committed, no CDI spec.
    fn delete_all_and_check_released(namespaces: &[&Namespace]) {
        let c = cluster();
        let started = Instant::now();
        let names: Vec<&str> = namespaces.iter().map(|n| n.name.as_str()).collect();
        let mut delete = vec!["delete", "namespace"];
        delete.extend(&names);
        delete.extend(["--wait=true", "--timeout=180s"]);
        c.kubectl(&delete);
        for node in &c.nodes {
            for name in &names {
                wait_until(&format!("{node} to release the tenants of {name}"), Duration::from_secs(60), || {
                    c.tenants_of(node, name).is_empty().then_some(())
                });
            }
            let devices: Value = serde_json::from_str(&c.gpuslice(node, &["devices", "--json"])).unwrap();
            for device in devices["devices"].as_array().unwrap() {
                assert_eq!(device["memory_committed_bytes"], 0, "{node}: committed after the pods went: {device}");
                assert_eq!(device["memory_used_bytes"], 0, "{node}: device memory in use after the pods went: {device}");
            }
            let status: Value = serde_json::from_str(&c.gpuslice(node, &["status", "--json"])).unwrap();
            for tenant in status["tenants"].as_array().unwrap() {
                let name = tenant["name"].as_str().unwrap();
                for namespace in &names {
                    assert!(!name.starts_with(&format!("{namespace}.")), "{node}: tenant {name} still has a ledger: {tenant}");
                }
            }
            let pod = c.gpuslice_pod(node);
            let specs = c.kubectl(&["exec", "-n", "gpuslice", &pod, "-c", "plugin", "--", "ls", "/var/run/cdi"]);
            assert!(!specs.contains("gpuslice.dev-slice_"), "{node}: CDI specs left behind: {specs}");
        }
        eprintln!(
            "{}: deleted; every node released its tenants (0 bytes held or committed) within {:.1} s",
            names.join(", "),
            secs(started)
        );
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = cluster().try_kubectl(&["delete", "namespace", &self.name, "--wait=true", "--timeout=180s"]);
        }
    }
}

/// What a pod asks of its slice.
#[derive(Clone, Default)]
struct Slice {
    memory: Option<&'static str>,
    compute: Option<u32>,
    /// A ceiling on the device's time, percent (the claim's opaque
    /// configuration).
    limit: Option<u32>,
}

/// A ResourceClaimTemplate `name` asking the class for `slice`.
fn claim_template(namespace: &str, name: &str, slice: &Slice) -> String {
    let mut capacity = Vec::new();
    if let Some(memory) = slice.memory {
        capacity.push(format!("memory: {memory}"));
    }
    if let Some(compute) = slice.compute {
        capacity.push(format!("compute: \"{compute}\""));
    }
    let capacity = if capacity.is_empty() {
        String::new()
    } else {
        format!("\n            capacity:\n              requests: {{{}}}", capacity.join(", "))
    };
    let config = slice.limit.map_or(String::new(), |limit| {
        format!(
            "\n      config:\n        - requests: [gpu]\n          opaque:\n            driver: {DRIVER}\n            parameters: {{apiVersion: {DRIVER}/v1, kind: SliceParameters, computeLimit: {limit}}}"
        )
    });
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  spec:\n    devices:\n      requests:\n        - name: gpu\n          exactly:\n            deviceClassName: {CLASS}{capacity}{config}\n"
    )
}

/// A pod of the client image, as the `restricted` level wants it (no root,
/// no privilege, the runtime's seccomp profile).
struct Pod<'a> {
    namespace: &'a str,
    name: &'a str,
    command: Vec<String>,
    /// The claim template its container uses, if any.
    template: Option<&'a str>,
    node: Option<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    /// `resources.limits` of the container (extended resources).
    limits: Vec<(&'a str, &'a str)>,
}

impl<'a> Pod<'a> {
    fn new(namespace: &'a str, name: &'a str, command: &[&str]) -> Pod<'a> {
        Pod {
            namespace,
            name,
            command: command.iter().map(|s| s.to_string()).collect(),
            template: None,
            node: None,
            env: Vec::new(),
            limits: Vec::new(),
        }
    }

    fn manifest(&self) -> String {
        let quote = |s: &str| serde_json::to_string(s).unwrap();
        let command = self.command.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ");
        let mut spec = String::new();
        if let Some(node) = self.node {
            spec += &format!("  nodeSelector: {{kubernetes.io/hostname: {node}}}\n");
        }
        if let Some(template) = self.template {
            spec += &format!("  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]\n");
        }
        let mut resources = Vec::new();
        if self.template.is_some() {
            resources.push("claims: [{name: gpu}]".to_string());
        }
        if !self.limits.is_empty() {
            let limits: Vec<String> = self.limits.iter().map(|(k, v)| format!("{k}: {}", quote(v))).collect();
            resources.push(format!("limits: {{{}}}", limits.join(", ")));
        }
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{{name: {k}, value: {}}}", quote(v))).collect();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n\
             {spec}  securityContext: {{runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: {{type: RuntimeDefault}}}}\n  containers:\n\
             \x20   - name: app\n      image: {CLIENT_IMAGE}\n      imagePullPolicy: Never\n      command: [{command}]\n      env: [{env}]\n\
             \x20     resources: {{{resources}}}\n      securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [\"ALL\"]}}}}\n",
            name = self.name,
            namespace = self.namespace,
            env = env.join(", "),
            resources = resources.join(", "),
        )
    }
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn helm_installs_gpuslice_and_every_node_publishes_its_gpus() {
    let c = cluster();
    // The chart is clean as Helm sees it, with its defaults and with a
    // simgpu node's values, and everything it renders is accepted by the
    // API server itself (a server-side dry run checks every field).
    for values in [None, Some("deploy/helm/gpuslice/ci/simgpu-values.yaml")] {
        let mut lint = vec!["lint", "--strict", "deploy/helm/gpuslice"];
        let mut template = vec!["template", "gpuslice", "deploy/helm/gpuslice", "--namespace", "gpuslice"];
        if let Some(values) = values {
            lint.extend(["-f", values]);
            template.extend(["-f", values]);
        }
        let linted = c.helm(&lint);
        assert!(linted.contains("1 chart(s) linted, 0 chart(s) failed") && !linted.contains("[WARNING]"), "{linted}");
        let rendered = c.helm(&template);
        let (ok, out, err) = c.command(&c.kubectl, &["apply", "--dry-run=server", "-f", "-"], Some(&rendered));
        assert!(ok, "the API server refuses what the chart renders: {err}{out}");
        let (ok, out, err) = c.command(&c.kubectl, &["create", "--dry-run=client", "-o", "json", "-f", "-"], Some(&rendered));
        assert!(ok, "{err}{out}");
        // One JSON object after another, as kubectl prints several.
        let objects: Vec<Value> = serde_json::Deserializer::from_str(&out).into_iter::<Value>().map(|o| o.unwrap()).collect();
        let find = |kind: &str| {
            objects.iter().find(|o| o["kind"] == kind).cloned().unwrap_or_else(|| panic!("the chart renders no {kind}: {rendered}"))
        };
        for kind in ["ServiceAccount", "ClusterRoleBinding", "ConfigMap", "Service"] {
            find(kind);
        }
        let class = find("DeviceClass");
        assert_eq!(class["metadata"]["name"], CLASS);
        assert_eq!(class["spec"]["selectors"][0]["cel"]["expression"], format!("device.driver == \"{DRIVER}\""));
        // The plugin may read claims and their namespaces (the team label)
        // and write slices, nothing else.
        let allowed = [
            ("resourceclaims", "get"),
            ("namespaces", "get"),
            ("resourceslices", "get"),
            ("resourceslices", "create"),
            ("resourceslices", "update"),
        ];
        for rule in find("ClusterRole")["rules"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    let grant = (resource.as_str().unwrap(), verb.as_str().unwrap());
                    assert!(allowed.contains(&grant), "the driver needs no {grant:?}: {rule}");
                }
            }
        }
        let pod = &find("DaemonSet")["spec"]["template"]["spec"];
        assert_eq!(pod["hostPID"], true, "the monitor maps host pids");
        let containers = pod["containers"].as_array().unwrap();
        let command = |name: &str| containers.iter().find(|c| c["name"] == name).unwrap()["command"].to_string();
        assert!(command("plugin").contains(&format!("--driver-name={DRIVER}")), "{}", command("plugin"));
        assert!(command("monitor").contains("--layout=tenant-dirs"), "{}", command("monitor"));
        for container in containers {
            assert_eq!(container["securityContext"]["capabilities"]["drop"][0], "ALL", "{container}");
            assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false, "{container}");
        }
    }
    // A value the chart does not accept is refused by name.
    let (ok, out, err) = c.command(&c.helm, &["template", "x", "deploy/helm/gpuslice", "--set", "monitor.onViolation=ignore"], None);
    assert!(!ok && format!("{out}{err}").contains("onViolation"), "{out}{err}");

    let daemonset = c.json(&["get", "daemonset", "-n", "gpuslice", "gpuslice"]);
    assert_eq!(daemonset["status"]["numberReady"], c.nodes.len(), "{}", daemonset["status"]);
    let mut listed = Vec::new();
    for node in &c.nodes {
        let slice = c.slice_of(node).unwrap();
        let devices = slice["spec"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1, "{slice}");
        let device = &devices[0];
        assert_eq!(text(device, "/capacity/memory/value"), DEVICE_BYTES.to_string(), "{device}");
        assert_eq!(text(device, "/capacity/compute/value"), "100", "{device}");
        assert_eq!(device["allowMultipleAllocations"], true);
        listed.push(format!("{node}: {} ({} GiB, compute 100)", text(device, "/name"), DEVICE_BYTES / GIB));
    }
    let table = c.kubectl(&["get", "resourceslices"]);
    for node in &c.nodes {
        assert!(table.lines().any(|l| l.contains(node) && l.contains(DRIVER)), "{table}");
    }
    eprintln!("kubectl get resourceslices:\n{table}{}", listed.join("\n"));
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_pod_in_a_restricted_namespace_gets_8_gib_and_30_percent_and_no_more() {
    let c = cluster();
    let ns = Namespace::new("slice-restricted");
    c.apply(&claim_template(&ns.name, "gpu-8gi-30", &Slice { memory: Some("8Gi"), compute: Some(30), limit: None }));
    let started = Instant::now();
    let mut pod = Pod::new(
        &ns.name,
        "train",
        &["memctl", "init", "ctx", "info", "nvml", "alloc:a:6G", "alloc:b:2G", "free:b", "mark:held", "sleep:600000"],
    );
    pod.template = Some("gpu-8gi-30");
    c.apply(&pod.manifest());
    let log = c.wait_for_line(&ns.name, "train", "held", Duration::from_secs(90));
    eprintln!("{}/train: scheduled, prepared and running its CUDA client {:.1} s after kubectl apply:\n{log}", ns.name, secs(started));
    // The container sees its claim as the whole GPU, through the driver
    // and through NVML, and is refused one allocation past it.
    assert_eq!(number(&log, "info.total"), 8 * GIB, "{log}");
    assert_eq!(number(&log, "nvml.total"), 8 * GIB, "{log}");
    assert_eq!(number(&log, "a"), 0, "6 GiB fit in the 8 GiB claim:\n{log}");
    assert_eq!(number(&log, "b"), 2, "2 GiB more (with the context's 256 MiB) is past it: CUDA_ERROR_OUT_OF_MEMORY (2)\n{log}");
    let pod_json = c.pod(&ns.name, "train");
    let node = text(&pod_json, "/spec/nodeName");
    // The shim came from the gpuslice image, linked for glibc 2.17, and
    // runs in an image whose glibc is 2.31.
    let glibc = c.kubectl(&["exec", "-n", &ns.name, "train", "--", "getconf", "GNU_LIBC_VERSION"]);
    assert_eq!(glibc.trim(), "glibc 2.31");
    let preload = c.kubectl(&["exec", "-n", &ns.name, "train", "--", "cat", "/etc/ld.so.preload"]);
    assert_eq!(preload.trim(), "/usr/local/lib/gpuslice/libgpuslice.so");
    // The node names the tenant by its namespace and pod.
    let status = c.gpuslice(&node, &["status"]);
    eprintln!("gpuslice status on {node}:\n{status}");
    let tenant = c.tenants_of(&node, &ns.name);
    assert_eq!(tenant.len(), 1, "{tenant:?}");
    let tenant_name = tenant[0]["tenant"].as_str().unwrap();
    assert!(
        status.lines().any(|l| l.starts_with(tenant_name) && l.contains("kubernetes") && l.contains(&ns.name) && l.contains("train")),
        "status does not name {tenant_name} by namespace and pod:\n{status}"
    );
    assert!(status.lines().any(|l| l.starts_with(tenant_name) && l.contains("8.0 GiB") && l.contains("30%")), "{status}");
    assert_eq!(tenant[0]["labels"]["pod"], "train");
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn claims_past_a_gpu_leave_the_last_pod_pending_with_the_schedulers_reason() {
    let c = cluster();
    let ns = Namespace::new("slice-full");
    let node = c.nodes[0].clone();
    c.apply(&claim_template(&ns.name, "gpu-24gi", &Slice { memory: Some("24Gi"), compute: Some(10), limit: None }));
    for name in ["first", "second"] {
        let mut pod = Pod::new(&ns.name, name, &["memctl", "init", "ctx", "info", "mark:held", "sleep:600000"]);
        pod.template = Some("gpu-24gi");
        pod.node = Some(&node);
        c.apply(&pod.manifest());
        if name == "first" {
            c.wait_for_line(&ns.name, "first", "held", Duration::from_secs(90));
        }
    }
    // 24 + 24 GiB on a 40 GiB GPU: the scheduler keeps the second pending
    // and says why; nothing of gpuslice decides it.
    let reason = wait_until("the scheduler's reason for the second pod", Duration::from_secs(60), || {
        let pod = c.pod(&ns.name, "second");
        let conditions = pod.pointer("/status/conditions")?.as_array()?.clone();
        conditions.into_iter().find(|cond| cond["type"] == "PodScheduled" && cond["status"] == "False").map(|cond| text(&cond, "/message"))
    });
    eprintln!("the second 24 GiB claim on {node} (40 GiB): Pending: {reason}");
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(text(&c.pod(&ns.name, "second"), "/status/phase"), "Pending");
    // Once the first goes, the second is placed.
    c.kubectl(&["delete", "pod", "-n", &ns.name, "first", "--wait=true"]);
    let log = c.wait_for_line(&ns.name, "second", "held", Duration::from_secs(90));
    assert_eq!(number(&log, "info.total"), 24 * GIB, "{log}");
    ns.delete_and_check_released();
}

/// Two pods keeping one GPU busy from the same moment; their shares of its
/// time as each measured it.
fn busy_pair(ns: &Namespace, node: &str, slices: [(&str, Slice); 2], seconds: u32) -> Vec<f64> {
    let c = cluster();
    let start_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 20.0;
    let at = format!("{start_at:.3}");
    let duration = seconds.to_string();
    for (name, slice) in &slices {
        c.apply(&claim_template(&ns.name, &format!("c-{name}"), slice));
        let template = format!("c-{name}");
        let mut pod = Pod::new(&ns.name, name, &["compute_load", "kernel", "1000", &duration]);
        pod.template = Some(&template);
        pod.node = Some(node);
        pod.env = vec![("GS_TEST_START_AT", &at)];
        c.apply(&pod.manifest());
    }
    slices
        .iter()
        .map(|(name, _)| {
            let (phase, log) = c.wait_done(&ns.name, name, Duration::from_secs(120 + u64::from(seconds)));
            assert_eq!(phase, "Succeeded", "{name}:\n{log}");
            assert!(float(&log, "late_ms") < 1000.0, "{name} began late: the window is not shared\n{log}");
            float(&log, "share")
        })
        .collect()
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn two_busy_pods_split_the_gpu_as_their_claims_say_and_a_ceiling_holds() {
    let c = cluster();
    let ns = Namespace::new("slice-shares");
    let node = c.nodes[0].clone();
    let shares = busy_pair(
        &ns,
        &node,
        [
            ("small", Slice { memory: Some("2Gi"), compute: Some(30), limit: None }),
            ("large", Slice { memory: Some("2Gi"), compute: Some(50), limit: None }),
        ],
        10,
    );
    let (a, b) = (shares[0], shares[1]);
    let split = 100.0 * a / (a + b);
    eprintln!(
        "claims of compute 30 and 50 on one GPU, 1 ms kernels back to back for 10 s: {:.1} % and {:.1} % of the GPU, a split of {split:.1} / {:.1} (target 37.5 / 62.5)",
        a * 100.0,
        b * 100.0,
        100.0 - split
    );
    assert!((split - 37.5).abs() <= 2.0, "asked 30/50, got {split:.1} / {:.1}", 100.0 - split);
    assert!(a + b > 0.9, "together they left the GPU idle: {a:.3} + {b:.3}");
    for name in ["small", "large"] {
        c.kubectl(&["delete", "pod", "-n", &ns.name, name, "--wait=true"]);
    }
    // A ceiling: a claim of compute 20 with computeLimit 25, beside a claim
    // of 10 with no ceiling. The first gets at most 25 % even though the
    // GPU has time to spare; the other takes the rest.
    let shares = busy_pair(
        &ns,
        &node,
        [
            ("capped", Slice { memory: Some("2Gi"), compute: Some(20), limit: Some(25) }),
            ("other", Slice { memory: Some("2Gi"), compute: Some(10), limit: None }),
        ],
        10,
    );
    eprintln!(
        "a claim of compute 20 with computeLimit 25 beside one of compute 10: {:.1} % and {:.1} % (ceiling 25 %)",
        shares[0] * 100.0,
        shares[1] * 100.0
    );
    assert!((shares[0] * 100.0 - 25.0).abs() <= 2.0, "ceiling 25 %, got {:.1} %", shares[0] * 100.0);
    assert!(shares[1] > 0.6, "the other claim did not get the time the capped one left: {:.3}", shares[1]);
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_pod_that_lies_about_itself_gains_nothing() {
    let c = cluster();
    let ns = Namespace::new("slice-hostile");
    let node = c.nodes[0].clone();
    c.apply(&claim_template(&ns.name, "gpu-8gi", &Slice { memory: Some("8Gi"), compute: Some(20), limit: None }));
    // Its own GPUSLICE_* (HAMi's too) and no LD_PRELOAD: the CDI spec's
    // variables replace the pod's, /etc/ld.so.preload loads the shim, and
    // the monitor wrote the cap where the pod cannot raise it.
    let mut liar = Pod::new(&ns.name, "liar", &["memctl", "init", "ctx", "info", "alloc:a:7G", "alloc:b:2G"]);
    liar.template = Some("gpu-8gi");
    liar.node = Some(&node);
    liar.env = vec![
        ("GPUSLICE_MEMORY_LIMIT", "40GiB"),
        ("GPUSLICE_COMPUTE_SHARE", "100"),
        ("GPUSLICE_TENANT", "someone-else"),
        ("GPUSLICE_DIR", "/tmp"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "40g"),
        ("LD_PRELOAD", ""),
    ];
    c.apply(&liar.manifest());
    let (phase, log) = c.wait_done(&ns.name, "liar", Duration::from_secs(90));
    eprintln!("a pod setting GPUSLICE_MEMORY_LIMIT=40GiB, GPUSLICE_TENANT, GPUSLICE_DIR and LD_PRELOAD='': {phase}\n{log}");
    assert_eq!(number(&log, "info.total"), 8 * GIB, "{log}");
    assert_eq!(number(&log, "b"), 2, "past its 8 GiB: CUDA_ERROR_OUT_OF_MEMORY\n{log}");
    // A process that moves its own ledger is capped by nothing in the
    // shim; the monitor finds it by NVML and kills it (kill mode, 1 s).
    let mut mover = Pod::new(
        &ns.name,
        "mover",
        &["/bin/sh", "-c", "mkdir -p /tmp/own && GPUSLICE_DIR=/tmp/own exec memctl init ctx info alloc:big:12G mark:held sleep:60000"],
    );
    mover.template = Some("gpu-8gi");
    mover.node = Some(&node);
    let log = c.run_until_killed(&mover, "a pod whose process moved its ledger to /tmp/own");
    assert_eq!(number(&log, "info.total"), DEVICE_BYTES, "the shim alone let it see the whole GPU:\n{log}");
    assert_eq!(number(&log, "big"), 0, "12 GiB past its 8 GiB claim, before the monitor found it:\n{log}");
    assert!(value(&log, "done").is_none(), "{log}");
    // One that launches through the driver's own entry points, past the
    // shim's gate: outside its tenant's turns, killed too.
    let mut skipper = Pod::new(&ns.name, "skipper", &["skip_gate", "1000", "60"]);
    skipper.template = Some("gpu-8gi");
    skipper.node = Some(&node);
    let log = c.run_until_killed(&skipper, "a pod launching past the shim's gate");
    assert!(value(&log, "kernels").is_none(), "it ran to its end: {log}");
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn restarting_the_kubelet_the_plugin_and_the_monitor_loses_nothing() {
    let c = cluster();
    let ns = Namespace::new("slice-restarts");
    let node = c.nodes[0].clone();
    c.apply(&claim_template(&ns.name, "gpu-8gi", &Slice { memory: Some("8Gi"), compute: Some(30), limit: None }));
    let mut holder = Pod::new(&ns.name, "holder", &["memctl", "init", "ctx", "alloc:a:6G", "mark:held", "sleep:600000"]);
    holder.template = Some("gpu-8gi");
    holder.node = Some(&node);
    c.apply(&holder.manifest());
    c.wait_for_line(&ns.name, "holder", "held", Duration::from_secs(90));

    // The kubelet: it deletes its node's ResourceSlices when it starts;
    // the plugin publishes again when the kubelet registers it.
    let script = c.root.join("scripts/k8s-cluster.sh");
    let started = Instant::now();
    let out = Command::new("bash").arg(&script).args(["restart", "kubelet", &node]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until(&format!("{node} Ready again"), Duration::from_secs(60), || {
        c.try_kubectl(&["wait", "--for=condition=Ready", &format!("node/{node}"), "--timeout=2s"]).ok()
    });
    std::thread::sleep(Duration::from_secs(5));
    wait_until(&format!("{node}'s ResourceSlice after the kubelet's restart"), Duration::from_secs(60), || c.slice_of(&node));
    eprintln!("kubelet on {node} restarted; Ready and its ResourceSlice published again within {:.1} s", secs(started));

    // The monitor and the plugin: their pod is deleted and the DaemonSet
    // makes a new one.
    let old = c.gpuslice_pod(&node);
    let started = Instant::now();
    c.kubectl(&["delete", "pod", "-n", "gpuslice", &old, "--wait=true"]);
    wait_until("a new gpuslice pod", Duration::from_secs(90), || {
        let pods = c.json(&["get", "pods", "-n", "gpuslice", "--field-selector", &format!("spec.nodeName={node}")]);
        items(&pods).into_iter().find(|p| {
            text(p, "/metadata/name") != old
                && p.pointer("/status/containerStatuses").and_then(Value::as_array).is_some_and(|s| s.iter().all(|s| s["ready"] == true))
        })
    });
    eprintln!("monitor and plugin on {node} restarted and ready within {:.1} s", secs(started));

    // The running pod kept its cap: 6 GiB held, a new process of it sees
    // 8 GiB and is refused 2 GiB more.
    assert_eq!(text(&c.pod(&ns.name, "holder"), "/status/phase"), "Running");
    let probe = c.kubectl(&["exec", "-n", &ns.name, "holder", "--", "memctl", "init", "ctx", "info", "alloc:x:2G", "alloc:y:1G"]);
    eprintln!("a new process in the running pod after the restarts:\n{probe}");
    assert_eq!(number(&probe, "info.total"), 8 * GIB, "{probe}");
    assert_eq!(number(&probe, "x"), 2, "{probe}");
    assert_eq!(number(&probe, "y"), 0, "{probe}");
    let tenants = c.tenants_of(&node, &ns.name);
    assert_eq!(tenants.len(), 1, "{tenants:?}");
    // New pods are prepared.
    let mut newcomer = Pod::new(&ns.name, "newcomer", &["memctl", "init", "ctx", "info"]);
    newcomer.template = Some("gpu-8gi");
    newcomer.node = Some(&node);
    c.apply(&newcomer.manifest());
    let (phase, log) = c.wait_done(&ns.name, "newcomer", Duration::from_secs(90));
    assert_eq!(phase, "Succeeded", "{log}");
    assert_eq!(number(&log, "info.total"), 8 * GIB, "{log}");
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_pod_that_does_not_fit_on_the_first_node_lands_on_the_second() {
    let c = cluster();
    assert!(c.nodes.len() >= 2, "this test needs two nodes: scripts/k8s-cluster.sh up --nodes 2");
    let ns = Namespace::new("slice-nodes");
    let (first, second) = (c.nodes[0].clone(), c.nodes[1].clone());
    c.apply(&claim_template(&ns.name, "gpu-32gi", &Slice { memory: Some("32Gi"), compute: None, limit: None }));
    c.apply(&claim_template(&ns.name, "gpu-16gi", &Slice { memory: Some("16Gi"), compute: None, limit: None }));
    let mut big = Pod::new(&ns.name, "big", &["memctl", "init", "ctx", "info", "mark:held", "sleep:600000"]);
    big.template = Some("gpu-32gi");
    big.node = Some(&first);
    c.apply(&big.manifest());
    c.wait_for_line(&ns.name, "big", "held", Duration::from_secs(90));
    // No node named: 16 GiB fits only on the second node's GPU.
    let mut other = Pod::new(&ns.name, "other", &["memctl", "init", "ctx", "info", "mark:held", "sleep:600000"]);
    other.template = Some("gpu-16gi");
    c.apply(&other.manifest());
    let log = c.wait_for_line(&ns.name, "other", "held", Duration::from_secs(90));
    let placed = text(&c.pod(&ns.name, "other"), "/spec/nodeName");
    eprintln!("32 GiB held on {first}: a 16 GiB claim was placed on {placed} and sees {} GiB", number(&log, "info.total") / GIB);
    assert_eq!(placed, second);
    assert_eq!(number(&log, "info.total"), 16 * GIB, "{log}");
    assert_eq!(c.tenants_of(&second, &ns.name).len(), 1);
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_whole_gpu_asked_for_the_classic_way_is_served_by_the_device_class() {
    let c = cluster();
    let ns = Namespace::new("slice-classic");
    // `nvidia.com/gpu: 1`, as pods asked NVIDIA's device plugin: the
    // DeviceClass's extendedResourceName makes the scheduler allocate a
    // device of the class for it (its default request: the whole memory).
    let mut pod = Pod::new(&ns.name, "whole", &["memctl", "init", "ctx", "info", "nvml", "mark:held", "sleep:600000"]);
    pod.limits = vec![("nvidia.com/gpu", "1")];
    c.apply(&pod.manifest());
    let log = c.wait_for_line(&ns.name, "whole", "held", Duration::from_secs(90));
    let node = text(&c.pod(&ns.name, "whole"), "/spec/nodeName");
    eprintln!("a pod with limits nvidia.com/gpu: 1 ran on {node}:\n{log}");
    assert_eq!(number(&log, "info.total"), DEVICE_BYTES, "{log}");
    let tenants = c.tenants_of(&node, &ns.name);
    assert_eq!(tenants.len(), 1, "{tenants:?}");
    // The whole GPU's memory is taken: a slice cannot be placed beside it.
    c.apply(&claim_template(&ns.name, "gpu-1gi", &Slice { memory: Some("1Gi"), compute: None, limit: None }));
    let mut beside = Pod::new(&ns.name, "beside", &["memctl", "init", "ctx", "info"]);
    beside.template = Some("gpu-1gi");
    beside.node = Some(&node);
    c.apply(&beside.manifest());
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(text(&c.pod(&ns.name, "beside"), "/status/phase"), "Pending");
    ns.delete_and_check_released();
}

/// A Deployment `trainer` of the client image whose pods each claim
/// `template` and hold `hold` of it for their life (`HOLD`), and every 2 s
/// start a process that asks 1 GiB more: refused while the slice is nearly
/// full, so that its refusals are counted too.
fn trainer_deployment(namespace: &str, template: &str, hold: &str) -> String {
    let script =
        "memctl init ctx alloc:held:$HOLD mark:held sleep:3600000 & while sleep 2; do memctl init ctx alloc:probe:1G >/dev/null 2>&1; done";
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: trainer, namespace: {namespace}}}\nspec:\n  replicas: 1\n  strategy: {{type: Recreate}}\n\
         \x20 selector: {{matchLabels: {{app: trainer}}}}\n  template:\n    metadata: {{labels: {{app: trainer}}}}\n    spec:\n\
         \x20     terminationGracePeriodSeconds: 1\n      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]\n\
         \x20     securityContext: {{runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: {{type: RuntimeDefault}}}}\n\
         \x20     containers:\n        - name: app\n          image: {CLIENT_IMAGE}\n          imagePullPolicy: Never\n\
         \x20         command: [\"/bin/sh\", \"-c\", {script}]\n          env: [{{name: HOLD, value: {hold}}}]\n\
         \x20         resources: {{claims: [{{name: gpu}}]}}\n\
         \x20         securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [\"ALL\"]}}}}\n",
        script = serde_json::to_string(script).unwrap(),
    )
}

/// A Kubernetes quantity as a number ("906m", "1", "2500m", "0.5").
fn quantity(text: &str) -> f64 {
    let parsed = match text.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().map(|m| m / 1000.0),
        None => text.parse::<f64>(),
    };
    parsed.unwrap_or_else(|e| panic!("not a quantity: {text:?} ({e})"))
}

/// The custom metrics API's value of `metric` for each pod of the
/// namespace that has one, by pod name.
fn pod_metric(c: &Cluster, namespace: &str, metric: &str) -> Vec<(String, f64)> {
    let path = format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{metric}?labelSelector=app%3Dtrainer");
    let Ok(body) = c.try_kubectl(&["get", "--raw", &path]) else { return Vec::new() };
    let list: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"));
    items(&list).iter().map(|i| (text(i, "/describedObject/name"), quantity(&text(i, "/value")))).collect()
}

/// The Deployment's replicas as its spec says and how many are ready.
fn replicas(c: &Cluster, namespace: &str) -> (u64, u64) {
    let d = c.json(&["get", "deployment", "-n", namespace, "trainer"]);
    (d["spec"]["replicas"].as_u64().unwrap_or(0), d["status"]["readyReplicas"].as_u64().unwrap_or(0))
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_horizontal_pod_autoscaler_adds_replicas_under_memory_pressure_and_removes_them_after() {
    let c = cluster();
    // The pipeline of scripts/k8s-cluster.sh: Prometheus scraping every
    // node's monitor, prometheus-adapter serving its recorded series.
    for version in ["v1beta1", "v1beta2"] {
        let name = format!("{version}.custom.metrics.k8s.io");
        wait_until(&format!("the APIService {name} Available"), Duration::from_secs(60), || {
            let service = c.json(&["get", "apiservice", &name]);
            let conditions = service.pointer("/status/conditions")?.as_array()?.clone();
            conditions.iter().any(|cond| cond["type"] == "Available" && cond["status"] == "True").then_some(())
        });
    }
    let ns = Namespace::new("slice-autoscale");
    c.apply(&claim_template(&ns.name, "gpu-8gi", &Slice { memory: Some("8Gi"), compute: None, limit: None }));
    // 7 GiB held of an 8 GiB claim (with the context's 256 MiB: 0.906).
    let started = Instant::now();
    c.apply(&trainer_deployment(&ns.name, "gpu-8gi", "7G"));
    let hpa = c.root.join("deploy/kubernetes/autoscaling/hpa.yaml");
    c.kubectl(&["apply", "-n", &ns.name, "-f", hpa.to_str().unwrap()]);

    // Served from the tenant's admission on, at 0 until the process has
    // allocated; then 7 GiB and the context's 256 MiB of 8 GiB (0.906),
    // 0.938 while a probe's context is there too.
    let first = wait_until("the custom metrics API to serve the first pod's 7 GiB", Duration::from_secs(120), || {
        pod_metric(c, &ns.name, "gpuslice_memory_pressure_ratio").into_iter().find(|(_, v)| *v > 0.85)
    });
    eprintln!("{}: gpuslice_memory_pressure_ratio of {} = {:.3}, {:.1} s after kubectl apply", ns.name, first.0, first.1, secs(started));
    assert!((0.9..=0.94).contains(&first.1), "7.25 GiB (7.5 with a probe) held of 8 GiB: {first:?}");
    // Three pods held under pressure: the HPA goes to its maxReplicas.
    wait_until("3 ready replicas", Duration::from_secs(240), || (replicas(c, &ns.name) == (3, 3)).then_some(()));
    let up = secs(started);
    // The newest pod's tenant is served from its admission, at 0 until
    // its process has allocated.
    let pressure = wait_until("7 GiB held in each of the 3 pods", Duration::from_secs(60), || {
        let m = pod_metric(c, &ns.name, "gpuslice_memory_pressure_ratio");
        (m.len() == 3 && m.iter().all(|(_, v)| *v > 0.85)).then_some(m)
    });
    eprintln!("scaled 1 -> 3 replicas (maxReplicas) {up:.1} s after kubectl apply; pressure by pod: {pressure:?}");
    // Each probe past the claim is refused, and that is served too.
    let denied = wait_until("refused allocations per second for every pod", Duration::from_secs(120), || {
        let m = pod_metric(c, &ns.name, "gpuslice_alloc_denied_per_second");
        (m.len() == 3 && m.iter().all(|(_, v)| *v > 0.0)).then_some(m)
    });
    eprintln!("gpuslice_alloc_denied_per_second by pod (a 1 GiB probe every 2 s, refused): {denied:?}");
    // Every replica is a tenant of its own claim, on some node.
    let tenants: usize = c.nodes.iter().map(|n| c.tenants_of(n, &ns.name).len()).sum();
    assert_eq!(tenants, 3, "one tenant per replica");
    let hpa_status = c.json(&["get", "hpa", "-n", &ns.name, "trainer"]);
    eprintln!("HPA status under pressure: {}", hpa_status["status"]);
    assert_eq!(hpa_status["status"]["desiredReplicas"], 3, "{}", hpa_status["status"]);

    // The load changes: the pods now hold 1 GiB (0.16 of the claim) and
    // their probes fit. The Deployment's new pods are under no pressure,
    // and the HPA goes back to its minReplicas.
    let changed = Instant::now();
    c.kubectl(&["set", "env", "-n", &ns.name, "deployment/trainer", "HOLD=1G"]);
    wait_until("1 replica", Duration::from_secs(240), || (replicas(c, &ns.name) == (1, 1)).then_some(()));
    let down = secs(changed);
    let after = wait_until("the pressure of the last pod", Duration::from_secs(60), || {
        let m = pod_metric(c, &ns.name, "gpuslice_memory_pressure_ratio");
        (m.len() == 1).then_some(m)
    });
    eprintln!("scaled 3 -> 1 replica (minReplicas) {down:.1} s after the pods' hold went from 7 GiB to 1 GiB; pressure: {after:?}");
    assert!(after[0].1 < 0.5, "{after:?}");
    let events = c.kubectl(&["get", "events", "-n", &ns.name, "--field-selector", "involvedObject.kind=HorizontalPodAutoscaler"]);
    eprintln!("the HPA's events:\n{events}");
    assert!(events.contains("New size: 3") && events.contains("New size: 1"), "{events}");
    c.kubectl(&["delete", "hpa", "-n", &ns.name, "trainer", "--wait=true"]);
    ns.delete_and_check_released();
}

#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_resource_quota_on_the_device_class_refuses_the_claim_past_it() {
    let c = cluster();
    let ns = Namespace::new("slice-quota");
    let resource = format!("{CLASS}.deviceclass.resource.k8s.io/devices");
    c.apply(&format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: gpu-devices, namespace: {}}}\nspec:\n  hard: {{\"{resource}\": \"2\"}}\n",
        ns.name
    ));
    // The quota admission refuses every claim until the quota controller
    // has computed the quota's status.
    wait_until("the quota's status", Duration::from_secs(60), || {
        let quota = c.json(&["get", "resourcequota", "-n", &ns.name, "gpu-devices"]);
        quota.pointer("/status/hard").and_then(|h| h.get(&resource)).map(|_| ())
    });
    let claim = |name: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: {}}}\nspec:\n  devices:\n    requests:\n\
             \x20     - name: gpu\n        exactly:\n          deviceClassName: {CLASS}\n          capacity:\n            requests: {{memory: 1Gi}}\n",
            ns.name
        )
    };
    c.apply(&claim("first"));
    c.apply(&claim("second"));
    let (ok, out, err) = c.command(&c.kubectl, &["apply", "-f", "-"], Some(&claim("third")));
    eprintln!("a third claim of {CLASS} in a namespace whose quota is 2 devices: {}", format!("{err}{out}").trim());
    assert!(!ok, "the API server accepted a claim past the quota: {out}");
    assert!(err.contains("exceeded quota: gpu-devices") && err.contains(&format!("limited: {resource}=2")), "{err}");
    assert!(c.try_kubectl(&["get", "resourceclaim", "-n", &ns.name, "third"]).is_err(), "the refused claim exists");
    // A pod whose template would make a third claim: the ResourceClaim
    // controller is refused the same way and the pod is never scheduled.
    c.apply(&claim_template(&ns.name, "gpu-1gi", &Slice { memory: Some("1Gi"), compute: None, limit: None }));
    let mut pod = Pod::new(&ns.name, "over", &["memctl", "init", "ctx", "info"]);
    pod.template = Some("gpu-1gi");
    c.apply(&pod.manifest());
    let event = wait_until("the ResourceClaim controller's event on the pod", Duration::from_secs(60), || {
        let events = c.kubectl(&["get", "events", "-n", &ns.name, "--field-selector", "involvedObject.name=over", "-o", "json"]);
        let events: Value = serde_json::from_str(&events).ok()?;
        items(&events).into_iter().map(|e| text(&e, "/message")).find(|m| m.contains("exceeded quota"))
    });
    eprintln!("a pod whose claim template passes the quota: {event}");
    assert_eq!(text(&c.pod(&ns.name, "over"), "/status/phase"), "Pending");
    // A claim deleted frees its device in the quota: the pod's claim is
    // made, allocated and prepared, and the pod runs.
    c.kubectl(&["delete", "resourceclaim", "-n", &ns.name, "first", "--wait=true"]);
    let (phase, log) = c.wait_done(&ns.name, "over", Duration::from_secs(120));
    assert_eq!(phase, "Succeeded", "{log}");
    assert_eq!(number(&log, "info.total"), GIB, "{log}");
    ns.delete_and_check_released();
}

/// Namespaces are teams (the chart's `monitor.namespaceTeams`): a
/// namespace labelled `gpuslice.dev/team: team-y` joins team team-y, and
/// team-y's memory quota (3 GiB, from the chart's `monitor.extraConfig`)
/// holds over the pods of both namespaces on the node: the second pod is
/// refused what would pass it, though its own 2 GiB claim has room, and
/// sees the team's room as its free memory. A pod of another namespace
/// on the node is its own team, not bound by it.
#[test]
#[ignore = "needs the Kubernetes cluster of scripts/test-kubernetes.sh"]
fn a_namespace_is_a_team_and_its_memory_quota_holds_over_its_pods() {
    let c = cluster();
    let node = c.nodes[0].as_str();
    let y = Namespace::new("team-y");
    let z = Namespace::new("team-z");
    let x = Namespace::new("team-x");
    c.kubectl(&["label", "namespace", &z.name, "gpuslice.dev/team=team-y"]);
    let start = |ns: &Namespace, script: &[&str]| {
        c.apply(&claim_template(&ns.name, "gpu-2gi", &Slice { memory: Some("2Gi"), compute: None, limit: None }));
        let mut pod = Pod::new(&ns.name, "app", script);
        pod.template = Some("gpu-2gi");
        pod.node = Some(node);
        c.apply(&pod.manifest());
        c.wait_for_line(&ns.name, "app", "held", Duration::from_secs(120))
    };
    // team-y: 256 MiB of context and 1.5 GiB, 1.75 GiB of the 3.
    let first = start(&y, &["memctl", "init", "ctx", "alloc:a:1536M", "mark:held", "sleep:600000"]);
    assert_eq!(number(&first, "a"), 0, "{first}");
    // team-z is in team-y: with its context the team holds 2 GiB, so
    // 1.5 GiB more would pass the quota (its own claim has room for it);
    // 768 MiB fits.
    let second = start(&z, &["memctl", "init", "ctx", "info", "alloc:a:1536M", "alloc:b:768M", "mark:held", "sleep:600000"]);
    eprintln!("{}/app, in team team-y beside {}/app:\n{second}", z.name, y.name);
    assert_eq!(number(&second, "info.total"), 2 * GIB, "the smaller of its claim and its team's quota: {second}");
    assert_eq!(number(&second, "info.free"), GIB, "the team's room, smaller than its own 1.75 GiB: {second}");
    assert_eq!(number(&second, "a"), 2, "past the team's quota: CUDA_ERROR_OUT_OF_MEMORY (2)\n{second}");
    assert_eq!(number(&second, "b"), 0, "{second}");
    // team-x is a team of its own on the same node.
    let third = start(&x, &["memctl", "init", "ctx", "alloc:a:1536M", "mark:held", "sleep:600000"]);
    assert_eq!(number(&third, "a"), 0, "{third}");
    let status: Value = serde_json::from_str(&c.gpuslice(node, &["status", "--json", "--config", "/etc/gpuslice/monitor.toml"])).unwrap();
    let team = |name: &str| {
        status["teams"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["team"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no team {name}: {status}"))
    };
    eprintln!("gpuslice status on {node}, teams: {}", status["teams"]);
    assert_eq!(team("team-y")["members"], 2, "{status}");
    assert_eq!(team("team-y")["memory_quota_bytes"], 3 * GIB, "{status}");
    assert!(team("team-y")["memory_used_bytes"].as_u64().is_some_and(|b| (2 * GIB..=3 * GIB).contains(&b)), "{status}");
    assert_eq!(team("team-x")["members"], 1, "{status}");
    Namespace::delete_all_and_check_released(&[&x, &y, &z]);
}

// --- helpers ---------------------------------------------------------------

fn number(log: &str, key: &str) -> u64 {
    value(log, key).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no whole number {key}= in:\n{log}"))
}

fn float(log: &str, key: &str) -> f64 {
    value(log, key).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no number {key}= in:\n{log}"))
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}
