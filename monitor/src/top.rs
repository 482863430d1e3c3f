//! `gpuslice top [--interval DUR] [--once]`: a live view of the host in
//! the terminal, in the spirit of nvidia-smi and nvitop: the devices (MIG
//! instances under their parent), each device's tenants (memory against
//! cap, compute limit, share, priority and target against use), their
//! processes, and the queue.
//!
//! Data flow: a [`Sampler`] reads the ledgers, NVML and the monitor's turn
//! tables exactly as `gpuslice status` does; [`sections`] turns its view
//! into titled tables of text cells; those are drawn with ratatui (live) or
//! printed as aligned plain text (`--once`, for scripts: no escape codes,
//! no terminal needed). The live view keeps one sampler, so the device
//! time a tenant used is a rate since the previous refresh.

use crate::config;
use crate::discovery::HostArgs;
use crate::error::Error;
use crate::sampler::{self, Sampler, View};
use crate::snapshot::Snapshot;
use crate::text::{device_name, human_bytes, render_rows};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Time between refreshes, such as 1s, 500ms or 1m (at least 100ms).
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one frame as plain text to stdout and exit: for scripts, no terminal needed.
    #[arg(long)]
    pub once: bool,
}

/// Shorter refreshes would spend the host's time re-reading ledgers that
/// cannot change that fast for a person.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How long the live view waits for a key before it checks its signals.
const INPUT_POLL: Duration = Duration::from_millis(100);

fn parse_interval(text: &str) -> Result<Duration, String> {
    match config::parse_duration(text) {
        Some(interval) if interval >= MIN_INTERVAL => Ok(interval),
        Some(_) => Err("the interval must be at least 100ms".into()),
        None => Err("expected a duration like 1s, 500ms or 1m".into()),
    }
}

pub fn main(args: TopArgs) -> Result<ExitCode, Error> {
    if args.once {
        let view = sampler::collect_view(&args.host)?;
        for note in &view.notes {
            eprintln!("gpuslice top: {note}");
        }
        for warning in &view.warnings {
            eprintln!("gpuslice top: warning: {warning}");
        }
        print!("{}", text(&view));
        return Ok(ExitCode::SUCCESS);
    }
    if !std::io::stdout().is_terminal() {
        return Err(Error::Usage("standard output is not a terminal; use `gpuslice top --once` for one frame as text".into()));
    }
    // The first look's errors (no such directory, NVML named but broken)
    // are printed as plain lines, before the screen is taken over.
    let mut sampler = Sampler::new(&args.host)?;
    let view = sampler.look()?;
    live(sampler, view, args.interval).map_err(Error::Failed)
}

/// How a cell stands out on the screen; plain text ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Plain,
    /// Worth a look: memory near the cap, a dead process awaiting reclaim.
    Warn,
    /// Something was refused or is over a limit.
    Alert,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cell {
    text: String,
    tone: Tone,
}

impl Cell {
    fn plain(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), tone: Tone::Plain }
    }

    fn toned(text: impl Into<String>, tone: Tone) -> Cell {
        Cell { text: text.into(), tone }
    }
}

/// One titled table of the frame.
struct Section {
    title: &'static str,
    header: &'static [&'static str],
    rows: Vec<Vec<Cell>>,
    /// What an empty table says instead of rows.
    empty: &'static str,
}

fn percent(ratio: f64) -> String {
    format!("{:.0}%", ratio * 100.0)
}

/// Memory near a cap or a device's total (90%) is worth a look; over it,
/// an alert.
fn fill_tone(used_bytes: u64, of_bytes: u64) -> Tone {
    if used_bytes > of_bytes {
        Tone::Alert
    } else if used_bytes.saturating_mul(10) >= of_bytes.saturating_mul(9) {
        Tone::Warn
    } else {
        Tone::Plain
    }
}

/// `used of` as a percentage cell, `-` where the whole is unknown or zero.
fn fill_cell(used_bytes: Option<u64>, of_bytes: Option<u64>) -> Cell {
    match (used_bytes, of_bytes) {
        (Some(used), Some(of)) if of > 0 => Cell::toned(percent(used as f64 / of as f64), fill_tone(used, of)),
        _ => Cell::plain("-"),
    }
}

