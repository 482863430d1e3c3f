//! The deployment files say what they do: every Kubernetes manifest in
//! `deploy/kubernetes/` is valid against the Kubernetes schemas, strictly
//! (`kubernetes-validate --strict`: an unknown or misplaced field is an
//! error, not a setting the API server drops), and the container example
//! uses the paths `scripts/install.sh` installs.

use gpuslice_tests::repo_root;
use std::path::PathBuf;
use std::process::Command;

fn manifests() -> Vec<PathBuf> {
    let dir = repo_root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

#[test]
fn kubernetes_manifests_validate_strictly() {
    let validate = repo_root().join(".deps/venv/bin/kubernetes-validate");
    assert!(validate.is_file(), "{} is missing: run `bash scripts/setup.sh` to install kubernetes-validate", validate.display());
    for manifest in manifests() {
        let out = Command::new(&validate)
            .args(["--strict", "--quiet"])
            .arg(&manifest)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", validate.display()));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !text.contains("ERROR"), "{} does not validate ({}):\n{text}", manifest.display(), out.status);
    }
}

#[test]
fn the_monitor_daemonset_states_its_measured_resources() {
    let path = repo_root().join("deploy/kubernetes/gpuslice-monitor.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for needed in ["scripts/measure-monitor.sh", "VmHWM", "requests:", "limits:"] {
        assert!(text.contains(needed), "{} must show its resources and how they were measured ({needed:?})", path.display());
    }
}

#[test]
fn the_dockerfile_uses_what_install_sh_installs() {
    let read = |relative: &str| {
        let path = repo_root().join(relative);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    };
    let dockerfile = read("deploy/Dockerfile");
    let install = read("scripts/install.sh");
    assert!(dockerfile.contains("scripts/install.sh --prefix /usr/local"), "the build stage installs with scripts/install.sh");
    for installed in ["bin/gpuslice-entrypoint", "lib/gpuslice/libgpuslice.so"] {
        assert!(install.contains(installed), "scripts/install.sh installs PREFIX/{installed}");
        assert!(dockerfile.contains(&format!("/usr/local/{installed}")), "deploy/Dockerfile uses /usr/local/{installed}");
    }
}
