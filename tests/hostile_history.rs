//! The monitor's history file and `gpuslice report` against a file someone
//! else put in its place: a link, a file of another user, a SQLite file of
//! another layout under the right layout number, a damaged one, and rows
//! whose tenant names carry quotes, newlines, escape codes and SQL. The
//! monitor must keep recording (what is not its history is moved aside,
//! with a log line naming it, and a fresh one started), nothing in a name
//! is run as SQL, and `gpuslice report` names the file in its error.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{Output, Sim};
use monitor_support::*;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOBODY: u32 = 65534;

fn report(sim: &Sim, extra: &[&str]) -> Output {
    sim.run(gpuslice_command(sim).arg("report").arg("--dir").arg(sim.ledger_dir()).args(extra))
}

fn history(sim: &Sim) -> PathBuf {
    sim.ledger_dir().join(".monitor/history.sqlite")
}

/// Runs `script` (Python, with `sqlite3` imported and `db` connected to
/// `path`, committed at the end); its stdout.
fn sqlite(path: &Path, script: &str) -> String {
    let program = format!("import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n{script}\ndb.commit()\n");
    let out = Command::new("python3").arg("-c").arg(&program).arg(path).output().expect("python3");
    assert!(out.status.success(), "{script}\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A monitor that writes an interval a second, run for a few rounds and stopped; its log.
fn record_a_while(sim: &Sim) -> Output {
    let monitor = Monitor::start(sim, MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() });
    monitor.wait_rounds(10);
    monitor.stop()
}

/// The monitor's state directory, made as the monitor makes it (0700),
/// so that something can be planted before the monitor's first start.
fn state_dir(sim: &Sim) -> PathBuf {
    let dir = sim.ledger_dir().join(".monitor");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

/// Puts something at the history's path.
type Plant<'a> = Box<dyn Fn(&Path) + 'a>;

#[test]
fn whatever_is_planted_at_the_history_is_moved_aside_and_recording_goes_on() {
    // A history as the monitor writes it, to plant copies of.
    let first = Sim::new().memory("4GiB");
    record_a_while(&first);
    let good = std::fs::read(history(&first)).unwrap();
    assert!(good.starts_with(b"SQLite format 3\0"));

    let elsewhere = std::env::temp_dir().join(format!("gpuslice-hostile-history-{}", std::process::id()));
    std::fs::write(&elsewhere, b"a file the history must never be written into").unwrap();
    std::os::unix::fs::lchown(&elsewhere, Some(NOBODY), Some(NOBODY)).unwrap();
    let cases: Vec<(&str, Plant)> = vec![
        (
            "a link to another user's file",
            Box::new(|path: &Path| {
                std::os::unix::fs::symlink(&elsewhere, path).unwrap();
                std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
            }),
        ),
        (
            "a history of another user",
            Box::new(|path: &Path| {
                std::fs::write(path, &good).unwrap();
                std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
            }),
        ),
        (
            "other tables under layout 1",
            Box::new(|path: &Path| {
                sqlite(path, "db.executescript('CREATE TABLE other (x); PRAGMA user_version = 1;')");
            }),
        ),
        (
            "damaged pages behind a whole header",
            Box::new(|path: &Path| {
                let mut bytes = good.clone();
                for page in 1..bytes.len() / 4096 {
                    bytes[page * 4096 + 8..page * 4096 + 208].fill(0xff);
                }
                std::fs::write(path, bytes).unwrap();
            }),
        ),
    ];
    for (what, plant) in cases {
        let sim = Sim::new().memory("4GiB");
        let path = state_dir(&sim).join("history.sqlite");
        plant(&path);
        let planted = std::fs::symlink_metadata(&path).unwrap();

        // `gpuslice report` names the file and does not read a link or
        // another user's file as the monitor's.
        let out = report(&sim, &["--json"]);
        assert_eq!(out.code(), Some(1), "{what}: {out}");
        assert!(out.stderr.contains(&path.display().to_string()) && !out.stderr.contains("panicked"), "{what}: {out}");

        let log = record_a_while(&sim);
        let moved = log
            .stderr
            .lines()
            .find(|l| l.contains("moved to") && l.contains(&path.display().to_string()))
            .unwrap_or_else(|| panic!("{what}: no log line says the planted file was moved aside:\n{}", log.stderr));
        assert!(!log.stderr.contains("history is off") && !log.stderr.contains("was not written"), "{what}:\n{}", log.stderr);
        // Kept, not deleted, and not followed.
        let aside = moved.split("moved to ").nth(1).and_then(|r| r.split(" and started").next()).unwrap();
        let aside_meta = std::fs::symlink_metadata(aside).unwrap_or_else(|e| panic!("{what}: {aside}: {e}"));
        assert_eq!((aside_meta.ino(), aside_meta.uid()), (planted.ino(), planted.uid()), "{what}: the planted file itself went aside");
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"a file the history must never be written into", "{what}");

        // A fresh history of the monitor's own, with what it recorded.
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file() && meta.uid() == 0 && meta.mode() & 0o777 == 0o600, "{what}: {meta:?}");
        let out = report(&sim, &["--json"]);
        out.assert_success();
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{what}: not JSON: {e}\n{out}"));
        assert!(json["devices"].as_array().is_some_and(|d| !d.is_empty()), "{what}: nothing recorded after the planted file: {json:#}");
        eprintln!("{what}: moved aside, recording went on");
    }
    let _ = std::fs::remove_file(&elsewhere);
}

