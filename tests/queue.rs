//! The admission queue, with real processes on simgpu: `gpuslice run
//! --queue` waits until its slice fits, starts its command on the devices
//! chosen for it, and leaves no trace when it dies; `gpuslice queue` shows
//! the jobs and `gpuslice cancel` ends one.
//!
//! Every job here is a shell that prints what it was given and then waits
//! for its stdin to close, so a test decides when a job ends. Every test
//! runs a monitor, which alone admits jobs; the tests of other Unix users
//! (`setpriv`, uids 1001 and 1002) attack the queue as those users.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{gpuslice_bin, poll, simgpu_lib, wrap_as_user, Running, Sim, GIB, MIB};
use monitor_support::{Monitor, MonitorOptions};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

/// What each job prints, then it waits for a line or EOF on stdin.
const JOB_SCRIPT: &str =
    "echo visible=$CUDA_VISIBLE_DEVICES; echo tenant=$GPUSLICE_TENANT; echo cap=$GPUSLICE_MEMORY_LIMIT; echo started=1; read line || true";

/// A test's host: its simulated GPUs and the monitor that admits its jobs.
/// (The monitor is dropped, and stopped, before the directory goes.)
struct Host {
    monitor: Monitor,
    sim: Sim,
}

impl std::ops::Deref for Host {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

/// `devices` simulated GPUs of 4 GiB each, and a monitor.
fn sim(devices: u32) -> Host {
    host(Sim::new().devices(devices).memory("4GiB"), MonitorOptions::default())
}

/// A monitor on `sim`, with the simulated GPU open to every user (as a
/// shared machine's is).
fn host(sim: Sim, options: MonitorOptions) -> Host {
    let monitor = Monitor::start(&sim, options);
    std::fs::set_permissions(sim.state_file(), std::fs::Permissions::from_mode(0o666)).unwrap();
    Host { monitor, sim }
}

fn gpuslice(sim: &Sim) -> Command {
    let mut cmd = sim.command(gpuslice_bin());
    cmd.env_remove("LD_PRELOAD");
    cmd
}

/// `gpuslice run --sim --queue --dir <ledger> ARGS -- sh -c JOB_SCRIPT`.
fn submit_command(sim: &Sim, args: &[&str]) -> Command {
    let mut cmd = gpuslice(sim);
    cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(args).args(["--", "sh", "-c", JOB_SCRIPT]);
    cmd
}

fn submit(sim: &Sim, args: &[&str]) -> Running {
    sim.spawn(&mut submit_command(sim, args))
}

/// The live jobs, from `gpuslice queue --json`.
fn jobs(sim: &Sim) -> Vec<Value> {
    let out = sim.run(gpuslice(sim).args(["queue", "--json", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    let doc: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("queue --json is not JSON: {e}\n{out}"));
    doc["jobs"].as_array().cloned().unwrap_or_default()
}

/// The state of the job named `name`, if it is in the queue.
fn state_of(jobs: &[Value], name: &str) -> Option<String> {
    jobs.iter().find(|j| j["name"] == name).map(|j| j["state"].as_str().unwrap_or_default().to_string())
}

fn wait_for_states(sim: &Sim, what: &str, expected: &[(&str, Option<&str>)]) -> Vec<Value> {
    poll::fetch_until(what, || jobs(sim), |jobs| expected.iter().all(|(name, state)| state_of(jobs, name).as_deref() == *state))
}

fn device_uuids(sim: &Sim) -> Vec<String> {
    let out = sim.run(gpuslice(sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).arg("--json"));
    out.assert_success();
    let view: Value = serde_json::from_str(&out.stdout).unwrap();
    view["devices"].as_array().unwrap().iter().map(|d| d["uuid"].as_str().unwrap().to_string()).collect()
}

fn committed(sim: &Sim) -> Vec<u64> {
    let out = sim.run(gpuslice(sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).arg("--json"));
    out.assert_success();
    let view: Value = serde_json::from_str(&out.stdout).unwrap();
    view["devices"].as_array().unwrap().iter().map(|d| d["memory_committed_bytes"].as_u64().unwrap()).collect()
}

#[test]
fn a_job_that_fits_starts_at_once_and_one_that_does_not_waits_for_it() {
    let sim = sim(2);
    let uuids = device_uuids(&sim);
    let mut a = submit(&sim, &["--gpus", "2", "--memory", "3GiB", "--name", "a"]);
    assert_eq!(a.wait_for("started"), "1");
    let mut a_visible: Vec<String> = a.wait_for("visible").split(',').map(String::from).collect();
    a_visible.sort();
    let mut all = uuids.clone();
    all.sort();
    assert_eq!(a_visible, all, "two GPUs, named by UUID");
    assert_eq!(a.wait_for("cap"), "3GiB");
    assert_eq!(a.wait_for("tenant"), "queue-1", "each job is its own tenant, named after the job (job 1)");
    assert_eq!(committed(&sim), [3 * GIB, 3 * GIB]);
    let out = sim.run(gpuslice(&sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).arg("--json"));
    let view: Value = serde_json::from_str(&out.stdout).unwrap();
    for device in view["devices"].as_array().unwrap() {
        assert_eq!(device["jobs"][0]["name"], "a", "gpuslice devices names the job on each of its GPUs: {device}");
    }

    // 2 GiB fits on neither device while a runs.
    let mut b = submit(&sim, &["--memory", "2GiB", "--name", "b"]);
    wait_for_states(&sim, "b to wait behind a", &[("a", Some("running")), ("b", Some("waiting"))]);
    assert!(!b.has_printed("started"), "b must not start while a holds the room");

    a.wait().assert_success();
    assert_eq!(b.wait_for("started"), "1");
    let b_visible = b.wait_for("visible");
    // Binpack: the fullest device that fits; both are empty, so the first.
    assert_eq!(b_visible, uuids[0]);
    assert_eq!(committed(&sim), [2 * GIB, 0]);
    b.wait().assert_success();
    poll::until("the queue to empty", || jobs(&sim).is_empty());
}

#[test]
fn higher_priority_first_then_first_come() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let mut low = submit(&sim, &["--memory", "3GiB", "--name", "low"]);
    wait_for_states(&sim, "low to wait", &[("low", Some("waiting"))]);
    let mut late = submit(&sim, &["--memory", "3GiB", "--name", "late", "--priority", "0"]);
    let mut high = submit(&sim, &["--memory", "3GiB", "--name", "high", "--priority", "5"]);
    wait_for_states(&sim, "all three to wait", &[("low", Some("waiting")), ("late", Some("waiting")), ("high", Some("waiting"))]);
    // Waiting jobs are listed in the order they will start.
    let order: Vec<String> = jobs(&sim).iter().filter(|j| j["state"] == "waiting").map(|j| j["name"].as_str().unwrap().into()).collect();
    assert_eq!(order, ["high", "low", "late"]);

    holder.wait().assert_success();
    high.wait_for("started");
    wait_for_states(&sim, "high to run", &[("high", Some("running")), ("low", Some("waiting")), ("late", Some("waiting"))]);
    assert!(!low.has_printed("started") && !late.has_printed("started"));
    high.wait().assert_success();
    low.wait_for("started");
    wait_for_states(&sim, "low to run before late", &[("low", Some("running")), ("late", Some("waiting"))]);
    assert!(!late.has_printed("started"));
    low.wait().assert_success();
    late.wait_for("started");
    late.wait().assert_success();
}

#[test]
fn a_waiting_job_killed_with_sigkill_leaves_no_entry() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let waiting = submit(&sim, &["--memory", "2GiB", "--name", "doomed"]);
    wait_for_states(&sim, "doomed to wait", &[("doomed", Some("waiting"))]);
    waiting.kill9();
    let left = wait_for_states(&sim, "doomed to leave the queue", &[("doomed", None)]);
    assert_eq!(left.len(), 1, "only the holder is left: {left:?}");
    holder.wait().assert_success();
}

#[test]
fn a_running_job_killed_with_sigkill_frees_its_commitment() {
    let sim = sim(1);
    let running = submit(&sim, &["--memory", "3GiB", "--name", "doomed"]);
    let mut running = running;
    running.wait_for("started");
    let mut next = submit(&sim, &["--memory", "2GiB", "--name", "next"]);
    wait_for_states(&sim, "next to wait", &[("doomed", Some("running")), ("next", Some("waiting"))]);
    // The job's pid is its command's (the queue execs it).
    running.kill9();
    assert_eq!(next.wait_for("started"), "1");
    wait_for_states(&sim, "only next to run", &[("doomed", None), ("next", Some("running"))]);
    assert_eq!(committed(&sim), [2 * GIB]);
    next.wait().assert_success();
}

#[test]
fn cancel_ends_a_waiting_job_and_names_unknown_ones() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let waiting = submit(&sim, &["--memory", "2GiB", "--name", "cancelled"]);
    let listed = wait_for_states(&sim, "it to wait", &[("cancelled", Some("waiting"))]);
    let id = listed.iter().find(|j| j["name"] == "cancelled").unwrap()["id"].as_u64().unwrap();
    let out = sim.run(gpuslice(&sim).args(["cancel", &id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(out.stdout.contains(&format!("job {id} cancelled while waiting")), "{out}");
    let ended = waiting.wait();
    assert!(!ended.success() && !ended.stdout.contains("started="), "{ended}");
    wait_for_states(&sim, "it to leave the queue", &[("cancelled", None)]);

    let out = sim.run(gpuslice(&sim).args(["cancel", "999", "--dir"]).arg(sim.ledger_dir()));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("no job 999"), "{out}");
    let out = sim.run(gpuslice(&sim).args(["cancel", "x1", "--dir"]).arg(sim.ledger_dir()));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("no job named \"x1\""), "{out}");
    let out = sim.run(gpuslice(&sim).args(["cancel", "a/b", "--dir"]).arg(sim.ledger_dir()));
    assert!(out.stderr.contains("\"a/b\" is neither a job id") && out.stderr.contains("not allowed"), "{out}");
    holder.wait().assert_success();
}

#[test]
fn cancel_by_name_ends_the_one_job_of_that_name_and_refuses_a_shared_one() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let first = submit(&sim, &["--memory", "2GiB", "--name", "twin"]);
    let second = submit(&sim, &["--memory", "2GiB", "--name", "twin"]);
    let waiting = submit(&sim, &["--memory", "2GiB", "--name", "by-name"]);
    let listed = wait_for_states(&sim, "them to wait", &[("by-name", Some("waiting")), ("twin", Some("waiting"))]);
    let id = listed.iter().find(|j| j["name"] == "by-name").unwrap()["id"].as_u64().unwrap();
    let out = sim.run(gpuslice(&sim).args(["cancel", "by-name", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(out.stdout.contains(&format!("job {id} cancelled while waiting")), "{out}");
    let ended = waiting.wait();
    assert!(!ended.success() && !ended.stdout.contains("started="), "{ended}");
    wait_for_states(&sim, "it to leave the queue", &[("by-name", None)]);

    // Two jobs share a name: neither is cancelled, and both ids are named.
    let out = sim.run(gpuslice(&sim).args(["cancel", "twin", "--dir"]).arg(sim.ledger_dir()));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("2 jobs are named \"twin\"") && out.stderr.contains("cancel one by its id"), "{out}");
    let listed = wait_for_states(&sim, "both to wait still", &[("twin", Some("waiting"))]);
    assert_eq!(listed.iter().filter(|j| j["name"] == "twin").count(), 2, "{listed:?}");
    for twin in listed.iter().filter(|j| j["name"] == "twin") {
        let id = twin["id"].as_u64().unwrap().to_string();
        sim.run(gpuslice(&sim).args(["cancel", &id, "--dir"]).arg(sim.ledger_dir())).assert_success();
    }
    for job in [first, second] {
        assert!(!job.wait().success());
    }
    holder.wait().assert_success();
}

#[test]
fn requests_that_can_never_fit_and_bad_input_are_refused_at_once() {
    let sim = sim(2);
    for (args, says) in
        [(vec!["--memory", "5GiB"], "the largest has 4.0 GiB"), (vec!["--gpus", "3", "--memory", "1GiB"], "3 GPUs and this host has 2")]
    {
        let out = sim.run(&mut submit_command(&sim, &args));
        assert_eq!(out.code(), Some(2), "{args:?}\n{out}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line\n{out}");
        assert!(lines[0].contains("can never start on this host") && lines[0].contains(says), "{out}");
        assert!(!out.stdout.contains("started="), "{out}");
    }
    for (args, says) in [
        (vec!["--gpus", "0"], "0 is not in 1..=64"),
        (vec!["--timeout", "soon"], "500ms, 90s, 1.5s, 5m or 1h 30m"),
        (vec!["--memory", "0=1GiB"], "one size for each of the job's GPUs"),
        (vec!["--memory", "1GB"], "write 1GiB"),
        (vec!["--memory", "3"], "or 3B if you mean bytes"),
        (vec!["--name", "a b"], "--name \"a b\""),
        (vec!["--priority", "high"], "--priority"),
    ] {
        let out = sim.run(&mut submit_command(&sim, &args));
        assert_eq!(out.code(), Some(2), "{args:?}\n{out}");
        assert!(out.stderr.contains(says), "{args:?} should say {says:?}\n{out}");
    }
    // A command that cannot run is found out before any wait.
    let mut typo = gpuslice(&sim);
    typo.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(["--", "no-such-program-here"]);
    let out = sim.run(&mut typo);
    assert_eq!(out.code(), Some(127), "a missing command exits 127, as under a shell\n{out}");
    assert!(out.stderr.contains("cannot run \"no-such-program-here\"") && out.stderr.contains("nothing was queued"), "{out}");
    // Queue options without --queue are refused, not ignored (--priority
    // alone is the tenant's compute priority).
    let out = sim.run(gpuslice(&sim).args(["run", "--sim", "--gpus", "2", "--", "true"]));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--queue"), "{out}");
    assert!(jobs(&sim).is_empty(), "nothing was queued");
}

#[test]
fn timeout_gives_up_with_exit_code_75() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let out = sim.run(&mut submit_command(&sim, &["--memory", "2GiB", "--name", "impatient", "--timeout", "300ms"]));
    assert_eq!(out.code(), Some(75), "{out}");
    assert!(out.stderr.contains("gave up") && !out.stdout.contains("started="), "{out}");
    wait_for_states(&sim, "the job to leave the queue", &[("impatient", None)]);
    holder.wait().assert_success();
}

#[test]
fn simultaneous_submissions_never_overcommit() {
    // One 4 GiB GPU and six 1.5 GiB jobs submitted at once: two fit.
    const JOBS: usize = 6;
    let sim = sim(1);
    let mut jobs_running: Vec<Option<Running>> =
        (0..JOBS).map(|i| Some(submit(&sim, &["--memory", "1536MiB", "--name", &format!("j{i}")]))).collect();
    let mut finished = 0;
    while finished < JOBS {
        // Wait for the queue to settle: every unfinished job listed, two running
        // (or all that are left).
        let left = JOBS - finished;
        let (listed, started) = poll::fetch_until(
            "the queue to settle",
            || {
                let started: Vec<usize> =
                    (0..JOBS).filter(|i| jobs_running[*i].as_mut().is_some_and(|job| job.has_printed("started"))).collect();
                (jobs(&sim), started)
            },
            |(jobs, started)| {
                jobs.len() == left && jobs.iter().filter(|j| j["state"] == "running").count() == left.min(2) && started.len() >= left.min(2)
            },
        );
        let running: u64 = listed.iter().filter(|j| j["state"] == "running").map(|j| j["memory_bytes"].as_u64().unwrap()).sum();
        assert!(running <= 4 * GIB, "{listed:?}");
        assert_eq!(started.len(), left.min(2), "as many started as fit: {listed:?}");
        // End one running job.
        let i = started[0];
        jobs_running[i].take().unwrap().wait().assert_success();
        finished += 1;
    }
}

#[test]
fn a_small_job_passes_a_blocked_one_only_on_devices_it_does_not_wait_for() {
    let sim = sim(2);
    let uuids = device_uuids(&sim);
    // Binpack fills device 0 first, then device 1: 1 GiB left on each.
    let mut first = submit(&sim, &["--memory", "3GiB", "--name", "first"]);
    assert_eq!(first.wait_for("visible"), uuids[0]);
    let mut second = submit(&sim, &["--memory", "3GiB", "--name", "second"]);
    assert_eq!(second.wait_for("visible"), uuids[1]);
    // 2 GiB fits nowhere; it lacks as much on both and waits for device 0.
    let mut blocked = submit(&sim, &["--memory", "2GiB", "--name", "blocked"]);
    wait_for_states(&sim, "blocked to wait", &[("blocked", Some("waiting"))]);
    // 1 GiB fits on both; device 0 is spoken for, so it may only take device 1.
    let mut small = submit(&sim, &["--memory", "1GiB", "--name", "small"]);
    assert_eq!(small.wait_for("visible"), uuids[1], "backfill onto the device the blocked job does not wait for");
    // Another 1 GiB would have to take device 0's last GiB: it waits.
    let mut later = submit(&sim, &["--memory", "1GiB", "--name", "later"]);
    wait_for_states(&sim, "later to wait", &[("later", Some("waiting")), ("blocked", Some("waiting"))]);
    assert!(!later.has_printed("started"));

    first.wait().assert_success();
    assert_eq!(blocked.wait_for("visible"), uuids[0], "the blocked job gets the device it waited for");
    assert_eq!(later.wait_for("visible"), uuids[0], "then the rest of device 0 goes to the next");
    for job in [second, blocked, small, later] {
        job.wait().assert_success();
    }
}

#[test]
fn spread_takes_the_emptiest_device_and_jobs_without_a_cap_take_whole_ones() {
    let sim = sim(2);
    let uuids = device_uuids(&sim);
    let mut whole = submit(&sim, &["--name", "whole"]);
    assert_eq!(whole.wait_for("visible"), uuids[0]);
    assert_eq!(whole.wait_for("cap"), "", "no cap: the whole device is the job's");
    assert_eq!(committed(&sim), [4 * GIB, 0]);
    let mut small = submit(&sim, &["--memory", "1GiB", "--name", "small"]);
    assert_eq!(small.wait_for("visible"), uuids[1]);
    // Device 1 has room, device 0 none: a whole-device job waits.
    let mut another_whole = submit(&sim, &["--name", "another-whole"]);
    wait_for_states(&sim, "a whole device to wait for", &[("another-whole", Some("waiting"))]);
    whole.wait().assert_success();
    assert_eq!(another_whole.wait_for("visible"), uuids[0]);
    another_whole.wait().assert_success();
    // Device 0 empty, device 1 holding 1 GiB: spread picks device 0, binpack device 1.
    let mut spread = submit(&sim, &["--memory", "1GiB", "--placement", "spread", "--name", "spread"]);
    assert_eq!(spread.wait_for("visible"), uuids[0]);
    let mut packed = submit(&sim, &["--memory", "512MiB", "--name", "packed"]);
    // Both now hold 1 GiB; ties go to the lower index.
    assert_eq!(packed.wait_for("visible"), uuids[0]);
    for job in [small, spread, packed] {
        job.wait().assert_success();
    }
}

#[test]
fn a_job_lasts_as_long_as_any_process_of_its_command() {
    let sim = sim(1);
    // The command leaves a child behind: the job (and its room) is the child's now.
    let mut parent_cmd = gpuslice(&sim);
    parent_cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(["--memory", "3GiB", "--name", "parent", "--"]);
    parent_cmd.args(["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo child=$!; echo started=1; read line || true"]);
    let mut parent = sim.spawn(&mut parent_cmd);
    let child: u32 = parent.wait_for("child").parse().unwrap();
    let mut next = submit(&sim, &["--memory", "2GiB", "--name", "next"]);
    wait_for_states(&sim, "next to wait", &[("next", Some("waiting"))]);
    parent.wait().assert_success();
    let listed = jobs(&sim);
    assert_eq!(state_of(&listed, "parent").as_deref(), Some("running"), "the child still holds the job: {listed:?}");
    assert!(!next.has_printed("started"));
    // SAFETY: kill(2) on the child the job's own command reported.
    assert_eq!(unsafe { libc::kill(child as libc::pid_t, libc::SIGKILL) }, 0);
    assert_eq!(next.wait_for("started"), "1");
    next.wait().assert_success();
}

#[test]
fn without_nvml_the_queue_says_it_cannot_see_the_gpus() {
    let sim = sim(1);
    let mut cmd = gpuslice(&sim);
    // No --sim, and no NVML-like library on the path.
    cmd.env_remove("LD_LIBRARY_PATH").args(["run", "--queue", "--dir"]).arg(sim.ledger_dir()).args(["--memory", "1GiB", "--", "true"]);
    let out = sim.run(&mut cmd);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("the queue needs NVML to know this host's GPUs"), "{out}");
    assert!(jobs(&sim).is_empty());
}

