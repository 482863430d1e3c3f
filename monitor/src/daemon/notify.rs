//! systemd's readiness protocol (`Type=notify`): when systemd started the
//! monitor it names a datagram socket in `NOTIFY_SOCKET`, and the monitor
//! sends `READY=1` there once its first round is done (ledgers looked at,
//! caps written, `/metrics` served), and `STOPPING=1` when it stops. Units
//! that order themselves after the monitor then start when it can govern
//! them. Without `NOTIFY_SOCKET` nothing is sent.
//!
//! The protocol is one datagram of `KEY=VALUE` lines to a path, or to an
//! abstract socket when the name starts with `@`; the message is small and
//! the code with it, so no crate is taken for it.

use super::log;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `STOPPING=1`) to systemd, if it is listening.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty()) else { return };
    if let Err(e) = send(&socket, state) {
        log::warn(&format!("cannot tell systemd {state} through NOTIFY_SOCKET={}: {e}", socket.to_string_lossy()));
    }
}

fn send(socket: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    let sender = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    let sent = match bytes.strip_prefix(b"@") {
        Some(abstract_name) => sender.send_to_addr(state.as_bytes(), &std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?),
        None => sender.send_to(state.as_bytes(), socket),
    }?;
    if sent == state.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("sent {sent} of {} bytes", state.len())))
    }
}
