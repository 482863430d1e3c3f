//! Drawing one live frame with ratatui: a title line, the tables (each a
//! title line, a header and as many rows as the height allows, with a
//! `+N more` line for the rest), and a footer for prompts, messages and
//! key hints; the help over it all when asked for.
//!
//! Every table is fitted to the width by [`super::table::fit`], so a
//! narrow terminal loses whole columns, never half a value. Colour is
//! only a help: bars are shaded characters, the selection is reverse
//! video, and `NO_COLOR` leaves colour out entirely.

use super::table::{bar_text, clip, fit, Kind, Table, Tone};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

/// How cells are styled: with colour, or (`NO_COLOR`) with attributes only.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    pub color: bool,
}

impl Palette {
    /// Colour unless `NO_COLOR` is set to anything non-empty (no-color.org).
    pub fn from_env() -> Palette {
        Palette { color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) }
    }

    pub fn tone(self, tone: Tone) -> Style {
        match (tone, self.color) {
            (Tone::Plain, _) | (Tone::Warn, false) => Style::default(),
            (Tone::Warn, true) => Style::default().fg(Color::Yellow),
            (Tone::Alert, true) => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            (Tone::Alert, false) => Style::default().add_modifier(Modifier::BOLD),
        }
    }

    fn bar(self, tone: Tone) -> Style {
        match (tone, self.color) {
            (Tone::Plain, true) => Style::default().fg(Color::Green),
            _ => self.tone(tone),
        }
    }

    fn header(self) -> Style {
        let bold = Style::default().add_modifier(Modifier::BOLD);
        if self.color {
            bold.fg(Color::Cyan)
        } else {
            bold
        }
    }

    fn title(self, focused: bool) -> Style {
        let style = Style::default().add_modifier(Modifier::BOLD);
        if focused {
            style.add_modifier(Modifier::REVERSED)
        } else {
            style
        }
    }
}

/// One table as the frame shows it: where it is scrolled to and which row
/// is selected (`None`: the table has no focus).
pub struct Shown<'a> {
    pub table: &'a Table,
    pub offset: usize,
    pub selected: Option<usize>,
    /// Whether Tab and the arrows reach its hidden rows.
    pub scrollable: bool,
}

/// Lines a table wants: title, header, rows (or its empty line).
fn wanted(table: &Table) -> usize {
    2 + table.rows.len().max(1)
}

/// Lines each table gets from `room`: first a title, header and one row
/// each (tables at the end left out when even that does not fit), then
/// one line at a time to each table that wants more, in turn.
pub fn heights(tables: &[&Table], room: usize) -> Vec<usize> {
    let mut heights: Vec<usize> = Vec::new();
    let mut left = room;
    for table in tables {
        let least = wanted(table).min(3);
        if least > left {
            break;
        }
        heights.push(least);
        left -= least;
    }
    loop {
        let mut grew = false;
        for (height, table) in heights.iter_mut().zip(tables) {
            if left > 0 && *height < wanted(table) {
                *height += 1;
                left -= 1;
                grew = true;
            }
        }
        if !grew {
            return heights;
        }
    }
}

/// Rows of a table that fit in `lines` (after title and header), and
/// whether a `+N more` line takes the last of them.
pub fn visible_rows(rows: usize, lines: usize) -> (usize, bool) {
    let body = lines.saturating_sub(2);
    if rows <= body {
        (rows, false)
    } else {
        (body.saturating_sub(1), true)
    }
}

/// The scroll offset that keeps `selected` in view, starting from `offset`.
pub fn scroll_to(offset: usize, selected: usize, visible: usize, rows: usize) -> usize {
    let visible = visible.max(1);
    let offset = if selected < offset {
        selected
    } else if selected >= offset + visible {
        selected + 1 - visible
    } else {
        offset
    };
    offset.min(rows.saturating_sub(visible))
}

fn line_area(area: Rect, y: u16) -> Rect {
    Rect { x: area.x, y: area.y + y, width: area.width, height: 1 }
}

