//! `gpuslice top`: one frame as plain text for scripts (`--once`, no
//! terminal), and the live view in a pseudo-terminal, driven as a person
//! would at 120×40, 80×24 and 60×15. What it writes is fed to a terminal
//! emulator's parser (vt100), and the tests read the screen a person
//! would see: whole values, short UUIDs, bars, `+N more`, the keys, the
//! kill prompt, and no colour under `NO_COLOR`.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{simgpu_lib, Running, Sim};
use monitor_support::*;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tenant `team-top` capped at 1 GiB and limited to 30% of device time,
/// holding 100 MiB plus its 64 MiB context on a 4 GiB simulated device.
fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-top").env("GPUSLICE_COMPUTE_LIMIT", "30")
}

/// A process of `tenant` on `sim` holding `alloc` (`100M`) until told
/// `done`, its `argv[0]` set to `argv0` (bash's `exec -a`), so that the
/// command line the view shows is short and known.
fn hold(sim: &Sim, tenant: &str, alloc: &str, argv0: &str) -> Running {
    let memctl = gpuslice_tests::compile_c("memctl");
    let mut cmd = sim.command("bash");
    cmd.env("GPUSLICE_TENANT", tenant).args(["-c", "exec -a \"$0\" \"$@\"", argv0]).arg(memctl).args([
        "init",
        "ctx",
        &format!("alloc:a:{alloc}"),
        "hold",
    ]);
    let mut app = sim.spawn(&mut cmd);
    app.wait_for("ready");
    app
}

/// The cells of a plain-text row (columns are two or more spaces apart).
fn cells(row: &str) -> Vec<&str> {
    row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// The rows under `title` in a `--once` frame, header first.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let start = text.find(&format!("\n{title}\n")).unwrap_or_else(|| panic!("no {title} section:\n{text}"));
    text[start + title.len() + 2..].lines().take_while(|l| !l.is_empty()).collect()
}