/// The tables of one frame, in screen order.
fn sections(snapshot: &Snapshot, jobs: &[crate::queue::store::Job]) -> Vec<Section> {
    let mut sections = vec![devices(snapshot), tenants(snapshot), processes(snapshot)];
    if !snapshot.untracked_processes.is_empty() {
        sections.push(untracked(snapshot));
    }
    let queue = queue_rows(jobs);
    if !queue.is_empty() {
        sections.push(Section { title: "QUEUE", header: QUEUE_HEADER, rows: queue, empty: "" });
    }
    sections
}

fn devices(snapshot: &Snapshot) -> Section {
    let rows = snapshot
        .devices
        .iter()
        .map(|d| {
            let name = device_name(snapshot, d.index, &d.uuid);
            // A MIG instance hangs under its parent when the parent is listed.
            let under_parent = d.parent_uuid.as_ref().is_some_and(|p| snapshot.devices.iter().any(|other| &other.uuid == p));
            let tenants = snapshot.tenants.iter().filter(|t| t.devices.iter().any(|td| td.uuid == d.uuid)).count();
            vec![
                Cell::plain(if under_parent { format!("└ {name}") } else { name }),
                Cell::plain(d.uuid.clone()),
                Cell::plain(format!("{} / {}", d.memory_used_bytes.map_or("-".into(), human_bytes), human_bytes(d.memory_total_bytes))),
                fill_cell(d.memory_used_bytes, Some(d.memory_total_bytes)),
                Cell::plain(d.utilization_ratio.map_or("-".into(), percent)),
                Cell::plain(tenants.to_string()),
            ]
        })
        .collect();
    Section {
        title: "DEVICES",
        header: &["DEVICE", "UUID", "MEMORY USED / TOTAL", "USE", "UTIL", "TENANTS"],
        rows,
        empty: "no device: NVML did not answer and no ledger names one",
    }
}

/// Tenants by device, in the devices' order; tenants that used no device last.
fn tenants(snapshot: &Snapshot) -> Section {
    let mut rows = Vec::new();
    let order = |uuid: &str| snapshot.devices.iter().position(|d| d.uuid == uuid).unwrap_or(usize::MAX);
    let mut pairs: Vec<_> = snapshot.tenants.iter().flat_map(|t| t.devices.iter().map(move |d| (t, d))).collect();
    pairs.sort_by_key(|(t, d)| (order(&d.uuid), t.name.as_str()));
    for (t, d) in pairs {
        rows.push(vec![
            Cell::plain(device_name(snapshot, d.index, &d.uuid)),
            Cell::plain(t.name.clone()),
            Cell::plain(human_bytes(d.memory_used_bytes)),
            Cell::plain(d.memory_limit_bytes.map_or("none".into(), human_bytes)),
            fill_cell(Some(d.memory_used_bytes), d.memory_limit_bytes),
            Cell::plain(d.processes.to_string()),
            Cell::toned(d.alloc_denied_total.to_string(), if d.alloc_denied_total > 0 { Tone::Alert } else { Tone::Plain }),
            Cell::plain(d.compute_limit_ratio.map_or("none".into(), percent)),
            Cell::plain(d.compute_share_ratio.map_or("-".into(), percent)),
            Cell::plain(d.compute_priority.to_string()),
            Cell::plain(d.compute_target_ratio.map_or("-".into(), percent)),
            Cell::plain(d.compute_used_ratio.map_or("-".into(), percent)),
        ]);
    }
    for t in snapshot.tenants.iter().filter(|t| t.devices.is_empty()) {
        let mut row = vec![Cell::plain("-"), Cell::plain(t.name.clone()), Cell::plain("0 B")];
        row.extend(["-", "-", "0", "0", "-", "-", "-", "-", "-"].map(Cell::plain));
        rows.push(row);
    }
    Section {
        title: "TENANTS",
        // Short names (`status` spells them out), so that the table fits
        // a terminal of 100 columns.
        header: &["DEVICE", "TENANT", "MEMORY", "CAP", "OF CAP", "PROCS", "DENIED", "LIMIT", "SHARE", "PRIO", "TARGET", "USED"],
        rows,
        empty: "no tenant: no ledger in the directory",
    }
}

