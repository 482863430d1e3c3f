//! Teams (`[teams.NAME]`), end to end. Compute: tenants saturate one simulated device
//! under the shim and a monitor whose configuration puts them in teams,
//! and each client reports the device time it got.
//!
//! The bounds leave room for a loaded two-core machine; how close to its
//! target each tenant gets is for `cargo bench --bench fairness` (its
//! `teams-1-vs-4` scenario) to say. Memory: what a team holds against its
//! quota, as the monitor reports it.

#[path = "compute_support/mod.rs"]
mod compute_support;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use compute_support::{busy_bins, busy_ratio, saturate, serial, sim};
use monitor_support::{write_atomically, Metrics, Monitor, MonitorOptions};

/// Starts one saturating client per entry (tenant, extra environment),
/// each running `seconds` and counting from one epoch; returns them with
/// the window to measure, which starts once all have started.
fn start_clients<'a>(
    sim: &gpuslice_tests::Sim,
    clients: &[(&'a str, &[(&str, &str)])],
    seconds: u32,
) -> (Vec<(&'a str, gpuslice_tests::Running)>, f64, f64) {
    let epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 0.5;
    let started = std::time::Instant::now();
    let mut running: Vec<(&str, gpuslice_tests::Running)> = clients
        .iter()
        .map(|(tenant, envs)| {
            let mut cmd = sim.py("fairness_load.py");
            let epoch = format!("{epoch:.6}");
            let seconds = seconds.to_string();
            cmd.env("GPUSLICE_TENANT", tenant)
                .env("FAIRNESS_EPOCH", &epoch)
                .envs(envs.iter().copied())
                .args(["saturate", "1000", &seconds]);
            (*tenant, sim.spawn(&mut cmd))
        })
        .collect();
    for (_, r) in &mut running {
        r.wait_for("started");
    }
    let from_s = (started.elapsed().as_secs_f64() - 0.5 + 0.3).max(1.0);
    let to_s = f64::from(seconds) - 0.7;
    assert!(to_s - from_s > 1.0, "the clients took {from_s:.1} s to start");
    (running, from_s, to_s)
}

/// Waits for the clients; each tenant's device time over the window (its
/// processes' together), in the order the tenants first appear.
fn device_time_by_tenant(running: Vec<(&str, gpuslice_tests::Running)>, from_s: f64, to_s: f64) -> Vec<(&str, f64)> {
    let mut got: Vec<(&str, f64)> = Vec::new();
    for (tenant, r) in running {
        let out = r.wait();
        out.assert_success();
        let ratio = busy_ratio(&busy_bins(&out, 1000.0), from_s, to_s);
        match got.iter_mut().find(|(t, _)| *t == tenant) {
            Some((_, r)) => *r += ratio,
            None => got.push((tenant, ratio)),
        }
    }
    got
}

fn target(m: &Metrics, tenant: &str) -> Option<f64> {
    m.value("gpuslice_tenant_compute_target_ratio", &[("tenant", tenant), ("device", "0")]).map(|t| (t * 1000.0).round() / 1000.0)
}

/// Team A's one tenant against team B's four, 50 / 50: A gets half the
/// device and each B tenant an eighth, not a fifth each. Within B, one
/// tenant asks its environment for a share of 100 and priority 9, which
/// its shim writes into its ledger's policy page (a member declares
/// nothing: its team's file settings hold), and another
/// runs two processes (its tenant's part, not twice it): neither gains.
#[test]
fn a_team_of_four_tenants_gets_the_team_split_and_lying_or_more_processes_gain_nothing() {
    let _serial = serial();
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(
        &config,
        "[teams.a]\ntenants = [\"solo\"]\nshare = 50\n[teams.b]\ntenants = [\"b-*\"]\nshare = 50\n\
         [tenants.solo]\n[tenants.b-1]\n[tenants.b-2]\n[tenants.b-3]\n[tenants.b-4]\n",
    )
    .unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let liar = [("GPUSLICE_COMPUTE_SHARE", "100"), ("GPUSLICE_PRIORITY", "9")];
    let clients: [(&str, &[(&str, &str)]); 6] = [("solo", &[]), ("b-1", &liar), ("b-2", &[]), ("b-2", &[]), ("b-3", &[]), ("b-4", &[])];
    let (running, from_s, to_s) = start_clients(&sim, &clients, 6);
    monitor.metrics_until("targets of 50 % for solo and 12.5 % for each of b-1 … b-4", |m| {
        target(m, "solo") == Some(0.5) && ["b-1", "b-2", "b-3", "b-4"].iter().all(|t| target(m, t) == Some(0.125))
    });
    // Each team's figures: its share, its members, its part of the device now.
    let team = |m: &Metrics, name: &str, team: &str| m.value(name, &[("team", team), ("device", "0")]);
    monitor.metrics_until("each team's share, members and target", |m| {
        ["a", "b"].iter().all(|t| {
            team(m, "gpuslice_team_compute_share_ratio", t) == Some(0.5)
                && team(m, "gpuslice_team_compute_target_ratio", t).is_some_and(|x| (x - 0.5).abs() < 0.001)
        }) && team(m, "gpuslice_team_members", "a") == Some(1.0)
            && team(m, "gpuslice_team_members", "b") == Some(4.0)
            && team(m, "gpuslice_team_compute_used_ratio", "b").is_some_and(|x| x > 0.0)
    });
    let got = device_time_by_tenant(running, from_s, to_s);
    eprintln!("teams 50 / 50, one tenant against four, {from_s:.1}-{to_s:.1} s: {got:?}");
    // Each tenant's part of the device time the clients got together, as
    // the fairness benchmark measures it.
    let total: f64 = got.iter().map(|(_, r)| r).sum();
    let part = |ratio: f64| ratio / total;
    let solo = part(got[0].1);
    assert!((0.4..=0.6).contains(&solo), "team a's only tenant got {solo:.3} of the device time, not about 0.5: {got:?}");
    for (tenant, ratio) in &got[1..] {
        let part = part(*ratio);
        assert!((0.07..=0.18).contains(&part), "{tenant} got {part:.3} of the device time, not about 0.125: {got:?}");
    }
    assert!(total > 0.4, "together they left the device idle: {got:?}");
}

/// A reload that puts running tenants in teams splits the device by team
/// from then on, and one that takes the teams away splits it by tenant again.
#[test]
fn a_reload_applies_team_changes_to_running_tenants() {
    let _serial = serial();
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    let by_tenant = "[tenants.x-1]\nshare = 10\n[tenants.x-2]\nshare = 10\n[tenants.y]\nshare = 10\n";
    std::fs::write(&config, by_tenant).unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    let clients = [saturate(&sim, "x-1", &[], "4"), saturate(&sim, "x-2", &[], "4"), saturate(&sim, "y", &[], "4")];
    let split = |x: f64, y: f64| move |m: &Metrics| target(m, "x-1") == Some(x) && target(m, "x-2") == Some(x) && target(m, "y") == Some(y);
    monitor.metrics_until("a third each, by tenant", split(0.333, 0.333));
    write_atomically(
        &config,
        &format!("{by_tenant}[teams.x]\ntenants = [\"x-?\"]\nshare = 50\n[teams.y]\ntenants = [\"y\"]\nshare = 50\n"),
    );
    monitor.metrics_until("a quarter for each x and a half for y, by team", split(0.25, 0.5));
    write_atomically(&config, &format!("{by_tenant}[teams.x]\ntenants = [\"x-1\"]\nshare = 10\n"));
    monitor.metrics_until("x-1 alone in its team, the others in none: a third each", split(0.333, 0.333));
    for running in clients {
        running.wait().assert_success();
    }
}

/// A team's memory: what its tenants hold together on a device, against
/// its quota, in /metrics; the excess (a quota lowered below what the team
/// holds, as here by a reload) is said in the log and frees nothing.
#[test]
fn a_teams_memory_and_its_excess_over_the_quota_are_reported() {
    const MIB: u64 = 1 << 20;
    // Not beside the compute tests' measurements.
    let _serial = serial();
    let sim = gpuslice_tests::Sim::new().shim();
    let config = sim.dir().join("monitor.toml");
    let tenants = "[tenants.lab-1]\nmemory = \"2GiB\"\n[tenants.lab-2]\nmemory = \"2GiB\"\n";
    std::fs::write(&config, format!("[teams.lab]\ntenants = [\"lab-*\"]\nmemory = \"4GiB\"\n{tenants}")).unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    let hold = |tenant: &str| {
        let mut cmd = sim.c("memctl");
        cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_MEMORY_LIMIT", "2GiB").args(["init", "ctx", "alloc:a:600M", "hold"]);
        let mut running = sim.spawn(&mut cmd);
        assert_eq!(running.wait_for("a"), gpuslice_tests::cu::SUCCESS.to_string());
        running
    };
    // `lab-squat` matches the team's pattern, but the configuration does
    // not govern it (it named itself): it is in no team.
    let holders = [hold("lab-1"), hold("lab-2"), hold("lab-squat")];
    let team = |m: &Metrics, name: &str| m.value(name, &[("team", "lab"), ("device", "0")]);
    let held = monitor.metrics_until("the team's two tenants' memory, not the squatter's", |m| {
        team(m, "gpuslice_team_memory_used_bytes").is_some_and(|b| b >= (1200 * MIB) as f64)
            && team(m, "gpuslice_team_memory_over_quota_bytes") == Some(0.0)
            && m.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "lab-squat"), ("device", "0")])
                .is_some_and(|b| b >= (600 * MIB) as f64)
    });
    assert_eq!(team(&held, "gpuslice_team_members"), Some(2.0), "the squatter was counted in the team");
    assert!(
        team(&held, "gpuslice_team_memory_used_bytes").is_some_and(|b| b < (1800 * MIB) as f64),
        "the squatter's memory was counted in the team's"
    );
    let held = team(&held, "gpuslice_team_memory_used_bytes").unwrap();
    // `status --config` shows the same team.
    let out = monitor_support::gpuslice_command(&sim).arg("status").arg("--config").arg(&config).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lab = &status["teams"][0];
    assert_eq!((lab["team"].as_str(), lab["members"].as_u64()), (Some("lab"), Some(2)), "{status}");
    assert!(lab["memory_used_bytes"].as_u64().is_some_and(|b| b >= 1200 * MIB), "{status}");
    assert_eq!(lab["memory_quota_bytes"].as_u64(), Some(4096 * MIB), "{status}");
    let text = monitor_support::gpuslice_command(&sim).arg("status").arg("--config").arg(&config).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("TEAMS (by the configuration)") && text.lines().any(|l| l.starts_with("lab ")), "{text}");
    assert_eq!(team(&monitor.metrics(), "gpuslice_team_memory_quota_bytes"), Some((4096 * MIB) as f64));
    // The quota lowered below what the team holds: the excess is reported.
    write_atomically(&config, &format!("[teams.lab]\ntenants = [\"lab-*\"]\nmemory = \"1GiB\"\n{tenants}"));
    monitor.metrics_until("the excess over the lowered quota", |m| {
        team(m, "gpuslice_team_memory_over_quota_bytes").is_some_and(|b| b >= held - (1024 * MIB) as f64)
    });
    for holder in holders {
        drop(holder.kill9());
    }
    let out = monitor.stop();
    let log = out.stderr.clone();
    assert!(log.contains("team lab: its tenants hold") && log.contains("over its quota of 1073741824 bytes"), "{out}");
}

