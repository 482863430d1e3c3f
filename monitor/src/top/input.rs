//! The live view's keys, read from the terminal by `poll(2)` and `read(2)`
//! and decoded here.
//!
//! Why not crossterm's event reader: on end of input (a closed pty, an
//! SSH connection dropped, a tmux session killed) its read loop spins on
//! `read` returning 0 or `EIO` and never returns, so the view neither
//! notices nor sees SIGTERM and burns a core until killed. Here every way
//! the terminal can go away (end of file, `EIO`, `POLLHUP`, `POLLERR`,
//! `POLLNVAL`) is [`Gone`], and the view gives the terminal back and exits.
//!
//! The keys decoded are those the view uses: printable characters, Tab and
//! Shift-Tab, Enter, Esc, Ctrl-C (raw mode delivers it as a byte), the
//! arrows, Home, End, Page Up and Down, F1 and F9, in the encodings
//! xterm-like terminals send (CSI and SS3). Anything else is skipped.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// The terminal is no longer there to read from.
#[derive(Debug, PartialEq, Eq)]
pub struct Gone;

/// Where keys come from: standard input when it is the terminal, else the
/// process's controlling terminal (as crossterm would).
pub struct Input {
    /// Held open for `/dev/tty`; `None` reads descriptor 0.
    tty: Option<File>,
}

