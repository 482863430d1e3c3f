//! The monitor's log: one line per event on stderr (journald and
//! `kubectl logs` take it from there).
//!
//! Each line is a `tracing` event of target [`TARGET`], written by
//! tracing-subscriber's fmt layer ([`init`]): as text, an RFC 3339
//! timestamp (UTC), the level, the target and the message,
//!
//! ```text
//! 2026-12-01T21:50:33.123456Z  WARN gpuslice::monitor: NVML disabled (--no-nvml): running in ledger-only mode
//! ```
//!
//! or, with `--log-format json`, one JSON object a line with `timestamp`,
//! `level`, `message` and `target`. `RUST_LOG` filters the events as
//! env-filter reads it (`warn`, `gpuslice=error`, …); unset or empty, the
//! monitor logs at `info`.
//!
//! Much of what the monitor complains about is written by tenants and
//! other local users (ledger files, their names, the slots in them) or by
//! whoever edits the configuration, so the log is bounded two ways:
//! - every message is cut to [`MAX_LINE_BYTES`] (the line adds only the
//!   timestamp, level and target, and in JSON its escapes), and [`bounded`]
//!   cuts one echoed value (a file name, a tenant string, a configuration
//!   value) to [`MAX_VALUE_CHARS`], saying how long it was;
//! - a complaint that can repeat goes through [`limited`] with a key (the
//!   file it is about, or the user who made the files): at most
//!   [`BURST_LINES`] lines per key per [`WINDOW`]; past that the lines are
//!   counted, and one line says how many were left out when the window
//!   ends ([`flush_suppressed`], every round) or the monitor stops
//!   ([`flush_all`]). Complaints about new files also go through a key of
//!   the files' owner ([`limited_per_owner`]), with [`OWNER_BURST_LINES`],
//!   so that one user making many files cannot fill the log either.
//!
//! The limits count lines before `RUST_LOG` filters them, so a filter
//! changes what is shown, never how much a flood may write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// The longest line written, in bytes (longer ones are cut).
pub const MAX_LINE_BYTES: usize = 2048;
/// The longest echoed value, in characters (longer ones are cut).
pub const MAX_VALUE_CHARS: usize = 160;
/// Lines per key and window before lines are left out.
pub const BURST_LINES: u32 = 5;
/// Lines about the files of one owner per window (see [`limited_per_owner`]).
pub const OWNER_BURST_LINES: u32 = 100;
/// The window of [`BURST_LINES`].
pub const WINDOW: Duration = Duration::from_secs(60);
/// Keys followed at once; lines past this share one key.
const MAX_KEYS: usize = 4096;
/// The key shared past [`MAX_KEYS`].
const OVERFLOW_KEY: &str = "other files";
/// The target of every event: `RUST_LOG=gpuslice=warn` (or
/// `gpuslice::monitor=warn`) selects it.
pub const TARGET: &str = "gpuslice::monitor";
/// The filter when `RUST_LOG` is unset or empty (or cannot be read).
const DEFAULT_FILTER: &str = "info";

/// How lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Timestamp, level, target and message, separated by spaces.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, message, target.
    Json,
}

/// The filter `RUST_LOG` asks for (`None`: unset), or, when it cannot be
/// read, the default filter and what to say about it.
fn filter_from(rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let default = || EnvFilter::builder().parse(DEFAULT_FILTER).unwrap_or_else(|_| EnvFilter::default());
    let Some(directives) = rust_log.map(str::trim).filter(|d| !d.is_empty()) else {
        return (default(), None);
    };
    match EnvFilter::builder().parse(directives) {
        Ok(filter) => (filter, None),
        Err(e) => (
            default(),
            Some(format!(
                "RUST_LOG {}: {e}; logging at {DEFAULT_FILTER}. RUST_LOG takes a level (off, error, warn, info, debug, trace) \
                 or TARGET=LEVEL directives separated by commas, such as gpuslice=warn",
                bounded(directives)
            )),
        ),
    }
}

