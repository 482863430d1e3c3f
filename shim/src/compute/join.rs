//! Joining: asking the monitor for each device's grant page, at start and
//! again whenever a device has none (no monitor yet, or it went away).
//!
//! Every process joins every device it sees, whatever its settings: when
//! any tenant on a device has a compute setting, every process there takes
//! turns, so the order in which tenants start does not matter. A process
//! whose tenant has a compute setting on a device it could not join says
//! so once, and keeps asking (the helper thread, every
//! [`super::helper::RETRY`]); without settings it asks just as quietly.

use super::gate;
use crate::accounting::{Device, Runtime};
use ledger::broker::{self, Hello};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Said once: a device with a compute setting is not arbitrated.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Joins every device this process sees and starts the helper thread.
pub fn join_all(rt: &'static Runtime) {
    let Some(config) = crate::config() else { return };
    let mut failed = None;
    for device in &rt.devices {
        let Some(seat) = gate::seat_for(device.ledger_index) else { continue };
        if let Err(e) = join_one(rt, seat, device, &config.dir) {
            failed = failed.or(Some((device.ordinal, e)));
        }
    }
    if let Some((ordinal, e)) = failed {
        if has_setting(rt) {
            WARNED.store(true, Ordering::Relaxed);
            warn!(
                "compute settings are arbitrated by the monitor, and on device {ordinal} {e}: this process runs without them \
                 there until a monitor answers (asked every {} s; a limit is kept by the tenant's own processes meanwhile)",
                super::helper::RETRY.as_secs()
            );
        } else {
            debug!("no grant page for device {ordinal} ({e})");
        }
    }
    super::refresh_mode(rt);
    super::helper::start(rt);
}

/// Asks again for the devices that have no page.
pub fn retry(rt: &Runtime) {
    let Some(config) = crate::config() else { return };
    let mut joined_any = false;
    for device in &rt.devices {
        let Some(seat) = gate::seat_for(device.ledger_index) else { continue };
        if seat.page().is_some() {
            continue;
        }
        if join_one(rt, seat, device, &config.dir).is_ok() {
            joined_any = true;
            info!("device {}: the monitor arbitrates it now", device.ordinal);
        }
    }
    if joined_any {
        super::refresh_mode(rt);
    }
}

fn join_one(rt: &Runtime, seat: &gate::Seat, device: &Device, dir: &std::path::Path) -> Result<(), String> {
    let hello = Hello { tenant: rt.ledger.tenant(), slot: rt.slot.index() as u32, generation: rt.slot.generation(), uuid: device.uuid };
    let joined = broker::join(dir, &hello)?;
    let member = joined.member;
    let page = joined.grants.leak();
    let fd = joined.stream.into_raw_fd();
    seat.join(page, member, device.ledger_index, fd);
    Ok(())
}

/// Whether this tenant has any compute setting on any device.
fn has_setting(rt: &Runtime) -> bool {
    rt.devices.iter().any(|d| {
        let p = rt.ledger.compute_policy(d.ledger_index);
        p.share_ratio_e4 > 0 || p.priority != 0 || ledger::compute::is_limiting(p.limit_ratio_e4)
    })
}
