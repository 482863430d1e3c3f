//! `gpuslice top [--interval DUR] [--once]`: a live view of the host in
//! the terminal, in the spirit of nvidia-smi and nvitop: the devices (MIG
//! instances under their parent), each device's tenants (memory against
//! cap, compute limit, share, priority and target against use, with
//! bars), the teams as the running monitor holds them (what their members
//! hold against the team's quota, its share and limit, its target and
//! use; where the monitor's directory can be read), their processes (pid, user, tenant, device, memory, SM, age and
//! command line), untracked processes and the queue.
//!
//! Data flow: a [`Sampler`] reads the ledgers, NVML and the monitor's turn
//! tables exactly as `gpuslice status` does; `/proc` adds each live
//! process's user and command ([`procinfo`]); [`rows::tables`] turns that
//! into [`table::Table`]s. `--once` prints every text column of them whole
//! (for scripts: no escape codes, no terminal needed); the live view
//! ([`screen`]) fits them to the terminal, dropping whole columns by
//! priority and marking rows that do not fit with `+N more`. The live view
//! keeps one sampler, so the device time a tenant used is a rate since the
//! previous refresh.
//!
//! Keys: Tab, arrows, paging, `s`/`r` to sort, `h` for help, `K` to kill
//! the selected process (root or its owner only, after a `y`, and only a
//! process the kernel confirms holds the ledger slot that names it).
//! `NO_COLOR` turns colour off; nothing on the screen depends on it.

mod input;
/// Also `gpuslice report`'s: names made safe for a terminal.
pub(crate) mod procinfo;
mod rows;
mod screen;
mod table;

use crate::config;
use crate::discovery::HostArgs;
use crate::error::Error;
use crate::sampler::{self, Sampler, View};
use clap::Args;
use procinfo::{ProcInfo, Users};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use rows::{Extra, QueuedJob, Sort};
use screen::{Palette, Shown};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use table::{clip, Table, Tone};

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
        let view = sampler::collect_view_with_activity(&args.host)?;
        for note in &view.notes {
            eprintln!("gpuslice top: {note}");
        }
        for warning in &view.warnings {
            eprintln!("gpuslice top: warning: {warning}");
        }
        let mut users = Users::default();
        let procs = read_procs(&view, &mut users);
        print!("{}", text(&view, &rows::queued_jobs(&view.dir, &mut users), &procs));
        return Ok(ExitCode::SUCCESS);
    }
    if !std::io::stdout().is_terminal() {
        return Err(Error::Usage("standard output is not a terminal; use `gpuslice top --once` for one frame as text".into()));
    }
    // The first look's errors (no such directory, NVML named but broken)
    // are printed as plain lines, before the screen is taken over.
    let mut sampler = Sampler::new(&args.host)?;
    let view = sampler.look()?;
    let app = App::new(view, args.interval, Palette::from_env());
    live(sampler, app).map_err(Error::Failed)
}

/// `/proc` facts for every live process of every tenant.
fn read_procs(view: &View, users: &mut Users) -> HashMap<u32, ProcInfo> {
    let live = view.snapshot.tenants.iter().flat_map(|t| &t.processes).filter(|p| p.alive);
    live.filter_map(|p| Some((p.pid, procinfo::read(p.pid, users)?))).collect()
}

/// The first line of a `--once` frame: where the view comes from.
fn title(view: &View) -> String {
    format!(
        "gpuslice top   ledger directory: {}   NVML: {}",
        view.dir.display(),
        if view.snapshot.nvml { "yes" } else { "no (ledger-only)" }
    )
}

/// One frame as plain text: the title, then each table with aligned
/// columns, every value whole.
fn text(view: &View, jobs: &[QueuedJob], procs: &HashMap<u32, ProcInfo>) -> String {
    let mut out = title(view);
    out.push('\n');
    for table in rows::tables(&view.snapshot, &Extra { jobs, procs, sort: Sort::default(), teams: view.teams.as_ref() }) {
        table.text(&mut out);
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

/// The tables that take a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Focus {
    Tenants,
    Processes,
}

impl Focus {
    fn slot(self) -> usize {
        match self {
            Focus::Tenants => 0,
            Focus::Processes => 1,
        }
    }
}

/// A process the operator asked to kill, waiting for the `y`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KillTarget {
    pid: u32,
    start_time_ticks: u64,
    /// How the prompt names it: user, tenant, command.
    about: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Normal,
    Help,
    Confirm(KillTarget),
}

