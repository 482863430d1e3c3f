//! Slurm, end to end: a real slurmctld and slurmd from Debian's packages,
//! with `deploy/slurm/` installed as their Prolog, TaskProlog and Epilog,
//! hand GRES shards of simulated GPUs to jobs, and each job's allocation
//! becomes a monitor-owned tenant (`slurm-<jobid>`) whose cap, share and
//! lifetime are the allocation's. Jobs run as `nobody` through `srun`.
//!
//! Each test has its own cluster (`tests/slurm_support`), one at a time:
//! the cluster's daemons and the compute measurement want the two cores.

#[path = "compute_support/mod.rs"]
mod compute_support;
#[path = "monitor_support/mod.rs"]
mod monitor_support;
#[path = "slurm_support/mod.rs"]
mod slurm_support;

use compute_support::{busy_bins, busy_ratio, serial};
use gpuslice_tests::{compile_c, cu, poll, python, python_script, wrap_as_user, Output, Running, GIB};
use monitor_support::{kill9, pid_alive};
use slurm_support::{Cluster, ClusterOptions, JOB_UID};
use std::os::unix::fs::MetadataExt;

/// Kill mode, as deploy/slurm/README.md configures the monitor, with a short grace.
const KILL_MODE: &str = "on_violation = \"kill\"\nviolation_grace = \"2s\"\nother_tenants = \"refuse\"\n";

fn cluster() -> Cluster {
    Cluster::start(ClusterOptions { monitor_config: KILL_MODE.into(), ..Default::default() })
}

/// `memctl ARGS` as a job with `gres`, started.
fn memctl_job(cluster: &Cluster, gres: &str, args: &[&str]) -> Running {
    cluster.sim.spawn(&mut cluster.srun(&[&format!("--gres={gres}")], compile_c("memctl"), args))
}

/// The one device of an allocation: (uuid, memory cap, share).
fn slice(tenant: &serde_json::Value) -> (String, Option<u64>, Option<f64>) {
    let devices = tenant["devices"].as_array().unwrap_or_else(|| panic!("no devices in {tenant}"));
    assert_eq!(devices.len(), 1, "one GPU allocated: {tenant}");
    let device = &devices[0];
    (device["uuid"].as_str().unwrap_or_default().to_string(), device["memory_bytes"].as_u64(), device["share_percent"].as_f64())
}

fn admitted(cluster: &Cluster, job: &str) -> serde_json::Value {
    cluster.tenant(job).unwrap_or_else(|| panic!("job {job} has no tenant:\n{:#}\n{}", cluster.tenants(), cluster.integration_log()))
}

/// Two jobs of 2 and 6 shards of one 8-shard, 8 GiB GPU: each is a tenant
/// with 2 and 6 GiB and 25 and 75 %, owned by the job's user, and each
/// sees its cap as the device's memory and gets nothing past it.
#[test]
fn shard_jobs_see_their_cap_as_the_device_and_get_nothing_past_it() {
    let _serial = serial();
    let cluster = cluster();
    let args = ["init", "ctx", "info", "alloc:a:free", "alloc:past:64M", "hold"];
    let mut small = memctl_job(&cluster, "shard:2", &args);
    small.wait_for("ready");
    let mut large = memctl_job(&cluster, "shard:6", &args);
    large.wait_for("ready");
    let (small_job, large_job) = (small.wait_for("job"), large.wait_for("job"));

    let (small_tenant, large_tenant) = (admitted(&cluster, &small_job), admitted(&cluster, &large_job));
    let (small_gpu, small_cap, small_share) = slice(&small_tenant);
    let (large_gpu, large_cap, large_share) = slice(&large_tenant);
    assert_eq!(small_gpu, large_gpu, "both on one GPU:\n{small_tenant}\n{large_tenant}");
    assert_eq!((small_cap, small_share), (Some(2 * GIB), Some(25.0)), "{small_tenant}");
    assert_eq!((large_cap, large_share), (Some(6 * GIB), Some(75.0)), "{large_tenant}");
    for (tenant, job) in [(&small_tenant, &small_job), (&large_tenant, &large_job)] {
        assert_eq!(tenant["labels"]["origin"], "slurm", "{tenant}");
        assert_eq!(tenant["labels"]["job"], job.as_str(), "{tenant}");
        let ledger = std::fs::metadata(tenant["ledger"].as_str().unwrap()).unwrap();
        assert_eq!((ledger.uid(), ledger.mode() & 0o777), (JOB_UID, 0o600), "the ledger is the job user's alone: {tenant}");
    }

    for (out, cap) in [(small.wait(), 2 * GIB), (large.wait(), 6 * GIB)] {
        out.assert_success().assert_rc("init", cu::SUCCESS).assert_rc("ctx", cu::SUCCESS);
        assert_eq!(out.u64("info.total"), cap, "the cap is the device's memory\n{out}");
        out.assert_rc("a", cu::SUCCESS).assert_rc("past", cu::OUT_OF_MEMORY);
    }
}

/// Seconds since the Unix epoch: one time base for the clients of a measurement.
fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Both saturating the GPU, jobs of 2 and 6 shards get 25 % and 75 % of
/// what the two got, within 2 points (kernel time per 100 ms bin, from a
/// window in which both ran).
#[test]
fn shard_jobs_of_2_and_6_split_a_busy_gpu_25_to_75() {
    let _serial = serial();
    let cluster = cluster();
    let epoch = unix_now_s();
    let script = python_script("fairness_load.py");
    let saturate = |gres: &str| {
        let mut cmd = cluster.srun_as_root(&[&format!("--gres={gres}")], python(), &[script.to_str().unwrap(), "saturate", "1000", "7"]);
        cmd.env("FAIRNESS_EPOCH", format!("{epoch:.6}"));
        cluster.sim.spawn(&mut cmd)
    };
    let (mut small, mut large) = (saturate("shard:2"), saturate("shard:6"));
    small.wait_for("started");
    large.wait_for("started");
    let both_from_s = unix_now_s() - epoch;
    let (small_job, large_job) = (small.wait_for("job"), large.wait_for("job"));
    assert_eq!(slice(&admitted(&cluster, &small_job)).0, slice(&admitted(&cluster, &large_job)).0, "both on one GPU");
    let (small, large) = (small.wait(), large.wait());
    small.assert_success();
    large.assert_success();
    let window = (both_from_s + 0.5, both_from_s + 4.5);
    let got = |out: &Output| busy_ratio(&busy_bins(out, 1000.0), window.0, window.1);
    let (a, b) = (got(&small), got(&large));
    let small_part = a / (a + b);
    eprintln!(
        "shard:2 and shard:6 saturating: {a:.3} and {b:.3} of the GPU from {:.1} s to {:.1} s; shard:2 got {:.1} % of it",
        window.0,
        window.1,
        small_part * 100.0
    );
    assert!((small_part - 0.25).abs() <= 0.02, "asked 25/75, got {a:.3}/{b:.3} ({:.1} %)\n{small}\n{large}", small_part * 100.0);
    assert!(a + b > 0.6, "together they left the GPU idle: {a:.3} + {b:.3}\n{small}\n{large}");
}

/// A job asking past its cap gets CUDA_ERROR_OUT_OF_MEMORY and goes on.
#[test]
fn a_job_past_its_cap_gets_out_of_memory_and_goes_on() {
    let _serial = serial();
    let cluster = cluster();
    let out = cluster.sim.run(&mut cluster.srun(
        &["--gres=shard:1"],
        compile_c("memctl"),
        &["init", "ctx", "info", "alloc:big:2G", "alloc:small:100M", "free:small", "mark:went_on"],
    ));
    out.assert_success().assert_rc("info", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB, "1 shard of 8 on an 8 GiB GPU\n{out}");
    out.assert_rc("big", cu::OUT_OF_MEMORY).assert_rc("small", cu::SUCCESS).assert_rc("free.small", cu::SUCCESS);
    assert_eq!(out.get("went_on"), "1");
}

/// Waits until job `job` has left the queue, its tenant is released and
/// gone, and nothing is held on any GPU.
fn assert_job_left_nothing(cluster: &Cluster, job: &str, ledger: &str) {
    poll::fetch_until("the job to leave the queue", || cluster.job_state(job), |state| state.is_empty());
    poll::fetch_until(
        "the tenant released and its ledger removed",
        || (cluster.tenant(job), std::path::Path::new(ledger).exists()),
        |(tenant, exists)| tenant.is_none() && !exists,
    );
    let devices = cluster.devices();
    for device in devices["devices"].as_array().unwrap() {
        assert_eq!(device["memory_used_bytes"], 0, "memory left on a GPU:\n{devices:#}");
        assert_eq!(device["memory_committed_bytes"], 0, "a cap left committed:\n{devices:#}");
    }
    let log = cluster.integration_log();
    assert!(log.contains(&format!("released slurm-{job}")), "the Epilog released it:\n{log}");
}