/// Sends the log to stderr in `format`, filtered by `RUST_LOG`. Called once,
/// first thing, by the monitor; before it (and in other verbs and unit
/// tests) events go nowhere. A second call changes nothing.
pub fn init(format: Format) {
    let rust_log = std::env::var_os("RUST_LOG").map(|v| v.to_string_lossy().into_owned());
    let (filter, complaint) = filter_from(rust_log.as_deref());
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_target(true).with_env_filter(filter);
    let installed = match format {
        Format::Text => builder.try_init(),
        Format::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(false).try_init(),
    };
    if installed.is_ok() {
        if let Some(complaint) = complaint {
            warn(&complaint);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// `text` cut to at most `max_bytes` bytes on a character boundary, with
/// what was cut said at the end.
fn cut(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes not shown]", &text[..end], text.len() - end).into()
}

/// An echoed value, cut to [`MAX_VALUE_CHARS`] characters and shown with
/// Rust's escapes (so a control character or a newline cannot forge a
/// line), with its length when it was cut.
pub fn bounded(value: &str) -> String {
    let chars = value.chars().count();
    if chars <= MAX_VALUE_CHARS {
        return value.escape_debug().to_string();
    }
    let head: String = value.chars().take(MAX_VALUE_CHARS).collect();
    format!("{}… ({} bytes in all)", head.escape_debug(), value.len())
}

/// A message cut to the bound of one log line (for errors printed outside
/// the log, such as the one the monitor exits with).
pub fn bounded_message(message: &str) -> String {
    cut(message, MAX_LINE_BYTES).into_owned()
}

fn line(level: Level, message: &str) {
    let message = cut(message, MAX_LINE_BYTES);
    match level {
        Level::Info => tracing::info!(target: TARGET, "{message}"),
        Level::Warn => tracing::warn!(target: TARGET, "{message}"),
        Level::Error => tracing::error!(target: TARGET, "{message}"),
    }
}

pub fn info(message: &str) {
    line(Level::Info, message);
}

pub fn warn(message: &str) {
    line(Level::Warn, message);
}

pub fn error(message: &str) {
    line(Level::Error, message);
}

/// One key's window.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    written: u32,
    suppressed: u64,
    level: Level,
}

/// The windows of all keys; a value so that its rules are tested without
/// the clock or stderr.
#[derive(Debug, Default)]
pub struct Limiter {
    windows: HashMap<String, Window>,
}

/// What to do with one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Write,
    Suppress,
}

impl Limiter {
    /// Whether a line under `key` at `now` is written; counts it either way.
    pub fn admit(&mut self, key: &str, level: Level, now: Instant) -> Decision {
        self.admit_up_to(key, BURST_LINES, level, now)
    }

    /// [`admit`](Self::admit) with a burst of `burst` lines.
    pub fn admit_up_to(&mut self, key: &str, burst: u32, level: Level, now: Instant) -> Decision {
        let key = if self.windows.contains_key(key) || self.windows.len() < MAX_KEYS { key } else { OVERFLOW_KEY };
        let window = self.windows.entry(key.to_string()).or_insert(Window { started: now, written: 0, suppressed: 0, level });
        if window.written < burst {
            window.written += 1;
            Decision::Write
        } else {
            window.suppressed += 1;
            if level == Level::Error || (level == Level::Warn && window.level == Level::Info) {
                window.level = level;
            }
            Decision::Suppress
        }
    }

    /// The keys whose window ended by `now` (all with `all`), with what
    /// they left out (nothing for some); those windows are forgotten.
    pub fn expire(&mut self, now: Instant, all: bool) -> Vec<(String, Level, u64, Duration)> {
        let mut ended = Vec::new();
        self.windows.retain(|key, w| {
            let age = now.saturating_duration_since(w.started);
            if !all && age < WINDOW {
                return true;
            }
            if w.suppressed > 0 {
                ended.push((key.clone(), w.level, w.suppressed, age));
            }
            false
        });
        ended.sort();
        ended
    }
}

static LIMITER: Mutex<Option<Limiter>> = Mutex::new(None);

fn with_limiter<T>(f: impl FnOnce(&mut Limiter) -> T) -> T {
    let mut guard = LIMITER.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Limiter::default))
}

/// Writes a complaint that may repeat, unless `key` (what it is about: a
/// file's path, a user) has had its [`BURST_LINES`] in this window.
pub fn limited(key: &str, level: Level, message: &str) {
    if with_limiter(|l| l.admit(key, level, Instant::now())) == Decision::Write {
        line(level, message);
    }
}

/// [`limited`] by the file `key`, and also by its `owner` (a user's files
/// together get [`OWNER_BURST_LINES`] per window).
pub fn limited_per_owner(key: &str, owner: &str, level: Level, message: &str) {
    let now = Instant::now();
    let admitted = with_limiter(|l| {
        l.admit_up_to(owner, OWNER_BURST_LINES, level, now) == Decision::Write && l.admit(key, level, now) == Decision::Write
    });
    if admitted {
        line(level, message);
    }
}

