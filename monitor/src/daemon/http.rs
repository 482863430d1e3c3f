//! `/metrics`, `/healthz` and a landing page at `/` over HTTP/1.1 on
//! `--listen`.
//!
//! The default port is 9494 ([`DEFAULT_LISTEN`]), not 9400: 9400 is
//! dcgm-exporter's default, and gpuslice runs on the same GPU nodes as
//! dcgm-exporter (gpuslice says what each tenant holds and gets,
//! dcgm-exporter what the device does: they are scraped side by side), so
//! with one default for both the second to start could not listen, and on a
//! host network the DaemonSets would fight over the port. `--listen :PORT` listens on every IPv4 address, as Go
//! exporters read it.
//!
//! The main loop renders both pages every round into [`Pages`]; this module
//! only hands out those pages, from a thread of its own, so no client can
//! hold up a round (caps, reclaim, kills).
//!
//! Anyone who reaches the port is a client: the DaemonSet listens on every
//! address and its liveness probe asks `/healthz`, so a pod that holds
//! connections open must not be able to get the monitor restarted. So:
//! - hyper reads and writes HTTP, and tokio runs each connection as a task
//!   on that one thread (a current-thread runtime): many slow clients cost
//!   memory, never threads, and none waits for another;
//! - a connection carries one request and has [`REQUEST_DEADLINE`] for all
//!   of it, from accept to the last byte of the answer, however slowly the
//!   client sends or reads; then it is closed;
//! - at most [`MAX_CONNECTIONS`] are open, each reading a head of at most
//!   [`MAX_HEAD_BYTES`]; one more closes the oldest (the nearest to its
//!   deadline anyway), so that a crowd of idle clients cannot keep a probe
//!   waiting in the kernel's accept queue.
//!
//! Failed requests are not logged: their number is the clients' choice.

use super::log;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a connection may take, from accept to the end of its answer. A
/// scrape or a probe over a working network takes milliseconds; Prometheus
/// allows a scrape 10 s by default, the kubelet a probe 1 s.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// Connections open at once. Each holds a descriptor, a task and its
/// buffers; 512 stay well under the usual soft limit of 1024 descriptors,
/// which the monitor shares with the tenants' ledgers.
pub const MAX_CONNECTIONS: usize = 512;

/// The longest request head read (hyper answers 431 past it). A scraper's
/// head is a few hundred bytes; hyper accepts no less than 8 KiB.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Pause after a failed accept (out of descriptors, most likely), so that
/// the loop does not spin while connections end.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// `--listen`'s default: port 9494 (see the module docs for why not 9400),
/// on the local host only, since `/metrics` names tenants and processes.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9494";

/// The page at `/`: what is served here, for a person who opens the port
/// in a browser.
const LANDING_PAGE: &str = concat!(
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gpuslice monitor</title></head>\n<body>\n",
    "<h1>gpuslice monitor ",
    env!("CARGO_PKG_VERSION"),
    "</h1>\n<ul>\n",
    "<li><a href=\"/metrics\">/metrics</a>: Prometheus metrics of the tenants, devices, processes and queue</li>\n",
    "<li><a href=\"/healthz\">/healthz</a>: <code>ok</code> while the monitor's rounds and arbiter run</li>\n",
    "</ul>\n</body></html>\n"
);

/// Binds `--listen`: `HOST:PORT`, `[V6]:PORT`, or `:PORT` for every IPv4
/// address (`0.0.0.0:PORT`).
pub fn bind(listen: &str) -> Result<std::net::TcpListener, String> {
    let address = match listen.strip_prefix(':') {
        Some(port) => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("--listen {listen:?}: expected HOST:PORT, [IPV6]:PORT or :PORT with a port from 0 to 65535"))?;
            format!("0.0.0.0:{port}")
        }
        None => listen.to_string(),
    };
    std::net::TcpListener::bind(&address).map_err(|e| format!("cannot listen on {listen}: {e}"))
}

/// What the server serves, replaced by the main loop every round. Answers
/// share these buffers rather than copying them.
#[derive(Default)]
pub struct Pages {
    pub metrics: Bytes,
    pub health: Bytes,
}

pub type SharedPages = Arc<Mutex<Pages>>;

/// Answers requests on `listener`, from a thread of its own, until the
/// process ends.
pub fn serve(listener: std::net::TcpListener, pages: SharedPages) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the HTTP server: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("cannot make the listening socket non-blocking: {e}"))?;
    let listener = {
        let _runtime = runtime.enter();
        TcpListener::from_std(listener).map_err(|e| format!("cannot serve the listening socket: {e}"))?
    };
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || runtime.block_on(accept(listener, pages)))
        .map_err(|e| format!("cannot start the HTTP server's thread: {e}"))?;
    Ok(())
}