/// A job cancelled with scancel, and one whose process is killed, leave
/// nothing held, and their tenants are released.
#[test]
fn a_cancelled_or_killed_job_leaves_nothing_held() {
    let _serial = serial();
    let cluster = cluster();
    let args = ["init", "ctx", "pid", "alloc:a:1G", "hold"];

    let mut cancelled = memctl_job(&cluster, "shard:4", &args);
    cancelled.wait_for("ready");
    let job = cancelled.wait_for("job");
    let tenant = admitted(&cluster, &job);
    assert_eq!(tenant["live_processes"], 1, "{tenant}");
    assert!(tenant["held_bytes"].as_u64().unwrap() >= GIB, "{tenant}");
    cluster.scancel(&job);
    poll::fetch_until("the cancelled job to leave the queue", || cluster.job_state(&job), |state| state.is_empty());
    let out = cancelled.wait();
    assert!(out.find("done").is_none(), "the job was cancelled, not ended\n{out}");
    assert_job_left_nothing(&cluster, &job, tenant["ledger"].as_str().unwrap());

    let mut killed = memctl_job(&cluster, "shard:4", &args);
    killed.wait_for("ready");
    let job = killed.wait_for("job");
    let tenant = admitted(&cluster, &job);
    let pid: u32 = killed.wait_for("pid").parse().unwrap();
    kill9(pid);
    poll::fetch_until("the killed job to leave the queue", || cluster.job_state(&job), |state| state.is_empty());
    let out = killed.wait();
    assert!(out.find("done").is_none(), "the job's process was killed\n{out}");
    assert_job_left_nothing(&cluster, &job, tenant["ledger"].as_str().unwrap());
}

/// A `shard:2` job whose task runs `env ENV… memctl …` to get from under
/// its slice and allocates 3 GiB: the monitor, in kill mode, finds it as a
/// violation of `kind` and kills it; the job ends. What the task saw.
fn escaping_job_is_found_and_killed(env: &[&str], kind: &str) -> gpuslice_tests::Output {
    let _serial = serial();
    let cluster = cluster();
    let memctl = compile_c("memctl");
    let mut args: Vec<&str> = env.to_vec();
    args.extend([memctl.to_str().unwrap(), "init", "ctx", "info", "pid", "alloc:x:3G", "hold"]);
    let mut job = cluster.sim.spawn(&mut cluster.srun(&["--gres=shard:2"], "env", &args));
    job.wait_for("ready");
    let id = job.wait_for("job");
    admitted(&cluster, &id);
    let pid: u32 = job.wait_for("pid").parse().unwrap();
    poll::until(&format!("the process found as {kind} to be killed"), || !pid_alive(pid));
    poll::fetch_until("the job to end", || cluster.job_state(&id), |state| state.is_empty());
    let out = job.wait();
    // It got past its 2 GiB; the monitor ended it.
    out.assert_rc("x", cu::SUCCESS);
    assert!(out.find("done").is_none(), "it was killed\n{out}");
    let metrics = cluster.monitor.as_ref().unwrap().metrics_after_this_round();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", kind)]), Some(1.0), "{out}");
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0), "{out}");
    out
}

/// A job that unsets LD_PRELOAD reaches the whole GPU, and the monitor, in
/// kill mode, finds it on the GPU outside every ledger and kills it.
#[test]
fn a_job_that_unsets_ld_preload_is_found_and_killed() {
    let out = escaping_job_is_found_and_killed(&["-u", "LD_PRELOAD"], "untracked_process");
    assert_eq!(out.u64("info.total"), 8 * GIB, "without the shim it saw the whole GPU\n{out}");
}

/// A job that names a tenant of its own (`GPUSLICE_TENANT`, with a cap of
/// its own choosing) to get from under its shards is, with `other_tenants =
/// "refuse"`, a tenant nobody governs: found and killed.
#[test]
fn a_job_that_names_its_own_tenant_is_found_and_killed() {
    let out = escaping_job_is_found_and_killed(&["GPUSLICE_TENANT=mine", "GPUSLICE_MEMORY_LIMIT=8GiB"], "ungoverned_tenant");
    assert_eq!(out.u64("info.total"), 8 * GIB, "under a cap of its own choosing it saw the whole GPU\n{out}");
}

/// A whole-GPU job and a shard job never share a GPU: with shards in use
/// on one GPU, Slurm gives a `gpu:1` job the other, and a second `gpu:1`
/// waits, though 6 shards are free, until the shard job ends.
#[test]
fn a_whole_gpu_job_and_a_shard_job_never_share_a_gpu() {
    let _serial = serial();
    let cluster = cluster();
    let args = ["init", "ctx", "info", "hold"];
    let mut shard = memctl_job(&cluster, "shard:2", &args);
    shard.wait_for("ready");
    let mut whole = memctl_job(&cluster, "gpu:1", &args);
    whole.wait_for("ready");
    let (shard_gpu, shard_cap, _) = slice(&admitted(&cluster, &shard.wait_for("job")));
    let whole_tenant = admitted(&cluster, &whole.wait_for("job"));
    let (whole_gpu, whole_cap, whole_share) = slice(&whole_tenant);
    assert_ne!(shard_gpu, whole_gpu, "a shard job and a whole-GPU job on one GPU");
    assert_eq!((shard_cap, whole_cap, whole_share), (Some(2 * GIB), None, Some(100.0)), "{whole_tenant}");

    let mut second = memctl_job(&cluster, "gpu:1", &args);
    poll::fetch_until(
        "the second whole-GPU job to wait for resources",
        || cluster.sim.run(cluster.root_command("squeue").args(["-h", "-t", "PD", "-o", "%r"])).stdout.trim().to_string(),
        |reason| reason == "Resources",
    );
    assert!(!second.has_printed("job"), "a second whole-GPU job started beside a shard job");
    let shard_out = shard.wait();
    shard_out.assert_success();
    assert_eq!(shard_out.u64("info.total"), 2 * GIB, "{shard_out}");
    second.wait_for("ready");
    let (second_gpu, second_cap, _) = slice(&admitted(&cluster, &second.wait_for("job")));
    assert_eq!((second_gpu, second_cap), (shard_gpu, None), "the freed GPU, whole");
    for out in [whole.wait(), second.wait()] {
        out.assert_success();
        assert_eq!(out.u64("info.total"), 8 * GIB, "a whole GPU\n{out}");
    }
}

/// Where gres.conf gives the GPUs no type, Slurm 22.05 puts a `gpu:1` job
/// on a GPU whose shards are in use. The monitor refuses that admission
/// (the shares would pass 100 %): the job never runs there, the shard job
/// keeps its slice, and Slurm drains the node for the failed Prolog.
#[test]
fn untyped_gpus_a_whole_gpu_job_beside_shards_is_refused() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions { typed: false, monitor_config: KILL_MODE.into(), ..Default::default() });
    let mut shard = memctl_job(&cluster, "shard:2", &["init", "ctx", "info", "hold"]);
    shard.wait_for("ready");
    let shard_job = shard.wait_for("job");
    let before = slice(&admitted(&cluster, &shard_job));
    let whole = cluster.sim.run(&mut cluster.srun(&["--gres=gpu:1"], compile_c("memctl"), &["init", "ctx", "info"]));
    assert!(whole.find("info").is_none(), "a whole-GPU job ran beside a shard job\n{whole}");
    assert!(whole.stderr.contains("Job prolog failed"), "{whole}");
    let log = cluster.integration_log();
    assert!(log.contains("would add up to 125%"), "the monitor refused the admission for the share it would take:\n{log}");
    assert_eq!(slice(&admitted(&cluster, &shard_job)), before, "the shard job keeps its slice");
    let shard_out = shard.wait();
    shard_out.assert_success();
    assert_eq!(shard_out.u64("info.total"), 2 * GIB, "{shard_out}");
    let node = cluster.sim.run(cluster.root_command("sinfo").args(["-h", "-N", "-o", "%T %E"]));
    assert!(node.stdout.contains("drain"), "Slurm drains a node whose Prolog failed:\n{node}");
}

