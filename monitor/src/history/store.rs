//! The history on disk: one SQLite file, written by the monitor alone and
//! read by `gpuslice report`.
//!
//! Layout: `series` names each tenant-and-device pair once and
//! `tenant_intervals` holds one row per pair and interval, keyed by the
//! interval's start and the series, so that a window of time is one range
//! of the key and retention is one range delete; `devices` and
//! `device_intervals` do the same for devices. Every figure is an integer
//! (bytes, nanoseconds, ten-thousandths of a device), so a row is a few
//! dozen bytes. `PRAGMA user_version` holds [`SCHEMA_VERSION`].
//!
//! Values above `i64::MAX` (SQLite's largest integer) are stored as
//! `i64::MAX`: only a tenant that lies in its ledger reaches them, and it
//! must not make the batch, and so the other tenants' rows, fail.

use super::aggregate::{Batch, DeviceRow, Origin, TeamOf, TenantRow};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// The layout this code writes and reads.
pub const SCHEMA_VERSION: i32 = 4;
/// How long a writer or reader waits for the other's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE series (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    device_uuid TEXT NOT NULL,
    UNIQUE (tenant, device_uuid)
);
CREATE TABLE tenant_intervals (
    start_s INTEGER NOT NULL,
    series INTEGER NOT NULL,
    span_s INTEGER NOT NULL,
    device_index INTEGER NOT NULL,
    rounds INTEGER NOT NULL,
    active_rounds INTEGER NOT NULL,
    memory_peak_bytes INTEGER NOT NULL,
    memory_mean_bytes INTEGER NOT NULL,
    driver_memory_peak_bytes INTEGER,
    memory_cap_bytes INTEGER,
    compute_share_e4 INTEGER,
    compute_limit_e4 INTEGER,
    compute_used_e4 INTEGER,
    compute_target_e4 INTEGER,
    throttled_ns INTEGER NOT NULL,
    denied INTEGER NOT NULL,
    processes_peak INTEGER NOT NULL,
    cpu_e4 INTEGER,
    gpu_e4 INTEGER,
    origin INTEGER,
    team INTEGER,
    PRIMARY KEY (start_s, series)
) WITHOUT ROWID;
CREATE TABLE origins (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    user TEXT NOT NULL,
    account TEXT NOT NULL,
    UNIQUE (job, user, account)
);
CREATE TABLE teams (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE devices (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE
);
CREATE TABLE device_intervals (
    start_s INTEGER NOT NULL,
    device INTEGER NOT NULL,
    span_s INTEGER NOT NULL,
    device_index INTEGER NOT NULL,
    rounds INTEGER NOT NULL,
    memory_total_bytes INTEGER NOT NULL,
    memory_used_peak_bytes INTEGER,
    utilization_e4 INTEGER,
    temperature_peak_c INTEGER,
    power_peak_mw INTEGER,
    throttled_rounds INTEGER,
    PRIMARY KEY (start_s, device)
) WITHOUT ROWID;
";

/// From layout 1 to 2: the CPU and GPU use of a tenant's processes (the
/// report's busy, starved or idle), and a device's peak temperature and
/// power and the rounds its clocks were held back. Rows of layout 1 have
/// none of them (NULL: not known).
const MIGRATE_1_TO_2: &str = "
ALTER TABLE tenant_intervals ADD COLUMN cpu_e4 INTEGER;
ALTER TABLE tenant_intervals ADD COLUMN gpu_e4 INTEGER;
ALTER TABLE device_intervals ADD COLUMN temperature_peak_c INTEGER;
ALTER TABLE device_intervals ADD COLUMN power_peak_mw INTEGER;
ALTER TABLE device_intervals ADD COLUMN throttled_rounds INTEGER;
";

/// From layout 2 to 3: the job, user and account a tenant was admitted
/// for ([`Origin`]), one row per distinct origin, which a tenant's
/// interval names (NULL: none; an empty text: that part not known). Rows
/// of layout 2 have none.
const MIGRATE_2_TO_3: &str = "
ALTER TABLE tenant_intervals ADD COLUMN origin INTEGER;
CREATE TABLE origins (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    user TEXT NOT NULL,
    account TEXT NOT NULL,
    UNIQUE (job, user, account)
);
";

/// From layout 3 to 4: the team the monitor held a tenant in
/// ([`TeamOf`]), one row per team name, which a tenant's interval names
/// (NULL: in no team). Rows of older layouts did not record it: they get 0,
/// which names no team row and reads back as [`TeamOf::NotRecorded`].
const MIGRATE_3_TO_4: &str = "
ALTER TABLE tenant_intervals ADD COLUMN team INTEGER DEFAULT 0;
CREATE TABLE teams (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
";

/// Why the history could not be opened for reading.
#[derive(Debug)]
pub enum OpenError {
    /// There is no history file.
    Missing,
    /// The caller may not read it (or its directory).
    Denied(String),
    /// Anything else: not a history, a newer layout, a broken file.
    Other(String),
}

/// Why the history could not be opened for writing.
#[derive(Debug)]
pub enum CreateError {
    /// The file is there but is not a history this code writes (not
    /// SQLite, other tables, another layout): it may be moved aside.
    NotAHistory(String),
    /// Anything else (permissions, a lock, the disk): leave the file alone.
    Failed(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::NotAHistory(message) | CreateError::Failed(message) => f.write_str(message),
        }
    }
}

/// An open history.
pub struct Store {
    conn: Connection,
}

/// Rows read back for a window (the tests read a window whole).
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Rows {
    /// By tenant, device, then time.
    pub tenants: Vec<TenantRow>,
    /// By device, then time.
    pub devices: Vec<DeviceRow>,
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn small(value: i64) -> u32 {
    u32::try_from(value.max(0)).unwrap_or(u32::MAX)
}

/// What a file that is not a regular one is, for messages.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_file() {
        "regular file"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else {
        "device"
    }
}

/// The statements the store runs, each compiled once against the file:
/// a table or a column that is missing fails here, naming it, rather
/// than at every interval.
const LAYOUT_PROBES: &[&str] = &[
    "SELECT id, tenant, device_uuid FROM series LIMIT 0",
    "SELECT start_s, series, span_s, device_index, rounds, active_rounds, memory_peak_bytes, memory_mean_bytes, \
     driver_memory_peak_bytes, memory_cap_bytes, compute_share_e4, compute_limit_e4, compute_used_e4, compute_target_e4, \
     throttled_ns, denied, processes_peak, cpu_e4, gpu_e4, origin, team FROM tenant_intervals LIMIT 0",
    "SELECT id, job, user, account FROM origins LIMIT 0",
    "SELECT id, name FROM teams LIMIT 0",
    "SELECT id, uuid FROM devices LIMIT 0",
    "SELECT start_s, device, span_s, device_index, rounds, memory_total_bytes, memory_used_peak_bytes, utilization_e4, \
     temperature_peak_c, power_peak_mw, throttled_rounds FROM device_intervals LIMIT 0",
];

fn check_layout(conn: &Connection) -> Result<(), rusqlite::Error> {
    LAYOUT_PROBES.iter().try_for_each(|probe| conn.prepare(probe).map(drop))
}

fn sql(context: &str) -> impl Fn(rusqlite::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// Reads `rows` with `read`, and calls `each` with every run of
/// consecutive rows that `same` says belong to one series (the query
/// orders them so), never holding more than one series in memory.
fn each_run<T>(
    mut rows: rusqlite::Rows<'_>,
    read: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    same: impl Fn(&T, &T) -> bool,
    mut each: impl FnMut(&[T]),
) -> Result<(), String> {
    let mut run: Vec<T> = Vec::new();
    while let Some(r) = rows.next().map_err(sql("cannot read the history"))? {
        let row = read(r).map_err(sql("cannot read the history"))?;
        if run.last().is_some_and(|last| !same(last, &row)) {
            each(&run);
            run.clear();
        }
        run.push(row);
    }
    if !run.is_empty() {
        each(&run);
    }
    Ok(())
}

fn tenant_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TenantRow> {
    Ok(TenantRow {
        start_s: uint(r.get(0)?),
        span_s: uint(r.get(1)?),
        tenant: r.get(2)?,
        device_uuid: r.get(3)?,
        device_index: small(r.get(4)?),
        rounds: small(r.get(5)?),
        active_rounds: small(r.get(6)?),
        memory_peak_bytes: uint(r.get(7)?),
        memory_mean_bytes: uint(r.get(8)?),
        driver_memory_peak_bytes: r.get::<_, Option<i64>>(9)?.map(uint),
        memory_cap_bytes: r.get::<_, Option<i64>>(10)?.map(uint),
        compute_share_e4: r.get::<_, Option<i64>>(11)?.map(small),
        compute_limit_e4: r.get::<_, Option<i64>>(12)?.map(small),
        compute_used_e4: r.get::<_, Option<i64>>(13)?.map(small),
        compute_target_e4: r.get::<_, Option<i64>>(14)?.map(small),
        throttled_ns: uint(r.get(15)?),
        denied: uint(r.get(16)?),
        processes_peak: small(r.get(17)?),
        cpu_e4: r.get::<_, Option<i64>>(18)?.map(small),
        gpu_e4: r.get::<_, Option<i64>>(19)?.map(small),
        origin: match (r.get::<_, Option<String>>(20)?, r.get::<_, Option<String>>(21)?, r.get::<_, Option<String>>(22)?) {
            (None, None, None) => None,
            (job, user, account) => {
                let known = |v: Option<String>| v.filter(|v| !v.is_empty());
                Some(Origin { job: known(job), user: known(user), account: known(account) })
            }
        },
        team: match (r.get::<_, Option<i64>>(23)?, r.get::<_, Option<String>>(24)?) {
            (None, _) => TeamOf::NoTeam,
            (Some(_), Some(name)) => TeamOf::Team(name),
            // 0 (a row of an older layout) or an id with no team row.
            (Some(_), None) => TeamOf::NotRecorded,
        },
    })
}

fn device_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeviceRow> {
    Ok(DeviceRow {
        start_s: uint(r.get(0)?),
        span_s: uint(r.get(1)?),
        device_uuid: r.get(2)?,
        device_index: small(r.get(3)?),
        rounds: small(r.get(4)?),
        memory_total_bytes: uint(r.get(5)?),
        memory_used_peak_bytes: r.get::<_, Option<i64>>(6)?.map(uint),
        utilization_e4: r.get::<_, Option<i64>>(7)?.map(small),
        temperature_peak_c: r.get::<_, Option<i64>>(8)?.map(small),
        power_peak_mw: r.get::<_, Option<i64>>(9)?.map(small),
        throttled_rounds: r.get::<_, Option<i64>>(10)?.map(small),
    })
}

impl Store {
    /// Opens the history at `path` for writing, creating it (mode 0600)
    /// with its tables if it does not exist. The file must be a regular
    /// file of this process's user with one name, its tables this
    /// layout's and its pages whole (else [`CreateError::NotAHistory`]);
    /// a mode other than 0600 is set to 0600.
    pub fn create(path: &Path) -> Result<Store, CreateError> {
        let shown = path.display();
        let failed = |what: String| CreateError::Failed(what);
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        // Whatever sits at the path and is not a plain file of ours (a
        // link, a directory, a file of another user or with a second
        // name) was not written by this monitor: moved aside, never
        // followed or opened, so that it cannot stop the history.
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.is_file() || meta.uid() != me || meta.nlink() != 1 => {
                return Err(CreateError::NotAHistory(format!(
                    "{shown} is not a history this monitor wrote: a {} of uid {} with {} name(s), mode {:o}; \
                     a regular file of uid {me} with one name is accepted",
                    file_kind(&meta),
                    meta.uid(),
                    meta.nlink(),
                    meta.mode()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(format!("{shown}: {e}"))),
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| failed(format!("cannot open {shown}: {e}")))?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| failed(format!("{shown}: {e}")))?;
        if !meta.is_file() || meta.uid() != me {
            return Err(failed(format!("{shown} must be a regular file of uid {me}; found uid {} mode {:o}", meta.uid(), meta.mode())));
        }
        if meta.mode() & 0o777 != 0o600 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| failed(format!("cannot make {shown} mode 0600: {e}")))?;
        }
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| failed(format!("cannot open {shown}: {e}")))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| failed(format!("{shown}: {e}")))?;
        // Not SQLite at all, or a broken file: not a history; a lock or
        // the disk: a failure that moving the file would not mend.
        let not_a_history = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
                CreateError::NotAHistory(format!("{shown} is not a history: {e}"))
            }
            _ => CreateError::Failed(format!("cannot read {shown}: {e}")),
        };
        let version: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(not_a_history)?;
        match version {
            0 => {
                let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(not_a_history)?;
                if tables != 0 {
                    return Err(CreateError::NotAHistory(format!("{shown} holds tables but no history layout")));
                }
                // Set before the first table: freed pages can then be given
                // back to the file system (see `prune`).
                conn.execute_batch(&format!(
                    "PRAGMA auto_vacuum = INCREMENTAL; BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                ))
                .map_err(|e| failed(format!("cannot create the history in {shown}: {e}")))?;
            }
            1 => {
                conn.execute_batch(&format!(
                    "BEGIN; {MIGRATE_1_TO_2} {MIGRATE_2_TO_3} {MIGRATE_3_TO_4} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                ))
                .map_err(|e| CreateError::NotAHistory(format!("{shown} cannot be brought from layout 1 to {SCHEMA_VERSION}: {e}")))?;
                check_layout(&conn).map_err(|e| CreateError::NotAHistory(format!("{shown} is not a history: {e}")))?;
            }
            2 => {
                conn.execute_batch(&format!("BEGIN; {MIGRATE_2_TO_3} {MIGRATE_3_TO_4} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"))
                    .map_err(|e| CreateError::NotAHistory(format!("{shown} cannot be brought from layout 2 to {SCHEMA_VERSION}: {e}")))?;
                check_layout(&conn).map_err(|e| CreateError::NotAHistory(format!("{shown} is not a history: {e}")))?;
            }
            3 => {
                conn.execute_batch(&format!("BEGIN; {MIGRATE_3_TO_4} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"))
                    .map_err(|e| CreateError::NotAHistory(format!("{shown} cannot be brought from layout 3 to {SCHEMA_VERSION}: {e}")))?;
                check_layout(&conn).map_err(|e| CreateError::NotAHistory(format!("{shown} is not a history: {e}")))?;
            }
            SCHEMA_VERSION => {
                // The layout number is one word anyone can write: the
                // tables must be there, and every page readable, or each
                // interval would fail to be written from now on.
                check_layout(&conn).map_err(|e| CreateError::NotAHistory(format!("{shown} is not a history: {e}")))?;
                let check: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0)).map_err(not_a_history)?;
                if check != "ok" {
                    let check = check.lines().collect::<Vec<_>>().join("; ");
                    return Err(CreateError::NotAHistory(format!("{shown} is not a history: it is damaged ({check})")));
                }
            }
            other => {
                return Err(CreateError::NotAHistory(format!("{shown} has layout {other}; this gpuslice writes layout {SCHEMA_VERSION}")))
            }
        }
        Ok(Store { conn })
    }

    /// Opens the history at `path` for reading only.
    pub fn open_read(path: &Path) -> Result<Store, OpenError> {
        let shown = path.display();
        match std::fs::symlink_metadata(path) {
            // The monitor never writes through a link (see `create`): one
            // here was put by someone else, and is not followed.
            Ok(meta) if !meta.is_file() => {
                return Err(OpenError::Other(format!("{shown} is a {}, not a history the monitor wrote: it is not read", file_kind(&meta))))
            }
            // Only the monitor writes its directory (mode 0700): a file of
            // another user there was planted, and its figures are not the
            // monitor's.
            Ok(meta) if path.parent().and_then(|d| std::fs::metadata(d).ok()).is_some_and(|d| d.uid() != meta.uid()) => {
                return Err(OpenError::Other(format!(
                    "{shown} belongs to uid {}, not to the owner of its directory (the monitor's user): it is not read",
                    meta.uid()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OpenError::Missing),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(OpenError::Denied(format!("{shown}: {e}"))),
            Err(e) => return Err(OpenError::Other(format!("{shown}: {e}"))),
        }
        if let Err(e) = std::fs::File::open(path) {
            return Err(if e.kind() == std::io::ErrorKind::PermissionDenied {
                OpenError::Denied(format!("{shown}: {e}"))
            } else {
                OpenError::Other(format!("{shown}: {e}"))
            });
        }
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| OpenError::Other(format!("cannot open {shown}: {e}")))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| OpenError::Other(format!("{shown}: {e}")))?;
        let version: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| {
            // A write cut short (the monitor killed mid-minute) left a
            // journal that only a writer may roll back.
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly) {
                OpenError::Other(format!("{shown}: its last write was cut short ({e}); the monitor rolls it back when it starts again"))
            } else {
                OpenError::Other(format!("{shown} is not a history: {e}"))
            }
        })?;
        if version != SCHEMA_VERSION {
            return Err(OpenError::Other(format!("{shown} has layout {version}; this gpuslice reads layout {SCHEMA_VERSION}")));
        }
        check_layout(&conn).map_err(|e| OpenError::Other(format!("{shown} is not a history: {e}")))?;
        Ok(Store { conn })
    }

    /// Writes one batch (any number of intervals) in one transaction.
    pub fn write(&mut self, batch: &Batch) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(sql("cannot begin a history transaction"))?;
        {
            let mut add_series =
                tx.prepare("INSERT OR IGNORE INTO series (tenant, device_uuid) VALUES (?1, ?2)").map_err(sql("prepare"))?;
            let mut series_id = tx.prepare("SELECT id FROM series WHERE tenant = ?1 AND device_uuid = ?2").map_err(sql("prepare"))?;
            let mut add_row = tx
                .prepare(
                    "INSERT OR REPLACE INTO tenant_intervals (start_s, series, span_s, device_index, rounds, active_rounds, \
                     memory_peak_bytes, memory_mean_bytes, driver_memory_peak_bytes, memory_cap_bytes, compute_share_e4, \
                     compute_limit_e4, compute_used_e4, compute_target_e4, throttled_ns, denied, processes_peak, cpu_e4, gpu_e4, \
                     origin, team) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
                )
                .map_err(sql("prepare"))?;
            let mut add_origin =
                tx.prepare("INSERT OR IGNORE INTO origins (job, user, account) VALUES (?1, ?2, ?3)").map_err(sql("prepare"))?;
            let mut origin_id =
                tx.prepare("SELECT id FROM origins WHERE job = ?1 AND user = ?2 AND account = ?3").map_err(sql("prepare"))?;
            let mut add_team = tx.prepare("INSERT OR IGNORE INTO teams (name) VALUES (?1)").map_err(sql("prepare"))?;
            let mut team_id = tx.prepare("SELECT id FROM teams WHERE name = ?1").map_err(sql("prepare"))?;
            for row in &batch.tenants {
                add_series.execute(params![row.tenant, row.device_uuid]).map_err(sql("cannot add a series"))?;
                let id: i64 = series_id.query_row(params![row.tenant, row.device_uuid], |r| r.get(0)).map_err(sql("series"))?;
                let origin: Option<i64> = match &row.origin {
                    Some(o) => {
                        let text = |v: &Option<String>| v.clone().unwrap_or_default();
                        let key = params![text(&o.job), text(&o.user), text(&o.account)];
                        add_origin.execute(key).map_err(sql("cannot add an origin"))?;
                        Some(origin_id.query_row(key, |r| r.get(0)).map_err(sql("origin"))?)
                    }
                    None => None,
                };
                let team: Option<i64> = match &row.team {
                    TeamOf::Team(name) => {
                        add_team.execute(params![name]).map_err(sql("cannot add a team"))?;
                        Some(team_id.query_row(params![name], |r| r.get(0)).map_err(sql("team"))?)
                    }
                    TeamOf::NoTeam => None,
                    // Never written by this monitor; kept as not recorded.
                    TeamOf::NotRecorded => Some(0),
                };
                add_row
                    .execute(params![
                        int(row.start_s),
                        id,
                        int(row.span_s),
                        row.device_index,
                        row.rounds,
                        row.active_rounds,
                        int(row.memory_peak_bytes),
                        int(row.memory_mean_bytes),
                        row.driver_memory_peak_bytes.map(int),
                        row.memory_cap_bytes.map(int),
                        row.compute_share_e4,
                        row.compute_limit_e4,
                        row.compute_used_e4,
                        row.compute_target_e4,
                        int(row.throttled_ns),
                        int(row.denied),
                        row.processes_peak,
                        row.cpu_e4,
                        row.gpu_e4,
                        origin,
                        team,
                    ])
                    .map_err(sql("cannot write a tenant's interval"))?;
            }
            let mut add_device = tx.prepare("INSERT OR IGNORE INTO devices (uuid) VALUES (?1)").map_err(sql("prepare"))?;
            let mut device_id = tx.prepare("SELECT id FROM devices WHERE uuid = ?1").map_err(sql("prepare"))?;
            let mut add_device_row = tx
                .prepare(
                    "INSERT OR REPLACE INTO device_intervals (start_s, device, span_s, device_index, rounds, memory_total_bytes, \
                     memory_used_peak_bytes, utilization_e4, temperature_peak_c, power_peak_mw, throttled_rounds) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(sql("prepare"))?;
            for row in &batch.devices {
                add_device.execute(params![row.device_uuid]).map_err(sql("cannot add a device"))?;
                let id: i64 = device_id.query_row(params![row.device_uuid], |r| r.get(0)).map_err(sql("device"))?;
                add_device_row
                    .execute(params![
                        int(row.start_s),
                        id,
                        int(row.span_s),
                        row.device_index,
                        row.rounds,
                        int(row.memory_total_bytes),
                        row.memory_used_peak_bytes.map(int),
                        row.utilization_e4,
                        row.temperature_peak_c,
                        row.power_peak_mw,
                        row.throttled_rounds,
                    ])
                    .map_err(sql("cannot write a device's interval"))?;
            }
        }
        tx.commit().map_err(sql("cannot commit the history"))
    }

    /// Deletes the intervals that began before Unix time `before_s`, the
    /// series and devices left with none, and gives the freed pages back
    /// to the file system. Returns how many intervals went.
    pub fn prune(&mut self, before_s: u64) -> Result<usize, String> {
        let tx = self.conn.transaction().map_err(sql("cannot begin a history transaction"))?;
        let mut gone = tx.execute("DELETE FROM tenant_intervals WHERE start_s < ?1", [int(before_s)]).map_err(sql("prune"))?;
        gone += tx.execute("DELETE FROM device_intervals WHERE start_s < ?1", [int(before_s)]).map_err(sql("prune"))?;
        tx.execute("DELETE FROM series WHERE id NOT IN (SELECT DISTINCT series FROM tenant_intervals)", []).map_err(sql("prune"))?;
        tx.execute("DELETE FROM devices WHERE id NOT IN (SELECT DISTINCT device FROM device_intervals)", []).map_err(sql("prune"))?;
        tx.execute("DELETE FROM origins WHERE id NOT IN (SELECT DISTINCT origin FROM tenant_intervals WHERE origin IS NOT NULL)", [])
            .map_err(sql("prune"))?;
        tx.execute("DELETE FROM teams WHERE id NOT IN (SELECT DISTINCT team FROM tenant_intervals WHERE team IS NOT NULL)", [])
            .map_err(sql("prune"))?;
        tx.commit().map_err(sql("cannot commit the pruning"))?;
        self.conn.execute_batch("PRAGMA incremental_vacuum").map_err(sql("incremental vacuum"))?;
        Ok(gone)
    }

    /// Calls `each` with the rows of one tenant and device at a time
    /// (oldest first; pairs by tenant, then device) of the intervals that
    /// began at or after Unix time `since_s`, so that a month of many
    /// tenants is never in memory at once.
    pub fn each_tenant_series(&self, since_s: u64, each: impl FnMut(&[TenantRow])) -> Result<(), String> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT i.start_s, i.span_s, s.tenant, s.device_uuid, i.device_index, i.rounds, i.active_rounds, \
                 i.memory_peak_bytes, i.memory_mean_bytes, i.driver_memory_peak_bytes, i.memory_cap_bytes, \
                 i.compute_share_e4, i.compute_limit_e4, i.compute_used_e4, i.compute_target_e4, i.throttled_ns, \
                 i.denied, i.processes_peak, i.cpu_e4, i.gpu_e4, o.job, o.user, o.account, i.team, t.name \
                 FROM tenant_intervals i JOIN series s ON s.id = i.series LEFT JOIN origins o ON o.id = i.origin \
                 LEFT JOIN teams t ON t.id = i.team \
                 WHERE i.start_s >= ?1 \
                 ORDER BY s.tenant, s.device_uuid, i.start_s",
            )
            .map_err(sql("cannot read the history"))?;
        let rows = statement.query([int(since_s)]).map_err(sql("cannot read the history"))?;
        each_run(rows, tenant_row, |a, b| a.tenant == b.tenant && a.device_uuid == b.device_uuid, each)
    }

    /// Calls `each` with the rows of one device at a time (oldest first),
    /// as [`Store::each_tenant_series`] does for tenants.
    pub fn each_device_series(&self, since_s: u64, each: impl FnMut(&[DeviceRow])) -> Result<(), String> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT i.start_s, i.span_s, d.uuid, i.device_index, i.rounds, i.memory_total_bytes, \
                 i.memory_used_peak_bytes, i.utilization_e4, i.temperature_peak_c, i.power_peak_mw, i.throttled_rounds \
                 FROM device_intervals i JOIN devices d ON d.id = i.device WHERE i.start_s >= ?1 \
                 ORDER BY d.uuid, i.start_s",
            )
            .map_err(sql("cannot read the history"))?;
        let rows = statement.query([int(since_s)]).map_err(sql("cannot read the history"))?;
        each_run(rows, device_row, |a, b| a.device_uuid == b.device_uuid, each)
    }

    /// For each team and device: the most its tenants' memory peaks there
    /// added up to in one interval that began at or after `since_s` (the
    /// intervals of one round are closed together, so one start is one
    /// interval for every tenant). Added as reals: a lying ledger's huge
    /// figure saturates instead of failing the sum.
    pub fn team_memory_peaks(&self, since_s: u64) -> Result<Vec<(String, String, u64)>, String> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT t.name, p.device_uuid, max(p.held) FROM \
                 (SELECT i.team AS team, s.device_uuid AS device_uuid, total(i.memory_peak_bytes) AS held \
                  FROM tenant_intervals i JOIN series s ON s.id = i.series \
                  WHERE i.start_s >= ?1 AND i.team IS NOT NULL GROUP BY i.team, s.device_uuid, i.start_s) p \
                 JOIN teams t ON t.id = p.team GROUP BY t.name, p.device_uuid ORDER BY t.name, p.device_uuid",
            )
            .map_err(sql("cannot read the history"))?;
        let rows = statement
            .query_map([int(since_s)], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, f64>(2)? as u64)))
            .map_err(sql("cannot read the history"))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql("cannot read the history"))
    }

    /// Every row of the intervals that began at or after Unix time `since_s`.
    #[cfg(test)]
    pub fn read(&self, since_s: u64) -> Result<Rows, String> {
        let mut read = Rows::default();
        self.each_tenant_series(since_s, |rows| read.tenants.extend_from_slice(rows))?;
        self.each_device_series(since_s, |rows| read.devices.extend_from_slice(rows))?;
        Ok(read)
    }

    /// The earliest interval's start, if any (how far back the history goes).
    pub fn oldest_s(&self) -> Result<Option<u64>, String> {
        self.conn
            .query_row("SELECT min(start_s) FROM tenant_intervals", [], |r| r.get::<_, Option<i64>>(0))
            .optional()
            .map(|v| v.flatten().map(uint))
            .map_err(sql("cannot read the history"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::summary::{summarize, summarize_devices, Verdict};
    use std::path::PathBuf;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    struct Dir(PathBuf);
    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("gpuslice-history-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
        fn file(&self) -> PathBuf {
            self.0.join("history.sqlite")
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn row(tenant: &str, device: u32, start_s: u64) -> TenantRow {
        TenantRow {
            start_s,
            span_s: 60,
            tenant: tenant.into(),
            device_uuid: format!("GPU-00000000-0000-0000-0000-00000000000{device}"),
            device_index: device,
            rounds: 240,
            active_rounds: 240,
            memory_peak_bytes: GIB,
            memory_mean_bytes: GIB / 2,
            driver_memory_peak_bytes: Some(GIB + 64 * MIB),
            memory_cap_bytes: Some(16 * GIB),
            compute_share_e4: Some(5000),
            compute_limit_e4: None,
            compute_used_e4: Some(1000),
            compute_target_e4: Some(5000),
            throttled_ns: 0,
            denied: 0,
            processes_peak: 2,
            cpu_e4: Some(9500),
            gpu_e4: Some(300),
            origin: None,
            team: crate::history::aggregate::TeamOf::NoTeam,
        }
    }

    fn device_row(device: u32, start_s: u64) -> DeviceRow {
        DeviceRow {
            start_s,
            span_s: 60,
            device_uuid: format!("GPU-00000000-0000-0000-0000-00000000000{device}"),
            device_index: device,
            rounds: 240,
            memory_total_bytes: 80 * GIB,
            memory_used_peak_bytes: Some(20 * GIB + u64::from(device)),
            utilization_e4: Some(4321),
            temperature_peak_c: Some(71),
            power_peak_mw: Some(512_000),
            throttled_rounds: Some(3),
        }
    }

    #[test]
    fn rows_come_back_as_written_and_the_file_is_0600() {
        let dir = Dir::new("roundtrip");
        let mut store = Store::create(&dir.file()).unwrap();
        let a = row("team-a", 0, 1000);
        let b = TenantRow { compute_share_e4: None, driver_memory_peak_bytes: None, memory_cap_bytes: None, ..row("team-b", 1, 1000) };
        let batch = Batch { tenants: vec![b.clone(), a.clone()], devices: vec![device_row(0, 1000)], left_out: 0 };
        store.write(&batch).unwrap();
        let rows = Store::open_read(&dir.file()).unwrap().read(0).unwrap();
        assert_eq!(rows.tenants, vec![a.clone(), b]);
        assert_eq!(rows.devices, vec![device_row(0, 1000)]);
        assert_eq!(Store::open_read(&dir.file()).unwrap().read(1001).unwrap().tenants, vec![]);
        assert_eq!(std::fs::metadata(dir.file()).unwrap().mode() & 0o777, 0o600);
        // Opened again (a restarted monitor): the rows stay, and a mode
        // someone widened is narrowed.
        drop(store);
        std::fs::set_permissions(dir.file(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut store = Store::create(&dir.file()).unwrap();
        assert_eq!(std::fs::metadata(dir.file()).unwrap().mode() & 0o777, 0o600);
        store.write(&Batch { tenants: vec![row("team-a", 0, 1060)], ..Batch::default() }).unwrap();
        assert_eq!(Store::open_read(&dir.file()).unwrap().read(0).unwrap().tenants.len(), 3);
        assert_eq!(Store::open_read(&dir.file()).unwrap().oldest_s().unwrap(), Some(1000));

        // While a transaction writes, its journal is as private as the file.
        store.conn.execute_batch("BEGIN; INSERT INTO series (tenant, device_uuid) VALUES ('x', 'y');").unwrap();
        let journal = dir.0.join("history.sqlite-journal");
        assert_eq!(std::fs::metadata(&journal).unwrap().mode() & 0o777, 0o600);
        store.conn.execute_batch("ROLLBACK").unwrap();
    }

    #[test]
    fn a_lying_tenants_huge_values_do_not_fail_the_others_rows() {
        let dir = Dir::new("huge");
        let mut store = Store::create(&dir.file()).unwrap();
        let liar = TenantRow {
            memory_peak_bytes: u64::MAX,
            memory_mean_bytes: u64::MAX,
            throttled_ns: u64::MAX,
            denied: u64::MAX,
            driver_memory_peak_bytes: Some(u64::MAX),
            ..row("liar", 0, 1000)
        };
        store.write(&Batch { tenants: vec![liar, row("team-a", 0, 1000)], ..Batch::default() }).unwrap();
        let rows = Store::open_read(&dir.file()).unwrap().read(0).unwrap();
        assert_eq!(rows.tenants.len(), 2);
        assert_eq!((rows.tenants[0].tenant.as_str(), rows.tenants[0].denied), ("liar", i64::MAX as u64));
        assert_eq!(rows.tenants[1], row("team-a", 0, 1000));
    }

    #[test]
    fn what_is_not_a_history_is_refused_with_its_name() {
        let dir = Dir::new("refused");
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Missing)));
        std::fs::write(dir.file(), b"not a database, just text that is long enough to have a header").unwrap();
        let e = Store::create(&dir.file()).err().unwrap();
        assert!(matches!(&e, CreateError::NotAHistory(m) if m.contains("history.sqlite")), "{e}");
        std::fs::remove_file(dir.file()).unwrap();
        // A newer layout.
        drop(Store::create(&dir.file()).unwrap());
        Connection::open(dir.file()).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
        let e = Store::create(&dir.file()).err().unwrap();
        assert!(matches!(&e, CreateError::NotAHistory(m) if m.contains("layout 99")), "{e}");
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("layout 99")));
        // A link is not followed: it is not a history, so it may be moved aside.
        std::fs::remove_file(dir.file()).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.file()).unwrap();
        let e = Store::create(&dir.file()).err().unwrap();
        assert!(matches!(&e, CreateError::NotAHistory(m) if m.contains("symbolic link")), "{e}");
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("symbolic link")));
        // This layout in the header, other tables in the file.
        std::fs::remove_file(dir.file()).unwrap();
        Connection::open(dir.file()).unwrap().execute_batch("CREATE TABLE other (x); PRAGMA user_version = 4;").unwrap();
        let e = Store::create(&dir.file()).err().unwrap();
        assert!(matches!(&e, CreateError::NotAHistory(m) if m.contains("no such table: series")), "{e}");
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("no such table: series")));
        // Layout 1 in the header, other tables in the file: nothing to bring forward.
        std::fs::remove_file(dir.file()).unwrap();
        Connection::open(dir.file()).unwrap().execute_batch("CREATE TABLE other (x); PRAGMA user_version = 1;").unwrap();
        let e = Store::create(&dir.file()).err().unwrap();
        assert!(matches!(&e, CreateError::NotAHistory(m) if m.contains("from layout 1")), "{e}");
    }

    #[test]
    fn a_history_of_layout_1_is_brought_forward_with_its_rows() {
        let dir = Dir::new("layout1");
        let mut store = Store::create(&dir.file()).unwrap();
        store.write(&Batch { tenants: vec![row("team-a", 0, 1000)], devices: vec![device_row(0, 1000)], left_out: 0 }).unwrap();
        drop(store);
        // The same file as layout 1 wrote it: without the newer columns.
        Connection::open(dir.file())
            .unwrap()
            .execute_batch(
                "ALTER TABLE tenant_intervals DROP COLUMN team; DROP TABLE teams; \
                 ALTER TABLE tenant_intervals DROP COLUMN origin; DROP TABLE origins; \
                 ALTER TABLE tenant_intervals DROP COLUMN cpu_e4; ALTER TABLE tenant_intervals DROP COLUMN gpu_e4; \
                 ALTER TABLE device_intervals DROP COLUMN temperature_peak_c; ALTER TABLE device_intervals DROP COLUMN power_peak_mw; \
                 ALTER TABLE device_intervals DROP COLUMN throttled_rounds; PRAGMA user_version = 1;",
            )
            .unwrap();
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("layout 1")));
        drop(Store::create(&dir.file()).unwrap());
        let read = Store::open_read(&dir.file()).unwrap().read(0).unwrap();
        let old = TenantRow { cpu_e4: None, gpu_e4: None, team: TeamOf::NotRecorded, ..row("team-a", 0, 1000) };
        assert_eq!(read.tenants, vec![old]);
        let old = DeviceRow { temperature_peak_c: None, power_peak_mw: None, throttled_rounds: None, ..device_row(0, 1000) };
        assert_eq!(read.devices, vec![old]);
    }

    #[test]
    fn a_history_of_layout_2_is_brought_forward_and_origins_come_back_as_written() {
        let dir = Dir::new("layout2");
        let mut store = Store::create(&dir.file()).unwrap();
        store.write(&Batch { tenants: vec![row("team-a", 0, 1000)], devices: vec![], left_out: 0 }).unwrap();
        drop(store);
        Connection::open(dir.file())
            .unwrap()
            .execute_batch(
                "ALTER TABLE tenant_intervals DROP COLUMN team; DROP TABLE teams; \
                 ALTER TABLE tenant_intervals DROP COLUMN origin; DROP TABLE origins; PRAGMA user_version = 2;",
            )
            .unwrap();
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("layout 2")));
        let mut store = Store::create(&dir.file()).unwrap();
        let origin = |job: &str, user: &str, account: Option<&str>| {
            Some(Origin { job: Some(job.into()), user: Some(user.into()), account: account.map(String::from) })
        };
        let jobs = vec![
            TenantRow { origin: origin("41", "alice", Some("physics")), ..row("slurm-41", 0, 1060) },
            TenantRow { origin: origin("42", "bob", None), ..row("slurm-42", 0, 1060) },
            // The same origin again in the next interval: one origin row.
            TenantRow { origin: origin("41", "alice", Some("physics")), ..row("slurm-41", 0, 1120) },
        ];
        store.write(&Batch { tenants: jobs.clone(), devices: vec![], left_out: 0 }).unwrap();
        let read = Store::open_read(&dir.file()).unwrap().read(0).unwrap();
        let old = TenantRow { team: TeamOf::NotRecorded, ..row("team-a", 0, 1000) };
        let mut expected = vec![old, jobs[0].clone(), jobs[2].clone(), jobs[1].clone()];
        expected.sort_by(|a, b| (&a.tenant, a.start_s).cmp(&(&b.tenant, b.start_s)));
        assert_eq!(read.tenants, expected);
        let origins: i64 = store.conn.query_row("SELECT count(*) FROM origins", [], |r| r.get(0)).unwrap();
        assert_eq!(origins, 2);
        // Pruned with the last interval that names it.
        store.prune(1100).unwrap();
        let origins: i64 = store.conn.query_row("SELECT count(*) FROM origins", [], |r| r.get(0)).unwrap();
        assert_eq!(origins, 1);
    }

    #[test]
    fn a_history_of_layout_3_is_brought_forward_and_teams_come_back_as_written() {
        let dir = Dir::new("layout3");
        let mut store = Store::create(&dir.file()).unwrap();
        store.write(&Batch { tenants: vec![row("lab-1", 0, 1000)], devices: vec![], left_out: 0 }).unwrap();
        drop(store);
        // The same file as layout 3 wrote it: no teams.
        Connection::open(dir.file())
            .unwrap()
            .execute_batch("ALTER TABLE tenant_intervals DROP COLUMN team; DROP TABLE teams; PRAGMA user_version = 3;")
            .unwrap();
        assert!(matches!(Store::open_read(&dir.file()), Err(OpenError::Other(e)) if e.contains("layout 3")));
        let mut store = Store::create(&dir.file()).unwrap();
        let in_team = |team: &str, r: TenantRow| TenantRow { team: TeamOf::Team(team.into()), ..r };
        let rows = vec![
            in_team("lab", row("lab-1", 0, 1060)),
            in_team("lab", row("lab-2", 0, 1060)),
            // The next interval: lab-1 in another team (a reload), lab-2 in none.
            in_team("ops", row("lab-1", 0, 1120)),
            row("lab-2", 0, 1120),
        ];
        store.write(&Batch { tenants: rows.clone(), devices: vec![], left_out: 0 }).unwrap();
        let read = Store::open_read(&dir.file()).unwrap().read(0).unwrap();
        // The interval of layout 3 did not record a team: it says so.
        let old = TenantRow { team: TeamOf::NotRecorded, ..row("lab-1", 0, 1000) };
        assert_eq!(read.tenants, vec![old, rows[0].clone(), rows[2].clone(), rows[1].clone(), rows[3].clone()]);
        let teams: i64 = store.conn.query_row("SELECT count(*) FROM teams", [], |r| r.get(0)).unwrap();
        assert_eq!(teams, 2);
        // Each team's tenants' peaks on a device added up, interval by interval.
        let peaks = Store::open_read(&dir.file()).unwrap().team_memory_peaks(0).unwrap();
        let uuid = row("x", 0, 0).device_uuid;
        assert_eq!(peaks, vec![("lab".to_string(), uuid.clone(), 2 * GIB), ("ops".to_string(), uuid, GIB)]);
        // A team goes with the last interval that names it.
        store.prune(1100).unwrap();
        let names: Vec<String> =
            store.conn.prepare("SELECT name FROM teams").unwrap().query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        assert_eq!(names, ["ops"]);
        // A lying member's huge peak saturates its own team's sum and fails nothing.
        let liar = TenantRow { memory_peak_bytes: u64::MAX, ..in_team("ops", row("lab-9", 0, 1180)) };
        store.write(&Batch { tenants: vec![liar, in_team("ops", row("lab-1", 0, 1180))], ..Batch::default() }).unwrap();
        let peaks = Store::open_read(&dir.file()).unwrap().team_memory_peaks(0).unwrap();
        assert_eq!(peaks.len(), 1);
        assert!(peaks[0].2 >= i64::MAX as u64, "{peaks:?}");
    }

    #[test]
    fn a_write_cut_short_is_named_to_a_reader_and_rolled_back_by_the_writer() {
        let dir = Dir::new("cut-short");
        let mut store = Store::create(&dir.file()).unwrap();
        store.write(&Batch { tenants: vec![row("team-a", 0, 1000)], ..Batch::default() }).unwrap();
        // A transaction big enough to spill into the file before it
        // commits, copied as a crash would leave it: the file and its journal.
        store.conn.execute_batch("PRAGMA cache_size = 1; BEGIN;").unwrap();
        for i in 0..2000 {
            store.conn.execute("INSERT INTO series (tenant, device_uuid) VALUES (?1, 'GPU-0')", params![format!("t{i}")]).unwrap();
        }
        let crashed = dir.0.join("crashed.sqlite");
        std::fs::copy(dir.file(), &crashed).unwrap();
        std::fs::copy(dir.0.join("history.sqlite-journal"), dir.0.join("crashed.sqlite-journal")).unwrap();
        store.conn.execute_batch("ROLLBACK").unwrap();

        let e = Store::open_read(&crashed).err().unwrap();
        assert!(matches!(&e, OpenError::Other(m) if m.contains("cut short")), "{e:?}");
        // The monitor's next start rolls it back: the committed row is there.
        drop(Store::create(&crashed).unwrap());
        let rows = Store::open_read(&crashed).unwrap().read(0).unwrap();
        assert_eq!(rows.tenants, vec![row("team-a", 0, 1000)]);
    }

    const WEEK_MINUTES: u64 = 7 * 24 * 60;

    /// A synthetic week, one row per minute per series, written an hour a
    /// transaction through [`Store::write`]: `team-a` (cap 16 GiB, share
    /// 50 %) peaks at (m mod 100 + 1) × 50 MiB and uses (m mod 20) % of the
    /// device, `team-b` runs at its 8 GiB cap with refusals, `team-c` works
    /// the first day only, and five more series fill two devices.
    fn synthetic_week(store: &mut Store, first_minute: u64) {
        for hour in 0..WEEK_MINUTES / 60 {
            let mut batch = Batch::default();
            for m in hour * 60..(hour + 1) * 60 {
                let start_s = (first_minute + m) * 60;
                batch.tenants.push(TenantRow {
                    memory_peak_bytes: (m % 100 + 1) * 50 * MIB,
                    compute_used_e4: Some(u32::try_from(m % 20).unwrap() * 100),
                    ..row("team-a", 0, start_s)
                });
                batch.tenants.push(TenantRow {
                    memory_peak_bytes: 8 * GIB - 64 * MIB,
                    memory_cap_bytes: Some(8 * GIB),
                    denied: u64::from(m % 600 == 0),
                    compute_share_e4: None,
                    compute_limit_e4: Some(3000),
                    compute_used_e4: Some(3000),
                    throttled_ns: 1_000_000_000,
                    ..row("team-b", 1, start_s)
                });
                let day_one = m < 24 * 60;
                batch.tenants.push(TenantRow {
                    active_rounds: if day_one { 240 } else { 0 },
                    memory_peak_bytes: if day_one { 3 * GIB } else { 0 },
                    processes_peak: u32::from(day_one),
                    ..row("team-c", 0, start_s)
                });
                for (i, device) in [0, 1, 1, 0, 1].into_iter().enumerate() {
                    batch.tenants.push(row(&format!("svc-{i}"), device, start_s));
                }
                batch.devices.push(device_row(0, start_s));
                batch.devices.push(device_row(1, start_s));
            }
            store.write(&batch).unwrap();
        }
    }

    #[test]
    fn a_synthetic_week_is_summed_up_by_the_rule_and_its_size_is_bounded() {
        let dir = Dir::new("week");
        let mut store = Store::create(&dir.file()).unwrap();
        let first_minute = 29_000_000;
        synthetic_week(&mut store, first_minute);
        drop(store);
        let week_bytes = std::fs::metadata(dir.file()).unwrap().len();
        let rows = 8 * WEEK_MINUTES;
        println!(
            "a synthetic week: {rows} tenant rows (8 tenant-device series) and {} device rows in {week_bytes} bytes \
             ({:.1} MiB, {:.0} bytes a tenant row with its share of the device rows)",
            2 * WEEK_MINUTES,
            week_bytes as f64 / MIB as f64,
            week_bytes as f64 / rows as f64
        );
        // A row is a few dozen bytes: a week of a series stays under 1 MiB.
        assert!(week_bytes < 8 * MIB, "{week_bytes} bytes for a week of 8 series");

        let store = Store::open_read(&dir.file()).unwrap();
        let read = store.read(first_minute * 60).unwrap();
        assert_eq!(read.tenants.len() as u64, rows);
        let summaries = summarize(&read.tenants);
        let find = |name: &str| summaries.iter().find(|s| s.tenant == name).unwrap();

        let a = find("team-a");
        assert_eq!(a.recorded_s, WEEK_MINUTES * 60);
        assert_eq!(a.memory_peak_bytes, 5000 * MIB);
        // 10,080 minutes: the 9,980th smallest peak is 99 × 50 MiB.
        assert_eq!(a.memory_p99_bytes, Some(4950 * MIB));
        assert_eq!(a.memory_p95_bytes, Some(4750 * MIB));
        // 4,950 MiB + 10 % = 5,445 MiB, up to a whole 512 MiB: 5.5 GiB.
        assert_eq!((a.memory_advice.verdict.clone(), a.memory_advice.recommended), (Verdict::Lower, Some(5632 * MIB)));
        assert_eq!(a.memory_advice.text, "cap 16.0 GiB, p99 4.8 GiB over 7d: 5.5 GiB would do");
        // Used 0–19 %: p99 19 % + 10 % = 20.9 %, up to 25 %, under the 50 % share.
        let share = a.share_advice.clone().unwrap();
        assert_eq!((share.verdict, share.recommended), (Verdict::Lower, Some(2500)));
        assert_eq!(share.text, "share 50 %, p99 used 19 % over 7d: 25 % would do");

        let b = find("team-b");
        assert_eq!(b.alloc_denied_total, WEEK_MINUTES / 600 + 1);
        assert_eq!(b.memory_advice.verdict, Verdict::Keep);
        assert_eq!(b.throttled_seconds, WEEK_MINUTES as f64);
        assert_eq!(b.limit_advice.clone().unwrap().verdict, Verdict::Keep);
        assert!(b.share_advice.is_none());

        let c = find("team-c");
        assert_eq!((c.recorded_s, c.active_s), (WEEK_MINUTES * 60, 24 * 3600));
        assert_eq!(c.memory_p99_bytes, Some(3 * GIB));
        assert_eq!(c.memory_advice.recommended, Some(3 * GIB + 512 * MIB));

        let devices = summarize_devices(&read.devices);
        assert_eq!(devices.len(), 2);
        assert_eq!((devices[1].memory_used_peak_bytes, devices[1].utilization_mean_ratio), (Some(20 * GIB + 1), Some(0.4321)));

        // A second week with a week's retention, pruned once a day (the
        // monitor prunes every hour): the file holds at most the week and
        // the day before a pruning, not two weeks.
        let mut store = Store::create(&dir.file()).unwrap();
        let second = first_minute + WEEK_MINUTES;
        for day in 0..7 {
            synthetic_day(&mut store, second + day * 24 * 60);
        }
        drop(store);
        let two_weeks_bytes = std::fs::metadata(dir.file()).unwrap().len();
        println!("after a second week with 7 days' retention: {two_weeks_bytes} bytes");
        let week_and_a_day = week_bytes * 8 / 7;
        assert!(two_weeks_bytes <= week_and_a_day + week_bytes / 20, "{two_weeks_bytes} bytes after two weeks, {week_bytes} after one");
        let store = Store::open_read(&dir.file()).unwrap();
        assert_eq!(store.oldest_s().unwrap(), Some(second * 60));
    }

    /// A day of the eight series, written an hour a transaction, then
    /// pruned to a week.
    fn synthetic_day(store: &mut Store, first_minute: u64) {
        for hour in 0..24 {
            let mut batch = Batch::default();
            for m in hour * 60..(hour + 1) * 60 {
                let start_s = (first_minute + m) * 60;
                for (i, device) in [0, 1, 0, 0, 1, 1, 0, 1].into_iter().enumerate() {
                    batch.tenants.push(row(
                        ["team-a", "team-b", "team-c", "svc-0", "svc-1", "svc-2", "svc-3", "svc-4"][i],
                        device,
                        start_s,
                    ));
                }
                batch.devices.push(device_row(0, start_s));
                batch.devices.push(device_row(1, start_s));
            }
            store.write(&batch).unwrap();
        }
        let now_s = (first_minute + 24 * 60) * 60;
        store.prune(now_s - WEEK_MINUTES * 60).unwrap();
    }
}