/// Draws `shown` in `area` (as tall as [`heights`] gave it).
pub fn draw_table(frame: &mut ratatui::Frame, shown: &Shown, area: Rect, palette: Palette) {
    let table = shown.table;
    let lines = usize::from(area.height);
    let (visible, more) = visible_rows(table.rows.len(), lines);
    let focused = shown.selected.is_some();
    let count = if table.rows.is_empty() { String::new() } else { format!(" ({})", table.rows.len()) };
    let hint = if focused { "◀ ↑↓" } else { "" };
    let title = format!(" {}{count} {hint}", table.title);
    let title = Line::from(vec![Span::styled(clip(&title, area.width), palette.title(focused))]);
    frame.render_widget(Paragraph::new(title), line_area(area, 0));
    if lines < 2 {
        return;
    }
    if table.rows.is_empty() {
        frame.render_widget(Paragraph::new(clip(table.empty, area.width)), line_area(area, 1));
        return;
    }
    let fitted = fit(table, area.width);
    let gap = " ".repeat(usize::from(fitted.spacing));
    let cells_line = |texts: Vec<Span<'static>>| {
        let mut spans = Vec::new();
        for (i, span) in texts.into_iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw(gap.clone()));
            }
            spans.push(span);
        }
        Line::from(spans)
    };
    let header = fitted
        .columns
        .iter()
        .zip(&fitted.widths)
        .map(|(&c, &w)| Span::styled(format!("{:<width$}", clip(table.columns[c].header, w), width = usize::from(w)), palette.header()))
        .collect();
    frame.render_widget(Paragraph::new(cells_line(header)), line_area(area, 1));
    for (y, r) in (shown.offset..table.rows.len()).take(visible).enumerate() {
        let row = &table.rows[r];
        let spans = fitted
            .columns
            .iter()
            .zip(&fitted.widths)
            .map(|(&c, &w)| match row.get(c) {
                Some(cell) if table.columns[c].kind == Kind::Bar => {
                    Span::styled(cell.bar.map_or_else(|| " ".repeat(usize::from(w)), |b| bar_text(b, w)), palette.bar(cell.tone))
                }
                Some(cell) => {
                    Span::styled(format!("{:<width$}", clip(cell.live_text(), w), width = usize::from(w)), palette.tone(cell.tone))
                }
                None => Span::raw(" ".repeat(usize::from(w))),
            })
            .collect();
        let mut line = cells_line(spans);
        if shown.selected == Some(r) {
            line = line.style(Style::default().add_modifier(Modifier::REVERSED));
        }
        let at = line_area(area, 2 + u16::try_from(y).unwrap_or(u16::MAX));
        frame.render_widget(Paragraph::new(line), at);
    }
    if more {
        let hidden = table.rows.len() - visible;
        let text = if shown.scrollable {
            format!(" +{hidden} more (Tab, ↑↓: scroll)")
        } else {
            format!(" +{hidden} more (a taller terminal shows them)")
        };
        let at = line_area(area, 2 + u16::try_from(visible).unwrap_or(u16::MAX));
        frame.render_widget(Paragraph::new(Span::styled(clip(&text, area.width), Style::default().add_modifier(Modifier::BOLD))), at);
    }
}

/// The keys, as the help shows them.
pub const HELP: &[(&str, &str)] = &[
    ("Tab", "move between the tenant and process tables"),
    ("↑ ↓  j k", "select a row"),
    ("PgUp PgDn", "a page up or down"),
    ("Home End  g G", "first or last row"),
    ("s", "sort by the next key: device, memory, compute, tenant, pid"),
    ("r", "reverse the order"),
    ("K  F9", "kill the selected process (root or its owner; asks first)"),
    ("h  ?", "this help (any key closes it)"),
    ("q  Esc  Ctrl-C", "quit"),
];

/// The help, over the middle of the screen.
pub fn draw_help(frame: &mut ratatui::Frame, palette: Palette) {
    let area = frame.area();
    let key_width = HELP.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(key, what)| Line::from(vec![Span::styled(format!("{key:<key_width$}  "), palette.header()), Span::raw(*what)]))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from("UUIDs show their first digits; `gpuslice top --once` prints them whole."));
    lines.push(Line::from("Bars: memory against the cap (or device); time used, │ marks the target."));
    lines.push(Line::from("unverified: not ours to check that it holds its slot (run as root)."));
    lines.push(Line::from("false claim: its ledger slot names a pid that does not hold the slot."));
    let width = lines.iter().map(Line::width).max().unwrap_or(0) + 4;
    let width = u16::try_from(width).unwrap_or(u16::MAX).min(area.width);
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX).min(area.height);
    let at = Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height };
    frame.render_widget(Clear, at);
    let block = Block::bordered().title(Span::styled(" gpuslice top: keys ", Style::default().add_modifier(Modifier::BOLD)));
    frame.render_widget(Paragraph::new(lines).block(block), at);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_gets_a_row_then_lines_in_turn() {
        let table =
            |rows: usize| Table { title: "T", columns: &[], rows: vec![vec![]; rows], keys: vec![String::new(); rows], empty: "none" };
        let (devices, tenants, processes) = (table(1), table(30), table(6));
        let all = [&devices, &tenants, &processes];
        // 60×15: 13 lines between the title and the footer.
        assert_eq!(heights(&all, 13), [3, 5, 5]);
        assert_eq!(heights(&all, 100), [3, 32, 8]);
        assert_eq!(heights(&all, 7), [3, 4], "the processes left out");
        assert_eq!(heights(&[&table(0)], 5), [3]);
        // 5 lines for 30 rows: 2 rows and `+28 more`.
        assert_eq!(visible_rows(30, 5), (2, true));
        assert_eq!(visible_rows(3, 5), (3, false));
        assert_eq!(visible_rows(0, 3), (0, false));
    }

    #[test]
    fn scrolling_keeps_the_selection_in_view() {
        assert_eq!(scroll_to(0, 0, 3, 10), 0);
        assert_eq!(scroll_to(0, 5, 3, 10), 3);
        assert_eq!(scroll_to(4, 2, 3, 10), 2);
        assert_eq!(scroll_to(8, 9, 3, 10), 7);
        assert_eq!(scroll_to(9, 9, 0, 10), 9);
    }

    #[test]
    fn no_color_means_no_colour() {
        let plain = Palette { color: false };
        for tone in [Tone::Plain, Tone::Warn, Tone::Alert] {
            assert_eq!(plain.tone(tone).fg, None);
            assert_eq!(plain.bar(tone).fg, None);
        }
        assert_eq!(plain.header().fg, None);
        assert_eq!(Palette { color: true }.tone(Tone::Alert).fg, Some(Color::Red));
    }
}