/// A job that rewrites its own ledger (its user owns the file, so it may
/// write every byte of it) to lift its cap and forget what it holds gains
/// nothing: past its 2 GiB it is refused, or, if its shim believed the
/// ledger, the monitor sees the driver's figure over the cap and kills it.
#[test]
fn a_job_that_rewrites_its_ledger_keeps_no_more_than_its_cap() {
    use std::sync::atomic::Ordering::SeqCst;
    let _serial = serial();
    let cluster = cluster();
    let mut job = memctl_job(&cluster, "shard:2", &["init", "ctx", "pid", "alloc:a:1536M", "ready", "wait", "alloc:b:1536M", "hold"]);
    job.wait_for("ready");
    let tenant = admitted(&cluster, &job.wait_for("job"));
    let pid: u32 = job.wait_for("pid").parse().unwrap();
    assert_eq!(job.wait_for("a"), cu::SUCCESS.to_string());
    // What the job's user could write, written here.
    let path = std::path::PathBuf::from(tenant["ledger"].as_str().unwrap());
    let ledger = ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for device in ledger.devices() {
        ledger.layout().policy.devices[device.index].memory_limit_bytes.store(ledger::layout::UNLIMITED, SeqCst);
        ledger.layout().usage.devices[device.index].used_bytes.store(0, SeqCst);
    }
    job.send_line("go");
    let second = job.wait_for("b");
    let monitor = cluster.monitor.as_ref().unwrap();
    if second == cu::SUCCESS.to_string() {
        eprintln!("the shim believed the rewritten ledger; the monitor must end the job");
        poll::until("the job over its cap to be killed", || !pid_alive(pid));
        let metrics = monitor.metrics_after_this_round();
        assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(1.0));
        assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0));
        assert!(job.wait().find("done").is_none(), "it was killed");
    } else {
        eprintln!("the rewritten ledger was corrected before the job's next allocation");
        assert_eq!(second, cu::OUT_OF_MEMORY.to_string(), "past its cap it is refused");
        job.wait().assert_success();
    }
}

/// A line of `scontrol show job -d`'s per-node detail, forged: this node's
/// GPU 0, whole.
fn forged_gres_line(cluster: &Cluster) -> String {
    format!("\n     Nodes={} CPU_IDs=0-7 Mem=0 GRES=gpu:simgpu:1(IDX:0)\n", cluster.node())
}

/// A one-shard job whose name, comment and work directory (all the job's
/// user writes) each hold a newline and a forged detail line that makes it
/// a whole GPU gets its one shard: 1 GiB and 12.5 %, and sees 1 GiB.
#[test]
fn a_forged_gres_line_in_a_job_field_gets_only_the_jobs_shard() {
    let _serial = serial();
    let cluster = cluster();
    let forged = forged_gres_line(&cluster);
    let workdir = cluster.dir().join(format!("work{forged}"));
    std::fs::create_dir_all(&workdir).unwrap();
    let mut job = cluster.sim.spawn(&mut cluster.srun(
        &[
            "--gres=shard:1",
            &format!("--job-name=name{forged}"),
            &format!("--comment=comment{forged}"),
            &format!("--chdir={}", workdir.display()),
        ],
        compile_c("memctl"),
        &["init", "ctx", "info", "hold"],
    ));
    job.wait_for("ready");
    let id = job.wait_for("job");
    // The forged lines are in the text a Prolog could read, as lines of their own.
    let detail = cluster.sim.run(cluster.root_command("scontrol").args(["show", "job", "-d", &id]));
    let forged_lines = detail.stdout.lines().filter(|line| format!("\n{line}\n") == forged).count();
    assert!(forged_lines >= 2, "the job's fields did not carry the forged line into scontrol's text:\n{detail}");
    let tenant = admitted(&cluster, &id);
    let (_, cap, share) = slice(&tenant);
    eprintln!("the forged job's tenant: memory {cap:?} bytes, share {share:?} %");
    assert_eq!((cap, share), (Some(GIB), Some(12.5)), "one shard of 8 on an 8 GiB GPU:\n{tenant}\n{}", cluster.integration_log());
    let out = job.wait();
    out.assert_success().assert_rc("info", cu::SUCCESS);
    assert_eq!(out.u64("info.total"), GIB, "the job sees one shard's memory\n{out}");
}

/// How the stand-in squeue of [`unexpected_allocation_data_drains_the_node`]
/// changes the real one's answers for the Prolog's job (`SLURM_JOB_ID`), as
/// the file `mutation` beside it says, and notes each call in `calls`. The
/// Prolog first asks for the job's request (`-O`): for the mutations of the
/// JSON that answer is empty, so that the Prolog reads the JSON; the
/// `request_*` mutations change the request's line instead.
const MUTATE_SQUEUE_PY: &str = r#"
import json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
mutation = open(os.path.join(here, "mutation")).read().strip()
job = int(os.environ["SLURM_JOB_ID"])
with open(os.path.join(here, "calls"), "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\n")
if mutation == "fails":
    sys.exit("squeue: error: the stand-in fails")
if "-O" in sys.argv:
    line = subprocess.run(["/usr/bin/squeue"] + sys.argv[1:], check=True, capture_output=True, text=True).stdout
    if mutation == "request_real":
        sys.stdout.write(line)
    elif mutation == "request_twice":
        sys.stdout.write(line + line)
    elif mutation == "request_gpu_too":
        sys.stdout.write(line.replace("gres:shard:1", "gres:shard:1,gres:gpu:1"))
    sys.exit(0)
if mutation.startswith("request_"):
    mutation = "none"
real = subprocess.run(["/usr/bin/squeue", "--json"], check=True, capture_output=True, text=True).stdout
doc = json.loads(real)
[mine] = [j for j in doc["jobs"] if j["job_id"] == job]
whole = ["gpu:simgpu:1(IDX:0)"]
text = None
if mutation == "none":
    text = real
elif mutation == "gres_detail_twice":
    # The job's own "gres_detail" and then a second one, a whole GPU.
    text = json.dumps(doc, indent=2)
    at = '"job_id": %d,' % job
    assert at in text
    text = text.replace(at, at + '\n      "gres_detail": ["gpu:simgpu:1(IDX:0)"],', 1)
elif mutation == "job_listed_twice":
    doc["jobs"].append(dict(mine, gres_detail=whole))
elif mutation == "no_gres_detail":
    del mine["gres_detail"]
elif mutation == "more_gres_than_nodes":
    mine["gres_detail"] = mine["gres_detail"] + whole
elif mutation == "unreadable_gres":
    mine["gres_detail"] = ["shard:one(IDX:0)"]
elif mutation == "text_not_json":
    text = subprocess.run(["/usr/bin/scontrol", "show", "job", "-d", str(job)], check=True, capture_output=True, text=True).stdout