#[test]
fn tenant_names_with_quotes_newlines_and_sql_are_only_data() {
    let sim = Sim::new().memory("4GiB");
    record_a_while(&sim);
    let path = history(&sim);
    // The monitor records only names of the tenant grammar; a file is read
    // as found, so these are put in by hand, beside a megabyte-long name.
    let names = [
        "x'); DROP TABLE series; --",
        "quote\" and ' and `",
        "line\nteam-forged  0  1h  1h  none",
        "escape\x1b[2J\x1b]0;owned\x07",
        "semi;colon -- /* */",
    ];
    let list = serde_json::to_string(&names).unwrap();
    let script = format!(
        "import json, time\nnow = int(time.time())\n\
         names = json.loads({list:?}) + ['m' * (1 << 20)]\n\
         team = db.execute('INSERT INTO teams (name) VALUES (?)', (names[2],)).lastrowid\n\
         for i, name in enumerate(names):\n\
         \x20   cur = db.execute('INSERT INTO series (tenant, device_uuid) VALUES (?, ?)', (name, 'GPU-hostile'))\n\
         \x20   db.execute('INSERT INTO tenant_intervals VALUES (?, ?, 60, 0, 240, 240, ?, 1, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 1, NULL, NULL, NULL, ?)', (now - 120, cur.lastrowid, 9223372036854775807 if i == 0 else 1, team if i < 2 else None))\n"
    );
    sqlite(&path, &script);
    // The monitor goes on writing and pruning the file with them in it.
    let log = record_a_while(&sim);
    assert!(!log.stderr.contains("moved to") && !log.stderr.contains("was not written"), "{}", log.stderr);
    let tables = sqlite(&path, "print(sorted(r[0] for r in db.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\")))");
    assert_eq!(tables.trim(), "['device_intervals', 'devices', 'origins', 'series', 'teams', 'tenant_intervals']");

    let out = report(&sim, &["--json"]);
    out.assert_success();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    let reported: Vec<&str> = json["tenants"].as_array().unwrap().iter().filter_map(|t| t["tenant"].as_str()).collect();
    for name in names {
        assert!(reported.contains(&name), "{name:?} comes back as it was written: {reported:?}");
    }
    assert!(reported.iter().any(|n| n.len() == 1 << 20), "the megabyte name too");

    // For people: no escape code reaches the terminal and no newline in a
    // name starts a row of its own.
    let out = report(&sim, &[]);
    out.assert_success();
    assert!(!out.stdout.contains('\x1b') && !out.stdout.contains('\x07'), "{}", &out.stdout[..out.stdout.len().min(4000)]);
    assert!(!out.stdout.lines().any(|l| l.starts_with("team-forged")), "a name forged a row");
    assert!(out.stdout.lines().any(|l| l.starts_with("line?team-forged")), "the name is shown, its newline as ?");
    // The megabyte name is cut, not a column a megabyte wide (such a width
    // panicked when formatted).
    let long = format!("{}… ", "m".repeat(128));
    assert!(out.stdout.lines().any(|l| l.starts_with(&long)), "the long name is cut");
    assert!(out.stdout.len() < 64 << 10, "{} bytes of table", out.stdout.len());

    // A team's name, as found, is shown as safely; the lying peak of one
    // of its rows saturates its sum and fails nothing.
    let out = report(&sim, &["--by", "team"]);
    out.assert_success();
    assert!(!out.stdout.contains('\x1b') && !out.stdout.lines().any(|l| l.starts_with("team-forged")), "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("line?team-forged")), "{out}");
}

#[test]
fn a_report_of_a_history_with_rows_of_the_wrong_type_names_the_file() {
    let sim = Sim::new().memory("4GiB");
    record_a_while(&sim);
    let path = history(&sim);
    sqlite(
        &path,
        "import time\ncur = db.execute(\"INSERT INTO series (tenant, device_uuid) VALUES ('t', 'GPU-x')\")\n\
         db.execute(\"INSERT INTO tenant_intervals VALUES (?, ?, 60, 0, 'many', 240, 1, 1, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 1, NULL, NULL, NULL, NULL)\", (int(time.time()) - 60, cur.lastrowid))",
    );
    let out = report(&sim, &[]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains(&path.display().to_string()) && out.stderr.contains("rounds"), "{out}");
    assert!(!out.stderr.contains("panicked"), "{out}");
}