#[test]
fn the_queue_table_lists_running_jobs_then_waiting_ones() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let waiting = submit(&sim, &["--memory", "2GiB", "--name", "second", "--priority", "-3"]);
    wait_for_states(&sim, "second to wait", &[("second", Some("waiting"))]);
    let out = sim.run(gpuslice(&sim).args(["queue", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("STATE") && lines[0].contains("DEVICES"), "{out}");
    assert!(lines[1].contains("holder") && lines[1].contains("running") && lines[1].contains("3.0 GiB"), "{out}");
    assert!(lines[2].contains("second") && lines[2].contains("waiting") && lines[2].contains(" -3 "), "{out}");
    drop(waiting);
    holder.wait().assert_success();
}

#[test]
fn cancel_sends_sigterm_to_a_running_job_and_its_room_goes_to_the_next() {
    let sim = sim(1);
    let running = submit(&sim, &["--memory", "3GiB", "--name", "running"]);
    let mut running = running;
    running.wait_for("started");
    let mut next = submit(&sim, &["--memory", "3GiB", "--name", "next"]);
    let listed = wait_for_states(&sim, "next to wait", &[("running", Some("running")), ("next", Some("waiting"))]);
    let id = listed.iter().find(|j| j["name"] == "running").unwrap()["id"].as_u64().unwrap();
    let out = sim.run(gpuslice(&sim).args(["cancel", &id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(out.stdout.contains("SIGTERM sent to its command"), "{out}");
    let ended = running.wait();
    assert!(ended.status.is_some_and(|s| !s.success()), "{ended}");
    assert_eq!(next.wait_for("started"), "1");
    next.wait().assert_success();
}

#[test]
fn overcommit_lets_caps_add_up_past_device_memory_as_configured() {
    let sim = host(Sim::new().devices(1).memory("4GiB").env("GPUSLICE_QUEUE_OVERCOMMIT", "1.5"), MonitorOptions::default());
    // 3 GiB + 3 GiB on a 4 GiB device: within 1.5 × 4 GiB.
    let mut a = submit(&sim, &["--memory", "3GiB", "--name", "a"]);
    let mut b = submit(&sim, &["--memory", "3GiB", "--name", "b"]);
    a.wait_for("started");
    b.wait_for("started");
    a.wait().assert_success();
    b.wait().assert_success();
    let bad = Sim::new().devices(1).memory("4GiB").env("GPUSLICE_QUEUE_OVERCOMMIT", "lots");
    let out = bad.run(&mut submit_command(&bad, &["--memory", "1GiB"]));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("GPUSLICE_QUEUE_OVERCOMMIT=\"lots\": expected a ratio from 1 to 10"), "{out}");
}

// Other Unix users. The queue is every user's: none can take it over,
// freeze it, lie their way into room or ahead of others, or touch another's job.

const ALICE: u32 = 1001;
const BOB: u32 = 1002;

fn submit_as(sim: &Sim, uid: u32, args: &[&str]) -> Running {
    sim.spawn(&mut wrap_as_user(uid, &submit_command(sim, args)))
}

/// Runs a shell command line as `uid`; whether it succeeded, and what it said.
fn shell_as(uid: u32, script: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script, "sh"]).args(args);
    let out = wrap_as_user(uid, &cmd).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn id_of(jobs: &[Value], name: &str) -> u64 {
    jobs.iter().find(|j| j["name"] == name).and_then(|j| j["id"].as_u64()).unwrap_or_else(|| panic!("no job {name}: {jobs:?}"))
}

/// Finding 1: after one user's first job, every other user (root
/// included) was refused with "the queue directory … belongs to uid N".
/// Now the monitor makes the directory root's, sticky; each user's job
/// file is theirs alone, and only its owner or root may cancel it.
#[test]
fn the_queue_belongs_to_no_single_user() {
    let sim = sim(1);
    let queue_dir = sim.ledger_dir().join("queue");
    let meta = std::fs::symlink_metadata(&queue_dir).expect("the monitor makes the queue directory at start");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o1777), "root's, sticky, open to all");
    let mut alices = submit_as(&sim, ALICE, &["--memory", "1GiB", "--name", "alices"]);
    assert_eq!(alices.wait_for("started"), "1");
    let mut bobs = submit_as(&sim, BOB, &["--memory", "1GiB", "--name", "bobs"]);
    assert_eq!(bobs.wait_for("started"), "1", "another user queues after the first");
    let mut roots = submit(&sim, &["--memory", "1GiB", "--name", "roots"]);
    assert_eq!(roots.wait_for("started"), "1", "so does root");
    let listed =
        wait_for_states(&sim, "three jobs to run", &[("alices", Some("running")), ("bobs", Some("running")), ("roots", Some("running"))]);
    let alice_id = id_of(&listed, "alices");
    assert_eq!(listed.iter().find(|j| j["name"] == "alices").unwrap()["uid"], ALICE, "the owner is the file's");

    // Alice's job is hers: Bob can neither rewrite, remove nor cancel it.
    let file = queue_dir.join(format!("{alice_id}.job"));
    assert_eq!((std::fs::metadata(&file).unwrap().uid(), std::fs::metadata(&file).unwrap().mode() & 0o777), (ALICE, 0o600));
    let (wrote, said) = shell_as(BOB, "echo '{}' > \"$1\"", &[file.to_str().unwrap()]);
    assert!(!wrote, "another user rewrote the job file: {said}");
    let (removed, said) = shell_as(BOB, "rm -f \"$1\"", &[file.to_str().unwrap()]);
    assert!(!removed && file.exists(), "another user removed the job file: {said}");
    let out = sim.run(&mut wrap_as_user(BOB, gpuslice(&sim).args(["cancel", &alice_id.to_string(), "--dir"]).arg(sim.ledger_dir())));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains(&format!("belongs to uid {ALICE}, not to you")), "{out}");
    // Root may cancel any job.
    let out = sim.run(gpuslice(&sim).args(["cancel", &alice_id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(alices.wait().status.is_some_and(|s| !s.success()), "root's cancel ends Alice's job");
    bobs.wait().assert_success();
    roots.wait().assert_success();
}

/// Finding 2: a user holding the (0666) queue lock froze every other
/// user's `run --queue` past its `--timeout`, and root's `queue` and
/// `cancel`. Now there is no lock another user can hold: Alice locks every
/// file of the queue she can open, and nobody waits for her.
#[test]
fn a_user_holding_queue_files_locked_freezes_nobody() {
    let sim = host(Sim::new().devices(1).memory("4GiB").timeout(Duration::from_secs(20)), MonitorOptions::default());
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let queue_dir = sim.ledger_dir().join("queue");
    let mut lock_all = Command::new("sh");
    // Every file she can open, locked exclusively on descriptors 3, 4, …, kept by `sleep`.
    let script = "i=3; for f in \"$1\"/* \"$1\"/.[!.]*; do if (: <\"$f\") 2>/dev/null; then \
                  eval \"exec $i<\\\"\\$f\\\"\"; flock -x -n $i && i=$((i+1)); fi; done; echo held=$((i-3)); exec sleep 600";
    lock_all.args(["-c", script, "sh"]).arg(&queue_dir);
    let mut locker = sim.spawn(&mut wrap_as_user(ALICE, &lock_all));
    locker.wait_for("held");
    std::thread::sleep(Duration::from_millis(300));

    let out = sim.run(&mut wrap_as_user(BOB, &submit_command(&sim, &["--memory", "2GiB", "--name", "bobs", "--timeout", "2s"])));
    assert_eq!(out.code(), Some(75), "Bob's --timeout holds: {out}");
    let listed = jobs(&sim);
    let id = id_of(&listed, "holder");
    let out = sim.run(gpuslice(&sim).args(["cancel", &id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(holder.wait().status.is_some_and(|s| !s.success()));
    let mut after = submit_as(&sim, BOB, &["--memory", "3GiB", "--name", "after"]);
    assert_eq!(after.wait_for("started"), "1", "the queue goes on while Alice holds her locks");
    after.wait().assert_success();
    let _ = locker.kill9();
}

/// Finding 3 (a): a planted job file saying "running, whole GPU" (as
/// Alice, holding it locked) committed the whole device, and another
/// user's job timed out. Now a job file is only a request: this one asks
/// a priority above Alice's ceiling, is refused, and commits nothing.
#[test]
fn a_planted_running_job_file_commits_nothing() {
    let sim = host(Sim::new().devices(1).memory("4GiB").timeout(Duration::from_secs(30)), MonitorOptions::default());
    let uuid = device_uuids(&sim).remove(0);
    let queue_dir = sim.ledger_dir().join("queue");
    let planted = serde_json::json!({
        "id": 99, "name": "planted", "priority": 1000, "gpus": 1, "memory_bytes": null, "placement": "binpack",
        "tenant": "queue-9", "uid": 0, "pid": 1, "submitted_unix_ms": 0, "state": "running",
        "devices": [uuid], "started_unix_ms": 0, "command": ["sleep"]
    });
    // Locked before its name appears, as a submitter's own job file is: a
    // job file nobody holds is an abandoned one, which the monitor removes
    // as soon as it sees it.
    let script = "mkdir -p \"$1\" && exec 3>\"$1/.planted.tmp\" && flock -x 3 && printf %s \"$2\" >&3 \
                  && ln \"$1/.planted.tmp\" \"$1/99.job\" && rm \"$1/.planted.tmp\" && echo held=1 && exec sleep 600";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script, "sh"]).arg(&queue_dir).arg(planted.to_string());
    let mut planter = sim.spawn(&mut wrap_as_user(ALICE, &cmd));
    planter.wait_for("held");
    sim.monitor.wait_rounds(2);
    assert_eq!(committed(&sim), [0], "a job file's claim commits nothing");
    let listed = jobs(&sim);
    assert!(listed.iter().all(|j| j["state"] != "running"), "{listed:?}");
    let mut bobs = submit_as(&sim, BOB, &["--memory", "3GiB", "--name", "bobs", "--timeout", "10s"]);
    assert_eq!(bobs.wait_for("started"), "1");
    assert_eq!(committed(&sim), [3 * GIB]);
    bobs.wait().assert_success();
    let _ = planter.kill9();
}

/// Finding 3 (b): a running 12 GiB job rewrote its own job file and its
/// own cap to 512 MiB, and the queue then admitted another user's 8 GiB
/// job on the same 16 GiB device. Now what a job commits is what the
/// monitor gave it, and its cap is written back.
#[test]
fn a_job_that_rewrites_its_file_and_its_cap_keeps_its_commitment() {
    let sim = host(Sim::new().devices(1).memory("16GiB").timeout(Duration::from_secs(30)), MonitorOptions::default());
    let mut big = submit_as(&sim, ALICE, &["--memory", "12GiB", "--name", "big"]);
    big.wait_for("started");
    let listed = wait_for_states(&sim, "big to run", &[("big", Some("running"))]);
    let entry = listed.iter().find(|j| j["name"] == "big").unwrap().clone();
    let (id, tenant) = (entry["id"].as_u64().unwrap(), entry["tenant"].as_str().unwrap().to_string());
    // Alice lies, in place (the file keeps its lock): 512 MiB.
    let mut lie = entry.clone();
    lie["memory_bytes"] = serde_json::json!(512 * MIB);
    lie["state"] = serde_json::json!("running");
    let file = sim.ledger_dir().join("queue").join(format!("{id}.job"));
    let (wrote, said) = shell_as(ALICE, "printf %s \"$1\" > \"$2\"", &[&lie.to_string(), file.to_str().unwrap()]);
    assert!(wrote, "Alice may write her own file: {said}");
    let ledger_path = ledger::tenant_path(&sim.ledger_dir(), &tenant);
    if let Ok(own) = ledger::Ledger::open(&ledger_path) {
        assert_eq!(std::fs::metadata(&ledger_path).unwrap().uid(), ALICE, "the job's ledger is its owner's");
        for device in own.devices() {
            own.set_memory_limit_bytes(device.index, 512 * MIB, ledger::PolicySource::Environment);
        }
    }
    sim.monitor.wait_rounds(2);
    assert_eq!(committed(&sim), [12 * GIB], "the monitor counts what it gave");
    let out = sim.run(&mut wrap_as_user(BOB, &submit_command(&sim, &["--memory", "8GiB", "--name", "bobs", "--timeout", "2s"])));
    assert_eq!(out.code(), Some(75), "Bob's 8 GiB does not fit beside Alice's 12: {out}");
    let own = ledger::Ledger::open(&ledger_path).expect("the monitor made the job's ledger");
    let device = own.devices()[0].index;
    assert_eq!(own.memory_limit_bytes(device), 12 * GIB, "the cap the monitor gave is written back");
    big.wait().assert_success();
}

/// Finding 4: any user's `--priority 1000` passed other users' earlier
/// jobs. Now the monitor's configuration says who may ask for what.
#[test]
fn priorities_above_the_callers_ceiling_are_refused() {
    let base = Sim::new().devices(1).memory("4GiB");
    let config = base.dir().join("monitor.toml");
    std::fs::write(&config, format!("[priority_ceilings]\ndefault = 0\nusers = {{ \"{ALICE}\" = 5 }}\n")).unwrap();
    let sim = host(base, MonitorOptions { config: Some(config), ..Default::default() });
    for (uid, priority, ceiling) in [(BOB, "1000", 0), (BOB, "1", 0), (ALICE, "6", 5)] {
        let out = sim.run(&mut wrap_as_user(uid, &submit_command(&sim, &["--memory", "1GiB", "--priority", priority])));
        assert_eq!(out.code(), Some(2), "uid {uid} --priority {priority}: {out}");
        let refused: Vec<&str> = out.stderr.lines().filter(|l| l.contains("refused")).collect();
        assert_eq!(refused.len(), 1, "one line: {out}");
        assert!(refused[0].contains(&format!("--priority {priority}")) && refused[0].contains(&format!("ceiling of {ceiling}")), "{out}");
        assert!(!out.stdout.contains("started="), "{out}");
    }
    let mut within = submit_as(&sim, ALICE, &["--memory", "1GiB", "--priority", "5", "--name", "within"]);
    assert_eq!(within.wait_for("started"), "1");
    let mut roots = submit(&sim, &["--memory", "1GiB", "--priority", "1000", "--name", "roots"]);
    assert_eq!(roots.wait_for("started"), "1", "root may ask for any priority");
    within.wait().assert_success();
    roots.wait().assert_success();
}

/// Finding 5: `gpuslice queue --dir /nonexistent` listed nothing and
/// exited 0.
#[test]
fn the_queue_of_a_directory_that_does_not_exist_is_an_error() {
    let sim = Sim::new();
    let missing = sim.dir().join("no-such-dir");
    let out = sim.run(gpuslice(&sim).args(["queue", "--dir"]).arg(&missing));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains(&missing.display().to_string()) && out.stdout.is_empty(), "{out}");
}

/// Without a monitor nothing is admitted: the job says why, once, and
/// `--timeout` still holds.
#[test]
fn without_a_monitor_a_job_waits_and_says_why() {
    let sim = sim(1);
    let Host { monitor, sim } = sim;
    monitor.stop();
    let out = sim.run(&mut submit_command(&sim, &["--memory", "1GiB", "--timeout", "1s"]));
    assert_eq!(out.code(), Some(75), "{out}");
    assert_eq!(out.stderr.matches("no monitor is admitting jobs").count(), 1, "{out}");
}

// The queue for people: who owns each job, why a waiting one waits (in
// the monitor's words), and nothing left behind by a cancelled job.

/// The job named `name` in `jobs`.
fn job_named<'a>(jobs: &'a [Value], name: &str) -> &'a Value {
    jobs.iter().find(|j| j["name"] == name).unwrap_or_else(|| panic!("no job {name}: {jobs:?}"))
}

