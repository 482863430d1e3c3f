//! gpuslice as a user installs and meets it: `scripts/install.sh` into a
//! prefix, the installed `gpuslice run --sim` with nothing in its
//! environment pointing at the libraries, the container entrypoint
//! (`scripts/entrypoint.sh`), the one-line refusal on a host without the
//! NVIDIA driver, and an example in every verb's `--help`.
//!
//! The install test installs the debug build the tests already use
//! (`install.sh --profile debug --no-build`), so it takes seconds; the
//! release build it makes by default is the same files built another way.

use gpuslice_tests::{compile_c, compile_c_library, cu, gpuslice_bin, repo_root, shim_lib, sim_lib_dir, simgpu_lib, target_dir, Sim, GIB};
use std::path::{Path, PathBuf};
use std::process::Command;

fn script(name: &str) -> PathBuf {
    repo_root().join("scripts").join(name)
}

/// Installs the built debug artefacts into `prefix` with `scripts/install.sh`.
fn install_into(sim: &Sim, prefix: &Path) {
    // Refuses stale artefacts, as every end-to-end test does.
    for artefact in [gpuslice_bin(), shim_lib(), simgpu_lib()] {
        assert!(artefact.is_file());
    }
    let cargo_target = target_dir().parent().expect("the profile directory has a parent").to_path_buf();
    let out = sim.run(
        Command::new("bash")
            .arg(script("install.sh"))
            .arg("--prefix")
            .arg(prefix)
            .args(["--profile", "debug", "--no-build"])
            .env("CARGO_TARGET_DIR", cargo_target),
    );
    out.assert_success();
}

#[test]
fn installed_gpuslice_runs_on_simgpu_with_a_clean_environment() {
    let sim = Sim::new();
    let prefix = sim.dir().join("prefix");
    install_into(&sim, &prefix);
    // The documentation the systemd unit names, at the place it names under
    // the default prefix.
    let unit = std::fs::read_to_string(repo_root().join("scripts/gpuslice-monitor.service")).unwrap();
    let documentation =
        unit.lines().find_map(|l| l.strip_prefix("Documentation=file:///usr/local/")).expect("the unit names a file under /usr/local");
    assert!(prefix.join(documentation).is_file(), "the unit's Documentation= ({documentation}) is not installed");
    for file in ["bin/gpuslice", "bin/gpuslice-entrypoint", "bin/gpuslice-dra", "lib/gpuslice/libgpuslice.so", "lib/gpuslice/libsimgpu.so"]
    {
        let path = prefix.join(file);
        let meta = std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{} is not installed: {e}", path.display()));
        assert!(meta.is_file(), "{} is a copy, not a link into the build tree", path.display());
    }

    // No LD_LIBRARY_PATH, GPUSLICE_SHIM_LIB or SIMGPU_LIB: the binary finds
    // its libraries in ../lib/gpuslice by itself.
    let memctl = compile_c("memctl");
    let mut cmd = Command::new(prefix.join("bin/gpuslice"));
    cmd.env_clear()
        .env("SIMGPU_STATE", sim.state_file())
        .args(["run", "--sim", "--memory", "1GiB", "--tenant", "installed", "--dir"])
        .arg(sim.ledger_dir())
        .arg("--")
        .arg(&memctl)
        .args(["init", "ctx", "info", "alloc:big:2G"]);
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("ctx", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB, "the application sees its 1 GiB cap\n{out}");
    out.assert_rc("big", cu::OUT_OF_MEMORY);
    assert!(sim.ledger_dir().join("installed.ledger").is_file(), "the tenant's ledger is where --dir said\n{out}");

    // The installed entrypoint preloads the installed shim.
    let mut cmd = Command::new(prefix.join("bin/gpuslice-entrypoint"));
    cmd.env_clear()
        .env("SIMGPU_STATE", sim.state_file())
        .env("LD_LIBRARY_PATH", prefix.join("lib/gpuslice/simgpu-libs"))
        .env("GPUSLICE_MEMORY_LIMIT", "512MiB")
        .env("GPUSLICE_TENANT", "entry")
        .env("GPUSLICE_DIR", sim.ledger_dir())
        .arg(&memctl)
        .args(["init", "ctx", "info"]);
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("ctx", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB / 2, "the entrypoint ran the command under the installed shim\n{out}");
}

