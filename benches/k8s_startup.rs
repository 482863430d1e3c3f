//! `kubectl apply` to the container's first CUDA call, on the real cluster
//! of scripts/k8s-cluster.sh with gpuslice installed (tests/kubernetes.rs
//! installs it; scripts/test-kubernetes.sh runs this after the tests):
//!
//! - with a claim: a pod whose ResourceClaimTemplate asks gpuslice.dev for
//!   1 GiB and 10 % (the scheduler allocates, the kubelet prepares through
//!   gpuslice-dra, containerd applies two CDI specs, the shim joins the
//!   monitor);
//! - without: the same pod and image with no claim, its CUDA client
//!   loading the copy of simgpu the image carries (LD_LIBRARY_PATH, its own
//!   state in /tmp): a container that reaches a driver with no DRA, no CDI
//!   and no shim.
//!
//! Each pod runs `memctl clock init ...`: `clock` prints the wall clock
//! just before the first CUDA call (`cuInit`), and the time from just
//! before `kubectl apply` to that clock is the figure. The sides alternate,
//! one pod at a time, each deleted before the next.
//!
//! `cargo bench --bench k8s_startup [-- --runs N]` (default 10 a side).

use gpuslice_tests::kube::{text, value, wait_until, Kube};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NAMESPACE: &str = "startup-bench";

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

/// One pod: apply, wait for its clock line, delete; seconds from apply to
/// the clock.
fn one(kube: &Kube, name: &str, claim: bool) -> f64 {
    let claims = if claim { "  resourceClaims: [{name: gpu, resourceClaimTemplateName: gpu-1gi}]\n" } else { "" };
    let resources = if claim { "{claims: [{name: gpu}]}" } else { "{}" };
    let env =
        if claim { "[]" } else { "[{name: LD_LIBRARY_PATH, value: /usr/local/lib/simgpu}, {name: SIMGPU_STATE, value: /tmp/simgpu}]" };
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n{claims}\
         \x20 securityContext: {{runAsNonRoot: true, runAsUser: 1000, seccompProfile: {{type: RuntimeDefault}}}}\n  containers:\n\
         \x20   - name: app\n      image: localhost/gpuslice-client:dev\n      imagePullPolicy: Never\n\
         \x20     command: [memctl, clock, init, ctx, info]\n      env: {env}\n      resources: {resources}\n\
         \x20     securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}\n"
    );
    let applied = now_s();
    kube.apply(&manifest);
    let clock = wait_until(&format!("{name}'s first CUDA call"), Duration::from_secs(120), || {
        let log = kube.try_kubectl(&["logs", "-n", NAMESPACE, name]).ok()?;
        value(&log, "clock")?.parse::<f64>().ok()
    });
    // Both sides' CUDA client ran (the claim's saw its 1 GiB).
    let log = wait_until(&format!("{name}'s answer"), Duration::from_secs(60), || {
        let log = kube.try_kubectl(&["logs", "-n", NAMESPACE, name]).ok()?;
        value(&log, "info.total").is_some().then_some(log)
    });
    assert_eq!(value(&log, "init").as_deref(), Some("0"), "{name}: cuInit failed\n{log}");
    if claim {
        assert_eq!(value(&log, "info.total"), Some((1u64 << 30).to_string()), "{name} did not see its 1 GiB claim:\n{log}");
    }
    kube.kubectl(&["delete", "pod", "-n", NAMESPACE, name, "--wait=true"]);
    clock - applied
}

fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let median = if samples.len() % 2 == 1 {
        samples[samples.len() / 2]
    } else {
        (samples[samples.len() / 2 - 1] + samples[samples.len() / 2]) / 2.0
    };
    (samples[0], median, samples[samples.len() - 1])
}

fn main() {
    let mut runs = 10usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--runs" {
            runs = args.next().and_then(|n| n.parse().ok()).filter(|n| *n > 0).expect("--runs needs a whole number above 0");
        }
    }
    let kube = Kube::running();
    let daemonset = kube.try_kubectl(&["get", "daemonset", "-n", "gpuslice", "gpuslice", "-o", "jsonpath={.status.numberReady}"]);
    assert!(
        daemonset.as_deref().is_ok_and(|n| n != "0" && !n.is_empty()),
        "gpuslice is not installed on the cluster ({daemonset:?}): run the tests first (scripts/test-kubernetes.sh)"
    );
    let _ = kube.try_kubectl(&["delete", "namespace", NAMESPACE, "--wait=true"]);
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}, labels: {{pod-security.kubernetes.io/enforce: restricted}}}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: gpu-1gi, namespace: {NAMESPACE}}}\n\
         spec:\n  spec:\n    devices:\n      requests:\n        - name: gpu\n          exactly:\n            deviceClassName: gpuslice.dev\n\
         \x20           capacity: {{requests: {{memory: 1Gi, compute: \"10\"}}}}\n"
    ));
    wait_until("the namespace's default ServiceAccount", Duration::from_secs(30), || {
        kube.try_kubectl(&["get", "serviceaccount", "default", "-n", NAMESPACE]).ok()
    });
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..runs {
        // Alternate which side goes first.
        for claim in if i % 2 == 0 { [true, false] } else { [false, true] } {
            let name = format!("{}-{i}", if claim { "claim" } else { "plain" });
            let seconds = one(&kube, &name, claim);
            if claim { &mut with } else { &mut without }.push(seconds);
        }
    }
    let _ = kube.try_kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    let nodes = kube.json(&["get", "nodes"]);
    let version = text(&nodes["items"][0], "/status/nodeInfo/kubeletVersion");
    let (w, p) = (stats(with), stats(without));
    println!("kubectl apply to the container's first CUDA call, {runs} pods a side, one at a time (kubelet {version}):");
    println!("| pod | min | median | max |");
    println!("|---|---|---|---|");
    println!("| no claim | {:.2} s | {:.2} s | {:.2} s |", p.0, p.1, p.2);
    println!("| gpuslice claim (1Gi, compute 10) | {:.2} s | {:.2} s | {:.2} s |", w.0, w.1, w.2);
    println!("the claim adds {:.2} s at the median", w.1 - p.1);
}
