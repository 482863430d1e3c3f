//! The README's quick-start output is what the demo prints. The test reads
//! the README's demo block, runs `examples/cap_demo.c` the way
//! `scripts/demo.sh` runs its second half (the `gpuslice run` arguments and
//! `SIMGPU_MEMORY` are read from the script), and compares every line.
//!
//! Nothing is normalised: on simgpu, with the demo's device size and the
//! default context cost, every value the program prints (device name, totals,
//! free memory, the refusal) is deterministic. What differs between runs — the
//! state file and the ledger directory — is never printed.

use gpuslice_tests::{repo_root, sim_lib_dir, Sim};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README line that introduces the demo block.
const README_INTRO: &str = "The demo's second half shows what a capped application sees:";

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The lines of the fenced block after `README_INTRO` in README.md.
fn readme_demo_block() -> Vec<String> {
    let readme = read("README.md");
    let mut lines = readme.lines().skip_while(|l| l.trim() != README_INTRO).skip(1);
    assert!(lines.next().is_some(), "README.md has no line {README_INTRO:?} introducing the demo's output");
    let mut lines = lines.skip_while(|l| l.trim().is_empty());
    assert_eq!(lines.next().map(str::trim), Some("```"), "README.md: a fenced block must follow {README_INTRO:?}");
    let block: Vec<String> = lines.take_while(|l| l.trim() != "```").map(str::to_string).collect();
    assert!(!block.is_empty(), "README.md: the demo block after {README_INTRO:?} is empty");
    block
}

/// What `scripts/demo.sh` does for the block's heading: the `gpuslice run`
/// options after the `echo` of that heading, and the simulated device size.
struct DemoScript {
    run_options: Vec<String>,
    simgpu_memory: String,
}

fn demo_script(heading: &str) -> DemoScript {
    let script = read("scripts/demo.sh");
    let echo = format!("echo \"{heading}\"");
    let mut lines = script.lines().skip_while(|l| l.trim() != echo);
    assert!(lines.next().is_some(), "scripts/demo.sh does not print the README's heading ({echo})");
    let run = lines.next().unwrap_or_default();
    let words: Vec<&str> = run.split_whitespace().collect();
    let start = words.iter().position(|w| *w == "run");
    let end = words.iter().position(|w| *w == "--dir");
    let (Some(start), Some(end)) = (start, end) else {
        panic!("scripts/demo.sh: after {echo} expected `\"$bin/gpuslice\" run OPTIONS --dir … -- …`, found {run:?}");
    };
    let simgpu_memory = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("SIMGPU_MEMORY="))
        .unwrap_or_else(|| panic!("scripts/demo.sh sets no SIMGPU_MEMORY"));
    DemoScript { run_options: words[start + 1..end].iter().map(|w| w.to_string()).collect(), simgpu_memory: simgpu_memory.to_string() }
}

/// Builds `examples/<name>.c` into `dir` as scripts/demo.sh does, linked
/// against simgpu.
fn compile_example(name: &str, dir: &Path) -> PathBuf {
    let root = repo_root();
    let out = dir.join(name);
    let result = Command::new("gcc")
        .args(["-O2", "-I"])
        .arg(root.join(".deps/include"))
        .arg(root.join("examples").join(format!("{name}.c")))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(sim_lib_dir())
        .arg("-lcuda")
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    assert!(
        result.status.success(),
        "compiling examples/{name}.c failed (run scripts/setup.sh for cuda.h):\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

#[test]
fn the_readme_shows_what_the_capped_demo_prints() {
    let block = readme_demo_block();
    let (heading, shown) = block.split_first().expect("the block is not empty");
    let demo = demo_script(heading);
    let sim = Sim::new().memory(&demo.simgpu_memory);
    let program = compile_example("cap_demo", sim.dir());

    let out = sim.run(sim.gpuslice().arg("run").args(&demo.run_options).arg("--dir").arg(sim.ledger_dir()).arg("--").arg(program));
    out.assert_success();
    assert!(out.stderr.is_empty(), "the demo prints nothing on stderr in the README\n{out}");
    let printed: Vec<&str> = out.stdout.lines().collect();
    if shown.iter().map(String::as_str).ne(printed.iter().copied()) {
        let first = shown.iter().zip(&printed).take_while(|(a, b)| a == b).count() + 1;
        panic!(
            "README.md's demo block differs from what examples/cap_demo.c prints under \
             `gpuslice run {}` (first at line {first} after the heading)\n\
             --- README.md shows:\n{}\n--- the demo printed:\n{}\n{out}",
            demo.run_options.join(" "),
            shown.join("\n"),
            printed.join("\n"),
        );
    }
}

/// The quick start's script itself, run as a user runs it (with what is
/// built already, and without its live part): it succeeds, and what it
/// prints under the cap is the README's block, line for line.
#[test]
fn the_demo_script_prints_the_readmes_block() {
    let block = readme_demo_block();
    let sim = Sim::new();
    let mut cmd = sim.command("bash");
    cmd.arg(repo_root().join("scripts/demo.sh")).env("DEMO_BIN", gpuslice_tests::target_dir()).env("DEMO_LIVE", "0");
    cmd.env_remove("LD_PRELOAD").env_remove("SIMGPU_STATE");
    let out = sim.run(&mut cmd);
    out.assert_success();
    let printed: Vec<&str> = out.stdout.lines().skip_while(|l| *l != block[0]).take(block.len()).collect();
    assert_eq!(printed, block.iter().map(String::as_str).collect::<Vec<_>>(), "scripts/demo.sh printed:\n{out}");
}