fn processes(snapshot: &Snapshot) -> Section {
    let mut rows = Vec::new();
    for t in &snapshot.tenants {
        let mut processes: Vec<_> = t.processes.iter().collect();
        processes.sort_by_key(|p| p.pid);
        for p in processes {
            rows.push(vec![
                Cell::plain(t.name.clone()),
                Cell::plain(p.pid.to_string()),
                Cell::plain(p.ns_pid.to_string()),
                Cell::plain(human_bytes(p.memory_used_bytes)),
                Cell::plain(p.driver_memory_used_bytes.map_or("-".into(), human_bytes)),
                Cell::plain(p.sm_utilization_ratio.map_or("-".into(), percent)),
                if p.alive { Cell::plain("alive") } else { Cell::toned("dead, awaiting reclaim", Tone::Warn) },
            ]);
        }
    }
    Section {
        title: "PROCESSES",
        header: &["TENANT", "PID", "NS PID", "MEMORY USED", "DRIVER SEES", "SM", "STATE"],
        rows,
        empty: "no process holds a ledger slot",
    }
}

fn untracked(snapshot: &Snapshot) -> Section {
    let rows = snapshot
        .untracked_processes
        .iter()
        .map(|u| {
            vec![
                Cell::plain(u.device.to_string()),
                Cell::plain(u.pid.to_string()),
                Cell::toned(human_bytes(u.memory_used_bytes), Tone::Warn),
            ]
        })
        .collect();
    Section { title: "UNTRACKED (using a GPU without the shim)", header: &["DEVICE", "PID", "MEMORY USED"], rows, empty: "" }
}

/// The queue's columns.
const QUEUE_HEADER: &[&str] = &["JOB", "NAME", "TENANT", "PRIO", "MEMORY", "DEVICES", "STATE", "FOR"];

/// The admission queue's live jobs in `dir` (none when it cannot be read),
/// running ones first, then the waiting ones in the order they will start.
fn queued_jobs(dir: &std::path::Path) -> Vec<crate::queue::store::Job> {
    let mut jobs = crate::queue::view(dir).map(|v| v.jobs).unwrap_or_default();
    // Stable: the waiting jobs keep the board's order, the order they start in.
    jobs.sort_by_key(|j| j.state == crate::queue::store::JobState::Waiting);
    jobs
}

/// The queued jobs, one row each under [`QUEUE_HEADER`]; the section is
/// shown only when there are some.
fn queue_rows(jobs: &[crate::queue::store::Job]) -> Vec<Vec<Cell>> {
    let now_ms = crate::queue::store::unix_ms();
    jobs.iter()
        .map(|job| {
            let since_ms = job.started_unix_ms.unwrap_or(job.submitted_unix_ms);
            vec![
                Cell::plain(job.id.to_string()),
                Cell::plain(job.name.clone().unwrap_or_else(|| "-".into())),
                Cell::plain(job.tenant.clone()),
                Cell::plain(job.priority.to_string()),
                Cell::plain(job.memory_bytes.map_or("whole GPU".into(), crate::text::human_bytes)),
                Cell::plain(if job.devices.is_empty() { "-".into() } else { job.devices.len().to_string() }),
                Cell::plain(format!("{:?}", job.state).to_lowercase()),
                Cell::plain(format!("{}s", now_ms.saturating_sub(since_ms) / 1000)),
            ]
        })
        .collect()
}

/// The first line of a frame: where the view comes from.
fn title(view: &View) -> String {
    format!(
        "gpuslice top   ledger directory: {}   NVML: {}",
        view.dir.display(),
        if view.snapshot.nvml { "yes" } else { "no (ledger-only)" }
    )
}

