//! The tables `top` shows, as text cells, and how one table fits a width.
//!
//! A [`Table`] is the same for both outputs: `--once` prints every text
//! column whole ([`Table::text`]); the live view asks [`fit`] which
//! columns fit the terminal. Columns are dropped whole, least important
//! first, so that no value is ever cut; bars grow into the room that is
//! left (after the free text); only the last resort (a terminal narrower than the columns that
//! say whose row it is) cuts a value, and then with a visible `…`.

use std::fmt::Write;

/// How a cell stands out on the screen; plain text ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    /// Worth a look: memory near the cap, a dead process awaiting reclaim.
    Warn,
    /// Something was refused or is over a limit.
    Alert,
}

/// A bar drawn in a bar column: how full, and where a mark (a compute
/// target) sits, both as ratios of the bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub fill_ratio: f64,
    pub mark_ratio: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// What `--once` prints.
    pub text: String,
    /// A shorter form for the live view (a UUID's first digits).
    pub short: Option<String>,
    pub tone: Tone,
    /// Only in bar columns.
    pub bar: Option<Bar>,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), short: None, tone: Tone::Plain, bar: None }
    }

    pub fn toned(text: impl Into<String>, tone: Tone) -> Cell {
        Cell { text: text.into(), short: None, tone, bar: None }
    }

    pub fn bar(bar: Bar, tone: Tone) -> Cell {
        Cell { text: String::new(), short: None, tone, bar: Some(bar) }
    }

    /// What the live view shows.
    pub fn live_text(&self) -> &str {
        self.short.as_deref().unwrap_or(&self.text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Shown whole or not at all.
    Text,
    /// A bar: live view only, as wide as there is room for.
    Bar,
    /// The last column, free text (a command line): it takes what room
    /// is left and may end in `…`, as in `ps` and `top`.
    Rest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub header: &'static str,
    /// 0: always shown; higher numbers are dropped first.
    pub priority: u8,
    pub kind: Kind,
}

pub const fn text(header: &'static str, priority: u8) -> Column {
    Column { header, priority, kind: Kind::Text }
}

pub const fn bar(header: &'static str, priority: u8) -> Column {
    Column { header, priority, kind: Kind::Bar }
}

pub const fn rest(header: &'static str, priority: u8) -> Column {
    Column { header, priority, kind: Kind::Rest }
}

/// One titled table of a frame.
pub struct Table {
    pub title: &'static str,
    pub columns: &'static [Column],
    pub rows: Vec<Vec<Cell>>,
    /// What names each row across refreshes, so that a selection stays on
    /// the same tenant or process when the rows move.
    pub keys: Vec<String>,
    /// What an empty table says instead of rows.
    pub empty: &'static str,
}

impl Table {
    /// The table as `--once` prints it: the title, then the text columns
    /// (bars left out) aligned, every value whole.
    pub fn text(&self, out: &mut String) {
        let _ = writeln!(out, "\n{}", self.title);
        if self.rows.is_empty() {
            let _ = writeln!(out, "{}", self.empty);
            return;
        }
        let shown: Vec<usize> = (0..self.columns.len()).filter(|&c| self.columns[c].kind != Kind::Bar).collect();
        let mut rows = vec![shown.iter().map(|&c| self.columns[c].header.to_string()).collect::<Vec<_>>()];
        rows.extend(
            self.rows.iter().map(|row| shown.iter().map(|&c| row.get(c).map_or(String::new(), |cell| cell.text.clone())).collect()),
        );
        crate::text::render_rows(out, &rows);
    }
}

/// Bars are at least this wide, or not shown; they grow to the widest
/// when there is room.
pub const BAR_MIN: u16 = 6;
const BAR_MAX: u16 = 24;
/// Blanks between columns where there is room, and the fewest.
const COLUMN_SPACING: u16 = 2;
const TIGHT_COLUMN_SPACING: u16 = 1;

/// Which columns the live view shows, in order, how wide, how far apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub columns: Vec<usize>,
    pub widths: Vec<u16>,
    pub spacing: u16,
}

fn chars(text: &str) -> u16 {
    u16::try_from(text.chars().count()).unwrap_or(u16::MAX)
}

/// The width a column needs: its widest cell or header; a bar its least.
fn natural(table: &Table, c: usize) -> u16 {
    let column = table.columns[c];
    match column.kind {
        Kind::Bar => BAR_MIN.max(chars(column.header)),
        Kind::Text | Kind::Rest => {
            table.rows.iter().filter_map(|r| r.get(c)).map(|cell| chars(cell.live_text())).chain([chars(column.header)]).max().unwrap_or(0)
        }
    }
}