elif mutation == "cut_short":
    text = real[: len(real) // 2]
else:
    sys.exit("unknown mutation " + mutation)
sys.stdout.write(text if text is not None else json.dumps(doc, indent=2) + "\n")
"#;

/// What the Prolog gets from the controller, changed in ways it must not
/// guess through (a GRES named twice, the job listed twice, a GRES missing
/// or unreadable, text, half a document, squeue failing): each time the
/// Prolog fails, the one-shard job does not run, no tenant is admitted,
/// and Slurm drains the node. Unchanged, the same stand-in admits 1 GiB,
/// from the job's request alone (one call) or, where the request is listed
/// twice or names a GPU beside the shard, from the JSON (a second call).
#[test]
fn unexpected_allocation_data_drains_the_node() {
    let _serial = serial();
    let squeue = format!("#!/bin/sh\nexec {} \"${{0%/*}}/mutate_squeue.py\" \"$@\"\n", python().display());
    let cluster = Cluster::start(ClusterOptions { monitor_config: KILL_MODE.into(), squeue_script: Some(squeue), ..Default::default() });
    let installed = cluster.dir().join("gpuslice-slurm");
    std::fs::write(installed.join("mutate_squeue.py"), MUTATE_SQUEUE_PY).unwrap();
    let node_state = || cluster.sim.run(cluster.root_command("sinfo").args(["-h", "-N", "-o", "%T %E"])).stdout.trim().to_string();
    let cases = [
        ("none", ""),
        ("request_real", ""),
        ("request_twice", ""),
        ("request_gpu_too", ""),
        ("gres_detail_twice", "gres_detail.0 twice"),
        ("job_listed_twice", "squeue --json lists job"),
        ("no_gres_detail", "lists 0 GRES details"),
        ("more_gres_than_nodes", "lists 2 GRES details"),
        ("unreadable_gres", "cannot read shard:one(IDX:0)"),
        ("text_not_json", "not the JSON expected"),
        ("cut_short", "not the JSON expected"),
        ("fails", "the stand-in fails"),
    ];
    for (mutation, why) in cases {
        std::fs::write(installed.join("mutation"), mutation).unwrap();
        std::fs::write(installed.join("calls"), "").unwrap();
        let log_before = cluster.integration_log().len();
        let mut job = cluster.sim.spawn(&mut cluster.srun(&["--gres=shard:1"], compile_c("memctl"), &["init", "ctx", "info", "hold"]));
        if why.is_empty() {
            job.wait_for("ready");
            let tenant = admitted(&cluster, &job.wait_for("job"));
            assert_eq!((slice(&tenant).1, slice(&tenant).2), (Some(GIB), Some(12.5)), "{mutation}: {tenant}");
            job.wait().assert_success();
            let calls = std::fs::read_to_string(installed.join("calls")).unwrap();
            let json_calls = calls.lines().filter(|c| c.contains("--json")).count();
            assert_eq!(json_calls, usize::from(mutation != "request_real"), "{mutation}: squeue called as\n{calls}");
            continue;
        }
        let out = job.wait();
        let log = cluster.integration_log()[log_before..].to_string();
        eprintln!("{mutation}: {}", log.trim());
        assert!(out.find("info").is_none(), "{mutation}: the job ran\n{out}\n{log}");
        assert!(out.stderr.contains("Job prolog failed"), "{mutation}: {out}");
        assert!(log.contains("error: ") && log.contains(why), "{mutation}: the Prolog's log does not say {why:?}:\n{log}");
        assert!(!log.contains("admitted"), "{mutation}: {log}");
        let tenants = cluster.tenants();
        assert!(tenants["tenants"].as_array().is_some_and(|t| t.is_empty()), "{mutation}: a tenant was admitted:\n{tenants:#}");
        let state = node_state();
        assert!(state.starts_with("drain"), "{mutation}: Slurm drains a node whose Prolog failed: {state}");
        cluster
            .sim
            .run(cluster.root_command("scontrol").args(["update", &format!("nodename={}", cluster.node()), "state=resume"]))
            .assert_success();
        poll::fetch_until("the node idle again", &node_state, |state| state.starts_with("idle"));
    }
}

/// The monitor stopped under a running job, and a job that starts while
/// it is down: the running job keeps its cap throughout (refused past it
/// while the monitor is down, and the monitor back lists it with the same
/// slice); a GPU job that meets no monitor for `monitor_wait_s` (3 s here)
/// is cancelled alone, with the reason in its AdminComment, and never runs,
/// while the node stays up; a job without GPUs runs meanwhile; a job whose
/// Prolog sees the monitor come back within the wait (a restart) runs
/// under its slice; and the release the cancelled job left pending is done.
#[test]
fn a_monitor_outage_cancels_its_jobs_a_restart_keeps_caps() {
    let _serial = serial();
    let mut cluster = Cluster::start(ClusterOptions { monitor_config: KILL_MODE.into(), monitor_wait_s: 3, ..Default::default() });
    let mut running =
        memctl_job(&cluster, "shard:2", &["init", "ctx", "alloc:a:1G", "ready", "wait", "alloc:b:1G", "alloc:c:512M", "hold"]);
    running.wait_for("ready");
    let running_job = running.wait_for("job");
    let before = slice(&admitted(&cluster, &running_job));
    assert_eq!((before.1, before.2), (Some(2 * GIB), Some(25.0)));
    cluster.stop_monitor();

    // Down: the running job is still held to 2 GiB (1 GiB, a context, and 1 GiB more is past it).
    running.send_line("go");
    assert_eq!(running.wait_for("b"), cu::OUT_OF_MEMORY.to_string(), "past its cap with the monitor down");
    assert_eq!(running.wait_for("c"), cu::SUCCESS.to_string());

    // A batch job and an srun job, their Prologs waiting at once.
    let memctl = compile_c("memctl");
    let batch = cluster.sbatch(&["--gres=shard:1"], &format!("#!/bin/sh\n{} init ctx info\n", memctl.display()));
    let started = std::time::Instant::now();
    let cancelled = cluster.sim.run(&mut cluster.srun(&["--gres=shard:1"], &memctl, &["init", "ctx", "info"]));
    let waited = started.elapsed();
    assert!(cancelled.find("info").is_none(), "a job ran with no monitor to admit it\n{cancelled}");
    poll::fetch_until("the batch job to leave the queue", || cluster.job_state(&batch), |state| state.is_empty());
    let batch_out = std::fs::read_to_string(cluster.dir().join(format!("out/{batch}_4294967294.out"))).unwrap_or_default();
    assert!(!batch_out.contains("info"), "a batch job ran with no monitor to admit it\n{batch_out}");
    let log = cluster.integration_log();
    let cancelled_jobs: Vec<String> = log
        .lines()
        .filter_map(|line| line.split_once("cancelled job ").map(|(_, rest)| rest.split(':').next().unwrap_or_default().to_string()))
        .collect();
    assert_eq!(cancelled_jobs.len(), 2, "the Prolog cancelled the batch job and the srun job:\n{log}\n{cancelled}");
    assert!(cancelled_jobs.contains(&batch), "{log}");
    for job in &cancelled_jobs {
        let shown = cluster.show_job(job);
        let reason = shown.lines().find(|line| line.trim_start().starts_with("AdminComment=")).unwrap_or_default().trim().to_string();
        eprintln!("monitor down: job {job} cancelled; scontrol show job: {reason}; node: {}", cluster.node_state());
        assert!(shown.contains("JobState=CANCELLED"), "{shown}");
        assert!(
            reason
                .starts_with(&format!("AdminComment=gpuslice: not started on {}: no gpuslice monitor answered within 3 s", cluster.node())),
            "{shown}"
        );
    }
    eprintln!("the srun job ended {:.1} s after it started", waited.as_secs_f64());
    assert!(waited >= std::time::Duration::from_secs(3), "the Prolog gave the monitor its 3 s: {waited:?}");
    let node = cluster.node_state();
    assert!(!node.contains("drain"), "the node stays up: {node}");
    let no_gpu = cluster.sim.run(&mut cluster.srun(&[], "true", &[]));
    no_gpu.assert_success();

    // Restarting: a job whose Prolog meets the monitor back within the wait runs under its slice.
    let during = memctl_job(&cluster, "shard:1", &["init", "ctx", "info"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let restart = std::time::Instant::now();
    cluster.start_monitor();
    eprintln!("the monitor answered {:.2} s after its start", restart.elapsed().as_secs_f64());
    let during_out = during.wait();
    during_out.assert_success().assert_rc("info", cu::SUCCESS);
    assert_eq!(during_out.u64("info.total"), GIB, "admitted after the restart: one shard\n{during_out}");

    // Back: the running job's slice is the one it had, and it is still held to it.
    assert_eq!(slice(&admitted(&cluster, &running_job)), before, "the restart kept the running job's slice");
    let out = running.wait();
    out.assert_success();
    let state_dir = cluster.dir().join("gpuslice-state");
    poll::fetch_until(
        "every job's note gone, the cancelled job's pending release done",
        || {
            std::fs::read_dir(&state_dir)
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
                .unwrap_or_default()
        },
        |names| names.is_empty(),
    );
    let tenants = cluster.tenants();
    assert!(tenants["tenants"].as_array().is_some_and(|t| t.is_empty()), "nothing left admitted:\n{tenants:#}");
    cluster.wait_idle();
}

/// `info.total` of each memctl run in a batch job's output, in order.
fn totals(output: &str) -> Vec<u64> {
    output.lines().filter_map(|line| line.strip_prefix("info.total=")).map(|v| v.trim().parse().unwrap()).collect()
}

/// What the Prolog admitted job `job` with: `memory <spec>, shares <spec>`.
fn admitted_as(cluster: &Cluster, job: &str) -> String {
    let log = cluster.integration_log();
    let line = log
        .lines()
        .find(|line| line.contains(&format!("admitted slurm-{job}: ")))
        .unwrap_or_else(|| panic!("job {job} was not admitted:\n{log}"));
    line.split_once(", memory ").map(|(_, rest)| format!("memory {rest}")).unwrap_or_default()
}

/// Jobs as production clusters run them, on a node whose Prolog and
/// Epilog are directories (`Prolog=<dir>/prolog.d/*`) holding a site's own
/// scripts beside a link to deploy/slurm's: a batch job of 2 shards (its
/// batch step and an `srun` step inside it), a job array of 1 shard per
/// task, and `salloc` of 3 shards followed by `srun`. Every task sees its
/// allocation's cap as the device's memory and each job is admitted with
/// the allocation's share. Slurm runs the scripts of a directory one at a
/// time, in reverse order of their names: `90-site`, gpuslice's, `10-site`.
#[test]
fn batch_jobs_arrays_and_salloc_are_capped_beside_a_sites_own_prologs() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions { monitor_config: KILL_MODE.into(), site_scripts: true, ..Default::default() });
    let memctl = compile_c("memctl");
    let m = memctl.display();
    let batch =
        cluster.sbatch(&["--gres=shard:2"], &format!("#!/bin/sh\necho job=$SLURM_JOB_ID\n{m} init ctx info\nsrun {m} init ctx info\n"));
    let array = cluster.sbatch(&["--gres=shard:1", "--array=0-1"], &format!("#!/bin/sh\necho job=$SLURM_JOB_ID\n{m} init ctx info\n"));
    let mut salloc = cluster.root_command("salloc");
    salloc.args(["--gres=shard:3", "sh", "-c"]).arg(format!("echo job=$SLURM_JOB_ID; srun {m} init ctx info")).current_dir(cluster.dir());
    let salloc = cluster.sim.run(&mut wrap_as_user(JOB_UID, &salloc));
    salloc.assert_success().assert_rc("info", cu::SUCCESS);
    assert_eq!(salloc.u64("info.total"), 3 * GIB, "salloc --gres=shard:3, then srun\n{salloc}");
    let salloc_job = salloc.get("job").to_string();

    let batch_out = cluster.batch_output(&batch, &format!("{batch}_4294967294"));
    assert_eq!(totals(&batch_out), [2 * GIB, 2 * GIB], "the batch step and an srun step in it, 2 shards each:\n{batch_out}");
    let mut jobs = vec![(batch.clone(), 2), (salloc_job, 3)];
    for task in 0..2 {
        let out = cluster.batch_output(&array, &format!("{array}_{task}"));
        assert_eq!(totals(&out), [GIB], "array task {task}, 1 shard:\n{out}");
        jobs.push((out.lines().find_map(|l| l.strip_prefix("job=")).unwrap().to_string(), 1));
    }
    for (job, shards) in &jobs {
        let shares = (*shards as f64 * 100.0 / 8.0).to_string();
        let got = admitted_as(&cluster, job);
        eprintln!("job {job}, shard:{shards}: admitted with {got}");
        let on = |gpu: u32| format!("memory {gpu}={}B, shares {gpu}={shares}", shards * GIB);
        assert!(got == on(0) || got == on(1), "job {job}, shard:{shards}: {got}");
    }

    cluster.wait_idle();
    let order = std::fs::read_to_string(cluster.dir().join("log/site-order")).unwrap();
    eprintln!("the site's scripts ran:\n{order}");
    for (job, _) in &jobs {
        let of_job: Vec<String> = order
            .lines()
            .filter(|l| l.split(' ').nth(1) == Some(job.as_str()))
            .map(|l| l.rsplit_once(' ').map_or(l, |(head, _time)| head).to_string())
            .collect();
        assert_eq!(
            of_job,
            [
                format!("prolog.d/90-site {job} none"),
                format!("prolog.d/10-site {job} admitted"),
                format!("epilog.d/90-site {job} admitted"),
                format!("epilog.d/10-site {job} none"),
            ],
            "the site's Prologs around gpuslice's, then its Epilogs around gpuslice's:\n{order}"
        );
    }
    let tenants = cluster.tenants();
    assert!(tenants["tenants"].as_array().is_some_and(|t| t.is_empty()), "every job released:\n{tenants:#}");
}

/// The cgroup layout production uses (`proctrack/cgroup`, `task/cgroup`
/// with `ConstrainDevices=yes`, `PrologFlags=Alloc,Contain`), on one GPU:
/// the Prolog admits `salloc --gres=shard:2` at allocation, before any
/// step; the step's task, in its own cgroup (`.../job_<id>/step_0/...`),
/// sees its 2 GiB and may open the GPU's device file, which a job without
/// GPUs may not; and a batch job cancelled while it holds memory leaves
/// nothing held.
#[test]
fn cgroups_constrain_devices_and_prolog_at_allocation() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions { gpus: 1, monitor_config: KILL_MODE.into(), cgroups: true, ..Default::default() });
    let memctl = compile_c("memctl");
    let (m, d) = (memctl.display(), cluster.dir().display());
    let step = format!(
        "echo job=$SLURM_JOB_ID; echo note=$(cat {d}/gpuslice-state/job-$SLURM_JOB_ID); \
         srun sh -c 'echo cgroup=$(grep -m1 freezer /proc/self/cgroup); (exec 3<{d}/dev/nvidia0) 2>&1 | sed \"s/^/device=/\"; exec {m} init ctx info'"
    );
    let mut salloc = cluster.root_command("salloc");
    salloc.args(["--gres=shard:2", "sh", "-c", &step]).current_dir(cluster.dir());
    let out = cluster.sim.run(&mut wrap_as_user(JOB_UID, &salloc));
    let job = out.get("job").to_string();
    eprintln!(
        "salloc --gres=shard:2: note before any step: {}; {}; {}",
        out.get("note"),
        out.get("cgroup"),
        out.find("device").unwrap_or("device opened")
    );
    out.assert_success().assert_rc("info", cu::SUCCESS);
    assert_eq!(out.get("note"), "admitted", "PrologFlags=Alloc: admitted before the first step\n{out}");
    assert!(out.get("cgroup").contains(&format!("/job_{job}/step_0")), "the task in the step's cgroup\n{out}");
    assert_eq!(out.u64("info.total"), 2 * GIB, "{out}");
    // No driver behind the simulated GPU's device number: allowed, opening it finds no device.
    assert!(out.find("device").is_some_and(|e| e.contains("No such device")), "the job's own GPU is allowed\n{out}");

    let mut plain = cluster.root_command("srun");
    plain.args(["sh", "-c"]).arg(format!("(exec 3<{d}/dev/nvidia0) 2>&1 | sed 's/^/device=/'; echo done=1")).current_dir(cluster.dir());
    let plain = cluster.sim.run(&mut wrap_as_user(JOB_UID, &plain));
    eprintln!("a job without GPUs: {}", plain.find("device").unwrap_or("device opened"));
    assert!(plain.find("device").is_some_and(|e| e.contains("Operation not permitted")), "ConstrainDevices denies the GPU\n{plain}");

    let batch = cluster.sbatch(&["--gres=shard:4"], &format!("#!/bin/sh\n{m} init ctx pid alloc:a:1G sleep:60000\n"));
    let tenant = poll::fetch_until(
        "the batch job to hold its 1 GiB",
        || cluster.tenant(&batch),
        |t| t.as_ref().is_some_and(|t| t["held_bytes"].as_u64().unwrap_or(0) >= GIB),
    )
    .unwrap();
    cluster.scancel(&batch);
    assert_job_left_nothing(&cluster, &batch, tenant["ledger"].as_str().unwrap());
}