fn write_summaries(ended: Vec<(String, Level, u64, Duration)>) {
    for (key, level, suppressed, age) in ended {
        line(level, &format!("{suppressed} more line(s) about {key} suppressed in the last {} s", age.as_secs().max(1)));
    }
}

/// Says, for each key whose window has ended, how many of its lines were
/// left out. Called every round.
pub fn flush_suppressed() {
    write_summaries(with_limiter(|l| l.expire(Instant::now(), false)));
}

/// Says how many lines were left out, for every key. Called when stopping.
pub fn flush_all() {
    write_summaries(with_limiter(|l| l.expire(Instant::now(), true)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn long_lines_and_values_are_cut_and_say_so() {
        let long = "9".repeat(50 << 20);
        let cut_line = cut(&long, MAX_LINE_BYTES);
        assert!(
            cut_line.len() < MAX_LINE_BYTES + 64 && cut_line.ends_with(&format!("[{} more bytes not shown]", long.len() - MAX_LINE_BYTES))
        );
        let value = bounded(&long);
        assert!(value.len() < MAX_VALUE_CHARS + 64 && value.ends_with(&format!("({} bytes in all)", long.len())), "{value}");
        assert_eq!(bounded("a\nb"), "a\\nb", "a value cannot start a line of its own");
        // Multi-byte characters are never split.
        let wide = "é".repeat(MAX_LINE_BYTES);
        assert!(cut(&wide, MAX_LINE_BYTES).starts_with('é'));
        assert_eq!(bounded_message("short"), "short");
    }

    #[test]
    fn rust_log_picks_the_level_and_a_bad_one_is_named_and_left_at_info() {
        let level = |rust_log: Option<&str>| filter_from(rust_log).0.max_level_hint();
        assert_eq!(level(None), Some(LevelFilter::INFO), "unset: info");
        assert_eq!(level(Some(" ")), Some(LevelFilter::INFO), "empty: info");
        assert_eq!(level(Some("warn")), Some(LevelFilter::WARN));
        assert_eq!(level(Some("gpuslice=error")), Some(LevelFilter::ERROR));
        assert_eq!(level(Some("off")), Some(LevelFilter::OFF));
        assert!(filter_from(Some("warn")).1.is_none());
        let (filter, complaint) = filter_from(Some("gpuslice=lo\u{7}ud"));
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::INFO));
        let complaint = complaint.expect("a bad RUST_LOG is named");
        assert!(complaint.contains("RUST_LOG gpuslice=lo\\u{7}ud:") && complaint.contains("gpuslice=warn"), "{complaint}");
    }

    #[test]
    fn each_key_gets_its_burst_per_window_and_the_rest_is_counted() {
        let (mut limiter, t0) = (Limiter::default(), Instant::now());
        let decisions: Vec<Decision> = (0..20).map(|_| limiter.admit("/d/a.ledger", Level::Warn, t0)).collect();
        assert_eq!(decisions.iter().filter(|d| **d == Decision::Write).count(), BURST_LINES as usize);
        // Another key is not held back by the first.
        assert_eq!(limiter.admit("/d/b.ledger", Level::Info, t0), Decision::Write);
        assert!(limiter.expire(t0 + WINDOW / 2, false).is_empty(), "the window has not ended");
        let ended = limiter.expire(t0 + WINDOW, false);
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!((ended[0].0.as_str(), ended[0].1, ended[0].2), ("/d/a.ledger", Level::Warn, 15));
        // A new window writes again.
        assert_eq!(limiter.admit("/d/a.ledger", Level::Warn, t0 + WINDOW), Decision::Write);
    }

    #[test]
    fn keys_past_the_bound_share_one() {
        let (mut limiter, t0) = (Limiter::default(), Instant::now());
        for n in 0..MAX_KEYS {
            limiter.admit(&format!("k{n}"), Level::Info, t0);
        }
        for _ in 0..BURST_LINES {
            assert_eq!(limiter.admit("one more", Level::Info, t0), Decision::Write);
        }
        assert_eq!(limiter.admit("and another", Level::Info, t0), Decision::Suppress);
        let ended = limiter.expire(t0, true);
        assert_eq!(ended, vec![(OVERFLOW_KEY.to_string(), Level::Info, 1, Duration::ZERO)]);
    }
}