#[test]
fn install_refuses_an_unknown_option_in_one_line() {
    let out = Sim::new().run(Command::new("bash").arg(script("install.sh")).arg("--prefx").arg("/tmp/nowhere"));
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line\n{out}");
    assert!(out.stderr.contains("unknown option '--prefx'") && out.stderr.contains("--prefix DIR"), "{out}");
}

#[test]
fn entrypoint_preloads_gpuslice_lib_ahead_of_the_images_preload() {
    let sim = Sim::new().tenant("entry").env("GPUSLICE_MEMORY_LIMIT", "768MiB");
    let sim = {
        let ledger = sim.ledger_dir();
        sim.env("GPUSLICE_DIR", ledger)
    };
    let shim = shim_lib().canonicalize().expect("the shim resolves");
    let out =
        sim.run(sim.command(script("entrypoint.sh")).env("GPUSLICE_LIB", &shim).arg(compile_c("memctl")).args(["init", "ctx", "info"]));
    out.assert_success().assert_rc("ctx", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), 768 << 20, "the command ran under the shim GPUSLICE_LIB names\n{out}");

    // An LD_PRELOAD the image sets stays, after the shim.
    let theirs = simgpu_lib().canonicalize().expect("libsimgpu.so resolves");
    let out = sim.run(sim.command(script("entrypoint.sh")).env("GPUSLICE_LIB", &shim).env("LD_PRELOAD", &theirs).args([
        "sh",
        "-c",
        "echo preload=$LD_PRELOAD; echo lib=${GPUSLICE_LIB-unset}",
    ]));
    out.assert_success();
    assert_eq!(out.get("lib"), "unset", "the shim refuses GPUSLICE_ variables it does not read\n{out}");
    assert_eq!(out.get("preload"), format!("{}:{}", shim.display(), theirs.display()), "{out}");
}

#[test]
fn entrypoint_refuses_to_run_without_the_library() {
    let sim = Sim::new();
    let missing = sim.dir().join("no-such/libgpuslice.so");
    let marker = sim.dir().join("ran");
    let out = sim.run(sim.command(script("entrypoint.sh")).env("GPUSLICE_LIB", &missing).arg("touch").arg(&marker));
    out.assert_failure();
    assert!(!marker.exists(), "the command must not run without the shim\n{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line\n{out}");
    assert!(out.stderr.contains(&missing.display().to_string()) && out.stderr.contains("missing"), "{out}");

    let out = sim.run(&mut sim.command(script("entrypoint.sh")));
    assert_eq!(out.code(), Some(2), "no command is a usage error\n{out}");
}

/// A shim the loader cannot preload here is skipped by the loader with one
/// line on stderr, and the command would run uncapped: `gpuslice run` and
/// the entrypoint find out in a process started as the command would be,
/// and refuse.
#[test]
fn a_shim_the_loader_cannot_preload_is_refused_before_the_command_runs() {
    let sim = Sim::new();
    let marker = sim.dir().join("ran");
    // Not a library at all: the loader says why.
    let broken = sim.dir().join("libgpuslice.so");
    std::fs::write(&broken, "not an ELF file\n").unwrap();
    // A library that loads, but is not the shim.
    let other = simgpu_lib();
    for (shim, says) in [(&broken, "cannot be preloaded"), (&other, "the loader gave no reason")] {
        let mut cmd = sim.gpuslice();
        cmd.env_remove("LD_PRELOAD").env("GPUSLICE_SHIM_LIB", shim).args(["run", "--sim", "--memory", "1GiB", "--", "touch"]).arg(&marker);
        let out = sim.run(&mut cmd);
        out.assert_failure();
        assert!(!marker.exists(), "the command must not run without the shim\n{out}");
        assert!(out.stderr.contains("is not loaded into programs on this host") && out.stderr.contains(says), "{out}");
    }
    let out = sim.run(sim.command(script("entrypoint.sh")).env_remove("LD_PRELOAD").env("GPUSLICE_LIB", &broken).arg("touch").arg(&marker));
    out.assert_failure();
    assert!(!marker.exists(), "the entrypoint must not run the command without the shim\n{out}");
    assert!(out.stderr.contains("is not loaded into programs here") && out.stderr.contains("cannot be preloaded"), "{out}");
    // The shim itself passes, and the command runs.
    let mut cmd = sim.gpuslice();
    cmd.env_remove("LD_PRELOAD").args(["run", "--sim", "--memory", "1GiB", "--", "touch"]).arg(&marker);
    sim.run(&mut cmd).assert_success();
    assert!(marker.exists());
}

