//! The monitor's HTTP port against clients that never finish a request.
//!
//! In the Kubernetes DaemonSet the monitor listens on every address and the
//! kubelet's liveness probe asks `/healthz`, so any pod that reaches the node
//! can hold connections to it. One connection that sends a request a byte at
//! a time and never ends it (slowloris) and a crowd of connections that send
//! nothing must not keep `/healthz` and `/metrics` from answering, nor the
//! monitor's rounds from running; and the server must close them itself once
//! its deadline for a request has passed.
//!
//! The server's deadline is short, so the held connections may be closed
//! before a starved machine has made all its probes. A probe counts only if
//! every held connection was still open when it was sent; when the deadline
//! ends an attack early, a new one is opened (a bounded number of times).
//! Nothing here asserts how long anything took.
//!
//! It connects to 127.0.0.1 only, and every loop is bounded in count and time.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{poll, Sim};
use monitor_support::{Metrics, Monitor, MonitorOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections opened and left silent.
const IDLE_CONNECTIONS: usize = 200;
/// Answers wanted from each page while the connections are held.
const PROBES: usize = 5;
/// Attacks opened at most, when the server's deadline ends one before the
/// probes are done.
const ATTACKS: usize = 5;
/// Probe pairs made at most during one attack.
const PROBES_PER_ATTACK: usize = 200;
/// Time between two bytes of the slow request, and between two probe pairs.
const PACE: Duration = Duration::from_millis(100);

/// How a connection looks from the client's side, without waiting.
#[derive(Debug, PartialEq)]
enum Peer {
    /// Nothing to read yet: the server holds it open.
    Open,
    /// End of stream or reset: the server has closed it.
    Closed,
    /// The server has sent something.
    Answered,
}

fn peer(stream: &TcpStream) -> Peer {
    let mut byte = 0u8;
    // SAFETY: a one-byte buffer that lives across the call, on a socket the
    // caller owns; MSG_PEEK leaves the byte to be read, MSG_DONTWAIT makes
    // this one call non-blocking without changing the socket's mode, which
    // the slow client's thread shares.
    let n = unsafe { libc::recv(stream.as_raw_fd(), (&raw mut byte).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        0 => Peer::Closed,
        n if n > 0 => Peer::Answered,
        _ => match std::io::Error::last_os_error().kind() {
            ErrorKind::WouldBlock | ErrorKind::Interrupted => Peer::Open,
            _ => Peer::Closed,
        },
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, poll::deadline())?;
    stream.set_read_timeout(Some(poll::deadline()))?;
    stream.set_write_timeout(Some(poll::deadline()))?;
    Ok(stream)
}

/// How the slow client ended.
#[derive(Debug, PartialEq)]
enum SlowEnd {
    /// The server closed the connection while it was still sending.
    ClosedByServer { bytes_sent: usize },
    /// The server answered the unfinished request.
    Answered { bytes_sent: usize },
    /// The test stopped it.
    Stopped { bytes_sent: usize },
    /// It ran out of time with the connection still open.
    GaveUp { bytes_sent: usize },
}

/// A request head sent one byte per [`PACE`] that never reaches its blank
/// line, from its own thread.
struct Slowloris {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<SlowEnd>,
}

impl Slowloris {
    fn start(addr: SocketAddr, limit: Duration) -> Slowloris {
        let stream = connect(addr).unwrap_or_else(|e| panic!("the slow client cannot connect to {addr}: {e}"));
        let mut writer = stream.try_clone().unwrap();
        let watcher = stream.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let head = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nX-Never-Ends: ");
            let mut bytes = head.bytes().chain(std::iter::repeat(b'a'));
            let until = Instant::now() + limit;
            let mut bytes_sent = 0;
            loop {
                if stopped.load(Ordering::Relaxed) {
                    return SlowEnd::Stopped { bytes_sent };
                }
                match peer(&watcher) {
                    Peer::Closed => return SlowEnd::ClosedByServer { bytes_sent },
                    Peer::Answered => return SlowEnd::Answered { bytes_sent },
                    Peer::Open => {}
                }
                if Instant::now() >= until {
                    return SlowEnd::GaveUp { bytes_sent };
                }
                let byte = bytes.next().unwrap_or(b'a');
                if writer.write_all(&[byte]).is_err() {
                    return SlowEnd::ClosedByServer { bytes_sent };
                }
                bytes_sent += 1;
                std::thread::sleep(PACE);
            }
        });
        Slowloris { stream, stop, thread }
    }

    fn end(self, stop: bool) -> SlowEnd {
        if stop {
            self.stop.store(true, Ordering::Relaxed);
        }
        self.thread.join().expect("the slow client's thread panicked")
    }
}