/// Teams by Slurm account: three tenants admitted through the control
/// socket as the Prolog admits jobs (`--label account=...`), two of account
/// physics and one of chemistry, teams physics and chemistry at 50 / 50:
/// the chemistry tenant gets half the device and each physics tenant a
/// quarter. What a tenant's own processes say has no part in it: a physics
/// tenant whose environment names the account chemistry (and asks for a
/// share of 100 at priority 9) stays in physics, and a process of the
/// physics job that names the chemistry job's tenant as its own
/// (`GPUSLICE_TENANT`) is one more process of that tenant, which gets its
/// tenant's part and no more.
#[test]
fn a_slurm_account_is_a_team_and_a_tenants_environment_changes_nothing() {
    let _serial = serial();
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(
        &config,
        "[teams.physics]\naccounts = [\"physics\"]\nshare = 50\n[teams.chemistry]\naccounts = [\"chemistry\"]\nshare = 50\n",
    )
    .unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    for (tenant, account) in [("slurm-101", "physics"), ("slurm-102", "physics"), ("slurm-103", "chemistry")] {
        let mut cmd = monitor_support::gpuslice_command(&sim);
        cmd.args(["tenant", "admit", tenant, "--device", "0", "--label", &format!("job={}", &tenant[6..])])
            .args(["--label", "user=root", "--label", &format!("account={account}"), "--dir"])
            .arg(sim.ledger_dir());
        sim.run(&mut cmd).assert_success();
    }
    let liar =
        [("SLURM_JOB_ACCOUNT", "chemistry"), ("SLURM_JOB_USER", "root"), ("GPUSLICE_COMPUTE_SHARE", "100"), ("GPUSLICE_PRIORITY", "9")];
    // The fourth: a process of the physics job (its environment says so)
    // that names the chemistry job's tenant as its own.
    let clients: [(&str, &[(&str, &str)]); 4] = [
        ("slurm-101", &[]),
        ("slurm-102", &liar),
        ("slurm-103", &[]),
        ("slurm-103", &[("SLURM_JOB_ACCOUNT", "physics"), ("SLURM_JOB_ID", "101")]),
    ];
    let (running, from_s, to_s) = start_clients(&sim, &clients, 9);
    monitor.metrics_until("targets of 50 % for slurm-103 and 25 % for each of slurm-101 and slurm-102", |m| {
        target(m, "slurm-103") == Some(0.5) && target(m, "slurm-101") == Some(0.25) && target(m, "slurm-102") == Some(0.25)
    });
    let team = |m: &Metrics, name: &str, team: &str| m.value(name, &[("team", team), ("device", "0")]);
    monitor.metrics_until("each team's members and share", |m| {
        team(m, "gpuslice_team_members", "physics") == Some(2.0)
            && team(m, "gpuslice_team_members", "chemistry") == Some(1.0)
            && ["physics", "chemistry"].iter().all(|t| team(m, "gpuslice_team_compute_share_ratio", t) == Some(0.5))
    });
    // `status --config` puts the tenants in the same teams, from the
    // monitor's admission records.
    let out = monitor_support::gpuslice_command(&sim).arg("status").arg("--config").arg(&config).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members =
        |name: &str| status["teams"].as_array().and_then(|t| t.iter().find(|t| t["team"] == name)).and_then(|t| t["members"].as_u64());
    assert_eq!((members("physics"), members("chemistry")), (Some(2), Some(1)), "{status}");
    let got = device_time_by_tenant(running, from_s, to_s);
    eprintln!("accounts physics and chemistry 50 / 50, {from_s:.1}-{to_s:.1} s: {got:?}");
    let total: f64 = got.iter().map(|(_, r)| r).sum();
    assert!(total > 0.4, "together they left the device idle: {got:?}");
    for (tenant, expected) in [("slurm-101", 0.25), ("slurm-102", 0.25), ("slurm-103", 0.5)] {
        let part = got.iter().find(|(t, _)| *t == tenant).map_or(0.0, |(_, r)| r / total);
        assert!((part - expected).abs() <= 0.03, "{tenant} got {part:.3} of the device time, not {expected} ± 0.03: {got:?}");
    }
}