/// Where one selectable table stands: the selected row (by key, so that it
/// follows its tenant or process when rows move; by position when that
/// row goes) and the scroll offset.
#[derive(Debug, Clone, Default)]
struct Cursor {
    key: Option<String>,
    index: usize,
    offset: usize,
}

/// The live view's state between frames.
struct App {
    view: View,
    procs: HashMap<u32, ProcInfo>,
    users: Users,
    jobs: Vec<QueuedJob>,
    interval: Duration,
    palette: Palette,
    sort: Sort,
    focus: Focus,
    cursors: [Cursor; 2],
    /// Rows each selectable table showed in the last frame (for paging).
    page: [usize; 2],
    mode: Mode,
    /// The answer to the last key (a kill sent or refused), until the next key.
    message: Option<(String, Tone)>,
    /// Why the last refresh failed; the view is the one before.
    error: Option<String>,
    /// Who runs `top` (real and effective uid): who may kill what.
    me: (u32, u32),
}

/// What a key asks of the loop.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Stay,
    Quit,
}

impl App {
    fn new(view: View, interval: Duration, palette: Palette) -> App {
        let mut app = App {
            procs: HashMap::new(),
            users: Users::default(),
            jobs: Vec::new(),
            view,
            interval,
            palette,
            sort: Sort::default(),
            focus: Focus::Processes,
            cursors: Default::default(),
            page: [1, 1],
            mode: Mode::Normal,
            message: None,
            error: None,
            me: procinfo::me(),
        };
        app.procs = read_procs(&app.view, &mut app.users);
        app.jobs = rows::queued_jobs(&app.view.dir, &mut app.users);
        app
    }