/// One slow client and [`IDLE_CONNECTIONS`] silent ones.
struct Attack {
    slow: Slowloris,
    idle: Vec<TcpStream>,
}

impl Attack {
    fn open(addr: SocketAddr) -> Attack {
        // Long enough for the probes and for the server's deadline after them.
        let slow = Slowloris::start(addr, 3 * poll::deadline());
        let idle = (1..=IDLE_CONNECTIONS)
            .map(|i| connect(addr).unwrap_or_else(|e| panic!("idle connection {i} of {IDLE_CONNECTIONS} to {addr}: {e}")))
            .collect();
        Attack { slow, idle }
    }

    /// Whether every connection is still open and unanswered.
    fn held(&self) -> bool {
        peer(&self.slow.stream) == Peer::Open && self.idle.iter().all(|s| peer(s) == Peer::Open)
    }
}

/// One request on a fresh connection: the status and body, or why there was
/// no answer within the wait deadline.
fn probe(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut stream = connect(addr).map_err(|e| format!("cannot connect: {e}"))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").map_err(|e| format!("cannot send: {e}"))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| format!("no answer within {:?}: {e}", poll::deadline()))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP head in {response:?}"))?;
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Fails the test unless `path` answers 200.
#[track_caller]
fn must_answer(addr: SocketAddr, path: &str, what: &str) -> String {
    match probe(addr, path) {
        Ok((200, body)) => body,
        Ok((status, body)) => panic!("{what}: {path} answered {status}: {body}"),
        Err(e) => panic!("{what}: {path}: {e}"),
    }
}

fn rounds(page: &str) -> u64 {
    Metrics::parse(page).value("gpuslice_monitor_rounds_total", &[]).unwrap_or_else(|| panic!("no round count in:\n{page}")) as u64
}

/// What the probes saw during one attack.
#[derive(Debug, Default)]
struct UnderAttack {
    health: usize,
    metrics: usize,
    first_round: Option<u64>,
    last_round: Option<u64>,
}

impl UnderAttack {
    fn enough(&self) -> bool {
        self.health >= PROBES && self.metrics >= PROBES && self.last_round > self.first_round
    }
}

#[test]
fn slow_and_idle_connections_stall_neither_probes_nor_rounds_and_are_closed() {
    let sim = Sim::new();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let addr: SocketAddr = monitor.addr.parse().unwrap_or_else(|e| panic!("listen={}: {e}", monitor.addr));
    assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST, "this test attacks 127.0.0.1 only");

    let mut cut_short = Vec::new();
    for attempt in 1..=ATTACKS {
        let attack = Attack::open(addr);
        let mut seen = UnderAttack::default();
        for pair in 1..=PROBES_PER_ATTACK {
            if seen.enough() || !attack.held() {
                break;
            }
            let what = format!("attack {attempt}, probe {pair}, with {} connections held", IDLE_CONNECTIONS + 1);
            let health = must_answer(addr, "/healthz", &what);
            assert!(health.starts_with("ok\n"), "{what}: /healthz says {health:?}");
            seen.health += 1;
            let round = rounds(&must_answer(addr, "/metrics", &what));
            seen.metrics += 1;
            seen.first_round.get_or_insert(round);
            seen.last_round = Some(round);
            std::thread::sleep(PACE);
        }
        if !seen.enough() {
            // The server's deadline closed the connections first: a slow
            // machine, not a stalled server (every probe was answered).
            cut_short.push(seen);
            drop(attack.idle);
            attack.slow.end(true);
            continue;
        }

        // The server closes every held connection by itself, the slow one
        // while it is still sending.
        let until = Instant::now() + poll::deadline();
        for (i, mut stream) in attack.idle.into_iter().enumerate() {
            let left = until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            stream.set_read_timeout(Some(left)).unwrap();
            let mut rest = Vec::new();
            match stream.read_to_end(&mut rest) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                Err(e) => panic!("idle connection {} of {IDLE_CONNECTIONS} still open after {:?}: {e}", i + 1, poll::deadline()),
            }
        }
        match attack.slow.end(false) {
            SlowEnd::ClosedByServer { .. } => {}
            other => panic!("the slow client was not closed by the server: {other:?}"),
        }

        // And it still answers.
        must_answer(addr, "/healthz", "after the attack");
        monitor.wait_rounds(1);
        return;
    }
    panic!("in {ATTACKS} attacks the server's deadline always closed the held connections before the probes were done: {cut_short:#?}");
}