/// 200 short `shard:1` batch jobs through one node, as many at once as
/// Slurm runs (8 CPUs): every one sees its 1 GiB and is refused past it,
/// every one is admitted and released, and after them nothing is left
/// admitted, no note is left in state_dir and the node is idle, not
/// drained. Slow (a minute or more): `scripts/test-slurm.sh` runs it.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn two_hundred_short_shard_jobs_all_capped_none_left() {
    const JOBS: usize = 200;
    let _serial = serial();
    let cluster = cluster();
    let memctl = compile_c("memctl");
    let script = format!("#!/bin/sh\n{} init ctx info alloc:past:1200M\n", memctl.display());
    let started = std::time::Instant::now();
    let jobs: Vec<String> = (0..JOBS).map(|_| cluster.sbatch(&["--gres=shard:1"], &script)).collect();
    let submitted_s = started.elapsed().as_secs_f64();
    cluster.wait_idle();
    let done_s = started.elapsed().as_secs_f64();
    let mut capped = 0;
    for job in &jobs {
        let out = cluster.batch_output(job, &format!("{job}_4294967294"));
        let total = out.lines().find_map(|l| l.strip_prefix("info.total=")).unwrap_or_default();
        let past = out.lines().find_map(|l| l.strip_prefix("past=")).unwrap_or_default();
        assert_eq!((total, past), (GIB.to_string().as_str(), cu::OUT_OF_MEMORY.to_string().as_str()), "job {job}:\n{out}");
        capped += 1;
    }
    let log = cluster.integration_log();
    let (admitted, released) = (log.matches("admitted slurm-").count(), log.matches("released slurm-").count());
    let tenants = cluster.tenants();
    let left = tenants["tenants"].as_array().map_or(usize::MAX, Vec::len);
    let notes = std::fs::read_dir(cluster.dir().join("gpuslice-state")).map_or(0, |d| d.count());
    let node = cluster.node_state();
    eprintln!(
        "{JOBS} jobs: submitted in {submitted_s:.1} s, all done in {done_s:.1} s; {capped} capped at 1 GiB and refused past it; \
         {admitted} admitted, {released} released; {left} left admitted, {notes} notes left; node: {node}"
    );
    assert_eq!((admitted, released, left, notes), (JOBS, JOBS, 0, 0), "{tenants:#}\n{log}");
    assert!(node.starts_with("idle"), "the node is not drained: {node}");
}

