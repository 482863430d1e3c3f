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
/// two spaces apart, without trailing spaces. The padding is written by
/// hand: `format!`'s width stops at 65,535 (past it, it panics), and a cell
/// may hold anything a file or a process named.
pub fn render_rows(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..columns).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let width = widths.get(c).copied().unwrap_or(0);
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width.saturating_sub(cell.chars().count()) + 2));
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

    #[test]
    fn columns_align_and_any_cell_fits() {
        let mut out = String::new();
        render_rows(&mut out, &[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(out, "a    bb\nccc  d\n");
        // Wider than format!'s widest padding.
        let long = "x".repeat(70_000);
        let mut out = String::new();
        render_rows(&mut out, &[vec![long.clone(), "y".into()], vec!["z".into(), "w".into()]]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("{long}  y"));
        assert_eq!(lines[1].len(), 70_000 + 3);
        assert!(lines[1].starts_with('z') && lines[1].ends_with("  w"));
    }
}