async fn accept(listener: TcpListener, pages: SharedPages) {
    let mut open: VecDeque<JoinHandle<()>> = VecDeque::new();
    let mut failing = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                failing = false;
                stream
            }
            Err(e) => {
                if !failing {
                    log::warn(&format!("cannot accept an HTTP connection: {e}"));
                    failing = true;
                }
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    if let Some(oldest) = open.pop_front() {
                        oldest.abort();
                    }
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        open.retain(|task| !task.is_finished());
        if open.len() >= MAX_CONNECTIONS {
            if let Some(oldest) = open.pop_front() {
                oldest.abort();
            }
        }
        open.push_back(tokio::spawn(connection(stream, Arc::clone(&pages))));
    }
}

/// One connection, one request. However it ends (answered, refused by
/// hyper, out of time, aborted), dropping it closes the socket.
async fn connection(stream: TcpStream, pages: SharedPages) {
    let service = service_fn(move |request| {
        let response = respond(&request, &pages);
        async move { Ok::<_, Infallible>(response) }
    });
    let serving = http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES)
        // REQUEST_DEADLINE bounds the head and everything after it.
        .header_read_timeout(None)
        // Header names as the server before this one wrote them, for clients
        // that compare them as written (the end-to-end tests' among them).
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(REQUEST_DEADLINE, serving).await;
}

fn respond<B>(request: &Request<B>, pages: &SharedPages) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => (StatusCode::OK, crate::metrics::CONTENT_TYPE, lock(pages).metrics.clone()),
        (&Method::GET | &Method::HEAD, "/healthz") => {
            let health = lock(pages).health.clone();
            // A monitor whose arbiter stopped is not healthy: its liveness
            // probe restarts it.
            let status = if health.starts_with(b"ok") { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
            (status, TEXT, health)
        }
        (&Method::GET | &Method::HEAD, "/") => (StatusCode::OK, HTML, Bytes::from_static(LANDING_PAGE.as_bytes())),
        (&Method::GET | &Method::HEAD, _) => (StatusCode::NOT_FOUND, TEXT, Bytes::from_static(b"not found: try /metrics or /healthz\n")),
        _ => (StatusCode::METHOD_NOT_ALLOWED, TEXT, Bytes::from_static(b"only GET and HEAD are served\n")),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    response
}

/// The pages, also after a panic elsewhere while they were held: they are
/// whole either way, replaced by one assignment.
fn lock(pages: &SharedPages) -> MutexGuard<'_, Pages> {
    pages.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> SharedPages {
        Arc::new(Mutex::new(Pages { metrics: Bytes::from_static(b"m 1\n"), health: Bytes::from_static(b"ok\n") }))
    }

    fn get(method: Method, target: &str) -> Response<Full<Bytes>> {
        let request = Request::builder().method(method).uri(target).body(()).unwrap();
        respond(&request, &pages())
    }

    fn body(response: Response<Full<Bytes>>) -> Bytes {
        use http_body_util::BodyExt;
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(response.into_body().collect()).unwrap().to_bytes()
    }

    #[test]
    fn pages_are_served_with_their_content_types() {
        let metrics = get(Method::GET, "/metrics?name=x");
        assert_eq!(metrics.status(), StatusCode::OK);
        assert_eq!(metrics.headers()[CONTENT_TYPE], "text/plain; version=0.0.4; charset=utf-8");
        assert_eq!(body(metrics), "m 1\n");
        let health = get(Method::HEAD, "/healthz");
        assert_eq!(health.status(), StatusCode::OK);
        assert_eq!(health.headers()[CONTENT_TYPE], TEXT);
    }

    #[test]
    fn the_landing_page_links_the_pages() {
        let landing = get(Method::GET, "/");
        assert_eq!(landing.status(), StatusCode::OK);
        assert_eq!(landing.headers()[CONTENT_TYPE], HTML);
        let text = String::from_utf8(body(landing).to_vec()).unwrap();
        assert!(text.contains("href=\"/metrics\"") && text.contains("href=\"/healthz\""), "{text}");
        assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    }

    #[test]
    fn listen_addresses_in_every_accepted_form() {
        let listener = bind(":0").unwrap();
        assert!(listener.local_addr().unwrap().ip().is_unspecified(), "{:?}", listener.local_addr());
        assert!(bind("127.0.0.1:0").unwrap().local_addr().unwrap().ip().is_loopback());
        for bad in [":", ":x", ":70000", ":-1"] {
            let e = bind(bad).unwrap_err();
            assert!(e.contains(&format!("--listen {bad:?}")) && e.contains(":PORT"), "{e}");
        }
        assert!(bind("nowhere").unwrap_err().contains("cannot listen on nowhere"));
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        assert_eq!(get(Method::GET, "/index.html").status(), StatusCode::NOT_FOUND);
        let post = get(Method::POST, "/metrics");
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[ALLOW], "GET, HEAD");
    }
}