/// What the integration adds to a batch job's start: from `sbatch` to the
/// job's first CUDA call (`cuInit` returned), 20 `shard:2` jobs on a plain
/// node and 20 on one with deploy/slurm and the monitor, alternating
/// between the two clusters (running at once, so a busy moment of the
/// machine falls on both), each job on an idle node. Also from the batch
/// script's start to that call (the TaskProlog and the shim's start; the
/// Prolog runs before the script). Prints the medians; asserts only that
/// every job ran and every integrated one was admitted.
#[test]
#[ignore = "a measurement: scripts/test-slurm.sh runs it"]
fn sbatch_to_the_first_cuda_call_with_and_without_the_integration() {
    const RUNS: usize = 20;
    let _serial = serial();
    let plain = Cluster::start(ClusterOptions { integration: false, ..Default::default() });
    // The site's scripts around gpuslice's Prolog time it.
    let integrated = Cluster::start(ClusterOptions { monitor_config: KILL_MODE.into(), site_scripts: true, ..Default::default() });
    let memctl = compile_c("memctl");
    let script = format!("#!/bin/sh\necho script=$(date +%s.%N)\n{} init clock\n", memctl.display());
    let time = |cluster: &Cluster| {
        cluster.wait_idle();
        let before = unix_now_s();
        let job = cluster.sbatch(&["--gres=shard:2"], &script);
        let out = cluster.batch_output(&job, &format!("{job}_4294967294"));
        let get = |key: &str| -> f64 {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key}:\n{out}"))
        };
        assert_eq!(get("init"), 0.0, "cuInit failed:\n{out}");
        ((get("clock") - before) * 1e3, (get("clock") - get("script")) * 1e3)
    };
    time(&plain);
    time(&integrated);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        without.push(time(&plain));
        with.push(time(&integrated));
    }
    let log = integrated.integration_log();
    assert_eq!(log.matches("admitted slurm-").count(), RUNS + 1, "every job was admitted:\n{log}");
    let median = |samples: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(pick).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    let (total_plain, total_with) = (median(&without, |s| s.0), median(&with, |s| s.0));
    let (script_plain, script_with) = (median(&without, |s| s.1), median(&with, |s| s.1));
    eprintln!(
        "sbatch to the first CUDA call, median of {RUNS}: plain {total_plain:.1} ms, with the integration {total_with:.1} ms ({:+.1} ms)",
        total_with - total_plain
    );
    eprintln!(
        "batch script's start to it, median of {RUNS}: plain {script_plain:.1} ms, with the integration {script_with:.1} ms ({:+.1} ms)",
        script_with - script_plain
    );
    eprintln!("all, ms (total, from the script's start): plain {without:.0?}; with {with:.0?}");
    // The Prolog: from the site's Prolog before gpuslice's to the one after it.
    let order = std::fs::read_to_string(integrated.dir().join("log/site-order")).unwrap();
    let at = |name: &str, job: &str| -> Option<f64> {
        order.lines().find(|l| l.starts_with(&format!("prolog.d/{name} {job} "))).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let mut prolog_ms: Vec<f64> = order
        .lines()
        .filter_map(|l| l.strip_prefix("prolog.d/90-site ")?.split(' ').next())
        .filter_map(|job| Some((at("10-site", job)? - at("90-site", job)?) * 1e3))
        .collect();
    prolog_ms.sort_by(f64::total_cmp);
    eprintln!(
        "gpuslice's Prolog (and one site script's start), median of {}: {:.1} ms (min {:.1}, max {:.1})",
        prolog_ms.len(),
        prolog_ms[prolog_ms.len() / 2],
        prolog_ms[0],
        prolog_ms[prolog_ms.len() - 1]
    );
}

/// Bytes used and committed on every GPU `devices` lists.
fn held_on(devices: &serde_json::Value) -> (u64, u64) {
    let list = devices["devices"].as_array().unwrap();
    (
        list.iter().map(|d| d["memory_used_bytes"].as_u64().unwrap()).sum(),
        list.iter().map(|d| d["memory_committed_bytes"].as_u64().unwrap()).sum(),
    )
}

/// Two nodes, each a host of its own (its slurmd in a network namespace,
/// its own simulated GPU and monitor): `srun --nodes=2 --gres=shard:2` is
/// admitted by both nodes' monitors and capped at 2 GiB on both; and a
/// job on both whose second node fails mid-run (every process of it
/// killed) leaves nothing held and nothing admitted on the first once
/// Slurm ends the job. Slow (Slurm takes 20 s or more to find a node
/// dead): `scripts/test-slurm.sh` runs it.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn two_node_jobs_are_capped_on_both_and_a_node_failure_frees_the_other() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions { gpus: 1, monitor_config: KILL_MODE.into(), two_nodes: true, ..Default::default() });
    let second = cluster.second.as_ref().unwrap();
    let memctl = compile_c("memctl");
    let out = cluster.sim.run(&mut cluster.srun(
        &["--nodes=2", "--ntasks-per-node=1", "--gres=shard:2"],
        "sh",
        &["-c", &format!("echo node=$SLURMD_NODENAME; exec {} init ctx info alloc:past:2100M", memctl.display())],
    ));
    out.assert_success();
    let job = out.get("job").to_string();
    eprintln!(
        "--nodes=2 --gres=shard:2: nodes {:?}, totals {:?}, past the cap {:?}",
        out.all("node"),
        out.all("info.total"),
        out.all("past")
    );
    assert_eq!(out.all("info.total"), [(2 * GIB).to_string(), (2 * GIB).to_string()], "2 GiB on each node\n{out}");
    assert_eq!(out.all("past"), [cu::OUT_OF_MEMORY.to_string(), cu::OUT_OF_MEMORY.to_string()], "{out}");
    let log = cluster.integration_log();
    for node in [cluster.node(), second.name.as_str()] {
        assert!(
            log.contains(&format!("job {job} on {node}: admitted slurm-{job}: devices 0, memory 0=2147483648B, shares 0=25")),
            "job {job} admitted on {node} with 2 GiB and 25 %:\n{log}"
        );
    }

    let mut held = cluster.sim.spawn(&mut cluster.srun(
        &["--nodes=2", "--ntasks-per-node=1", "--gres=shard:2"],
        "sh",
        &["-c", &format!("exec {} init ctx alloc:a:1G ready sleep:120000", memctl.display())],
    ));
    let job = held.wait_for("job");
    let holds = |tenants: serde_json::Value| {
        tenants["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tenant"] == format!("slurm-{job}") && t["held_bytes"].as_u64().unwrap_or(0) >= GIB)
    };
    poll::until("the job holding 1 GiB on both nodes", || holds(cluster.tenants()) && holds(cluster.second_tenants()));
    // The second node fails: every process in its namespace (slurmd, slurmstepd, the task) is killed.
    let pids = std::process::Command::new("ip").args(["netns", "pids", &second.netns]).output().unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&pids.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert!(pids.len() >= 3, "slurmd, slurmstepd and the task in the second node: {pids:?}");
    let failed_at = std::time::Instant::now();
    for pid in pids {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    poll::fetch_until("Slurm to end the job for its failed node", || cluster.job_state(&job), |state| state.is_empty());
    let ended_s = failed_at.elapsed().as_secs_f64();
    poll::fetch_until(
        "nothing held or admitted on the first node",
        || (held_on(&cluster.devices()), cluster.tenants()["tenants"].as_array().map_or(usize::MAX, Vec::len)),
        |(held, tenants)| *held == (0, 0) && *tenants == 0,
    );
    let out = held.wait();
    let nodes = cluster.node_state();
    eprintln!(
        "the second node failed: Slurm ended job {job} {ended_s:.1} s later; the first node holds nothing; nodes: {}",
        nodes.replace('\n', ", ")
    );
    assert!(out.stderr.contains("Node failure"), "{out}");
    assert!(nodes.lines().next().is_some_and(|first| first.starts_with("idle")), "the first node is up: {nodes}");
}

