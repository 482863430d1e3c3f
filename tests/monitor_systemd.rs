//! The monitor under systemd (`Type=notify`): it says `READY=1` on
//! `NOTIFY_SOCKET` once its first round is done, and `STOPPING=1` when it
//! stops, as the unit in scripts/ expects.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::Sim;
use monitor_support::{monitor_command, MonitorOptions};
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

fn receive(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("a datagram from the monitor within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_monitor_tells_systemd_when_it_is_ready_and_when_it_stops() {
    let sim = Sim::new();
    let path = sim.dir().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut cmd = monitor_command(&sim, &MonitorOptions::default());
    cmd.env("NOTIFY_SOCKET", &path);
    let mut monitor = sim.spawn(&mut cmd);
    assert_eq!(receive(&socket), "READY=1");
    // It is ready when it says so: its first round has run.
    monitor.wait_for("ready");
    monitor.signal("TERM");
    assert_eq!(receive(&socket), "STOPPING=1");
    monitor.wait().assert_success();
}
