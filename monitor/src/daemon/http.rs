//! `/metrics` and `/healthz` over plain HTTP/1.1 on `--listen`.
//!
//! One thread answers one request per connection from texts the main loop
//! renders each round, so a slow scraper never holds up reclaim.

use super::log;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server serves, replaced by the main loop every round.
#[derive(Default)]
pub struct Pages {
    pub metrics: String,
    pub health: String,
}

pub type SharedPages = Arc<Mutex<Pages>>;

/// Answers requests on `listener` until the process ends.
pub fn serve(listener: TcpListener, pages: SharedPages) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => {
                    if let Err(e) = answer(stream, &pages) {
                        log::warn(&format!("HTTP request failed: {e}"));
                    }
                }
                Err(e) => log::warn(&format!("cannot accept an HTTP connection: {e}")),
            }
        }
    });
}

fn answer(mut stream: TcpStream, pages: &SharedPages) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = {
        let pages = pages.lock().unwrap_or_else(|e| e.into_inner());
        match (method, path) {
            ("GET" | "HEAD", "/metrics") => ("200 OK", crate::metrics::CONTENT_TYPE, pages.metrics.clone()),
            ("GET" | "HEAD", "/healthz") => ("200 OK", "text/plain; charset=utf-8", pages.health.clone()),
            ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", "not found: try /metrics or /healthz\n".into()),
            _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET and HEAD are served\n".into()),
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes())?;
    stream.flush()
}