/// `sbatch` jobs under the integration, with slurmdbd, and the monitor's
/// history every second: `sacct` and `gpuslice report --by job` agree on
/// each job's user, account, shards and time held, and `--by user` on each
/// user's jobs and device time. The job id and user come from the Prolog
/// (root, slurmd's environment): a job that sets `SLURM_JOB_USER`,
/// `SLURM_JOB_ACCOUNT` and `SLURM_JOB_ID` in its own environment changes
/// nothing. Slow (a database and slurmdbd): `scripts/test-slurm.sh` runs it.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn sacct_and_the_report_agree_on_each_jobs_and_users_shards_and_time() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions {
        monitor_config: KILL_MODE.into(),
        accounting: true,
        monitor_args: vec!["--history-interval".into(), "1s".into()],
        ..Default::default()
    });
    let memctl = compile_c("memctl");
    // Each holds 512 MiB for as long as it runs.
    let job = |seconds: u32| format!("#!/bin/sh\nexec {} init ctx info alloc:a:512M sleep:{}\n", memctl.display(), seconds * 1000);
    let other = slurm_support::user_name(slurm_support::OTHER_UID);
    // (user, account, shards, seconds), of different lengths and sizes.
    let submitted = [
        (JOB_UID, "physics", 2, 3),
        (slurm_support::OTHER_UID, "chemistry", 3, 13),
        (JOB_UID, "chemistry", 1, 18),
        (slurm_support::OTHER_UID, "physics", 4, 8),
    ];
    let mut jobs = Vec::new();
    for (i, (uid, account, shards, seconds)) in submitted.iter().enumerate() {
        let mut args = vec![format!("--gres=shard:{shards}"), format!("--account={account}")];
        if i == 1 {
            // What the job's user sets reaches the job's tasks, not the Prolog.
            args.push("--export=ALL,SLURM_JOB_USER=nobody,SLURM_JOB_ACCOUNT=forged,SLURM_JOB_ID=1".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        jobs.push(cluster.sbatch_as(*uid, &args, &job(*seconds)));
    }
    for job in &jobs {
        let out = cluster.batch_output(job, &format!("{job}_4294967294"));
        assert_eq!(out.lines().find_map(|l| l.strip_prefix("a=")), Some("0"), "job {job}:\n{out}");
    }
    cluster.wait_idle();
    // sacct: once slurmdbd has each job's end.
    let fields = "JobIDRaw,User,Account,AllocTRES,ElapsedRaw,State";
    let sacct = poll::fetch_until(
        "sacct to list every job COMPLETED",
        || cluster.sacct(fields),
        |rows| rows.len() == jobs.len() && rows.iter().all(|r| r.get(5).map(String::as_str) == Some("COMPLETED")),
    );
    // The report: once no tenant is left and its history has the last
    // interval of each (written a second after it closes).
    poll::fetch_until("no tenant left", || cluster.tenants()["tenants"].as_array().map_or(usize::MAX, Vec::len), |n| *n == 0);
    let settled = |by: &str| {
        poll::fetch_until(
            &format!("the report by {by} to settle"),
            || {
                let before = cluster.report(by)["groups"].clone();
                std::thread::sleep(std::time::Duration::from_millis(2500));
                (before, cluster.report(by)["groups"].clone())
            },
            |(before, after)| before == after,
        )
        .1
    };
    let by_job = settled("job");
    let by_user = settled("user");
    for by in ["job", "user"] {
        let mut cmd = monitor_support::gpuslice_command(&cluster.sim);
        cmd.args(["report", "--since", "1h", "--by", by, "--dir"]).arg(cluster.sim.ledger_dir());
        let out = cluster.sim.run(&mut cmd);
        out.assert_success();
        eprintln!("$ gpuslice report --by {by}\n{}", out.stdout);
        for job in &jobs {
            let row = out.stdout.lines().find(|l| l.split(|c: char| c.is_whitespace() || c == ',').any(|w| w == format!("slurm-{job}")));
            assert!(row.is_some(), "job {job}'s tenant in the table:\n{out}");
        }
    }
    eprintln!("sacct ({fields}):");
    for row in &sacct {
        eprintln!("  {}", row.join(" "));
    }
    let shards_of = |tres: &str| -> u32 {
        tres.split(',').find_map(|t| t.strip_prefix("gres/shard=")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{tres}"))
    };
    let groups = by_job.as_array().unwrap();
    assert_eq!(groups.len(), jobs.len(), "one entry per job, none else: {by_job:#}");
    // The report's time is to its intervals (a second here, each closed at
    // a round, up to 1.25 s, and recorded in whole seconds): the interval
    // of the admission from its start, that of the release to its end,
    // and the Epilog's and the monitor's time to release; sacct's is in
    // whole seconds. 1 to 3 s longer were seen on a busy machine. The jobs'
    // lengths differ by more than that.
    const SLACK_S: f64 = 4.0;
    let mut per_user: std::collections::BTreeMap<String, (Vec<String>, f64, f64, f64)> = Default::default();
    for (row, (_, account, shards, _)) in sacct.iter().zip(&submitted) {
        let (id, user, sacct_account, tres, elapsed) = (&row[0], &row[1], &row[2], &row[3], row[4].parse::<f64>().unwrap());
        assert_eq!((sacct_account.as_str(), shards_of(tres)), (*account, *shards), "sacct: {row:?}");
        let entry = groups.iter().find(|g| g["key"] == id.as_str()).unwrap_or_else(|| panic!("job {id} not in {by_job:#}"));
        let share = entry["share_ratio"].as_f64().unwrap();
        let (held, allocated) = (entry["held_s"].as_f64().unwrap(), entry["allocated_device_s"].as_f64().unwrap());
        eprintln!(
            "job {id}: sacct {user} {sacct_account} shard:{} {elapsed} s; report {} {} share {share} held {held} s, {allocated:.2} device-s",
            shards_of(tres),
            entry["users"],
            entry["accounts"]
        );
        assert_eq!(entry["users"], serde_json::json!([user]), "job {id}'s user: {entry:#}");
        assert_eq!(entry["accounts"], serde_json::json!([sacct_account]), "job {id}'s account: {entry:#}");
        assert_eq!(entry["tenants"], serde_json::json!([format!("slurm-{id}")]), "{entry:#}");
        assert_eq!(entry["devices"].as_array().map(Vec::len), Some(1), "one GPU: {entry:#}");
        assert!(entry["memory_peak_bytes"].as_u64().unwrap() >= 512 << 20, "job {id} held 512 MiB: {entry:#}");
        assert_eq!((share * f64::from(slurm_support::SHARDS_PER_GPU)).round() as u32, shards_of(tres), "job {id}: {entry:#}");
        assert!((held - elapsed).abs() <= SLACK_S, "job {id}: held {held} s in the report, {elapsed} s in sacct");
        let gpus = f64::from(shards_of(tres)) / f64::from(slurm_support::SHARDS_PER_GPU);
        assert!((allocated - gpus * elapsed).abs() <= gpus * SLACK_S, "job {id}: {allocated} device-s, sacct {gpus} x {elapsed} s");
        let sums = per_user.entry(user.clone()).or_default();
        sums.0.push(id.clone());
        sums.1 += elapsed;
        sums.2 += gpus * elapsed;
        sums.3 += gpus * SLACK_S;
    }
    let mut names = vec![other.clone(), "nobody".to_string()];
    names.sort();
    assert_eq!(per_user.keys().cloned().collect::<Vec<_>>(), names, "sacct's users");
    let users = by_user.as_array().unwrap();
    assert_eq!(users.len(), per_user.len(), "one entry per user: {by_user:#}");
    for (user, (ids, elapsed, device_s, device_slack)) in &per_user {
        let entry = users.iter().find(|g| g["key"] == user.as_str()).unwrap_or_else(|| panic!("{user} not in {by_user:#}"));
        let mut ids = ids.clone();
        ids.sort();
        assert_eq!(entry["jobs"], serde_json::json!(ids), "{user}'s jobs: {entry:#}");
        let (held, allocated) = (entry["held_s"].as_f64().unwrap(), entry["allocated_device_s"].as_f64().unwrap());
        eprintln!("user {user}: sacct {elapsed} s, {device_s:.2} device-s; report {held} s, {allocated:.2} device-s");
        let n = ids.len() as f64;
        assert!((held - elapsed).abs() <= SLACK_S * n, "{user}: held {held} s, sacct {elapsed} s");
        assert!((allocated - device_s).abs() <= *device_slack, "{user}: {allocated} device-s, sacct {device_s}");
    }
}

/// With slurmdbd and `AccountingStorageEnforce=associations,limits`, an
/// account's `GrpTRES=gres/shard=4` bounds its shards across the cluster:
/// with 3 shards of it running on one node and 1 on the other, its next
/// `shard:1` job stays pending with Slurm's reason `AssocGrpGRES` (and is
/// admitted nowhere) while both nodes have shards free and another
/// account's job runs; once one of its jobs ends, it runs. Slow (two
/// nodes, a database and slurmdbd): `scripts/test-slurm.sh` runs it.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn an_accounts_grp_tres_bounds_its_shards_across_the_cluster() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterOptions {
        gpus: 1,
        monitor_config: KILL_MODE.into(),
        two_nodes: true,
        accounting: true,
        enforce: true,
        ..Default::default()
    });
    cluster.sacctmgr(&["modify", "account", "physics", "set", "GrpTRES=gres/shard=4"]);
    let limits = cluster.sim.run(cluster.root_command("sacctmgr").args([
        "-n",
        "-P",
        "show",
        "assoc",
        "account=physics",
        "user=",
        "format=Account,GrpTRES",
    ]));
    assert!(limits.stdout.contains("physics|gres/shard=4"), "{limits}");
    let (a, b) = (cluster.node().to_string(), cluster.second.as_ref().unwrap().name.clone());
    let long = "#!/bin/sh\nsleep 300\n";
    let running = |job: &str| poll::fetch_until(&format!("job {job} to run"), || cluster.job_state(job), |s| s.starts_with("RUNNING"));
    let on_a = cluster.sbatch(&["--account=physics", "--gres=shard:3", &format!("--nodelist={a}")], long);
    let on_b = cluster.sbatch(&["--account=physics", "--gres=shard:1", &format!("--nodelist={b}")], long);
    running(&on_a);
    running(&on_b);
    let past = cluster.sbatch(&["--account=physics", "--gres=shard:1"], long);
    let state = poll::fetch_until(&format!("job {past} to wait on its account"), || cluster.job_state(&past), |s| s.contains("AssocGrp"));
    eprintln!("physics at 4 of 4 shards (3 on {a}, 1 on {b}); its next shard:1 job: {state}");
    assert_eq!(state, "PENDING AssocGrpGRES");
    // Room on both nodes: another account's job runs beside it.
    let other = cluster.sbatch(&["--account=chemistry", "--gres=shard:4"], long);
    running(&other);
    assert_eq!(cluster.job_state(&past), "PENDING AssocGrpGRES", "still bounded by its account, not by room");
    let name = format!("slurm-{past}");
    for tenants in [cluster.tenants(), cluster.second_tenants()] {
        let names: Vec<&str> = tenants["tenants"].as_array().unwrap().iter().filter_map(|t| t["tenant"].as_str()).collect();
        assert!(!names.contains(&name.as_str()), "the pending job is admitted nowhere: {tenants:#}");
    }
    cluster.scancel(&on_a);
    running(&past);
    eprintln!("job {on_a} ended: job {past} runs ({})", cluster.job_state(&past));
}