    fn refresh(&mut self, look: Result<View, Error>) {
        match look {
            Ok(view) => {
                self.procs = read_procs(&view, &mut self.users);
                self.jobs = rows::queued_jobs(&view.dir, &mut self.users);
                self.view = view;
                self.error = None;
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    fn tables(&self) -> Vec<Table> {
        rows::tables(&self.view.snapshot, &Extra { jobs: &self.jobs, procs: &self.procs, sort: self.sort, teams: self.view.teams.as_ref() })
    }

    /// The selected row of `focus` in `table`: the row with the remembered
    /// key, else the same position (clamped); the cursor learns the answer.
    fn select(&mut self, focus: Focus, table: &Table) -> Option<usize> {
        let cursor = &mut self.cursors[focus.slot()];
        if table.rows.is_empty() {
            return None;
        }
        let index = cursor.key.as_ref().and_then(|k| table.keys.iter().position(|other| other == k)).unwrap_or(cursor.index);
        let index = index.min(table.rows.len() - 1);
        cursor.index = index;
        cursor.key = table.keys.get(index).cloned();
        Some(index)
    }

    fn on_key(&mut self, key: &KeyEvent) -> Step {
        if key.kind != KeyEventKind::Press {
            return Step::Stay;
        }
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Step::Quit;
        }
        match std::mem::replace(&mut self.mode, Mode::Normal) {
            // Any key closes the help.
            Mode::Help => return Step::Stay,
            Mode::Confirm(target) => {
                self.message = Some(match key.code {
                    KeyCode::Char('y') | KeyCode::Char('Y') => kill(&target, libc::SIGTERM, "SIGTERM"),
                    KeyCode::Char('9') => kill(&target, libc::SIGKILL, "SIGKILL"),
                    _ => (format!("pid {} not signalled", target.pid), Tone::Plain),
                });
                return Step::Stay;
            }
            Mode::Normal => {}
        }
        self.message = None;
        let slot = self.focus.slot();
        let page = self.page[slot].max(1);
        let cursor = &mut self.cursors[slot];
        let moved = |cursor: &mut Cursor, index: usize| {
            cursor.index = index;
            // The row at the new position is found by the next frame.
            cursor.key = None;
        };
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return Step::Quit,
            KeyCode::Char('h') | KeyCode::Char('?') | KeyCode::F(1) => self.mode = Mode::Help,
            KeyCode::Char('s') => {
                self.sort.key = self.sort.key.next();
                self.message = Some((format!("sorted by {}", self.sort.key.name()), Tone::Plain));
            }
            KeyCode::Char('r') => self.sort.reversed = !self.sort.reversed,
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = if self.focus == Focus::Tenants { Focus::Processes } else { Focus::Tenants };
            }
            KeyCode::Up | KeyCode::Char('k') => moved(cursor, cursor.index.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => moved(cursor, cursor.index + 1),
            KeyCode::PageUp => moved(cursor, cursor.index.saturating_sub(page)),
            KeyCode::PageDown => moved(cursor, cursor.index + page),
            KeyCode::Home | KeyCode::Char('g') => moved(cursor, 0),
            KeyCode::End | KeyCode::Char('G') => moved(cursor, usize::MAX),
            KeyCode::Char('K') | KeyCode::F(9) => self.ask_to_kill(),
            _ => {}
        }
        Step::Stay
    }

    /// The kill prompt for the selected process, or why there is none.
    fn ask_to_kill(&mut self) {
        if self.focus != Focus::Processes {
            self.message = Some(("select a process to kill: Tab to the process table".into(), Tone::Warn));
            return;
        }
        let tables = self.tables();
        let Some(processes) = tables.iter().find(|t| t.title == rows::PROCESSES) else { return };
        let Some(index) = self.select(Focus::Processes, processes) else {
            self.message = Some(("no process to kill".into(), Tone::Warn));
            return;
        };
        let key = &processes.keys[index];
        let found = self
            .view
            .snapshot
            .tenants
            .iter()
            .flat_map(|t| t.processes.iter().map(move |p| (t, p)))
            .find(|(t, p)| &rows::process_key(&t.name, p.pid) == key);
        self.message = Some(match found.map(|(t, p)| (t, p, self.procs.get(&p.pid))) {
            None => ("that process is gone".into(), Tone::Warn),
            Some((_, p, _)) if !p.alive => (format!("pid {} has exited; the monitor reclaims its memory", p.pid), Tone::Warn),
            Some((_, p, None)) => (format!("pid {} cannot be read in /proc: not offered for killing", p.pid), Tone::Warn),
            Some((_, p, Some(info))) if !procinfo::may_signal(self.me, info.uids) => {
                (format!("only root or its owner ({}) may kill pid {}", info.user, p.pid), Tone::Alert)
            }
            // A tenant writes its own slot: only a process the kernel shows
            // holding the slot's lock is the one the ledger names.
            Some((_, p, _)) if !p.confirmed => {
                (format!("pid {} is not confirmed as the process holding its ledger slot: not offered for killing", p.pid), Tone::Alert)
            }
            Some((t, p, Some(info))) => {
                self.mode = Mode::Confirm(KillTarget {
                    pid: p.pid,
                    start_time_ticks: info.start_time_ticks,
                    about: format!("user {}, tenant {}: {}", info.user, t.name, info.command),
                });
                return;
            }
        });
    }
}

/// Sends the signal and says what came of it.
fn kill(target: &KillTarget, signal: libc::c_int, name: &str) -> (String, Tone) {
    match procinfo::signal(target.pid, target.start_time_ticks, signal) {
        Ok(()) => (format!("sent {name} to pid {}", target.pid), Tone::Plain),
        Err(procinfo::KillError::Gone) => (format!("pid {} is no longer the process shown: nothing sent", target.pid), Tone::Warn),
        Err(procinfo::KillError::Refused(why)) => (format!("cannot kill pid {}: {why}", target.pid), Tone::Alert),
    }
}

fn live(mut sampler: Sampler, mut app: App) -> Result<ExitCode, String> {
    // A signal ends the view as a key does: the terminal is given back.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(|e| format!("cannot handle signals: {e}"))?;
    }
    // A resize is drawn at once (each draw fits the frame to the size).
    let resized = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGWINCH, Arc::clone(&resized)).map_err(|e| format!("cannot handle signals: {e}"))?;
    let mut input = input::Input::open().map_err(|e| format!("cannot read the terminal: {e}"))?;
    let mut tui = Tui::start()?;
    let mut next = Instant::now() + app.interval;
    loop {
        tui.terminal.draw(|frame| draw(frame, &mut app)).map_err(|e| format!("cannot draw: {e}"))?;
        // Wait for a key, a resize or the next refresh.
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(ExitCode::SUCCESS);
            }
            if resized.swap(false, Ordering::Relaxed) {
                break;
            }
            let now = Instant::now();
            if now >= next {
                app.refresh(sampler.look());
                // Late refreshes do not pile up: the next is an interval on.
                next = Instant::now() + app.interval;
                break;
            }
            let wait = next.saturating_duration_since(now).min(INPUT_POLL);
            // The terminal gone (a hang-up, a closed pty, end of input)
            // ends the view quietly: nobody is left to read a message.
            let Ok(keys) = input.wait(wait) else {
                return Ok(ExitCode::SUCCESS);
            };
            if keys.is_empty() {
                continue;
            }
            for key in &keys {
                if app.on_key(key) == Step::Quit {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            break;
        }
    }
}