/// One frame as plain text: the title, then each table with aligned columns.
fn text(view: &View) -> String {
    let mut out = title(view);
    out.push('\n');
    for section in sections(&view.snapshot, &queued_jobs(&view.dir)) {
        out.push('\n');
        out.push_str(section.title);
        out.push('\n');
        if section.rows.is_empty() {
            out.push_str(section.empty);
            out.push('\n');
            continue;
        }
        let mut rows = vec![section.header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
        rows.extend(section.rows.iter().map(|row| row.iter().map(|c| c.text.clone()).collect()));
        render_rows(&mut out, &rows);
    }
    out
}

/// The terminal, in raw mode on the alternate screen for as long as this
/// lives: dropping it gives the terminal back on every way out, an error
/// included (a panic is covered by ratatui's panic hook).
struct Tui {
    terminal: ratatui::DefaultTerminal,
}

impl Tui {
    fn start() -> Result<Tui, String> {
        match ratatui::try_init() {
            Ok(terminal) => Ok(Tui { terminal }),
            Err(e) => {
                ratatui::restore();
                Err(format!("cannot set up the terminal: {e}"))
            }
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        ratatui::restore();
    }
}

/// What the live view shows below the tables: the last refresh's trouble.
struct Footer {
    text: String,
    tone: Tone,
}

fn footer(view: &View, error: Option<&str>) -> Footer {
    if let Some(error) = error {
        return Footer { text: format!("cannot refresh: {error} (showing the last view)"), tone: Tone::Alert };
    }
    let mut lines = view.warnings.iter().map(|w| format!("warning: {w}")).chain(view.notes.iter().cloned());
    match lines.next() {
        Some(first) => {
            let more = lines.count();
            let text = if more > 0 { format!("{first} (and {more} more: see gpuslice status)") } else { first };
            Footer { text, tone: Tone::Warn }
        }
        None => Footer { text: String::new(), tone: Tone::Plain },
    }
}

fn live(mut sampler: Sampler, mut view: View, interval: Duration) -> Result<ExitCode, String> {
    // A signal ends the view as a key does: the terminal is given back.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(|e| format!("cannot handle signals: {e}"))?;
    }
    let mut tui = Tui::start()?;
    let mut error: Option<String> = None;
    let mut next = Instant::now() + interval;
    loop {
        let shown = footer(&view, error.as_deref());
        tui.terminal.draw(|frame| draw(frame, &view, &shown, interval)).map_err(|e| format!("cannot draw: {e}"))?;
        // Wait for a key, a resize or the next refresh.
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(ExitCode::SUCCESS);
            }
            let now = Instant::now();
            if now >= next {
                match sampler.look() {
                    Ok(fresh) => {
                        view = fresh;
                        error = None;
                    }
                    Err(e) => error = Some(e.to_string()),
                }
                // Late refreshes do not pile up: the next is an interval on.
                next = Instant::now() + interval;
                break;
            }
            let wait = next.saturating_duration_since(now).min(INPUT_POLL);
            if !event::poll(wait).map_err(|e| format!("cannot read the terminal: {e}"))? {
                continue;
            }
            match event::read().map_err(|e| format!("cannot read the terminal: {e}"))? {
                Event::Key(key) if is_quit(&key) => return Ok(ExitCode::SUCCESS),
                // Drawing again fits the frame to the new size.
                Event::Resize(..) => break,
                _ => {}
            }
        }
    }
}

