//! The monitor's turn tables: one sealed table per device, created on the
//! first request for it and handed to every shim that asks
//! (`ledger::broker`), and read back each round for the targets the
//! tenants' weights came to.
//!
//! The tables outlive any shim and die with the monitor. A shim that got
//! its table keeps it when the monitor stops, so tenants go on taking turns
//! (they are not frozen); processes started after a restart get the new
//! monitor's tables, and the two groups then share the device as the
//! hardware does until the old processes end.

use super::log;
use ledger::turns::{MemberView, Turns};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most tables the monitor makes: a client naming made-up UUIDs cannot
/// make it allocate without end.
pub const MAX_TABLES: usize = 64;

/// The tables by device UUID.
#[derive(Clone, Default)]
pub struct TurnTables {
    tables: Arc<Mutex<HashMap<[u8; 16], Turns>>>,
}

impl TurnTables {
    /// Binds `<dir>/.turns.sock` (any user of the directory may connect)
    /// and answers requests on a thread of its own.
    pub fn serve(dir: &Path) -> Result<TurnTables, String> {
        let path = ledger::broker::socket_path(dir);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                let _ = std::fs::remove_file(&path);
            }
            Ok(_) => return Err(format!("{} exists and is no socket; remove it", path.display())),
            Err(_) => {}
        }
        let listener = ledger::broker::with_socket_path(dir, |p| UnixListener::bind(p))
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot open {} to tenants: {e}", path.display()))?;
        let tables = TurnTables::default();
        let serving = tables.clone();
        std::thread::Builder::new()
            .name("turn-tables".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
                    let Ok(uuid) = ledger::broker::read_request(&mut stream) else { continue };
                    let fd = serving.table_fd(uuid);
                    let _ = ledger::broker::answer(&stream, fd);
                }
            })
            .map_err(|e| format!("cannot start the turn-table thread: {e}"))?;
        Ok(tables)
    }

    /// The descriptor of `uuid`'s table, made if it is new and there is room.
    fn table_fd(&self, uuid: [u8; 16]) -> Option<i32> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(turns) = tables.get(&uuid) {
            return Some(turns.fd());
        }
        if tables.len() >= MAX_TABLES {
            log::warn(&format!("turn tables: {MAX_TABLES} devices already; a request for another is refused"));
            return None;
        }
        let name = crate::nvml::uuid_string(&uuid);
        match Turns::create_sealed(&name) {
            Ok(turns) => {
                let fd = turns.fd();
                tables.insert(uuid, turns);
                log::info(&format!("turn table for device {name} created"));
                Some(fd)
            }
            Err(e) => {
                log::warn(&format!("cannot create a turn table for device {name}: {e}"));
                None
            }
        }
    }

    /// Every member of `uuid`'s table, if the monitor has one.
    pub fn members(&self, uuid: &[u8; 16]) -> Vec<MemberView> {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let now_ns = ledger::compute::monotonic_ns();
        tables.get(uuid).map(|t| t.table().members_view(now_ns)).unwrap_or_default()
    }
}
