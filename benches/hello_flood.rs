//! Hellos under a flood: how long an honest process waits from its hello to
//! its grant page (p50, p99), and the shares two honest tenants under the
//! shim get (configured 90 / 10), first alone, then while another Unix user
//! sends about 1,000 hostile hellos a second. Each hostile hello comes from
//! a process that holds 20,000 OFD locks on a ledger of its own and 200
//! duplicates of that descriptor, names a slot it does not hold, and passes
//! that descriptor: the worst the check can be asked to look at.
//!
//! Target: the honest tenants' shares unchanged within 2 points, and the
//! grant latency bounded (the flood costs a user at most
//! `HELLOS_PER_ROUND_PER_UID` checks per round of the arbiter).
//!
//! Run (as root: the flood runs as uid 65534):
//! `cargo build --release --workspace && cargo bench --bench hello_flood -- --seconds 8`.
//! On a debug build:
//! `cargo build --workspace && GS_TEST_TARGET_DIR=target/debug cargo bench --bench hello_flood -- --seconds 4`.

#[path = "../tests/compute_support/mod.rs"]
mod compute_support;
#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use compute_support::{busy_bins, busy_ratio, saturate};
use gpuslice_tests::{wrap_as_user, Sim};
use ledger::broker::{self, Hello};
use monitor_support::{Monitor, MonitorOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The uid the flood runs as.
const FLOOD_UID: u32 = 65534;
/// Hellos a second the flood aims at.
const FLOOD_RATE: u32 = 1000;
/// The flood's locks and duplicated descriptors.
const FLOOD_LOCKS: u64 = 20_000;
const FLOOD_DUPS: usize = 200;
/// How often the honest probe joins.
const PROBE_EVERY: Duration = Duration::from_millis(20);

fn main() {
    if let Ok(dir) = std::env::var("HELLO_FLOOD_DIR") {
        return flood(Path::new(&dir));
    }
    let seconds: f64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .map(|s| s.parse().expect("--seconds takes a number, like 8"))
        .unwrap_or(8.0);
    println!("| phase | hostile hellos/s | honest grants | p50 ms | p99 ms | max ms | share 90 got | share 10 got |");
    println!("|---|---|---|---|---|---|---|---|");
    for flooded in [false, true] {
        phase(flooded, seconds);
    }
}

fn phase(flooded: bool, seconds: f64) {
    let sim = Sim::new().shim().timeout(Duration::from_secs(120 + seconds as u64));
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.big]\nshare = 90\n[tenants.small]\nshare = 10\n").unwrap();
    let _monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let run_for = format!("{}", seconds + 2.0);
    let big = saturate(&sim, "big", &[], &run_for);
    let small = saturate(&sim, "small", &[], &run_for);
    let uuid = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), "big")).unwrap().devices()[0].uuid;
    let mut flood = flooded.then(|| {
        let exe = std::env::current_exe().expect("the bench binary");
        let mut cmd = sim.command(exe);
        cmd.env_remove("LD_PRELOAD")
            .env("HELLO_FLOOD_DIR", sim.ledger_dir())
            .env("HELLO_FLOOD_UUID", uuid.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let mut running = sim.spawn(&mut wrap_as_user(FLOOD_UID, &cmd));
        running.wait_for("armed");
        running
    });
    // The honest probe: a process of its own tenant, joining over and over.
    let dir = sim.ledger_dir();
    let probe = ledger::Ledger::open_or_create(&dir, "probe").expect("the probe's ledger");
    let slot = probe.claim_slot().expect("a slot");
    let hello = Hello {
        tenant: "probe".into(),
        slot: slot.index() as u32,
        generation: slot.generation(),
        uuid,
        asked_cap_bytes: ledger::UNLIMITED,
    };
    let mut latencies_ms = Vec::new();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        let started = Instant::now();
        if let Ok(joined) = broker::join(&dir, &hello, Some(probe.lock_fd())) {
            latencies_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            drop(joined);
        }
        std::thread::sleep(PROBE_EVERY);
    }
    let sent_per_s = flood.as_mut().map_or(0.0, |f| {
        f.send_line("stop");
        let out = f.wait_for("sent");
        out.parse::<f64>().unwrap_or(0.0) / seconds
    });
    drop(flood);
    let (big, small) = (big.wait(), small.wait());
    let (b, s) = (busy_ratio(&busy_bins(&big, 1000.0), 1.0, seconds), busy_ratio(&busy_bins(&small, 1000.0), 1.0, seconds));
    latencies_ms.sort_by(f64::total_cmp);
    let at = |q: f64| latencies_ms.get(((latencies_ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    println!(
        "| {} | {sent_per_s:.0} | {} | {:.2} | {:.2} | {:.2} | {:.1} % | {:.1} % |",
        if flooded { "flood" } else { "alone" },
        latencies_ms.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        100.0 * b / (b + s),
        100.0 * s / (b + s)
    );
}

/// The flood's side, as another user: arms its ledger, then sends hostile
/// hellos at [`FLOOD_RATE`] until told `stop` on stdin; prints `sent=N`.
fn flood(dir: &Path) {
    let hex = std::env::var("HELLO_FLOOD_UUID").expect("HELLO_FLOOD_UUID");
    let mut uuid = [0u8; 16];
    for (i, byte) in uuid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("a hex UUID");
    }
    let tenant = format!("flood{}", std::process::id());
    let ledger = ledger::Ledger::open_or_create(dir, &tenant).expect("a ledger of its own");
    let slot = ledger.claim_slot().expect("a slot");
    let path: PathBuf = ledger::tenant_path(dir, &tenant);
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("its ledger");
    for i in 0..FLOOD_LOCKS {
        // SAFETY: an all-zero flock is valid; F_OFD_SETLK on a live descriptor.
        unsafe {
            let mut lock: libc::flock = std::mem::zeroed();
            lock.l_type = libc::F_WRLCK as libc::c_short;
            lock.l_whence = libc::SEEK_SET as libc::c_short;
            lock.l_start = ((1u64 << 24) + 2 * i) as libc::off_t;
            lock.l_len = 1;
            libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock);
        }
    }
    // SAFETY: dup of a live descriptor, kept open to the end.
    let _copies: Vec<i32> = (0..FLOOD_DUPS).map(|_| unsafe { libc::dup(file.as_raw_fd()) }).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopper = stop.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        stopper.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    println!("armed=1");
    let hello = Hello { tenant, slot: slot.index() as u32 + 1, generation: 1, uuid, asked_cap_bytes: ledger::UNLIMITED };
    let every = Duration::from_secs(1) / FLOOD_RATE;
    let started = Instant::now();
    let mut sent: u64 = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let _ = broker::join(dir, &hello, Some(file.as_raw_fd()));
        sent += 1;
        let due = every * sent as u32;
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    println!("sent={sent}");
}