/// The memory quota of a team (issue: members together never pass it),
/// enforced at allocation: its members' processes reserve in the team's
/// page, which only they hold, before their own ledgers.
/// - A member under its own cap is refused what would pass the team's
///   quota, and `cuMemGetInfo` and NVML show it the team's room.
/// - A tenant outside the team, and one that names itself like a member,
///   are not bound by it, and hold no team page.
/// - A member's process killed with `SIGKILL` gives its part back.
/// - Processes of both members allocating at once never pass it.
/// - A member that writes the team's total (up, to refuse its team-mates,
///   or down) is corrected by the monitor's audit.
/// - A reload below what the team holds refuses new allocations and frees
///   nothing.
#[test]
fn a_teams_memory_quota_holds_across_its_members_at_allocation() {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let _serial = serial();
    // Contexts cost nothing here, so that the figures are the allocations'.
    let sim = gpuslice_tests::Sim::new().shim().memory("16GiB").context_memory("0");
    let config = sim.dir().join("monitor.toml");
    let tenants = "[tenants.lab-1]\nmemory = \"2GiB\"\n[tenants.lab-2]\nmemory = \"2GiB\"\n[tenants.other]\nmemory = \"2GiB\"\n";
    std::fs::write(&config, format!("[teams.lab]\ntenants = [\"lab-*\"]\nmemory = \"3GiB\"\n{tenants}")).unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    let memctl = |tenant: &str, script: &[&str]| {
        let mut cmd = sim.c("memctl");
        cmd.env("GPUSLICE_TENANT", tenant).args(script);
        cmd
    };
    // A process's mapping of its team's page (the shim keeps the mapping,
    // not the descriptor), to open as the process could.
    let team_page_of = |pid: u32| -> Option<std::path::PathBuf> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let line = maps.lines().find(|l| l.contains("memfd:gpuslice-team-lab"))?;
        Some(format!("/proc/{pid}/map_files/{}", line.split_whitespace().next()?).into())
    };
    let oom = gpuslice_tests::cu::OUT_OF_MEMORY.to_string();
    let ok = gpuslice_tests::cu::SUCCESS.to_string();

    // lab-1 fills its own cap: 2 GiB of the team's 3.
    let mut lab1 = sim.spawn(&mut memctl("lab-1", &["init", "ctx", "alloc:a:2G", "hold"]));
    assert_eq!(lab1.wait_for("a"), ok);
    // lab-2 is under its own cap, but the team has 1 GiB left.
    let mut lab2 = sim.spawn(&mut memctl(
        "lab-2",
        &["init", "ctx", "info:before", "nvml:nv", "alloc:a:768M", "alloc:b:512M", "info:after", "mark:done", "hold"],
    ));
    assert_eq!(lab2.wait_for("done"), "1");
    let lab2_out = lab2.kill9();
    assert_eq!(lab2_out.get("a"), ok, "{lab2_out}");
    assert_eq!(lab2_out.get("b"), oom, "768 + 512 MiB is under lab-2's cap but past the team's quota: {lab2_out}");
    assert_eq!((lab2_out.u64("before.total"), lab2_out.u64("before.free")), (2 * GIB, GIB), "min(cap, quota), the team's room");
    assert_eq!((lab2_out.u64("nv.total"), lab2_out.u64("nv.free")), (2 * GIB, GIB), "{lab2_out}");
    assert_eq!(lab2_out.u64("after.free"), 256 * MIB, "{lab2_out}");
    // Not in the team: a configured tenant, and one that named itself
    // like a member (the configuration does not govern it).
    for (tenant, size) in [("other", "2G"), ("lab-squat", "2G")] {
        let mut outsider = sim.spawn(&mut memctl(tenant, &["init", "ctx", &format!("alloc:a:{size}"), "hold"]));
        assert_eq!(outsider.wait_for("a"), ok, "{tenant} is bound by a team it is not in");
        assert!(team_page_of(outsider.pid()).is_none(), "{tenant} was handed the team's page");
        drop(outsider.kill9());
    }
    // lab-2's killed process gave its 768 MiB back: lab-2 gets the 1 GiB.
    let refill = |tenant: &str, size: &str, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let out = sim.run(&mut memctl(tenant, &["init", "ctx", &format!("alloc:a:{size}")]));
            if out.get("a") == ok {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {out}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let killed = std::time::Instant::now();
    refill("lab-2", "1G", "the killed member process's memory never left the team's total");
    eprintln!("a member's process killed: its memory back to the team after {:?}", killed.elapsed());

    // A member writes its team's total: up, refusing its team-mates...
    let mut holder = sim.spawn(&mut memctl("lab-2", &["init", "ctx", "alloc:a:256M", "hold"]));
    assert_eq!(holder.wait_for("a"), ok);
    let page = team_page_of(holder.pid()).expect("a member's process holds its team's page");
    // Another Unix user cannot reach it through the member's process.
    let other_user = sim.run(sim.as_user(43117, 43117, &[], "dd").arg(format!("if={}", page.display())).arg("count=1"));
    assert!(
        !other_user.success() && other_user.stderr.contains("Permission denied"),
        "uid 43117 read the team's page of a root process: {other_user}"
    );
    let page = std::fs::OpenOptions::new().read(true).write(true).open(page).unwrap();
    use std::os::unix::fs::FileExt;
    let used_at = |file: &std::fs::File| {
        let mut word = [0u8; 8];
        file.read_exact_at(&mut word, 64).unwrap();
        u64::from_le_bytes(word)
    };
    assert_eq!(used_at(&page), 2 * GIB + 256 * MIB, "the team's total: lab-1's 2 GiB and this 256 MiB");
    page.write_all_at(&u64::MAX.to_le_bytes(), 64).unwrap();
    let written = std::time::Instant::now();
    let refused = sim.run(&mut memctl("lab-2", &["init", "ctx", "alloc:a:256M"]));
    assert_eq!(refused.get("a"), oom, "{refused}");
    refill("lab-2", "256M", "a total written up was not corrected");
    eprintln!("a total written up to u64::MAX: corrected, lab-2 allocating again after {:?}", written.elapsed());
    assert_eq!(used_at(&page), 2 * GIB + 256 * MIB, "corrected to what the members' ledgers hold");
    // ... and down: corrected back up, so the quota holds again.
    page.write_all_at(&0u64.to_le_bytes(), 64).unwrap();
    let written = std::time::Instant::now();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while used_at(&page) != 2 * GIB + 256 * MIB {
        assert!(std::time::Instant::now() < deadline, "a total written down was not corrected: {}", used_at(&page));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("a total written down to 0: corrected after {:?}", written.elapsed());
    let refused = sim.run(&mut memctl("lab-2", &["init", "ctx", "alloc:a:1G"]));
    assert_eq!(refused.get("a"), oom, "{refused}");
    drop(holder.kill9());
    drop(lab1.kill9());

    // Both members at once: four processes each asking for 3 × 256 MiB
    // (lab-1 and lab-2 2 GiB each, the team 3): the team never holds more
    // than its quota, whatever the interleaving.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while used_at(&page) != 0 {
        assert!(std::time::Instant::now() < deadline, "the killed processes' memory stayed in the team's total: {}", used_at(&page));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut racers: Vec<gpuslice_tests::Running> = (0..8)
        .map(|i| {
            let tenant = if i % 2 == 0 { "lab-1" } else { "lab-2" };
            sim.spawn(&mut memctl(tenant, &["init", "ctx", "wait", "alloc:a:256M", "alloc:b:256M", "alloc:c:256M", "mark:done", "hold"]))
        })
        .collect();
    for r in &mut racers {
        r.send_line("go");
    }
    let mut granted = 0u64;
    for r in &mut racers {
        assert_eq!(r.wait_for("done"), "1");
    }
    for r in racers {
        let out = r.kill9();
        granted += ["a", "b", "c"].iter().filter(|k| out.get(k) == ok).count() as u64 * 256 * MIB;
    }
    eprintln!("eight processes of both members at once: {} MiB granted of the team's 3072", granted / MIB);
    assert!(granted <= 3 * GIB, "the members were granted {} MiB together, past the team's 3 GiB", granted / MIB);
    assert!(granted >= 2 * GIB, "only {} MiB granted of the team's 3 GiB", granted / MIB);

    // A reload below what the team holds: new allocations are refused, and
    // what the members hold stays theirs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while used_at(&page) != 0 {
        assert!(std::time::Instant::now() < deadline, "the racers' memory stayed in the team's total: {}", used_at(&page));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut holder = sim.spawn(&mut memctl("lab-1", &["init", "ctx", "alloc:a:1G", "wait", "alloc:b:1M", "mark:done", "hold"]));
    assert_eq!(holder.wait_for("a"), ok);
    write_atomically(&config, &format!("[teams.lab]\ntenants = [\"lab-*\"]\nmemory = \"512MiB\"\n{tenants}"));
    monitor.metrics_until("the lowered quota", |m| {
        m.value("gpuslice_team_memory_over_quota_bytes", &[("team", "lab"), ("device", "0")]).is_some_and(|b| b >= (512 * MIB) as f64)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    holder.send_line("go");
    assert_eq!(holder.wait_for("done"), "1");
    let out = holder.kill9();
    assert_eq!(out.get("b"), oom, "a member allocated past a quota lowered below what its team holds: {out}");
    let out = monitor.stop();
    assert!(out.stderr.contains("team lab: its memory on device"), "the audit's correction is in the log: {out}");
}

/// Each team's quota, what its tenants hold, its share and what they used,
/// as `status` and `top --once` show them (the running monitor's own
/// membership, no `--config`) and as `report --by team` sums them from the
/// history. A tenant that named itself to match a team's pattern
/// (`lab-squat`) is in no team anywhere: not counted in the team's
/// members or memory, not listed with it, and under "(no team)" in the
/// report, since each reads the monitor's decision and never matches names.
#[test]
fn a_teams_quota_holdings_and_use_show_in_status_top_and_the_report() {
    const MIB: u64 = 1 << 20;
    let _serial = serial();
    let started = std::time::Instant::now();
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(
        &config,
        "[teams.lab]\ntenants = [\"lab-*\"]\nmemory = \"4GiB\"\nshare = 50\n[teams.ops]\ntenants = [\"ops-*\"]\nmemory = \"1GiB\"\n\
         [tenants.lab-1]\n[tenants.lab-2]\n[tenants.ops-1]\n",
    )
    .unwrap();
    let monitor = Monitor::start(
        &sim,
        MonitorOptions { config: Some(config), args: vec!["--history-interval".into(), "1s".into()], ..Default::default() },
    );
    let hold = |tenant: &str| {
        let mut cmd = sim.c("memctl");
        cmd.env("GPUSLICE_TENANT", tenant).args(["init", "ctx", "alloc:a:600M", "hold"]);
        let mut running = sim.spawn(&mut cmd);
        assert_eq!(running.wait_for("a"), gpuslice_tests::cu::SUCCESS.to_string());
        running
    };
    let holders = [hold("lab-1"), hold("lab-squat")];
    let busy = saturate(&sim, "lab-2", &[], "3");
    let status = || {
        let out = monitor_support::gpuslice_command(&sim).args(["status", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let lab = |status: &serde_json::Value| status["teams"].as_array().and_then(|t| t.iter().find(|t| t["team"] == "lab")).cloned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let seen = loop {
        let s = status();
        // Its two tenants, and the device time lab-2 is using now.
        if lab(&s).is_some_and(|l| l["members"] == 2 && l["compute_used_ratio"].as_f64().is_some_and(|u| u > 0.1)) {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "status never showed team lab with its two tenants busy: {s:#}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let team = lab(&seen).unwrap();
    assert_eq!(team["memory_quota_bytes"].as_u64(), Some(4096 * MIB), "{seen:#}");
    assert_eq!(team["compute_share_ratio"].as_f64(), Some(0.5), "{seen:#}");
    let held = team["memory_used_bytes"].as_u64().unwrap();
    assert!((600 * MIB..1200 * MIB).contains(&held), "lab-1's 600 MiB and lab-2's, not the squatter's: {held} bytes: {seen:#}");
    assert_eq!(seen["team_members"]["lab"], serde_json::json!(["lab-1", "lab-2"]), "{seen:#}");
    assert_eq!(seen["team_members"]["ops"], serde_json::json!(["ops-1"]), "{seen:#}");
    let text = monitor_support::gpuslice_command(&sim).arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("\nTEAMS (as the monitor holds them)\n"), "{text}");
    // A team none of whose tenants runs is shown too, with its quota.
    let ops: Vec<&str> = text.lines().find(|l| l.starts_with("ops ")).unwrap_or_else(|| panic!("{text}")).split_whitespace().collect();
    assert_eq!(ops[..6], ["ops", "-", "0", "0", "B", "1.0"], "{text}");

    let top = sim.run(monitor_support::gpuslice_command(&sim).args(["top", "--once"]));
    top.assert_success();
    let row = top.stdout.lines().skip_while(|l| *l != "TEAMS").find(|l| l.starts_with("lab ")).unwrap_or_else(|| panic!("{top}"));
    assert!(row.contains("4.0 GiB") && row.contains("50%") && row.ends_with("lab-1,lab-2"), "{row}");
    assert!(!top.stdout.lines().skip_while(|l| *l != "TEAMS").take_while(|l| !l.is_empty()).any(|l| l.contains("lab-squat")), "{top}");

    busy.wait().assert_success();
    // Past another whole interval, then the open one is written at the stop.
    monitor.wait_rounds(6);
    for holder in holders {
        drop(holder.kill9());
    }
    monitor.stop();
    let out = sim.run(monitor_support::gpuslice_command(&sim).args(["status", "--json"]));
    out.assert_success();
    assert!(!out.stdout.contains("\"team_members\""), "a stopped monitor's teams are not shown: {out}");

    let report = |extra: &[&str]| {
        let out = sim.run(monitor_support::gpuslice_command(&sim).args(["report", "--since", "1h", "--by", "team"]).args(extra));
        out.assert_success();
        out
    };
    let out = report(&["--json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    let groups = json["groups"].as_array().unwrap_or_else(|| panic!("{json:#}"));
    let group = |kind: &str, key: &str| groups.iter().find(|g| g["kind"] == kind && g["key"] == key).unwrap_or_else(|| panic!("{json:#}"));
    let lab = group("team", "lab");
    assert_eq!(lab["tenants"], serde_json::json!(["lab-1", "lab-2"]), "{lab:#}");
    assert!(lab["used_device_s"].as_f64().is_some_and(|s| s > 0.5), "lab-2 kept the device busy for 3 s: {lab:#}");
    assert!(lab["memory_peak_bytes"].as_u64().is_some_and(|b| b >= 600 * MIB), "{lab:#}");
    assert!(lab["memory_together_peak_bytes"].as_u64().is_some_and(|b| b >= 600 * MIB), "{lab:#}");
    let none = group("none", "-");
    assert_eq!(none["tenants"], serde_json::json!(["lab-squat"]), "{none:#}");
    let text = report(&[]);
    assert!(text.stdout.contains("\nBY TEAM\n"), "{text}");
    let line = text.stdout.lines().find(|l| l.starts_with("(no team) ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("lab-squat"), "{text}");
    eprintln!("teams in status, top and the report: {:.1} s", started.elapsed().as_secs_f64());
}