fn once(sim: &Sim) -> gpuslice_tests::Output {
    let out = sim.run(gpuslice_command(sim).args(["top", "--once", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    out
}

#[test]
fn once_prints_one_plain_frame_without_a_terminal() {
    let sim = sim();
    let mut app = hold(&sim, "team-top", "100M", "memctl");
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let uuid = status_json(&sim)["devices"][0]["uuid"].as_str().expect("a device UUID").to_string();

    // Standard input and output are pipes: no terminal.
    let out = once(&sim);
    let text = &out.stdout;
    assert!(!text.contains('\x1b'), "escape codes in a plain frame: {text:?}");
    assert!(!text.contains('█'), "no bars in a plain frame: {text}");
    assert_eq!(text.lines().next(), Some(format!("gpuslice top   ledger directory: {}   NVML: yes", sim.ledger_dir().display()).as_str()));

    let devices = section(text, "DEVICES");
    assert_eq!(cells(devices[0]), ["DEVICE", "UUID", "MEMORY USED / TOTAL", "USE", "UTIL", "TENANTS", "TEMP", "POWER", "HELD BY"]);
    assert_eq!(devices.len(), 2, "{text}");
    let device = cells(devices[1]);
    // The whole UUID, for scripts.
    assert_eq!((device[0], device[1], device[5]), ("0", uuid.as_str(), "1"), "{text}");
    assert!(device[2].ends_with(" / 4.0 GiB"), "{text}");

    let tenants = section(text, "TENANTS");
    assert_eq!(tenants.len(), 2, "{text}");
    // Used: no kernel ran between the two looks.
    let tenant = cells(tenants[1]);
    assert_eq!(tenant[..12], ["0", "team-top", "164.0 MiB", "1.0 GiB", "16%", "1", "0", "30%", "-", "0", "30%", "0%"], "{text}");
    // It holds memory and does nothing: idle.
    assert!(tenant[12].starts_with("idle (GPU 0%, CPU "), "{text}");

    let processes = section(text, "PROCESSES");
    assert_eq!(cells(processes[0]), ["PID", "USER", "TENANT", "DEVICE", "MEMORY", "DRIVER SEES", "SM", "TIME", "STATE", "COMMAND"]);
    assert_eq!(processes.len(), 2, "{text}");
    let process = cells(processes[1]);
    assert_eq!(process[..5], [app.pid().to_string().as_str(), "root", "team-top", "0", "164.0 MiB"], "{text}");
    assert_eq!((process[8], process[9]), ("alive", "memctl init ctx alloc a 100M hold"), "{text}");
    assert!(!text.contains("\nQUEUE\n"), "{text}");

    app.send_line("done");
    app.wait().assert_success();
}

#[test]
fn a_tenant_cannot_write_escape_codes_to_the_operators_terminal() {
    let sim = sim();
    // A tenant chooses its own command line.
    let mut app = hold(&sim, "team-top", "1M", "\x1b[2J\x1b]0;owned\x07evil");
    let text = once(&sim).stdout;
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let process = section(&text, "PROCESSES")[1];
    assert!(process.ends_with("?[2J?]0;owned?evil init ctx alloc a 1M hold"), "{process:?}");
    app.send_line("done");
    app.wait().assert_success();
}

/// The attacker claims a slot in its own ledger (holding its lock, as any
/// of its processes can) and writes the victim's identity into it: `top`
/// neither shows the victim's user and command as the attacker's nor
/// offers to kill it.
#[test]
fn a_slot_naming_another_process_is_shown_as_a_false_claim_and_not_killed() {
    let sim = sim();
    let mut victim = hold(&sim, "victim", "10M", "victim");
    let mut attacker = hold(&sim, "attacker", "1M", "attacker");
    let ledger = ledger_view::open(&sim.ledger_dir(), "attacker");
    let slot = ledger.claim_slot().expect("a free slot");
    let record = &ledger.layout().slots[slot.index()];
    let victim_pid = victim.pid();
    let stat = std::fs::read_to_string(format!("/proc/{victim_pid}/stat")).unwrap();
    record.pid.store(victim_pid, Ordering::SeqCst);
    record.ns_pid.store(victim_pid, Ordering::SeqCst);
    record.pidns_inode.store(0, Ordering::SeqCst);
    record.start_time_ticks.store(ledger::process::start_time_ticks(&stat).unwrap(), Ordering::SeqCst);

    let text = once(&sim).stdout;
    let claims: Vec<Vec<&str>> = section(&text, "PROCESSES").iter().map(|r| cells(r)).filter(|c| c[0] == victim_pid.to_string()).collect();
    assert_eq!(claims.len(), 2, "the victim's own row and the claim: {text}");
    let claim = claims.iter().find(|c| c[2] == "attacker").unwrap_or_else(|| panic!("{text}"));
    assert_eq!((claim[1], claim[claim.len() - 2], claim[claim.len() - 1]), ("-", "false claim", "-"), "{text}");
    let own = claims.iter().find(|c| c[2] == "victim").unwrap();
    assert_eq!((own[1], own[own.len() - 2]), ("root", "alive"), "{text}");

    // Selected in the live view (sorted by tenant, then pid: the claim of
    // the older victim's pid is the first row), it is not offered.
    let mut pty = top(&sim, 24, 120, |c| c);
    pty.wait_for("the claim", |rows| rows.iter().any(|r| r.contains("false claim")));
    pty.type_keys(b"sss");
    pty.wait_for("sorted by tenant", |rows| rows[0].contains("sort: tenant"));
    pty.type_keys(b"g");
    pty.type_keys(b"K");
    let refusal = format!("pid {victim_pid} is not confirmed as the process holding its ledger slot");
    pty.wait_for("the refusal", |rows| rows[23].starts_with(&refusal));
    pty.type_keys(b"y");
    std::thread::sleep(Duration::from_millis(300));
    assert!(std::path::Path::new(&format!("/proc/{victim_pid}")).exists(), "the victim was killed");
    quit(pty);
    ledger.release_slot(slot);
    for app in [&mut victim, &mut attacker] {
        app.send_line("done");
    }
    victim.wait().assert_success();
    attacker.wait().assert_success();
}

#[test]
fn once_with_a_missing_directory_is_a_one_line_error() {
    let sim = Sim::new();
    let missing = sim.dir().join("nowhere");
    let out = sim.run(gpuslice_command(&sim).args(["top", "--once", "--no-nvml", "--dir"]).arg(&missing));
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(out.stderr, format!("gpuslice: the ledger directory {} (--dir) does not exist\n", missing.display()));
    assert_eq!(out.stdout, "");
}

/// A program on a pseudo-terminal, and the screen it has drawn so far.
struct Pty {
    child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<vt100::Parser>>,
    /// Every byte it wrote, escape codes included.
    bytes: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Tells the reader to let go of its copy of the master.
    closing: Arc<std::sync::atomic::AtomicBool>,
    status: Option<ExitStatus>,
}

fn winsize(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 }
}

fn nonzero(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).expect("a terminal has rows and columns")
}

impl Pty {
    /// Starts `cmd` as the leader of a new session whose controlling
    /// terminal is a fresh pseudo-terminal of `rows`×`cols`.
    fn spawn(cmd: &mut Command, rows: u16, cols: u16) -> Pty {
        Pty::spawn_with(cmd, rows, cols, true)
    }

    /// As [`Pty::spawn`]; with `controlling` false the terminal is only the
    /// program's descriptors 0, 1 and 2, so that closing it sends no
    /// SIGHUP and the program learns of it only by reading.
    fn spawn_with(cmd: &mut Command, rows: u16, cols: u16, controlling: bool) -> Pty {
        let (mut master, mut slave) = (-1, -1);
        let size = winsize(rows, cols);
        // SAFETY: the out-pointers are live locals; no name buffer, no termios.
        let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: openpty returned these two descriptors to us alone.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        for fd in [&master, &slave] {
            // SAFETY: fcntl on a descriptor we own; the child gets the slave only as 0, 1 and 2.
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the terminal"));
        cmd.stdin(io(&slave)).stdout(io(&slave)).stderr(io(&slave)).env("TERM", "xterm-256color");
        // SAFETY: setsid and ioctl are async-signal-safe; they make the
        // terminal on descriptor 0 the new session's controlling terminal,
        // so that a resize reaches the program as SIGWINCH.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || (controlling && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0) {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        drop(slave);
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(nonzero(rows), nonzero(cols), 0)));
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let mut source = master.try_clone().expect("dup the master");
        let (to_screen, to_bytes) = (Arc::clone(&screen), Arc::clone(&bytes));
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = Arc::clone(&closing);
        let reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let mut poll = libc::pollfd { fd: source.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd, a live local.
                if unsafe { libc::poll(&mut poll, 1, 20) } < 1 {
                    continue;
                }
                // EIO once the program has closed its terminal.
                let Ok(n @ 1..) = source.read(&mut buffer) else { break };
                to_screen.lock().unwrap().process(&buffer[..n]);
                to_bytes.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Pty { child, master, screen, bytes, reader: Some(reader), closing, status: None }
    }

    /// The screen, row by row.
    fn rows(&self) -> Vec<String> {
        let parser = self.screen.lock().unwrap();
        let (_, cols) = parser.screen().size();
        parser.screen().rows(0, cols.get()).collect()
    }

    fn text(&self) -> String {
        self.rows().join("\n")
    }

    /// Waits until the screen satisfies `done` and stays the same for a
    /// moment (a frame can arrive in more than one read), and returns its
    /// rows.
    fn wait_for(&mut self, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + gpuslice_tests::child_timeout();
        loop {
            let rows = self.rows();
            if done(&rows) {
                std::thread::sleep(Duration::from_millis(50));
                if self.rows() == rows {
                    return rows;
                }
                continue;
            }
            if Instant::now() > deadline || self.exited() {
                panic!("the screen never showed {what}:\n{}\n(status: {:?})", rows.join("\n"), self.status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).expect("type into the terminal");
    }

    /// Resizes the terminal (the kernel tells the program by SIGWINCH) and
    /// the emulated screen with it.
    fn resize(&mut self, rows: u16, cols: u16) {
        self.screen.lock().unwrap().set_size(nonzero(rows), nonzero(cols));
        // SAFETY: TIOCSWINSZ reads one winsize from a live local.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &winsize(rows, cols)) };
        assert_eq!(rc, 0, "resize: {}", std::io::Error::last_os_error());
    }

    fn exited(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("wait for the program");
        }
        self.status.is_some()
    }

    /// Waits for the program to exit and for its last bytes.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + gpuslice_tests::child_timeout();
        while !self.exited() {
            assert!(Instant::now() < deadline, "the program did not exit:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.status.expect("exited")
    }

    fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if !self.exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `gpuslice top` on this test's ledgers and simgpu's NVML, on a terminal
/// of `rows`×`cols`, with `env` set.
fn top(sim: &Sim, rows: u16, cols: u16, wrap: impl FnOnce(Command) -> Command) -> Pty {
    let mut cmd = gpuslice_command(sim);
    cmd.args(["top", "--interval", "200ms", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).env_remove("NO_COLOR");
    Pty::spawn(&mut wrap(cmd), rows, cols)
}

fn row_with<'a>(rows: &'a [String], text: &str) -> &'a str {
    rows.iter().find(|r| r.contains(text)).unwrap_or_else(|| panic!("no row with {text:?}:\n{}", rows.join("\n")))
}

/// The screen's table titled `title`: its title line, header and rows, up
/// to the next title (a line starting with a blank and capitals).
fn table<'a>(rows: &'a [String], title: &str) -> Vec<&'a str> {
    let start = rows.iter().position(|r| r.starts_with(&format!(" {title}"))).unwrap_or_else(|| panic!("no {title}:\n{}", rows.join("\n")));
    // The last row is the footer.
    let rest = &rows[start + 1..rows.len() - 1];
    let end = rest
        .iter()
        .position(|r| r.starts_with(" PROCESSES") || r.starts_with(" TENANTS") || r.starts_with(" DEVICES"))
        .unwrap_or(rest.len());
    rows[start..start + 1 + end].iter().map(String::as_str).collect()
}

/// Signal-free exit: the terminal given back (alternate screen left,
/// cursor shown) after `q`.
fn quit(mut pty: Pty) {
    let before = pty.bytes().len();
    pty.type_keys(b"q");
    let status = pty.wait_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let bytes = pty.bytes();
    let tail = &bytes[before..];
    let has = |haystack: &[u8], needle: &[u8]| haystack.windows(needle.len()).any(|w| w == needle);
    assert!(has(&bytes, b"\x1b[?1049h"), "entered the alternate screen");
    assert!(has(tail, b"\x1b[?1049l"), "left the alternate screen");
    assert!(has(tail, b"\x1b[?25h"), "showed the cursor");
}

#[test]
fn live_view_fits_120x40_80x24_and_60x15_without_cutting_a_value() {
    let sim = sim();
    let mut app = hold(&sim, "team-top", "100M", "memctl");
    let others: Vec<Running> = (1..=4).map(|i| hold(&sim, &format!("team-b{i}"), "10M", "memctl")).collect();
    let uuid = status_json(&sim)["devices"][0]["uuid"].as_str().expect("a device UUID").to_string();
    let short = &uuid[..12];
    let pid = app.pid().to_string();

    let mut pty = top(&sim, 40, 120, |c| c);
    // 120×40: every tenant and process, short UUID, bars, user and command.
    let rows = pty.wait_for("five tenants and their processes", |rows| rows.iter().filter(|r| r.contains("memctl init")).count() == 5);
    let screen = rows.join("\n");
    assert!(rows[0].starts_with("gpuslice top  h: help  q: quit  every 200ms  sort: device"), "{screen}");
    assert!(screen.contains(short) && !screen.contains(&uuid[..13]), "the UUID cut to {short}: {screen}");
    // Only the title's ledger directory may end in `…`.
    assert!(!rows[1..].iter().any(|r| r.contains('…')) && !screen.contains(" more (Tab"), "nothing cut, nothing hidden: {screen}");
    let tenants = table(&rows, "TENANTS");
    assert_eq!(tenants.len(), 2 + 5, "{screen}");
    let words: Vec<&str> = tenants[1].split_whitespace().collect();
    assert_eq!(
        words,
        [
            "DEVICE", "TENANT", "MEMORY", "CAP", "CAP", "USE", "OF", "CAP", "PROCS", "DENIED", "LIMIT", "SHARE", "PRIO", "TARGET", "USED",
            "COMPUTE", "ACTIVITY"
        ],
        "{screen}"
    );
    let team_top = row_with(&rows, "team-top");
    for value in ["164.0 MiB", "1.0 GiB", "16%", "30%", "0%"] {
        assert!(team_top.contains(value), "{value} in {team_top:?}");
    }
    // 16% of the cap filled; the compute bar shows its 30% target.
    assert!(team_top.contains('█') && team_top.contains('░') && team_top.contains('│'), "bars: {team_top:?}");
    let process = row_with(&rows, &format!("{pid} "));
    let words: Vec<&str> = process.split_whitespace().collect();
    assert_eq!(words[..5], [pid.as_str(), "root", "team-top", "0", "164.0"], "{screen}");
    assert!(process.trim_end().ends_with("alive  memctl init ctx alloc a 100M hold"), "{process:?}");

    // 80×24: fewer columns, each whole; still every row.
    pty.resize(24, 80);
    // (The 120-column screen cut to 80 columns has no COMPUTE: it was at
    // its right end.)
    let rows = pty.wait_for("the 80-column layout", |rows| {
        rows.len() == 24 && rows.iter().any(|r| r.starts_with("DEVICE") && r.contains("COMPUTE") && !r.contains("PRIO"))
    });
    let screen = rows.join("\n");
    assert!(screen.contains(short), "{screen}");
    assert!(!screen.contains(" more (Tab"), "24 rows hold 5 tenants: {screen}");
    let team_top = row_with(&rows, "team-top");
    for value in ["164.0 MiB", "1.0 GiB", "30%", "0%"] {
        assert!(team_top.contains(value), "{value} whole in {team_top:?}");
    }
    assert!(team_top.contains('█') && team_top.contains('│'), "both bars at 80 columns: {team_top:?}");
    let process = row_with(&rows, &format!("{pid} "));
    for value in ["root", "team-top", "164.0 MiB", "memctl"] {
        assert!(process.contains(value), "{value} whole in {process:?}");
    }
    // No header cut mid-word: each is one of the full names.
    let header: Vec<&str> = table(&rows, "TENANTS")[1].split_whitespace().collect();
    for word in &header {
        assert!(
            ["DEVICE", "TENANT", "MEMORY", "CAP", "USE", "OF", "DENIED", "TARGET", "USED", "COMPUTE", "PROCS"].contains(word),
            "{word}: {screen}"
        );
    }
    assert!(rows[23].starts_with("Tab ↑↓ select  s sort  r reverse  K kill  h help  q quit"), "{screen}");

    // 60×15: rows that do not fit are counted.
    pty.resize(15, 60);
    let rows = pty.wait_for("+N more", |rows| rows.len() == 15 && rows.iter().filter(|r| r.contains(" more (Tab")).count() == 2);
    let screen = rows.join("\n");
    let tenants = table(&rows, "TENANTS");
    // Title, header, 2 of the 5 rows, and the marker.
    assert_eq!(tenants.len(), 5, "{screen}");
    assert!(tenants[4].starts_with(" +3 more"), "{screen}");
    let processes = table(&rows, "PROCESSES");
    assert!(processes.last().unwrap().starts_with(" +3 more"), "{screen}");
    for row in &tenants[2..4] {
        assert!(row.contains(" MiB "), "memory whole: {row:?}");
    }

    // Back to 80×24, then quit.
    pty.resize(24, 80);
    pty.wait_for("every row again", |rows| rows.iter().filter(|r| r.contains("memctl")).count() == 5);
    quit(pty);
    for mut other in others {
        other.send_line("done");
        other.wait().assert_success();
    }
    app.send_line("done");
    app.wait().assert_success();
}

/// `nvitop -1` and `top` on the same processes: each process nvitop lists
/// is in top's process table with the same pid, user and memory the
/// driver reports, and its tenant beside them.
#[test]
fn the_process_table_agrees_with_nvitop() {
    let sim = sim();
    let mut small = hold(&sim, "team-small", "100M", "small");
    let mut big = hold(&sim, "team-big", "300M", "big");
    let mut cmd = sim.command(gpuslice_tests::python());
    // Not a tenant: it sees every process.
    cmd.env_remove("LD_PRELOAD").args(["-m", "nvitop", "-1"]).current_dir(sim.dir());
    let nvitop = sim.run(&mut cmd);
    nvitop.assert_success();

    let mut pty = top(&sim, 40, 120, |c| c);
    let rows =
        pty.wait_for("both processes", |rows| rows.iter().any(|r| r.contains("small init")) && rows.iter().any(|r| r.contains("big init")));
    for (app, tenant, nvitop_memory, memory) in
        [(&small, "team-small", "164.0MiB", "164.0 MiB"), (&big, "team-big", "364.0MiB", "364.0 MiB")]
    {
        let pid = app.pid().to_string();
        let theirs =
            nvitop.stdout.lines().find(|l| l.contains(&format!(" {pid} "))).unwrap_or_else(|| panic!("nvitop lists no {pid}\n{nvitop}"));
        assert!(theirs.contains(nvitop_memory) && theirs.contains(" root "), "{theirs}");
        let ours: Vec<&str> = row_with(&rows, &format!("{pid} ")).split_whitespace().collect();
        let memory: Vec<&str> = memory.split(' ').collect();
        // PID USER TENANT DEVICE MEMORY (ledger) DRIVER SEES (as nvitop's GPU-MEM).
        assert_eq!(ours[..8], [pid.as_str(), "root", tenant, "0", memory[0], memory[1], memory[0], memory[1]], "{}", rows.join("\n"));
    }
    quit(pty);
    for app in [&mut small, &mut big] {
        app.send_line("done");
    }
    small.wait().assert_success();
    big.wait().assert_success();
}

/// An SSH connection dropped or a tmux session killed: the terminal is
/// closed under the live view. It exits within a second, whether the
/// kernel hangs it up (its controlling terminal) or it only finds the end
/// of its input, and it answers SIGTERM as it waits.
#[test]
fn top_exits_when_its_terminal_is_closed_or_on_sigterm() {
    let sim = sim();
    let _holder = hold(&sim, "team-a", "10M", "small");
    for controlling in [true, false] {
        let mut cmd = gpuslice_command(&sim);
        cmd.args(["top", "--interval", "200ms", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib());
        let mut pty = Pty::spawn_with(&mut cmd, 24, 100, controlling);
        pty.wait_for("the process", |rows| rows.iter().any(|r| r.contains("small init")));
        // Closing the master (and the reader's copy of it) closes the terminal.
        pty.closing.store(true, Ordering::Relaxed);
        if let Some(reader) = pty.reader.take() {
            let _ = reader.join();
        }
        let closed = Instant::now();
        drop(std::mem::replace(&mut pty.master, std::fs::File::open("/dev/null").expect("/dev/null")));
        while !pty.exited() && closed.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(pty.exited(), "top still runs a second after its terminal closed (controlling terminal: {controlling})");
    }
    let mut pty = top(&sim, 24, 100, |c| c);
    pty.wait_for("the process", |rows| rows.iter().any(|r| r.contains("small init")));
    let before = pty.bytes().len();
    // SAFETY: kill on the child's pid, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let status = pty.wait_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let bytes = pty.bytes();
    assert!(bytes[before..].windows(8).any(|w| w == b"\x1b[?1049l"), "left the alternate screen on SIGTERM");
}

#[test]
fn keys_help_sort_select_and_a_kill_that_asks_first() {
    let sim = sim();
    let small = hold(&sim, "team-a", "10M", "small");
    let big = hold(&sim, "team-z", "300M", "big");
    let mut pty = top(&sim, 24, 100, |c| c);
    pty.wait_for("both processes", |rows| rows.iter().any(|r| r.contains("small init")) && rows.iter().any(|r| r.contains("big init")));

    pty.type_keys(b"h");
    let rows = pty.wait_for("the help", |rows| rows.iter().any(|r| r.contains("kill the selected process")));
    assert!(row_with(&rows, "sort by the next key").contains("s "), "{}", rows.join("\n"));
    pty.type_keys(b"x");
    pty.wait_for("the help closed", |rows| !rows.iter().any(|r| r.contains("kill the selected process")));

    // Sorted by tenant name, team-a first; by memory, team-z's 364 MiB first.
    let position = |rows: &[String], what: &str| rows.iter().position(|r| r.contains(what)).unwrap_or(usize::MAX);
    let rows = pty.rows();
    assert!(position(&rows, "small init") < position(&rows, "big init"), "{}", rows.join("\n"));
    pty.type_keys(b"s");
    let rows = pty.wait_for("sorted by memory", |rows| rows[0].contains("sort: memory"));
    assert!(position(&rows, "big init") < position(&rows, "small init"), "{}", rows.join("\n"));

    // The selection (reverse video) stayed on the first row's process,
    // team-a's, now second; up selects the one above.
    let selected = |pty: &Pty| {
        let parser = pty.screen.lock().unwrap();
        let (rows, _) = parser.screen().size();
        let contents: Vec<String> = parser.screen().rows(0, 200).collect();
        (0..rows.get())
            .find(|&r| {
                parser.screen().cell(r, 0).is_some_and(|c| c.inverse())
                    && contents[usize::from(r)].starts_with(|c: char| c.is_ascii_digit())
            })
            .map(|r| contents[usize::from(r)].clone())
    };
    let first = selected(&pty).expect("a selected process row");
    assert!(first.contains("small init"), "{first}");
    pty.type_keys(b"\x1b[A");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !selected(&pty).is_some_and(|r| r.contains("big init")) {
        assert!(Instant::now() < deadline, "up did not select the row above:\n{}", pty.text());
        std::thread::sleep(Duration::from_millis(20));
    }

    // The kill asks first; `n` leaves the process alone.
    pty.type_keys(b"K");
    let prompt = format!("kill pid {} (user root, tenant team-z: big init ctx alloc a 300M hold)?  y: SIGTERM", big.pid());
    pty.wait_for("the kill prompt", |rows| rows[23].starts_with(&prompt));
    pty.type_keys(b"n");
    pty.wait_for("no kill", |rows| rows[23].starts_with(&format!("pid {} not signalled", big.pid())));
    std::thread::sleep(Duration::from_millis(300));
    assert!(std::path::Path::new(&format!("/proc/{}", big.pid())).exists(), "not killed after `n`");

    // `y` sends SIGTERM.
    pty.type_keys(b"K");
    pty.wait_for("the kill prompt again", |rows| rows[23].starts_with(&prompt));
    pty.type_keys(b"y");
    pty.wait_for("the kill sent", |rows| rows.iter().any(|r| r.starts_with(&format!("sent SIGTERM to pid {}", big.pid()))));
    let out = big.wait();
    assert_eq!(out.status.and_then(|s| s.signal()), Some(libc::SIGTERM), "{out}");
    quit(pty);
    drop(small);
}

#[test]
fn only_root_or_the_owner_may_kill() {
    let sim = sim();
    sim.share_the_gpu();
    // A set-group-ID ledger directory shares each ledger with its group:
    // a member sees root's process there, but may not kill it.
    let nobody = 65534;
    std::os::unix::fs::chown(sim.ledger_dir(), None, Some(nobody)).expect("chown the ledger directory");
    std::fs::set_permissions(sim.ledger_dir(), std::os::unix::fs::PermissionsExt::from_mode(0o2770)).expect("chmod");
    let mut app = hold(&sim, "team-top", "10M", "rootjob");
    let mut pty = top(&sim, 24, 100, |c| gpuslice_tests::wrap_as_user(nobody, &c));
    pty.wait_for("root's process", |rows| rows.iter().any(|r| r.contains("rootjob init")));
    pty.type_keys(b"K");
    let refusal = format!("only root or its owner (root) may kill pid {}", app.pid());
    pty.wait_for("the refusal", |rows| rows[23].starts_with(&refusal));
    pty.type_keys(b"y");
    std::thread::sleep(Duration::from_millis(300));
    assert!(std::path::Path::new(&format!("/proc/{}", app.pid())).exists(), "a `y` after a refusal kills nothing");
    quit(pty);
    app.send_line("done");
    app.wait().assert_success();
}

/// The colours set by the SGR sequences in `bytes` (`ESC [ … m`): 30–38,
/// 40–48, 90–97 and 100–107 set one; 39 and 49 only go back to the default.
fn colour_codes(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut found = Vec::new();
    let mut sgr = 0;
    for sequence in text.split("\x1b[").skip(1) {
        let Some(end) = sequence.find(|c: char| !(c.is_ascii_digit() || c == ';')) else { continue };
        if !sequence[end..].starts_with('m') {
            continue;
        }
        sgr += 1;
        let params: Vec<u32> = sequence[..end].split(';').filter_map(|p| p.parse().ok()).collect();
        if params.first().is_some_and(|&p| matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107)) {
            found.push(sequence[..end].to_string());
        }
    }
    assert!(sgr > 0, "no SGR sequence at all: the check would prove nothing");
    found
}

#[test]
fn no_color_is_honoured() {
    let sim = sim();
    let mut app = hold(&sim, "team-top", "10M", "memctl");
    let mut coloured = top(&sim, 24, 100, |c| c);
    coloured.wait_for("the tenant", |rows| rows.iter().any(|r| r.contains("team-top")));
    assert!(!colour_codes(&coloured.bytes()).is_empty(), "colour by default");
    quit(coloured);

    let mut plain = top(&sim, 24, 100, |mut c| {
        c.env("NO_COLOR", "1");
        c
    });
    let rows = plain.wait_for("the tenant", |rows| rows.iter().any(|r| r.contains("team-top")));
    // The same screen text, the selection still in reverse video.
    assert!(row_with(&rows, "team-top").contains('░'), "bars without colour: {}", rows.join("\n"));
    quit_and_check_plain(plain);
    app.send_line("done");
    app.wait().assert_success();
}

fn quit_and_check_plain(pty: Pty) {
    let bytes = pty.bytes();
    assert_eq!(colour_codes(&bytes), Vec::<String>::new(), "colour under NO_COLOR");
    assert!(String::from_utf8_lossy(&bytes).contains("\x1b[7m"), "the selection in reverse video");
    quit(pty);
}

#[test]
fn live_view_quits_on_esc_and_ctrl_c() {
    let sim = sim();
    let mut app = hold(&sim, "team-top", "10M", "memctl");
    for key in [&b"\x1b"[..], b"\x03"] {
        let mut pty = top(&sim, 24, 80, |c| c);
        pty.wait_for("the tenant", |rows| rows.iter().any(|r| r.contains("team-top")));
        let asked = Instant::now();
        pty.type_keys(key);
        let status = pty.wait_exit();
        assert_eq!(status.code(), Some(0), "{key:?}: {status:?}");
        // One input poll (100 ms) and one refresh at most; the rest is room
        // for a machine busy with other tests.
        assert!(asked.elapsed() < Duration::from_secs(5), "{key:?}");
        assert!(pty.bytes().windows(8).any(|w| w == b"\x1b[?1049l"), "{key:?}: the terminal given back");
    }
    app.send_line("done");
    app.wait().assert_success();
}

/// The monitor in an operator's terminal prints its log only: `listen=`
/// and `ready=1` are for scripts that start it on a pipe. And `--group`,
/// which only the monitor uses, is no flag of `status` or `top`.
#[test]
fn the_monitor_in_a_terminal_prints_no_lines_for_scripts_and_group_is_the_monitors() {
    let sim = sim();
    // The command holds copies of the terminal: it goes at once.
    let mut pty = Pty::spawn(&mut monitor_command(&sim, &MonitorOptions::default()), 24, 200);
    let rows = pty.wait_for("the first round", |rows| rows.iter().any(|r| r.contains("ready: the first round is done")));
    assert!(!rows.iter().any(|r| r.starts_with("ready=") || r.starts_with("listen=")), "{}", rows.join("\n"));
    // SAFETY: kill on the child's pid, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    pty.wait_exit();
    for command in ["status", "top"] {
        let out = sim.run(gpuslice_command(&sim).args([command, "--group", "wheel"]));
        assert_eq!(out.code(), Some(2), "{out}");
        assert!(out.stderr.contains("unexpected argument '--group'"), "{out}");
    }
}
