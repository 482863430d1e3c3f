//! Reading a tenant's ledger from a test, as the monitor does. The `ledger`
//! crate is a dev-dependency, so this file is not part of the support
//! library: tests that need it include it with
//! `#[path = "support/ledger_view.rs"] mod ledger_view;`.

#![allow(dead_code)]

use std::path::Path;

/// Opens `<dir>/<tenant>.ledger` without writing to it.
pub fn open(dir: &Path, tenant: &str) -> ledger::Ledger {
    let path = ledger::tenant_path(dir, tenant);
    ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("cannot open the ledger {}: {e}", path.display()))
}

/// Bytes the tenant holds on ledger device index `dev` (all its processes,
/// contexts included).
pub fn used_bytes(dir: &Path, tenant: &str, dev: usize) -> u64 {
    open(dir, tenant).used_bytes(dev)
}

/// The tenant's cap on ledger device index `dev`.
pub fn memory_limit_bytes(dir: &Path, tenant: &str, dev: usize) -> u64 {
    open(dir, tenant).memory_limit_bytes(dev)
}

/// The process slots in use.
pub fn slots(dir: &Path, tenant: &str) -> Vec<ledger::SlotView> {
    open(dir, tenant).slots()
}

/// The slot of host pid `pid`, if it has one.
pub fn slot_of(dir: &Path, tenant: &str, pid: u32) -> Option<ledger::SlotView> {
    slots(dir, tenant).into_iter().find(|s| s.pid == pid)
}

/// The bytes of a valid ledger file of tenant `name`, made from
/// `template` (a whole ledger file of another tenant): only the name in the
/// header differs, as a copy an attacker renames would.
pub fn renamed_copy(template: &[u8], name: &str) -> Vec<u8> {
    let at = std::mem::offset_of!(ledger::layout::Header, tenant_name);
    let mut bytes = template.to_vec();
    bytes[at..at + 64].fill(0);
    bytes[at..at + name.len()].copy_from_slice(name.as_bytes());
    bytes
}
