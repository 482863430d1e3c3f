//! Text for people, shared by the verbs that print tables: sizes
//! ([`human_bytes`]), device names ([`device_name`]) and aligned columns
//! ([`render_rows`]).

use crate::snapshot::Snapshot;
use std::fmt::Write;

/// A size for people: `512.0 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A device's name in the tables: its index, and for a MIG device its
/// parent's index and its profile (`0 MIG 3g.71gb`).
pub fn device_name(snapshot: &Snapshot, index: u32, uuid: &str) -> String {
    match snapshot.devices.iter().find(|d| d.uuid == uuid).and_then(|d| d.mig_profile.as_ref()) {
        Some(profile) => format!("{index} MIG {profile}"),
        None => index.to_string(),
    }
}

/// Writes `rows` as aligned columns, each as wide as its widest cell and
/// two spaces apart, without trailing spaces.
pub fn render_rows(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..columns).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let width = widths.get(c).copied().unwrap_or(0);
            let _ = write!(line, "{cell:<width$}  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_people() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512 << 20), "512.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
