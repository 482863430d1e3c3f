//! Joining: asking the monitor for each device's grant page, at start and
//! again whenever a device has none (no monitor yet, or it went away).
//!
//! Every process joins every device it makes a context on, whatever its
//! settings: when any tenant on a device has a compute setting, every
//! process there takes turns, so the order in which tenants start does not
//! matter. A process
//! whose tenant has a compute setting on a device it could not join says
//! so once, and keeps asking (the helper thread, every
//! [`super::helper::RETRY`]); without settings it asks just as quietly.

use super::gate;
use crate::accounting::{Device, Runtime};
use ledger::broker::{self, Hello, JoinError, Refusal};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Said once: a device with a compute setting is not arbitrated.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Sets the launch path's mode at initialisation. Devices are joined when
/// the process first makes a context on them ([`join_device`]): a process
/// that sees eight GPUs and uses one joins one, so grants on the others
/// never send its launches down the slow path. The helper thread starts
/// there too, with the first seat: a process that never makes a context
/// (one that only asks what devices there are) starts no thread.
pub fn start(rt: &'static Runtime) {
    super::refresh_mode(rt);
}

/// Joins the device of `cu_device` if this process has not yet (after a
/// context was made there; the first launch comes after), then starts the
/// helper if it is not running yet: it answers the monitor on a joined seat
/// and asks again for one that could not join. Started after the join, its
/// first look already finds the seat: the join need not wake it (a wake-up
/// and a second `ppoll` of a thread that has only just started), and what
/// the monitor sends meanwhile waits in the connection for that look.
pub fn join_device(rt: &'static Runtime, cu_device: abi::cuda::CUdevice) {
    let Some(config) = crate::config() else { return };
    let Some(device) = rt.device_by_handle(cu_device) else { return };
    if gate::seats().any(|s| s.dev.load(Ordering::Relaxed) == device.ledger_index) {
        return;
    }
    let Some(seat) = gate::seat_for(device.ledger_index) else { return };
    let joined = join_one(rt, seat, device, &config.dir);
    super::helper::start(rt);
    match joined {
        Ok(()) => super::refresh_mode(rt),
        Err(JoinError::Refused(why, e)) if holds_back(why) => {
            seat.refuse(ledger::compute::monotonic_ns());
            warn!(
                "device {}: {e}: this process has no place in the monitor's turns there; its launches there wait up to {} s \
                 for one (asked again meanwhile), then fail with CUDA_ERROR_NOT_PERMITTED",
                device.ordinal,
                gate::REFUSED_WAIT_NS / 1_000_000_000
            );
        }
        Err(e) if has_setting(rt) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                warn!(
                    "device {}: {e}: compute settings there are not arbitrated by the monitor, so this tenant's share and priority are NOT enforced \
                     (its processes share the device as the hardware does) until a monitor answers (asked every {} s); \
                     a limit is kept by the tenant's own processes meanwhile",
                    device.ordinal,
                    super::helper::RETRY.as_secs()
                );
            }
        }
        Err(e) => debug!("no grant page for device {} ({e})", device.ordinal),
    }
}

/// Asks again for the devices that have no page.
pub fn retry(rt: &Runtime) {
    let Some(config) = crate::config() else { return };
    let mut joined_any = false;
    for seat in gate::seats() {
        let dev = seat.dev.load(Ordering::Relaxed);
        let Some(device) = rt.devices.iter().find(|d| d.ledger_index == dev) else { continue };
        if seat.page().is_some() {
            continue;
        }
        match join_one(rt, seat, device, &config.dir) {
            Ok(()) => {
                joined_any = true;
                info!("device {}: the monitor arbitrates it now", device.ordinal);
            }
            Err(JoinError::Refused(why, _)) if holds_back(why) => seat.refuse(ledger::compute::monotonic_ns()),
            // No monitor answers: nobody arbitrates the device.
            Err(JoinError::NoMonitor(_)) => seat.clear_refusal(),
            Err(JoinError::Refused(..)) => {}
        }
    }
    if joined_any {
        super::refresh_mode(rt);
    }
}

/// Whether a refusal means that the monitor arbitrates the device without
/// this process: then its launches there are held ([`gate::refused_wait`]),
/// for running beside the turns would take them from the others. A device
/// the monitor does not know, or has no page for, it does not arbitrate.
fn holds_back(why: Refusal) -> bool {
    !matches!(why, Refusal::UnknownDevice | Refusal::Internal)
}

fn join_one(rt: &Runtime, seat: &gate::Seat, device: &Device, dir: &std::path::Path) -> Result<(), JoinError> {
    let hello = Hello {
        tenant: rt.ledger.tenant(),
        slot: rt.slot.index() as u32,
        generation: rt.slot.generation(),
        uuid: device.uuid,
        asked_cap_bytes: rt.ledger.held_cap_bytes(device.ledger_index),
    };
    let joined = broker::join_or_refusal(dir, &hello, Some(rt.ledger.lock_fd()))?;
    let member = joined.member;
    if let Some(team) = joined.team {
        crate::accounting::team::take_page(rt, seat, team.leak());
    }
    let page = joined.grants.leak();
    let fd = joined.stream.into_raw_fd();
    seat.join(page, member, device.ledger_index, fd);
    super::helper::wake();
    Ok(())
}

/// Whether this tenant has any compute setting on any device.
fn has_setting(rt: &Runtime) -> bool {
    rt.devices.iter().any(|d| {
        let p = rt.ledger.compute_policy(d.ledger_index);
        p.share_ratio_e4 > 0 || p.priority != 0 || ledger::compute::is_limiting(p.limit_ratio_e4)
    })
}
