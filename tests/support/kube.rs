//! The Kubernetes test cluster of scripts/k8s-cluster.sh, reached as an
//! operator reaches it: the pinned kubectl and helm with the cluster's
//! kubeconfig. Shared by tests/kubernetes.rs and benches/k8s_startup.rs.

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster's tools and kubeconfig.
pub struct Kube {
    pub root: PathBuf,
    pub kubectl: PathBuf,
    pub helm: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kube {
    /// The cluster `scripts/k8s-cluster.sh up` left running (its directory:
    /// GPUSLICE_K8S_DIR, else .deps/k8s/cluster); a panic that says how to
    /// start one where there is none.
    pub fn running() -> Kube {
        let root = crate::repo_root();
        let bin = root.join(".deps/k8s/bin");
        let dir = std::env::var_os("GPUSLICE_K8S_DIR").map(PathBuf::from).unwrap_or_else(|| root.join(".deps/k8s/cluster"));
        let kube = Kube { kubectl: bin.join("kubectl"), helm: bin.join("helm"), kubeconfig: dir.join("kubeconfig"), root };
        assert!(
            kube.kubeconfig.is_file() && kube.kubectl.is_file(),
            "no cluster at {}: run `bash scripts/test-kubernetes.sh` (or `scripts/k8s-cluster.sh up --nodes 2`)",
            kube.kubeconfig.display()
        );
        kube
    }

    /// Runs `program ARGS` (kubectl or helm) with the cluster's
    /// kubeconfig, `stdin` written to it: (success, stdout, stderr).
    pub fn command(&self, program: &PathBuf, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut cmd = Command::new(program);
        cmd.args(args).env("KUBECONFIG", &self.kubeconfig).current_dir(&self.root);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("cannot write to {}: {e}", program.display()));
        }
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// kubectl ARGS; its stdout, or a panic with what it said.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.command(&self.kubectl, args, None);
        assert!(ok, "kubectl {}: {err}{out}", args.join(" "));
        out
    }

    /// kubectl ARGS; its stdout, or what it said.
    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        match self.command(&self.kubectl, args, None) {
            (true, out, _) => Ok(out),
            (false, out, err) => Err(format!("{err}{out}")),
        }
    }

    /// helm ARGS; all it printed, or a panic with it.
    pub fn helm(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.command(&self.helm, args, None);
        assert!(ok, "helm {}: {err}{out}", args.join(" "));
        format!("{out}{err}")
    }

    /// kubectl apply of `manifest` (YAML).
    pub fn apply(&self, manifest: &str) {
        let (ok, out, err) = self.command(&self.kubectl, &["apply", "-f", "-"], Some(manifest));
        assert!(ok, "kubectl apply: {err}{out}\n{manifest}");
    }

    /// kubectl get ARGS -o json.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl {}: not JSON ({e}): {text}", args.join(" ")))
    }
}

/// The `items` of a list object.
pub fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The string at `pointer`, or "".
pub fn text(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// The last value of `key=value` in a client's output.
pub fn value(log: &str, key: &str) -> Option<String> {
    log.lines().rev().find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')).map(str::to_string))
}

/// Polls `check` every 250 ms until it gives a value; panics after `within`.
pub fn wait_until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < within, "timed out after {} s waiting for {what}", within.as_secs());
        std::thread::sleep(Duration::from_millis(250));
    }
}