/// `reason` of the job named `name`, if it is listed with one.
fn reason_of(jobs: &[Value], name: &str) -> Option<String> {
    jobs.iter().find(|j| j["name"] == name).and_then(|j| j["reason"].as_str()).map(String::from)
}

/// USER and REASON: a job short of memory names the device and the
/// figures; a job that would fit is behind the higher-priority job that
/// waits for that room. A job file's own `uid` and `reason` are ignored:
/// Alice plants one claiming to be root's and first in line.
#[test]
fn the_queue_says_whose_each_job_is_and_why_it_waits() {
    let sim = host(Sim::new().devices(1).memory("4GiB").timeout(Duration::from_secs(30)), MonitorOptions::default());
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let high = submit(&sim, &["--memory", "2GiB", "--name", "high", "--priority", "5"]);
    let listed = poll::fetch_until("high to wait short of memory", || jobs(&sim), |j| reason_of(j, "high").is_some());
    let high_id = id_of(&listed, "high");
    assert_eq!(reason_of(&listed, "high").as_deref(), Some("GPU 0: 1.0 GiB free of 2.0 GiB asked"), "{listed:?}");

    // Alice's job asks 1 GiB, which GPU 0 has, but high waits for that room.
    let queue_dir = sim.ledger_dir().join("queue");
    let planted = serde_json::json!({
        "id": 77, "name": "alices", "priority": 0, "gpus": 1, "memory_bytes": GIB, "placement": "binpack",
        "tenant": "", "uid": 0, "pid": 1, "submitted_unix_ms": 0, "state": "waiting",
        "devices": [], "started_unix_ms": null, "command": ["sleep"], "reason": "first in line"
    });
    let script = "exec 3>\"$1/.planted.tmp\" && flock -x 3 && printf %s \"$2\" >&3 \
                  && ln \"$1/.planted.tmp\" \"$1/77.job\" && rm \"$1/.planted.tmp\" && echo held=1 && exec sleep 600";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script, "sh"]).arg(&queue_dir).arg(planted.to_string());
    let mut planter = sim.spawn(&mut wrap_as_user(ALICE, &cmd));
    planter.wait_for("held");
    let listed = poll::fetch_until("Alice's job to be looked at", || jobs(&sim), |j| reason_of(j, "alices").is_some());
    let alices = job_named(&listed, "alices");
    assert_eq!(alices["reason"], format!("behind job {high_id} (priority 5)"), "the monitor's reason, not the file's: {alices}");
    assert_eq!((alices["uid"].as_u64(), alices["user"].as_str()), (Some(u64::from(ALICE)), Some("1001")), "{alices}");
    assert_eq!(alices["position"], 2, "{alices}");
    let high_job = job_named(&listed, "high");
    assert_eq!((high_job["user"].as_str(), high_job["position"].as_u64()), (Some("root"), Some(1)), "{high_job}");
    let holder_job = job_named(&listed, "holder");
    assert!(holder_job["reason"].is_null() && holder_job["position"].is_null(), "a running job waits for nothing: {holder_job}");

    // The table says the same, in USER and REASON columns.
    let out = sim.run(gpuslice(&sim).args(["queue", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert!(header.contains(&"USER") && header.contains(&"REASON"), "{out}");
    let line = |name: &str| *lines.iter().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_else(|| panic!("no {name}\n{out}"));
    assert_eq!(line("holder").split_whitespace().nth(2), Some("root"), "{out}");
    assert!(line("high").contains("root") && line("high").contains("GPU 0: 1.0 GiB free of 2.0 GiB asked"), "{out}");
    let alices_line = line("alices");
    assert!(alices_line.split_whitespace().nth(2) == Some("1001"), "{out}");
    assert!(alices_line.contains(&format!("behind job {high_id} (priority 5)")) && !alices_line.contains("first in line"), "{out}");

    // And so does `top`'s QUEUE table.
    let out = sim.run(gpuslice(&sim).args(["top", "--once", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    let queue = out.stdout.split("\nQUEUE\n").nth(1).unwrap_or_else(|| panic!("no QUEUE table:\n{out}"));
    let rows: Vec<&str> = queue.lines().take_while(|l| !l.is_empty()).collect();
    let cells = |row: &str| row.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>();
    assert_eq!(cells(rows[0]), ["JOB", "NAME", "USER", "TENANT", "PRIO", "MEMORY", "DEVICES", "STATE", "FOR", "REASON"], "{out}");
    let row = |name: &str| {
        cells(rows.iter().find(|r| cells(r).get(1).map(String::as_str) == Some(name)).unwrap_or_else(|| panic!("no {name}\n{out}")))
    };
    assert_eq!((row("holder")[2].as_str(), row("holder")[9].as_str()), ("root", "-"), "{out}");
    assert_eq!((row("high")[2].as_str(), row("high")[9].as_str()), ("root", "GPU 0: 1.0 GiB free of 2.0 GiB asked"), "{out}");
    assert_eq!(row("alices")[2], "1001", "{out}");
    assert_eq!(row("alices")[9], format!("behind job {high_id} (priority 5)"), "the monitor's reason, not the file's:\n{out}");
    let _ = planter.kill9();
    drop(high);
    holder.wait().assert_success();
}

/// A waiting `run --queue` says its place and reason when they change,
/// one line each time, and not when the board changes around it.
#[test]
fn a_waiting_job_prints_its_place_and_reason_when_they_change() {
    let sim = sim(1);
    let mut holder = submit(&sim, &["--memory", "3GiB", "--name", "holder"]);
    holder.wait_for("started");
    let log = sim.dir().join("waiting.stderr");
    let mut cmd = gpuslice(&sim);
    cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(["--memory", "2GiB", "--name", "patient"]);
    cmd.args(["--", "sh", "-c", JOB_SCRIPT]);
    // Its stderr goes to a file, so the test can read it while it waits.
    let mut logged = Command::new("sh");
    logged.args(["-c", "exec \"$@\" 2>\"$0\""]).arg(&log).arg(cmd.get_program()).args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => logged.env(key, value),
            None => logged.env_remove(key),
        };
    }
    let mut patient = sim.spawn(&mut logged);
    let said = |wanted: &str| {
        poll::fetch_until(
            &format!("the waiting job to say {wanted:?}"),
            || std::fs::read_to_string(&log).unwrap_or_default(),
            |text| text.lines().last().is_some_and(|l| l.ends_with(wanted)),
        )
    };
    said("position 1 in line: GPU 0: 1.0 GiB free of 2.0 GiB asked");
    let first = submit(&sim, &["--memory", "2GiB", "--name", "first", "--priority", "5"]);
    let first_id = id_of(&wait_for_states(&sim, "first to wait", &[("first", Some("waiting"))]), "first");
    said(&format!("position 2 in line: behind job {first_id} (priority 5)"));
    // A job behind it changes the board, not its place or reason.
    let last = submit(&sim, &["--memory", "1GiB", "--name", "last", "--priority", "-5"]);
    poll::until("last to be looked at", || reason_of(&jobs(&sim), "last").is_some());
    drop(last);
    wait_for_states(&sim, "last to leave", &[("last", None)]);
    let out = sim.run(gpuslice(&sim).args(["cancel", &first_id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(!first.wait().success());
    said("position 1 in line: GPU 0: 1.0 GiB free of 2.0 GiB asked");
    holder.wait().assert_success();
    assert_eq!(patient.wait_for("started"), "1");
    patient.wait().assert_success();
    let text = std::fs::read_to_string(&log).unwrap();
    let waits: Vec<&str> = text.lines().filter(|l| l.contains(" waits: ")).collect();
    assert_eq!(waits.len(), 3, "one line per change, none per board:\n{text}");
}

/// A job's tenant (`queue-<n>`) goes with it: cancelled while running,
/// or killed, it leaves no tenant in `gpuslice status` and no ledger.
#[test]
fn a_cancelled_job_leaves_no_tenant_behind() {
    let sim = sim(1);
    let mut running = submit(&sim, &["--memory", "1GiB", "--name", "cancelled"]);
    let tenant = running.wait_for("tenant");
    let mut killed = submit(&sim, &["--memory", "1GiB", "--name", "killed"]);
    let killed_tenant = killed.wait_for("tenant");
    assert_ne!(tenant, killed_tenant);
    let status = monitor_support::status_json(&sim);
    for name in [&tenant, &killed_tenant] {
        assert!(monitor_support::tenant(&status, name).is_some(), "{name} is listed while its job runs: {status}");
    }
    let id = id_of(&jobs(&sim), "cancelled");
    let out = sim.run(gpuslice(&sim).args(["cancel", &id.to_string(), "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    assert!(!running.wait().success());
    let _ = killed.kill9();
    poll::until("both tenants to leave gpuslice status", || {
        let status = monitor_support::status_json(&sim);
        monitor_support::tenant(&status, &tenant).is_none() && monitor_support::tenant(&status, &killed_tenant).is_none()
    });
    for name in [&tenant, &killed_tenant] {
        assert!(!ledger::tenant_path(&sim.ledger_dir(), name).exists(), "{name}'s ledger is removed");
    }
    assert!(jobs(&sim).is_empty());
}

/// Queued jobs wait for their team's room. Team `research` names this
/// test's user (`users`) and the configured tenant `lab-1`, with a 3 GiB
/// quota on the one 8 GiB device: of two 2 GiB jobs of this user, the
/// second waits, with the team named in `gpuslice queue`, though the device
/// has room; a job of a user in no team passes it; the first job's end lets
/// it start. The first job's tenant is the team's member at allocation: its
/// 2 GiB count in the team's page, so `lab-1` is refused 2 GiB more. A job
/// larger than the quota is refused at once.
#[test]
fn a_queued_job_waits_for_its_teams_room_and_its_tenant_is_in_the_team() {
    use gpuslice_tests::cu::{OUT_OF_MEMORY, SUCCESS};
    let sim = Sim::new().devices(1).memory("8GiB").context_memory("0").shim();
    let me = Command::new("id").arg("-un").output().unwrap();
    let me = String::from_utf8(me.stdout).unwrap().trim().to_string();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, format!("[teams.research]\nusers = [\"{me}\"]\ntenants = [\"lab-*\"]\nmemory = \"3GiB\"\n[tenants.lab-1]\n"))
        .unwrap();
    let sim = host(sim, MonitorOptions { config: Some(config), ..Default::default() });
    // A job that allocates 2 GiB under the shim and holds it.
    let memctl = sim.c("memctl").get_program().to_owned();
    let job_of = |name: &str, memory: &str| {
        let mut cmd = gpuslice(&sim);
        cmd.args(["run", "--sim", "--queue", "--memory", memory, "--name", name, "--dir"])
            .arg(sim.ledger_dir())
            .arg("--")
            .arg(&memctl)
            .args(["init", "ctx", "alloc:a:2G", "hold"]);
        cmd
    };
    let job = |name: &str| job_of(name, "2GiB");
    let started = std::time::Instant::now();
    // More than the team's quota: it could never start, and is refused at once.
    let out = sim.run(&mut job_of("too-big", "4GiB"));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("team research's memory quota allows that much on 0 device(s)"), "{out}");
    let mut first = sim.spawn(&mut job("first"));
    assert_eq!(first.wait_for("a"), SUCCESS.to_string());
    let mut second = sim.spawn(&mut job("second"));
    let listed = poll::fetch_until(
        "the second job to wait for its team",
        || jobs(&sim),
        |jobs| jobs.iter().any(|j| j["name"] == "second" && j["reason"].as_str().is_some_and(|r| r.starts_with("team research"))),
    );
    let waiting = listed.iter().find(|j| j["name"] == "second").unwrap();
    assert_eq!(waiting["state"], "waiting", "{waiting}");
    assert_eq!(waiting["reason"], "team research: 2.0 GiB of its 3.0 GiB quota committed on GPU 0, 2.0 GiB asked", "{waiting}");
    assert_eq!(waiting["team"], "research", "{waiting}");
    assert!(!second.has_printed("a"), "the second job ran past its team's quota");

    // A user in no team: not held by the team, though it asks the same
    // and comes later; and its tenant is bound by no team page.
    let mut outsider = sim.spawn(&mut wrap_as_user(ALICE, &job("outsider")));
    assert_eq!(outsider.wait_for("a"), SUCCESS.to_string(), "a job of a user in no team was held by a team");
    let listed = jobs(&sim);
    assert_eq!(state_of(&listed, "second").as_deref(), Some("waiting"));
    assert!(listed.iter().find(|j| j["name"] == "outsider").is_some_and(|j| j["team"].is_null()), "{listed:?}");

    // The first job's tenant reserves in the team's page: lab-1, another
    // member, finds 1 GiB left of the team's 3.
    let team_page = std::fs::read_to_string(format!("/proc/{}/maps", first.pid())).unwrap();
    assert!(team_page.contains("memfd:gpuslice-team-research"), "the queued job's process was not handed its team's page");
    let member = sim.run(sim.c("memctl").env("GPUSLICE_TENANT", "lab-1").args(["init", "ctx", "alloc:x:2G", "alloc:y:1G"]));
    assert_eq!((member.get("x"), member.get("y")), (OUT_OF_MEMORY.to_string().as_str(), SUCCESS.to_string().as_str()), "{member}");

    // The first job ends: the second starts.
    first.wait().assert_success();
    assert_eq!(second.wait_for("a"), SUCCESS.to_string());
    second.wait().assert_success();
    outsider.wait().assert_success();
    eprintln!("team queue scenario: {:?}", started.elapsed());
}