/// `1s`, `500ms`: how the title says how often it refreshes.
fn format_interval(interval: Duration) -> String {
    if interval.subsec_millis() == 0 {
        format!("{}s", interval.as_secs())
    } else {
        format!("{}ms", interval.as_millis())
    }
}

/// What the last line says: a prompt, the answer to a key, a failed
/// refresh, the first warning, or else the keys.
fn footer(app: &App) -> (String, Tone) {
    if let Mode::Confirm(target) = &app.mode {
        return (format!("kill pid {} ({})?  y: SIGTERM  9: SIGKILL  other key: no", target.pid, target.about), Tone::Alert);
    }
    if let Some(message) = &app.message {
        return message.clone();
    }
    if let Some(error) = &app.error {
        return (format!("cannot refresh: {error} (showing the last view)"), Tone::Alert);
    }
    let view = &app.view;
    let mut lines = view.warnings.iter().map(|w| format!("warning: {w}")).chain(view.notes.iter().cloned());
    match lines.next() {
        Some(first) => {
            let more = lines.count();
            let text = if more > 0 { format!("{first} (and {more} more: see gpuslice status)") } else { first };
            (text, Tone::Warn)
        }
        None => ("Tab ↑↓ select  s sort  r reverse  K kill  h help  q quit".into(), Tone::Plain),
    }
}

