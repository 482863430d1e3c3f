//! The one grammar of every duration gpuslice reads: `run --queue
//! --timeout`, the configuration's `violation_grace`, `top --interval`,
//! `monitor --history-retention` and `report --since`.
//!
//! A duration is what the `humantime` crate reads (`500ms`, `90s`, `1.5s`,
//! `5m`, `1h 30m`, `2min`), or a plain number of seconds (`1`, `0.5`), as
//! `sleep`, `timeout` and `watch -n` take it. Only ASCII is accepted (a
//! look-alike character copied from a document is refused, as in sizes),
//! and nothing longer than [`MAX`]: a deadline that far away is a typo,
//! and one past what the clock can add would be a crash.

use std::time::Duration;

/// What a duration may look like, for error messages.
pub const FORMAT: &str = "a duration like 500ms, 90s, 1.5s, 5m or 1h 30m, or a number of seconds like 5";

/// The longest duration accepted: a year.
pub const MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a duration (see the module docs); the error says what was wrong
/// and what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    if let Some(c) = text.chars().find(|c| !c.is_ascii()) {
        return Err(format!("{text:?} contains U+{:04X}, which is not ASCII: expected {FORMAT}", c as u32));
    }
    let trimmed = text.trim_ascii();
    let duration = match plain_seconds(trimmed) {
        Some(seconds) => seconds,
        None => humantime::parse_duration(trimmed).map_err(|e| format!("{text:?}: {e}: expected {FORMAT}"))?,
    };
    if duration > MAX {
        return Err(format!("{text:?} is longer than a year: expected {FORMAT}"));
    }
    Ok(duration)
}

/// `5` or `0.5`: digits, at most one dot with digits on both sides.
fn plain_seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(whole) && digits(fraction)) {
        return None;
    }
    // Whole numbers of more than 20 digits, or a value past `MAX`, are
    // caught by the bound; `try_from_secs_f64` refuses what no `Duration`
    // holds.
    Duration::try_from_secs_f64(text.parse::<f64>().ok()?).ok().or(Some(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_form() {
        for (text, expected) in [
            ("500ms", Duration::from_millis(500)),
            ("90s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("5m", Duration::from_secs(300)),
            ("2min", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1h 30m", Duration::from_secs(5400)),
            ("1h30m", Duration::from_secs(5400)),
            ("0s", Duration::ZERO),
            ("1", Duration::from_secs(1)),
            ("0.25", Duration::from_millis(250)),
            (" 5s ", Duration::from_secs(5)),
            ("365d", MAX),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn refused_with_what_is_accepted() {
        for bad in
            ["", "s", "-1s", "+1s", "1e3s", "soon", "5 s s", ".5", "5.", "1.2.3", "5sec\u{a0}", "１s", "366d", "99999999999999999999999"]
        {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(FORMAT), "{bad:?}: {e}");
            assert!(e.starts_with(&format!("{bad:?}")), "{bad:?}: {e}");
        }
        assert!(parse("5sec\u{a0}").unwrap_err().contains("U+00A0"));
        assert!(parse("400d").unwrap_err().contains("longer than a year"));
    }
}