/// `q`, Esc and Ctrl-C (which raw mode delivers as a key, not SIGINT).
fn is_quit(key: &KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

fn style(tone: Tone) -> Style {
    match tone {
        Tone::Plain => Style::default(),
        Tone::Warn => Style::default().fg(Color::Yellow),
        Tone::Alert => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
    }
}

/// Rows a section takes on screen: its rows (or its empty line), the
/// header and the border.
fn section_height(section: &Section) -> u16 {
    let body = if section.rows.is_empty() { 1 } else { section.rows.len() + 1 };
    u16::try_from(body + 2).unwrap_or(u16::MAX)
}

fn draw(frame: &mut ratatui::Frame, view: &View, shown: &Footer, interval: Duration) {
    let sections = sections(&view.snapshot, &queued_jobs(&view.dir));
    let mut constraints = vec![Constraint::Length(1)];
    constraints.extend(sections.iter().map(|s| Constraint::Length(section_height(s))));
    // The rest of the screen stays empty; the footer sits at the bottom.
    constraints.extend([Constraint::Min(0), Constraint::Length(1)]);
    let areas = Layout::vertical(constraints).split(frame.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    // What to press first: a long directory is what gets cut.
    let head = Line::from(vec![
        Span::styled("gpuslice top", bold),
        Span::raw(format!(
            "   q: quit   every {}   NVML: {}   ledger directory: {}",
            format_interval(interval),
            if view.snapshot.nvml { "yes" } else { "no (ledger-only)" },
            view.dir.display()
        )),
    ]);
    frame.render_widget(Paragraph::new(head), areas[0]);
    for (section, area) in sections.iter().zip(areas.iter().skip(1)) {
        draw_section(frame, section, *area);
    }
    if let Some(area) = areas.last() {
        frame.render_widget(Paragraph::new(Span::styled(shown.text.as_str(), style(shown.tone))), *area);
    }
}

fn draw_section(frame: &mut ratatui::Frame, section: &Section, area: Rect) {
    let block = Block::bordered().title(Span::styled(format!(" {} ", section.title), Style::default().add_modifier(Modifier::BOLD)));
    if section.rows.is_empty() {
        frame.render_widget(Paragraph::new(section.empty).block(block), area);
        return;
    }
    let widest: Vec<u16> = (0..section.header.len())
        .map(|c| {
            let cells = section.rows.iter().filter_map(|r| r.get(c)).map(|cell| cell.text.chars().count());
            let widest = cells.chain(section.header.get(c).map(|h| h.chars().count())).max().unwrap_or(0);
            u16::try_from(widest).unwrap_or(u16::MAX)
        })
        .collect();
    // Inside the border; the first two columns say what the row is about.
    let (widths, spacing) = fit(&widest, 2, area.width.saturating_sub(2));
    let header = Row::new(section.header.iter().copied()).style(Style::default().add_modifier(Modifier::BOLD));
    let rows = section
        .rows
        .iter()
        .map(|row| Row::new(row.iter().map(|cell| ratatui::widgets::Cell::from(Span::styled(cell.text.as_str(), style(cell.tone))))));
    frame.render_widget(
        Table::new(rows, widths.into_iter().map(Constraint::Length)).header(header).column_spacing(spacing).block(block),
        area,
    );
}

/// Blanks between columns, and the fewest a narrow terminal gets.
const COLUMN_SPACING: u16 = 2;
const TIGHT_COLUMN_SPACING: u16 = 1;

/// Column widths and the spacing between them within `room`: each column
/// as wide as its widest cell. Where that does not fit, the columns move
/// closer; where that is not enough, the first `keep` columns keep their
/// width and the others give way in proportion to theirs, so that a narrow
/// terminal still shows whose row it is.
fn fit(widest: &[u16], keep: usize, room: u16) -> (Vec<u16>, u16) {
    let columns = u32::try_from(widest.len()).unwrap_or(u32::MAX);
    let gaps = |spacing: u16| u32::from(spacing) * columns.saturating_sub(1);
    let kept: u32 = widest.iter().take(keep).copied().map(u32::from).sum();
    let rest: u32 = widest.iter().skip(keep).copied().map(u32::from).sum();
    let room = u32::from(room);
    for spacing in [COLUMN_SPACING, TIGHT_COLUMN_SPACING] {
        if kept + rest + gaps(spacing) <= room {
            return (widest.to_vec(), spacing);
        }
    }
    let left = room.saturating_sub(kept + gaps(TIGHT_COLUMN_SPACING));
    let give_way = |width: u16| u16::try_from(u32::from(width) * left / rest.max(1)).unwrap_or(width);
    (widest.iter().enumerate().map(|(c, &width)| if c < keep { width } else { give_way(width) }).collect(), TIGHT_COLUMN_SPACING)
}

/// `1s`, `500ms`: how the title says how often it refreshes.
fn format_interval(interval: Duration) -> String {
    if interval.subsec_millis() == 0 {
        format!("{}s", interval.as_secs())
    } else {
        format!("{}ms", interval.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{fixtures, DeviceView, TenantDeviceView};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    const GIB: u64 = 1 << 30;

    fn device(uuid: &str, parent: Option<&str>, profile: Option<&str>) -> DeviceView {
        DeviceView {
            index: 0,
            uuid: uuid.into(),
            memory_total_bytes: 4 * GIB,
            memory_used_bytes: Some(GIB),
            utilization_ratio: Some(0.25),
            parent_uuid: parent.map(Into::into),
            mig_profile: profile.map(Into::into),
            arbitrated: None,
        }
    }

    /// `team-a` on `GPU-0` with a 1 GiB cap, 0.95 GiB used, a 30% limit.
    fn view() -> View {
        let tenant_device = TenantDeviceView {
            compute_limit_ratio: Some(0.3),
            compute_target_ratio: Some(0.3),
            compute_unarbitrated_processes: None,
            compute_used_ratio: Some(0.29),
            alloc_denied_total: 2,
            ..fixtures::tenant_device(GIB / 100 * 95, Some(GIB), None)
        };
        let mut snapshot = fixtures::one_tenant(true, tenant_device, vec![]);
        snapshot.devices = vec![device("GPU-0", None, None)];
        View { dir: "/run/gpuslice".into(), snapshot, notes: vec![], warnings: vec![] }
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("10ms").unwrap_err().contains("at least 100ms"));
        assert!(parse_interval("soon").unwrap_err().contains("like 1s"));
        assert_eq!(format_interval(Duration::from_secs(2)), "2s");
        assert_eq!(format_interval(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn text_frame_has_device_tenant_cap_and_compute() {
        let text = text(&view());
        assert!(text.starts_with("gpuslice top   ledger directory: /run/gpuslice   NVML: yes\n"), "{text}");
        let row = text.lines().find(|l| l.starts_with("0 ") && l.contains("team-a")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells, ["0", "team-a", "972.8 MiB", "1.0 GiB", "95%", "1", "2", "30%", "-", "0", "30%", "29%"], "{row}");
        assert!(
            text.contains("\nTENANTS\nDEVICE  TENANT  MEMORY     CAP      OF CAP  PROCS  DENIED  LIMIT  SHARE  PRIO  TARGET  USED\n"),
            "{text}"
        );
        assert!(text.contains("\nDEVICES\n") && text.contains("1.0 GiB / 4.0 GiB"), "{text}");
        assert!(text.contains("\nPROCESSES\nno process holds a ledger slot\n"), "{text}");
        assert!(!text.contains('\x1b'), "no escape codes: {text:?}");
        assert!(!text.contains("QUEUE"), "no queue until it is wired: {text}");
    }

    #[test]
    fn mig_instances_hang_under_their_parent() {
        let mut view = view();
        view.snapshot.devices.push(device("MIG-1", Some("GPU-0"), Some("3g.71gb")));
        let text = text(&view);
        assert!(text.lines().any(|l| l.starts_with("└ 0 MIG 3g.71gb") && l.contains("MIG-1")), "{text}");
    }

    #[test]
    fn tones() {
        assert_eq!(fill_tone(89, 100), Tone::Plain);
        assert_eq!(fill_tone(90, 100), Tone::Warn);
        assert_eq!(fill_tone(101, 100), Tone::Alert);
        assert_eq!(fill_cell(Some(1), Some(0)).text, "-");
        assert!(queue_rows(&[]).is_empty());
    }

    #[test]
    fn live_frame_draws_the_tenant_and_fits_any_size() {
        let view = view();
        let shown = footer(&view, Some("the ledger directory vanished"));
        for (width, height) in [(160, 30), (90, 20), (40, 8), (1, 1)] {
            let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
            terminal.draw(|frame| draw(frame, &view, &shown, Duration::from_secs(1))).unwrap();
            let buffer = terminal.backend().buffer();
            let lines: Vec<String> =
                buffer.content().chunks(usize::from(width)).map(|line| line.iter().map(|c| c.symbol()).collect()).collect();
            if width >= 90 {
                let tenant_row = lines.iter().find(|l| l.contains("team-a")).unwrap_or_else(|| panic!("{lines:#?}"));
                let words: Vec<&str> = tenant_row.split_whitespace().take(5).collect();
                assert_eq!(words, ["│0", "team-a", "972.8", "MiB", "1.0"], "the tenant keeps its name: {tenant_row}");
                assert!(lines[0].starts_with("gpuslice top   q: quit   every 1s"), "{lines:#?}");
                assert!(lines.last().unwrap().starts_with("cannot refresh: the ledger directory vanished"), "{lines:#?}");
            }
        }
    }

    #[test]
    fn columns_give_way_but_the_first_keep_their_width() {
        assert_eq!(fit(&[6, 8, 10, 10], 2, 100), (vec![6, 8, 10, 10], 2));
        assert_eq!(fit(&[6, 8, 10, 10], 2, 37), (vec![6, 8, 10, 10], 1));
        // 14 kept, 3 of gaps: 13 left for 20.
        assert_eq!(fit(&[6, 8, 10, 10], 2, 30), (vec![6, 8, 6, 6], 1));
        assert_eq!(fit(&[6, 8, 10, 10], 2, 10), (vec![6, 8, 0, 0], 1));
        assert_eq!(fit(&[6, 8], 2, 3), (vec![6, 8], 1));
        assert_eq!(fit(&[], 2, 3), (vec![], 2));
    }

    #[test]
    fn quit_keys() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert!(is_quit(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(is_quit(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(is_quit(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!is_quit(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
    }
}