fn draw(frame: &mut ratatui::Frame, app: &mut App) {
    let area = frame.area();
    if area.height == 0 || area.width == 0 {
        return;
    }
    let bold = Style::default().add_modifier(Modifier::BOLD);
    // What to press first; a long directory is what gets cut.
    let head = format!(
        "  h: help  q: quit  every {}  sort: {}{}  NVML: {}  {}",
        format_interval(app.interval),
        app.sort.key.name(),
        if app.sort.reversed { " (reversed)" } else { "" },
        if app.view.snapshot.nvml { "yes" } else { "no" },
        app.view.dir.display()
    );
    let head = Line::from(vec![Span::styled("gpuslice top", bold), Span::raw(clip(&head, area.width.saturating_sub(12)))]);
    frame.render_widget(Paragraph::new(head), Rect { height: 1, ..area });

    let tables = app.tables();
    let body = usize::from(area.height.saturating_sub(2));
    let heights = screen::heights(&tables.iter().collect::<Vec<_>>(), body);
    let mut y = area.y + 1;
    for (table, &height) in tables.iter().zip(&heights) {
        let focus = match table.title {
            rows::TENANTS => Some(Focus::Tenants),
            rows::PROCESSES => Some(Focus::Processes),
            _ => None,
        };
        let (visible, _) = screen::visible_rows(table.rows.len(), height);
        let (selected, offset) = match focus {
            Some(focus) => {
                let index = app.select(focus, table);
                let cursor = &mut app.cursors[focus.slot()];
                app.page[focus.slot()] = visible;
                cursor.offset = index.map_or(0, |index| screen::scroll_to(cursor.offset, index, visible, table.rows.len()));
                (index.filter(|_| app.focus == focus), cursor.offset)
            }
            None => (None, 0),
        };
        let at = Rect { x: area.x, y, width: area.width, height: u16::try_from(height).unwrap_or(u16::MAX) };
        screen::draw_table(frame, &Shown { table, offset, selected, scrollable: focus.is_some() }, at, app.palette);
        y += at.height;
    }
    if area.height >= 2 {
        let (text, tone) = footer(app);
        let at = Rect { x: area.x, y: area.y + area.height - 1, width: area.width, height: 1 };
        frame.render_widget(Paragraph::new(Span::styled(clip(&text, area.width), app.palette.tone(tone))), at);
    }
    if app.mode == Mode::Help {
        screen::draw_help(frame, app.palette);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{fixtures, DeviceView, ProcessView, TenantDeviceView};
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
            health: None,
        }
    }

    fn process(pid: u32, memory_used_bytes: u64) -> ProcessView {
        ProcessView {
            pid,
            ns_pid: pid,
            slot: 0,
            alive: true,
            confirmed: true,
            memory_used_bytes,
            driver_memory_used_bytes: None,
            sm_utilization_ratio: Some(0.2),
            start_time_ticks: 0,
            devices: vec![],
        }
    }

    const UUID: &str = "GPU-3f2a9c1e-0000-1111-2222-333344445555";

    /// `team-a` on `GPU-3f2a9c1e…` with a 1 GiB cap, 0.95 GiB used, a 30%
    /// limit; and `extra` more tenants of one process each.
    fn view(extra: usize) -> View {
        let tenant_device = TenantDeviceView {
            uuid: UUID.into(),
            compute_limit_ratio: Some(0.3),
            compute_target_ratio: Some(0.3),
            compute_unarbitrated_processes: None,
            compute_member: None,
            compute_used_ratio: Some(0.29),
            alloc_denied_total: 2,
            ..fixtures::tenant_device(GIB / 100 * 95, Some(GIB), None)
        };
        let mut snapshot = fixtures::one_tenant(true, tenant_device.clone(), vec![process(4242, GIB / 2)]);
        snapshot.devices = vec![device(UUID, None, None)];
        for i in 0..extra {
            let mut tenant = snapshot.tenants[0].clone();
            tenant.name = format!("team-{i:02}");
            tenant.processes = vec![process(5000 + i as u32, GIB / 4)];
            snapshot.tenants.push(tenant);
        }
        View { dir: "/run/gpuslice".into(), snapshot, notes: vec![], warnings: vec![], teams: None }
    }

    fn procs() -> HashMap<u32, ProcInfo> {
        let info = ProcInfo {
            uids: [1000; 3],
            user: "alice".into(),
            command: "python train.py".into(),
            start_time_ticks: 0,
            elapsed_s: Some(65),
            fds_readable: true,
        };
        [(4242, info)].into_iter().collect()
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
    fn text_frame_has_device_tenant_cap_compute_and_process() {
        let text = text(&view(0), &[], &procs());
        assert!(text.starts_with("gpuslice top   ledger directory: /run/gpuslice   NVML: yes\n"), "{text}");
        let row = text.lines().find(|l| l.starts_with("0 ") && l.contains("team-a")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        // No activity: the fixture holds no CPU or SM figure.
        assert_eq!(cells, ["0", "team-a", "972.8 MiB", "1.0 GiB", "95%", "1", "2", "30%", "-", "0", "30%", "29%", "-"], "{row}");
        assert!(
            text.contains(
                "\nTENANTS\nDEVICE  TENANT  MEMORY     CAP      OF CAP  PROCS  DENIED  LIMIT  SHARE  PRIO  TARGET  USED  ACTIVITY\n"
            ),
            "{text}"
        );
        assert!(text.contains("\nDEVICES\n") && text.contains("1.0 GiB / 4.0 GiB") && text.contains(UUID), "the whole UUID: {text}");
        let process = text.lines().find(|l| l.starts_with("4242 ")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = process.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells, ["4242", "alice", "team-a", "-", "512.0 MiB", "-", "20%", "1:05", "alive", "python train.py"], "{text}");
        assert!(!text.contains('\x1b') && !text.contains('█'), "no escape codes, no bars: {text:?}");
        assert!(!text.contains("QUEUE"), "no queue when none waits: {text}");
    }

    #[test]
    fn the_teams_table_follows_the_monitors_membership_not_names() {
        use crate::teams::membership::{Membership, Settings, Team};
        let mut view = view(1);
        // `team-00` matches no list: only the monitor's list puts a tenant in a team.
        let team = |name: &str, members: &[&str], quota: u64| Team {
            team: name.into(),
            members: members.iter().map(|m| m.to_string()).collect(),
            devices: vec![],
            other_devices: Settings { memory_quota_bytes: Some(quota), share_ratio_e4: 5000, ..Settings::default() },
        };
        view.teams = Some(Membership { pid: 1, teams: vec![team("research", &["team-a"], 2 * GIB), team("ops", &["ops-1"], GIB)] });
        let text = text(&view, &[], &procs());
        let lines: Vec<&str> = text.lines().collect();
        let titles: Vec<&str> = lines.windows(2).filter(|w| w[0].is_empty()).map(|w| w[1]).collect();
        assert_eq!(titles, ["DEVICES", "TEAMS", "TENANTS", "PROCESSES"], "{text}");
        let row = |name: &str| -> Vec<String> {
            let line = text.lines().skip_while(|l| *l != "TEAMS").find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{text}"));
            line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect()
        };
        assert_eq!(
            row("research "),
            ["research", "0", "1", "972.8 MiB", "2.0 GiB", "47%", "50%", "none", "30%", "29%", "team-a"],
            "{text}"
        );
        assert_eq!(row("ops "), ["ops", "-", "0", "0 B", "1.0 GiB", "-", "50%", "none", "-", "-", "-"], "{text}");
        // The live view still finds the process table to kill from.
        let mut app = App::new(view, Duration::from_secs(1), Palette { color: false });
        app.procs = procs();
        app.me = (1000, 1000);
        press(&mut app, KeyCode::End);
        screen(&mut app, 120, 40);
        press(&mut app, KeyCode::Char('K'));
        assert!(matches!(&app.mode, Mode::Confirm(t) if t.pid == 4242), "{:?} {:?}", app.mode, app.message);
    }

    #[test]
    fn a_process_not_holding_its_slot_is_not_attributed() {
        let mut view = view(0);
        view.snapshot.tenants[0].processes[0].confirmed = false;
        let row = |procs: &HashMap<u32, ProcInfo>| {
            let text = text(&view, &[], procs);
            let row = text.lines().find(|l| l.starts_with("4242 ")).unwrap_or_else(|| panic!("{text}")).to_string();
            row.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>()
        };
        // Checked (its open files readable), and not holding the slot.
        let checked = row(&procs());
        assert_eq!((checked[1].as_str(), checked[8].as_str(), checked[9].as_str()), ("-", "false claim", "-"), "{checked:?}");
        // Not ours to check: shown, and said to be unverified.
        let mut procs = procs();
        procs.get_mut(&4242).unwrap().fds_readable = false;
        let unchecked = row(&procs);
        assert_eq!((unchecked[1].as_str(), unchecked[8].as_str(), unchecked[9].as_str()), ("alice", "unverified", "python train.py"));
    }

    #[test]
    fn mig_instances_hang_under_their_parent() {
        let mut view = view(0);
        view.snapshot.devices.push(device("MIG-1", Some(UUID), Some("3g.71gb")));
        let text = text(&view, &[], &procs());
        assert!(text.lines().any(|l| l.starts_with("└ 0 MIG 3g.71gb") && l.contains("MIG-1")), "{text}");
    }

    /// The screen as lines of text, after drawing `app` at this size.
    fn screen(app: &mut App, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| draw(frame, app)).unwrap();
        let buffer = terminal.backend().buffer();
        buffer.content().chunks(usize::from(width)).map(|line| line.iter().map(|c| c.symbol()).collect()).collect()
    }

    fn app(extra: usize) -> App {
        let mut app = App::new(view(extra), Duration::from_secs(1), Palette { color: false });
        app.procs = procs();
        app
    }

    #[test]
    fn at_80_by_24_no_value_is_cut() {
        let mut app = app(0);
        let lines = screen(&mut app, 80, 24);
        let all = lines.join("\n");
        assert!(lines[0].starts_with("gpuslice top  h: help  q: quit  every 1s"), "{all}");
        assert!(all.contains("GPU-3f2a9c1e ") && !all.contains("GPU-3f2a9c1e-"), "a short UUID: {all}");
        let tenant = lines.iter().find(|l| l.contains("team-a")).unwrap();
        for value in ["972.8 MiB", "1.0 GiB", "29%", "30%"] {
            assert!(tenant.contains(value), "{value} whole in {tenant:?}");
        }
        assert!(tenant.contains('█') && tenant.contains('│'), "memory and compute bars: {tenant:?}");
        let process = lines.iter().find(|l| l.contains("4242")).unwrap();
        for value in ["alice", "team-a", "512.0 MiB", "20%", "python train.py"] {
            assert!(process.contains(value), "{value} whole in {process:?}");
        }
        assert!(!all.contains('…'), "nothing cut: {all}");
        assert!(lines[23].starts_with("Tab ↑↓ select"), "{all}");
    }

    #[test]
    fn rows_that_do_not_fit_are_counted() {
        let mut app = app(30);
        let lines = screen(&mut app, 60, 15);
        let all = lines.join("\n");
        let markers: Vec<&String> = lines.iter().filter(|l| l.contains(" more (Tab")).collect();
        assert_eq!(markers.len(), 2, "tenants and processes: {all}");
        // 31 tenant rows in 5 lines: 2 shown.
        assert!(markers[0].starts_with(" +29 more"), "{all}");
        // Paging down the process table keeps the selection in view.
        for _ in 0..40 {
            app.on_key(&KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        }
        let lines = screen(&mut app, 60, 15);
        assert!(lines.iter().any(|l| l.contains("5029")), "the last process is shown: {lines:#?}");
    }

    #[test]
    fn devices_that_do_not_fit_are_counted_too() {
        let mut app = app(0);
        for i in 1..10 {
            app.view.snapshot.devices.push(device(&format!("GPU-{i:08}"), None, None));
        }
        let lines = screen(&mut app, 60, 15);
        let marker = lines.iter().find(|l| l.contains(" more (a taller terminal")).unwrap_or_else(|| panic!("{lines:#?}"));
        // 13 lines: one tenant and one process take 3 each; the devices
        // get the other 7: title, header, 4 rows and the marker.
        assert!(marker.starts_with(" +6 more"), "{lines:#?}");
    }

    /// The whole 80×24 screen, as a person reads it.
    #[test]
    fn the_80_by_24_screen() {
        let mut app = app(3);
        let lines: Vec<String> = screen(&mut app, 80, 24).iter().map(|l| l.trim_end().to_string()).collect();
        let expected = [
            "gpuslice top  h: help  q: quit  every 1s  sort: device  NVML: yes  /run/gpuslice",
            " DEVICES (1)",
            "DEVICE  UUID          MEMORY USED / TOTAL  MEMORY    USE  UTIL  BUSY     TENANTS",
            "0       GPU-3f2a9c1e  1.0 GiB / 4.0 GiB    ██░░░░░░  25%  25%   █▊░░░░░  4",
            " TENANTS (4)",
            "DEVICE TENANT  MEMORY    CAP     CAP USE OF CAP PROCS DENIED TARGET USED COMPUTE",
            "0      team-00 972.8 MiB 1.0 GiB ██████▋ 95%    1     2      30%    29%  ██│░░░░",
            "0      team-01 972.8 MiB 1.0 GiB ██████▋ 95%    1     2      30%    29%  ██│░░░░",
            "0      team-02 972.8 MiB 1.0 GiB ██████▋ 95%    1     2      30%    29%  ██│░░░░",
            "0      team-a  972.8 MiB 1.0 GiB ██████▋ 95%    1     2      30%    29%  ██│░░░░",
            " PROCESSES (4) ◀ ↑↓",
            "PID  USER  TENANT  DEVICE MEMORY    DRIVER SEES SM  TIME STATE COMMAND",
            "5000 -     team-00 -      256.0 MiB -           20% -    alive -",
            "5001 -     team-01 -      256.0 MiB -           20% -    alive -",
            "5002 -     team-02 -      256.0 MiB -           20% -    alive -",
            "4242 alice team-a  -      512.0 MiB -           20% 1:05 alive python train.py",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "Tab ↑↓ select  s sort  r reverse  K kill  h help  q quit",
        ];
        assert_eq!(lines, expected, "{lines:#?}");
    }

    #[test]
    fn any_size_draws() {
        for (width, height) in [(160, 40), (120, 40), (80, 24), (60, 15), (40, 8), (1, 1), (3, 2)] {
            let mut app = app(3);
            app.mode = Mode::Help;
            screen(&mut app, width, height);
            app.mode = Mode::Normal;
            screen(&mut app, width, height);
        }
    }

    fn press(app: &mut App, code: KeyCode) -> Step {
        app.on_key(&KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn keys() {
        let mut app = app(2);
        assert_eq!(press(&mut app, KeyCode::Char('q')), Step::Quit);
        assert_eq!(press(&mut app, KeyCode::Esc), Step::Quit);
        assert_eq!(app.on_key(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Step::Quit);
        press(&mut app, KeyCode::Char('h'));
        assert_eq!(app.mode, Mode::Help);
        let help = screen(&mut app, 80, 24).join("\n");
        for (key, what) in screen::HELP {
            assert!(help.contains(&format!("{key:<14}  {what}")), "{key} whole at 80 columns: {help}");
        }
        assert!(help.contains("false claim: its ledger slot names a pid that does not hold the slot."), "{help}");
        // Any key closes the help, q included.
        assert_eq!(press(&mut app, KeyCode::Char('q')), Step::Stay);
        assert_eq!(app.mode, Mode::Normal);
        press(&mut app, KeyCode::Char('s'));
        assert_eq!(app.sort.key, rows::SortKey::Memory);
        let lines = screen(&mut app, 120, 40);
        // Most memory first: team-a's 512 MiB before the others' 256.
        let first = lines.iter().position(|l| l.contains("4242")).unwrap();
        assert!(lines.iter().position(|l| l.contains("5000")).unwrap() > first, "{lines:#?}");
        press(&mut app, KeyCode::Char('r'));
        let lines = screen(&mut app, 120, 40);
        assert!(lines.iter().position(|l| l.contains("5000")).unwrap() < lines.iter().position(|l| l.contains("4242")).unwrap());
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.focus, Focus::Tenants);
        press(&mut app, KeyCode::Char('K'));
        assert!(app.message.as_ref().unwrap().0.contains("Tab to the process table"), "{:?}", app.message);
    }

    #[test]
    fn kill_asks_only_root_or_the_owner() {
        let mut app = app(0);
        // Someone else's process, asked by a user who is neither.
        app.me = (2000, 2000);
        press(&mut app, KeyCode::Char('K'));
        assert_eq!(app.mode, Mode::Normal);
        assert_eq!(app.message.as_ref().unwrap().0, "only root or its owner (alice) may kill pid 4242");
        // Its owner is asked first.
        app.me = (1000, 1000);
        press(&mut app, KeyCode::Char('K'));
        assert!(matches!(&app.mode, Mode::Confirm(t) if t.pid == 4242), "{:?}", app.mode);
        let prompt = screen(&mut app, 120, 40).pop().unwrap();
        assert!(prompt.starts_with("kill pid 4242 (user alice, tenant team-a: python train.py)?  y: SIGTERM"), "{prompt}");
        // Anything but y or 9 is a no.
        press(&mut app, KeyCode::Char('n'));
        assert_eq!(app.mode, Mode::Normal);
        assert_eq!(app.message.as_ref().unwrap().0, "pid 4242 not signalled");
        // A slot whose process the kernel does not confirm is never offered.
        app.view.snapshot.tenants[0].processes[0].confirmed = false;
        app.me = (0, 0);
        press(&mut app, KeyCode::Char('K'));
        assert_eq!(app.mode, Mode::Normal);
        assert!(app.message.as_ref().unwrap().0.contains("not confirmed"), "{:?}", app.message);
    }
}