/// The columns of `table` that fit in `room` cells: the least important
/// (highest priority number, the rightmost of equals) are dropped until
/// the rest fit whole, and those less important than the free-text column
/// until it fits whole too; then the free text takes what it needs, bars
/// grow into what is left, and the columns move apart where they all fit
/// whole. Only when the columns that cannot be dropped are wider than the
/// room is the widest of them narrowed.
pub fn fit(table: &Table, room: u16) -> Fitted {
    let natural: Vec<u16> = (0..table.columns.len()).map(|c| natural(table, c)).collect();
    // The free-text column needs only its header to be shown.
    let least = |c: usize| if table.columns[c].kind == Kind::Rest { chars(table.columns[c].header) } else { natural[c] };
    let mut shown: Vec<usize> = (0..table.columns.len()).collect();
    let needed = |shown: &[usize], spacing: u16| -> u32 {
        shown.iter().map(|&c| u32::from(least(c))).sum::<u32>()
            + u32::from(spacing) * u32::try_from(shown.len().saturating_sub(1)).unwrap_or(0)
    };
    while needed(&shown, TIGHT_COLUMN_SPACING) > u32::from(room) {
        let drop =
            shown.iter().enumerate().filter(|(_, &c)| table.columns[c].priority > 0).max_by_key(|(i, &c)| (table.columns[c].priority, *i));
        match drop {
            Some((i, _)) => {
                shown.remove(i);
            }
            None => break,
        }
    }
    // A column less important than the free text goes before that text
    // is cut.
    let whole = |shown: &[usize], spacing: u16| -> u32 {
        shown.iter().map(|&c| u32::from(natural[c])).sum::<u32>()
            + u32::from(spacing) * u32::try_from(shown.len().saturating_sub(1)).unwrap_or(0)
    };
    if let Some(rest) = shown.iter().map(|&c| table.columns[c]).find(|column| column.kind == Kind::Rest) {
        // Only where that makes it whole: else they stay, and it is cut.
        let kept: Vec<usize> = shown.iter().copied().filter(|&c| table.columns[c].priority <= rest.priority).collect();
        while whole(&kept, TIGHT_COLUMN_SPACING) <= u32::from(room) && whole(&shown, TIGHT_COLUMN_SPACING) > u32::from(room) {
            let drop = shown
                .iter()
                .enumerate()
                .filter(|(_, &c)| table.columns[c].priority > rest.priority)
                .max_by_key(|(i, &c)| (table.columns[c].priority, *i));
            match drop {
                Some((i, _)) => {
                    shown.remove(i);
                }
                None => break,
            }
        }
    }
    let mut widths: Vec<u16> = shown.iter().map(|&c| least(c)).collect();
    let spacing = if whole(&shown, COLUMN_SPACING) <= u32::from(room) { COLUMN_SPACING } else { TIGHT_COLUMN_SPACING };
    let used = needed(&shown, spacing);
    if used > u32::from(room) {
        // Last resort: the widest column gives up what is missing.
        let over = u16::try_from(used - u32::from(room)).unwrap_or(u16::MAX);
        if let Some(widest) = (0..widths.len()).max_by_key(|&i| widths[i]) {
            widths[widest] = widths[widest].saturating_sub(over).max(1);
        }
        return Fitted { columns: shown, widths, spacing };
    }
    let mut left = u16::try_from(u32::from(room) - used).unwrap_or(0);
    let grow = |widths: &mut Vec<u16>, left: &mut u16, kind: Kind, upto: &dyn Fn(usize) -> u16| {
        // One cell at a time, in turn, so that bars grow evenly.
        loop {
            let mut grew = false;
            for (i, &c) in shown.iter().enumerate() {
                if *left > 0 && table.columns[c].kind == kind && widths[i] < upto(c) {
                    widths[i] += 1;
                    *left -= 1;
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
    };
    grow(&mut widths, &mut left, Kind::Rest, &|c| natural[c]);
    grow(&mut widths, &mut left, Kind::Bar, &|_| BAR_MAX);
    Fitted { columns: shown, widths, spacing }
}

/// `text` in `width` cells: whole when it fits, else cut with a `…`.
pub fn clip(text: &str, width: u16) -> String {
    let width = usize::from(width);
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        cut.push('…');
    }
    cut
}

/// Eighths of a cell, for a bar's last partly filled cell.
const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
const FULL: char = '█';
const EMPTY: char = '░';
const MARK: char = '│';

/// A bar `width` cells wide: filled to `fill_ratio` (whole cells, then
/// eighths), the rest shaded so that its end shows without colour, and
/// the mark drawn over the cell where it falls.
pub fn bar_text(bar: Bar, width: u16) -> String {
    let width = usize::from(width);
    let eighths = (bar.fill_ratio.clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    let mut cells: Vec<char> = (0..width)
        .map(|i| match eighths.saturating_sub(i * 8) {
            0 => EMPTY,
            n if n >= 8 => FULL,
            n => EIGHTHS[n],
        })
        .collect();
    if let Some(mark) = bar.mark_ratio {
        let at = ((mark.clamp(0.0, 1.0) * width as f64).round() as usize).min(width.saturating_sub(1));
        if let Some(cell) = cells.get_mut(at) {
            *cell = MARK;
        }
    }
    cells.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] = &[text("NAME", 0), text("MEMORY", 0), bar("BAR", 3), text("EXTRA", 5), rest("COMMAND", 1)];

    fn table() -> Table {
        let row = vec![
            Cell::plain("team-a"),
            Cell::plain("164.0 MiB"),
            Cell::bar(Bar { fill_ratio: 0.5, mark_ratio: None }, Tone::Plain),
            Cell::plain("1234567"),
            Cell::plain("python train.py --epochs 10"),
        ];
        Table { title: "T", columns: COLUMNS, rows: vec![row], keys: vec!["a".into()], empty: "" }
    }

    #[test]
    fn columns_are_dropped_whole_least_important_first() {
        let t = table();
        // Everything: 6 + 9 + 6 + 7 + 27 and 4 gaps of 2.
        let wide = fit(&t, 120);
        assert_eq!(wide.columns, [0, 1, 2, 3, 4]);
        assert_eq!(wide.spacing, 2);
        assert_eq!(wide.widths[4], 27, "the command whole");
        assert!(wide.widths[2] > BAR_MIN, "the bar grows: {wide:?}");
        // 59 with single blanks: all, the command whole.
        let tight = fit(&t, 60);
        assert_eq!((tight.columns.len(), tight.spacing, tight.widths[4]), (5, 1, 27), "{tight:?}");
        // EXTRA (priority 5) goes first, then the bar (3): columns less
        // important than the command go before it is cut.
        let narrow = fit(&t, 52);
        assert_eq!(narrow.columns, [0, 1, 2, 4], "{narrow:?}");
        assert_eq!(narrow.widths[3], 27, "{narrow:?}");
        // Where the command cannot be whole anyway, the others stay.
        let cut = fit(&t, 40);
        assert_eq!(cut.columns, [0, 1, 2, 3, 4], "{cut:?}");
        let narrower = fit(&t, 28);
        assert_eq!(narrower.columns, [0, 1, 4], "{narrower:?}");
        assert_eq!(narrower.widths[2], 11, "the command takes what is left: {narrower:?}");
        for fitted in [&wide, &narrow, &narrower] {
            let total: u16 = fitted.widths.iter().sum::<u16>() + fitted.spacing * (fitted.columns.len() as u16 - 1);
            assert!(total <= 120, "{fitted:?}");
            // No text column narrower than its value.
            assert!(fitted.widths[0] >= 6 && fitted.widths[1] >= 9, "{fitted:?}");
        }
        let total: u16 = narrower.widths.iter().sum::<u16>() + narrower.spacing * 2;
        assert!(total <= 28, "{narrower:?}");
        // Narrower than what must stay: the widest gives way, with a `…`.
        let tiny = fit(&t, 12);
        assert_eq!(tiny.columns, [0, 1]);
        assert_eq!(tiny.widths.iter().sum::<u16>() + 1, 12, "{tiny:?}");
        assert_eq!(clip("164.0 MiB", 5), "164.…");
        assert_eq!(clip("team-a", 6), "team-a");
    }

    #[test]
    fn once_text_has_every_text_column_and_no_bar() {
        let mut out = String::new();
        table().text(&mut out);
        assert_eq!(out, "\nT\nNAME    MEMORY     EXTRA    COMMAND\nteam-a  164.0 MiB  1234567  python train.py --epochs 10\n");
    }

    #[test]
    fn bars() {
        assert_eq!(bar_text(Bar { fill_ratio: 0.5, mark_ratio: None }, 8), "████░░░░");
        assert_eq!(bar_text(Bar { fill_ratio: 0.0, mark_ratio: None }, 4), "░░░░");
        assert_eq!(bar_text(Bar { fill_ratio: 1.7, mark_ratio: None }, 4), "████");
        // 29% of 10 cells: 2 whole and 7 eighths (2.32 rounded); the 30% mark on cell 3.
        assert_eq!(bar_text(Bar { fill_ratio: 0.29, mark_ratio: Some(0.3) }, 10), "██▉│░░░░░░");
        assert_eq!(bar_text(Bar { fill_ratio: 0.1, mark_ratio: Some(1.0) }, 4), "▍░░│");
    }
}
