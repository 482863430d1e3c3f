//! The admission queue, with real processes on simgpu: `gpuslice run
//! --queue` waits until its slice fits, starts its command on the devices
//! chosen for it, and leaves no trace when it dies; `gpuslice queue` shows
//! the jobs and `gpuslice cancel` ends one.
//!
//! Every job here is a shell that prints what it was given and then waits
//! for its stdin to close, so a test decides when a job ends.

use gpuslice_tests::{gpuslice_bin, poll, simgpu_lib, Running, Sim, GIB};
use serde_json::Value;
use std::process::Command;

/// What each job prints, then it waits for a line or EOF on stdin.
const JOB_SCRIPT: &str =
    "echo visible=$CUDA_VISIBLE_DEVICES; echo tenant=$GPUSLICE_TENANT; echo cap=$GPUSLICE_MEMORY_LIMIT; echo started=1; read line || true";

/// Two simulated GPUs of 4 GiB each unless a test says otherwise.
fn sim(devices: u32) -> Sim {
    Sim::new().devices(devices).memory("4GiB")
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
    assert!(a.wait_for("tenant").starts_with("queue-"), "each job is its own tenant");
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
    assert!(out.stderr.contains("\"x1\" is not a job id"), "{out}");
    holder.wait().assert_success();
}

#[test]
fn requests_that_can_never_fit_and_bad_input_are_refused_at_once() {
    let sim = sim(2);
    for (args, says) in [
        (vec!["--memory", "5GiB"], "the largest has 4.0 GiB"),
        (vec!["--gpus", "3", "--memory", "1GiB"], "3 GPUs and this host has 2"),
    ] {
        let out = sim.run(&mut submit_command(&sim, &args));
        assert_eq!(out.code(), Some(2), "{args:?}\n{out}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line\n{out}");
        assert!(lines[0].contains("can never start on this host") && lines[0].contains(says), "{out}");
        assert!(!out.stdout.contains("started="), "{out}");
    }
    for (args, says) in [
        (vec!["--gpus", "0"], "0 is not in 1..=64"),
        (vec!["--timeout", "5min"], "500ms, 90s, 5m or 1h"),
        (vec!["--memory", "0=1GiB"], "one size for each of the job's GPUs"),
        (vec!["--memory", "1GB"], "write 1GiB"),
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
    assert_eq!(out.code(), Some(2), "{out}");
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
    let left = jobs(&sim);
    assert_eq!(state_of(&left, "impatient"), None, "{left:?}");
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
                jobs.len() == left
                    && jobs.iter().filter(|j| j["state"] == "running").count() == left.min(2)
                    && started.len() >= left.min(2)
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
    let sim = sim(1).env("GPUSLICE_QUEUE_OVERCOMMIT", "1.5");
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