impl Input {
    pub fn open() -> std::io::Result<Input> {
        // SAFETY: isatty only inspects descriptor 0.
        if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
            return Ok(Input { tty: None });
        }
        Ok(Input { tty: Some(File::options().read(true).open("/dev/tty")?) })
    }

    fn fd(&self) -> RawFd {
        self.tty.as_ref().map_or(libc::STDIN_FILENO, AsRawFd::as_raw_fd)
    }

    /// Waits up to `timeout` for input and returns the keys it holds (none
    /// when the time ran out or a signal came), or [`Gone`].
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<KeyEvent>, Gone> {
        let fd = self.fd();
        let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let timeout_ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one pollfd, a live local, for the call's duration.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
        if ready < 0 {
            return match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => Ok(Vec::new()),
                _ => Err(Gone),
            };
        }
        if ready == 0 {
            return Ok(Vec::new());
        }
        if poll.revents & libc::POLLIN == 0 {
            // POLLHUP, POLLERR or POLLNVAL with nothing left to read.
            return Err(Gone);
        }
        let mut buffer = [0u8; 1024];
        // SAFETY: reads at most the buffer's length into a live local, from
        // descriptor 0 or the /dev/tty this Input holds open.
        let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        let read = usize::try_from(read).map_err(|_| std::io::Error::last_os_error());
        match read {
            Ok(0) => Err(Gone),
            Ok(n) => Ok(decode(buffer.get(..n).unwrap_or_default())),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) => Ok(Vec::new()),
            Err(_) => Err(Gone),
        }
    }
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// The keys in one read from the terminal. A read holds whole escape
/// sequences in practice (a terminal writes each at once); an Esc that
/// ends the bytes is the Esc key.
pub fn decode(bytes: &[u8]) -> Vec<KeyEvent> {
    let mut keys = Vec::new();
    let mut rest = bytes;
    while let Some((&first, tail)) = rest.split_first() {
        rest = tail;
        let code = match first {
            0x1b => {
                let (code, used) = escape(rest);
                rest = rest.get(used..).unwrap_or_default();
                code
            }
            0x03 => {
                keys.push(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
                continue;
            }
            b'\t' => Some(KeyCode::Tab),
            b'\r' | b'\n' => Some(KeyCode::Enter),
            0x7f | 0x08 => Some(KeyCode::Backspace),
            0x20..=0x7e => Some(KeyCode::Char(char::from(first))),
            0x80.. => {
                // One UTF-8 character: its lead byte and continuation bytes.
                let continuation = rest.iter().take_while(|&&b| b & 0xc0 == 0x80).count();
                let whole = bytes.len() - rest.len() - 1;
                let text = bytes.get(whole..whole + 1 + continuation).and_then(|b| std::str::from_utf8(b).ok());
                rest = rest.get(continuation..).unwrap_or_default();
                text.and_then(|t| t.chars().next()).map(KeyCode::Char)
            }
            _ => None,
        };
        if let Some(code) = code {
            keys.push(key(code));
        }
    }
    keys
}

/// The key an escape sequence names, from the bytes after its Esc, and how
/// many of them it took.
fn escape(after: &[u8]) -> (Option<KeyCode>, usize) {
    match after.first() {
        None => (Some(KeyCode::Esc), 0),
        // SS3: ESC O <final>, as in application cursor mode.
        Some(b'O') => match after.get(1) {
            Some(&last) => (ss3_or_csi_final(last), 2),
            None => (None, 1),
        },
        // CSI: ESC [ <parameters> <final byte in 0x40..=0x7e>.
        Some(b'[') => {
            let body = after.get(1..).unwrap_or_default();
            let Some(end) = body.iter().position(|b| (0x40..=0x7e).contains(b)) else {
                return (None, after.len());
            };
            let parameters = body.get(..end).unwrap_or_default();
            let last = body.get(end).copied().unwrap_or(0);
            let code = if last == b'~' {
                let number = std::str::from_utf8(parameters).ok().and_then(|p| p.split(';').next()).and_then(|p| p.parse::<u32>().ok());
                match number {
                    Some(1 | 7) => Some(KeyCode::Home),
                    Some(4 | 8) => Some(KeyCode::End),
                    Some(5) => Some(KeyCode::PageUp),
                    Some(6) => Some(KeyCode::PageDown),
                    Some(11) => Some(KeyCode::F(1)),
                    Some(20) => Some(KeyCode::F(9)),
                    _ => None,
                }
            } else {
                ss3_or_csi_final(last)
            };
            (code, 1 + end + 1)
        }
        // Esc then another key (Alt-key): the Esc alone, the key after.
        Some(_) => (Some(KeyCode::Esc), 0),
    }
}

fn ss3_or_csi_final(last: u8) -> Option<KeyCode> {
    match last {
        b'A' => Some(KeyCode::Up),
        b'B' => Some(KeyCode::Down),
        b'C' => Some(KeyCode::Right),
        b'D' => Some(KeyCode::Left),
        b'H' => Some(KeyCode::Home),
        b'F' => Some(KeyCode::End),
        b'P' => Some(KeyCode::F(1)),
        b'Z' => Some(KeyCode::BackTab),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(bytes: &[u8]) -> Vec<KeyCode> {
        decode(bytes).into_iter().map(|k| k.code).collect()
    }

    #[test]
    fn keys_the_view_uses() {
        assert_eq!(codes(b"qKs"), [KeyCode::Char('q'), KeyCode::Char('K'), KeyCode::Char('s')]);
        assert_eq!(codes(b"\x1b[A\x1b[B\x1bOC\x1bOD"), [KeyCode::Up, KeyCode::Down, KeyCode::Right, KeyCode::Left]);
        assert_eq!(
            codes(b"\x1b[5~\x1b[6~\x1b[H\x1b[F\x1b[1~\x1b[4~"),
            [KeyCode::PageUp, KeyCode::PageDown, KeyCode::Home, KeyCode::End, KeyCode::Home, KeyCode::End]
        );
        assert_eq!(codes(b"\t\x1b[Z\r"), [KeyCode::Tab, KeyCode::BackTab, KeyCode::Enter]);
        assert_eq!(codes(b"\x1bOP\x1b[11~\x1b[20~"), [KeyCode::F(1), KeyCode::F(1), KeyCode::F(9)]);
        assert_eq!(codes(b"\x1b"), [KeyCode::Esc]);
        assert_eq!(codes(b"\x1bq"), [KeyCode::Esc, KeyCode::Char('q')]);
        assert_eq!(codes("é".as_bytes()), [KeyCode::Char('é')]);
        let ctrl_c = decode(b"\x03");
        assert_eq!(ctrl_c.len(), 1);
        assert_eq!(ctrl_c[0].code, KeyCode::Char('c'));
        assert!(ctrl_c[0].modifiers.contains(KeyModifiers::CONTROL));
    }

    #[test]
    fn unknown_and_cut_sequences_are_skipped() {
        assert_eq!(codes(b"\x1b[99~q"), [KeyCode::Char('q')]);
        assert_eq!(codes(b"\x1b[1;5"), []);
        assert_eq!(codes(b"\x1bO"), []);
        assert_eq!(codes(b"\x00\x1f"), []);
        // A lone continuation byte is not a character.
        assert_eq!(codes(b"\x80q"), [KeyCode::Char('q')]);
    }
}
