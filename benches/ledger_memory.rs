//! What each watched ledger costs the monitor: its resident memory (split
//! into its own, `RssAnon`, and the ledger files' pages it maps, `RssFile`,
//! which are the page cache the tenants share), its open descriptors
//! between rounds, and its round rate, with 0 to 512 valid ledgers in the
//! directory (the default `--max-ledgers`), and with a flood of 1,100 of
//! one user, of which the per-uid bound lets it watch 32.
//!
//! Prints one table row per directory.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench ledger_memory`
//! (on a debug build: `cargo build --workspace && GS_TEST_TARGET_DIR=target/debug cargo bench --bench ledger_memory`).

#[path = "../tests/support/ledger_view.rs"]
mod ledger_view;
#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::Sim;
use ledger::Ledger;
use monitor_support::{Monitor, MonitorOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// Valid ledgers, each naming itself, owned by `uid`, in `dir`.
fn plant(dir: &Path, staging: &Path, prefix: &str, count: usize, uid: u32) {
    std::fs::create_dir_all(staging).unwrap();
    drop(Ledger::open_or_create_with(staging, "template", ledger::FileAccess::Tenant).expect("a template ledger"));
    let template = std::fs::read(ledger::tenant_path(staging, "template")).unwrap();
    for n in 0..count {
        let name = format!("{prefix}-{n}");
        let path = ledger::tenant_path(dir, &name);
        std::fs::write(&path, ledger_view::renamed_copy(&template, &name)).unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
}

/// `VmRSS`, `RssAnon` and `RssFile` of `pid`, KiB.
fn rss_kib(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field =
        |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

/// The fewest descriptors `pid` held over a few looks (between rounds).
fn descriptors_between_rounds(pid: u32) -> usize {
    (0..40)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(13));
            std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
        })
        .min()
        .unwrap_or(0)
}

struct Row {
    what: String,
    watched: u64,
    rss: (u64, u64, u64),
    descriptors: usize,
    rounds_per_s: f64,
}

fn measure(what: &str, root_ledgers: usize, flood_ledgers: usize) -> Row {
    let sim = Sim::new().memory("16GiB").context_memory("64MiB");
    let dir = sim.ledger_dir();
    plant(&dir, &sim.dir().join("staging-root"), "root", root_ledgers, 0);
    plant(&dir, &sim.dir().join("staging-flood"), "flood", flood_ledgers, 2999);
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let expected = (root_ledgers + flood_ledgers.min(32)) as f64;
    monitor.metrics_until("every ledger is watched", |m| m.value("gpuslice_ledgers_watched", &[]) == Some(expected));
    // Let every watched ledger be read a few times.
    monitor.wait_rounds(4);
    let pid = monitor.running.pid();
    let rss = rss_kib(pid);
    let descriptors = descriptors_between_rounds(pid);
    let (start, rounds_before) = (Instant::now(), monitor.rounds());
    std::thread::sleep(Duration::from_secs(2));
    let rounds_per_s = (monitor.rounds() - rounds_before) as f64 / start.elapsed().as_secs_f64();
    let watched = monitor.metrics().value("gpuslice_ledgers_watched", &[]).unwrap_or(0.0) as u64;
    drop(monitor);
    Row { what: what.into(), watched, rss, descriptors, rounds_per_s }
}

fn main() {
    let rows: Vec<Row> = [
        ("empty directory", 0, 0),
        ("32 ledgers", 32, 0),
        ("128 ledgers", 128, 0),
        ("512 ledgers", 512, 0),
        ("flood: 1,100 of one uid", 0, 1100),
    ]
    .into_iter()
    .map(|(what, root, flood)| measure(what, root, flood))
    .collect();
    let base = &rows[0];
    println!(
        "{:<26} {:>8} {:>10} {:>10} {:>10} {:>14} {:>6} {:>9}",
        "directory", "watched", "RSS KiB", "anon KiB", "file KiB", "KiB/ledger", "fds", "rounds/s"
    );
    for row in &rows {
        let per_ledger =
            if row.watched > 0 { format!("{:.0}", row.rss.0.saturating_sub(base.rss.0) as f64 / row.watched as f64) } else { "-".into() };
        println!(
            "{:<26} {:>8} {:>10} {:>10} {:>10} {:>14} {:>6} {:>9.1}",
            row.what, row.watched, row.rss.0, row.rss.1, row.rss.2, per_ledger, row.descriptors, row.rounds_per_s
        );
    }
    println!(
        "(a ledger file is {} KiB; KiB/ledger is the RSS above the empty directory's, per watched ledger)",
        ledger::layout::FILE_BYTES / 1024
    );
}