/// An account is a team: with teams physics and chemistry at 50 / 50 in
/// the monitor's configuration (`accounts = [...]`), two saturating
/// `shard:2` jobs of account physics and one of chemistry on one GPU: the
/// chemistry job gets half of what the three got and each physics job a
/// quarter, within 3 points (without teams each would get a third). The
/// account is the one slurmd's Prolog admitted the job with.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn an_accounts_jobs_are_its_team_and_split_the_gpu_with_another_account_50_50() {
    let _serial = serial();
    let teams = "[teams.physics]\naccounts = [\"physics\"]\nshare = 50\n[teams.chemistry]\naccounts = [\"chemistry\"]\nshare = 50\n";
    let cluster = Cluster::start(ClusterOptions { gpus: 1, monitor_config: format!("{KILL_MODE}{teams}"), ..Default::default() });
    let epoch = unix_now_s();
    let script = python_script("fairness_load.py");
    let saturate = |account: &str| {
        let account = format!("--account={account}");
        let mut cmd = cluster.srun_as_root(&[&account, "--gres=shard:2"], python(), &[script.to_str().unwrap(), "saturate", "1000", "8"]);
        cmd.env("FAIRNESS_EPOCH", format!("{epoch:.6}"));
        cluster.sim.spawn(&mut cmd)
    };
    let mut jobs = [("physics", saturate("physics")), ("physics", saturate("physics")), ("chemistry", saturate("chemistry"))];
    for (_, job) in &mut jobs {
        job.wait_for("started");
    }
    let all_from_s = unix_now_s() - epoch;
    for (account, job) in &mut jobs {
        let id = job.wait_for("job");
        let tenant = admitted(&cluster, &id);
        assert_eq!(tenant["labels"]["account"].as_str(), Some(*account), "{tenant}");
    }
    let outs: Vec<(&str, Output)> = jobs.into_iter().map(|(account, job)| (account, job.wait())).collect();
    let window = (all_from_s + 0.5, all_from_s + 5.0);
    let got: Vec<f64> = outs
        .iter()
        .map(|(_, out)| {
            out.assert_success();
            busy_ratio(&busy_bins(out, 1000.0), window.0, window.1)
        })
        .collect();
    let total: f64 = got.iter().sum();
    eprintln!("physics, physics, chemistry (teams 50 / 50) from {:.1} s to {:.1} s: {got:.3?} of the GPU", window.0, window.1);
    assert!(total > 0.6, "together they left the GPU idle: {got:?}");
    for ((account, out), (ratio, expected)) in outs.iter().zip(got.iter().zip([0.25, 0.25, 0.5])) {
        let part = ratio / total;
        assert!((part - expected).abs() <= 0.03, "a job of {account} got {part:.3} of the GPU time, not {expected} ± 0.03: {got:?}\n{out}");
    }
}

/// An account is a team (`account_teams = true`), and a team's memory
/// quota (`[teams.physics] memory = "3GiB"`) holds over all its jobs on the
/// node at allocation: a second physics job, under its own 2 GiB cap, is
/// refused what would take physics past 3 GiB and sees the team's room as
/// its free memory; a chemistry job (its own team, no quota) is not bound.
#[test]
#[ignore = "slow: scripts/test-slurm.sh runs it"]
fn an_accounts_team_memory_quota_holds_over_its_jobs_on_the_node() {
    let _serial = serial();
    let teams = "account_teams = true\n[teams.physics]\nmemory = \"3GiB\"\n";
    let cluster = Cluster::start(ClusterOptions { gpus: 1, monitor_config: format!("{KILL_MODE}{teams}"), ..Default::default() });
    let job = |account: &str, args: &[&str]| {
        let account = format!("--account={account}");
        cluster.sim.spawn(&mut cluster.srun_as_root(&[&account, "--gres=shard:2"], compile_c("memctl"), args))
    };
    // physics: its context (64 MiB on this cluster's GPU) and 1.5 GiB.
    let mut first = job("physics", &["init", "ctx", "alloc:a:1536M", "mark:held", "hold"]);
    assert_eq!(first.wait_for("held"), "1");
    // A second physics job: with its context the team holds 1.625 GiB, so
    // 1.5 GiB more would pass 3 GiB (its own 2 GiB cap has room for it).
    let mut second = job("physics", &["init", "ctx", "info", "alloc:a:1536M", "alloc:b:768M", "mark:done", "hold"]);
    assert_eq!(second.wait_for("done"), "1");
    let mut third = job("chemistry", &["init", "ctx", "alloc:a:1536M", "mark:done", "hold"]);
    assert_eq!(third.wait_for("done"), "1");
    for (account, running) in [("physics", &mut first), ("physics", &mut second), ("chemistry", &mut third)] {
        let id = running.wait_for("job");
        assert_eq!(admitted(&cluster, &id)["labels"]["account"].as_str(), Some(account));
    }
    let (first, second, third) = (first.wait(), second.wait(), third.wait());
    eprintln!("a second physics job beside one holding 1.5 GiB (and its context) of physics' 3 GiB:\n{}", second.stdout);
    first.assert_success().assert_rc("a", cu::SUCCESS);
    second.assert_success();
    let mib = GIB / 1024;
    let team_room = 3 * GIB - 1536 * mib - 2 * 64 * mib;
    assert_eq!((second.u64("info.total"), second.u64("info.free")), (2 * GIB, team_room), "min(cap, quota), the team's room: {second}");
    second.assert_rc("a", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
    third.assert_success().assert_rc("a", cu::SUCCESS);
}