#[test]
fn run_without_a_driver_says_so_and_names_sim() {
    // On any host, with or without a driver installed: the loader, audited,
    // finds no libcuda.so.1 anywhere, not even simgpu's on LD_LIBRARY_PATH.
    let hidden = compile_c_library("hide_driver");
    let sim = Sim::new();
    let marker = sim.dir().join("ran");
    let mut cmd = Command::new(gpuslice_bin());
    cmd.env_clear().env("LD_AUDIT", &hidden).env("LD_LIBRARY_PATH", sim_lib_dir());
    cmd.args(["run", "--memory", "1GiB", "--", "touch"]).arg(&marker);
    let out = sim.run(&mut cmd);
    out.assert_failure();
    assert!(!marker.exists(), "the command must not start\n{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line\n{out}");
    assert!(out.stderr.contains("no NVIDIA driver") && out.stderr.contains("libcuda.so.1") && out.stderr.contains("--sim"), "{out}");

    // A driver named by GPUSLICE_CUDA_LIB is the one checked.
    let mut cmd = Command::new(gpuslice_bin());
    cmd.env_clear().env("GPUSLICE_CUDA_LIB", sim.dir().join("libcuda.so.1")).args(["run", "--", "true"]);
    let out = sim.run(&mut cmd);
    out.assert_failure();
    assert_eq!(out.stderr.lines().count(), 1, "one line\n{out}");
    assert!(out.stderr.contains("GPUSLICE_CUDA_LIB=") && out.stderr.contains("--sim"), "{out}");

    // Where the loader finds a libcuda.so.1 (here simgpu's), the command runs.
    let out = sim.run(
        sim.gpuslice()
            .args(["run", "--memory", "1GiB", "--tenant", "driver", "--dir"])
            .arg(sim.ledger_dir())
            .arg("--")
            .arg(compile_c("memctl"))
            .args(["init", "ctx", "info"]),
    );
    out.assert_success().assert_rc("ctx", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    assert!(sim_lib_dir().join("libcuda.so.1").exists());
}

#[test]
fn every_verb_has_an_example_in_its_help() {
    for verb in [None, Some("sim"), Some("run"), Some("monitor"), Some("status")] {
        let mut cmd = Command::new(gpuslice_bin());
        cmd.args(verb).arg("--help");
        let out = cmd.output().expect("gpuslice runs");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "gpuslice {verb:?} --help failed: {}", String::from_utf8_lossy(&out.stderr));
        assert!(help.contains("Example"), "gpuslice {} --help shows no example:\n{help}", verb.unwrap_or(""));
        let name = format!("gpuslice {} ", verb.unwrap_or("")).replace("  ", " ");
        let examples = help.split_once("Example").map_or("", |(_, rest)| rest);
        assert!(examples.contains(&name), "the example runs {name:?}:\n{help}");
    }
}

/// A command that is not there exits 127 and one that cannot be executed
/// 126, as under a shell, so that scripts and batch systems that read those
/// codes tell a typo from a failed job.
#[test]
fn a_missing_command_exits_127_as_under_a_shell() {
    let sim = Sim::new();
    let dir = sim.ledger_dir();
    let plain = sim.dir().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let plain = plain.display().to_string();
    for (verb, program, code) in [
        (&["run", "--sim", "--memory", "1GiB", "--dir"][..], "no-such-cmd", 127),
        (&["sim"][..], "no-such-cmd", 127),
        (&["run", "--sim", "--memory", "1GiB", "--dir"][..], plain.as_str(), 126),
        (&["sim"][..], plain.as_str(), 126),
    ] {
        let mut cmd = sim.gpuslice();
        cmd.args(verb);
        if verb[0] == "run" {
            cmd.arg(&dir);
        }
        let out = sim.run(cmd.args(["--", program]));
        assert_eq!(out.code(), Some(code), "{verb:?} -- {program}\n{out}");
        assert_eq!(out.stderr.lines().count(), 1, "one line\n{out}");
        assert!(out.stderr.contains(&format!("cannot run {program}")), "{out}");
    }
}
