//! libgpuslice.so: the per-process CUDA interception shim.
//!
//! Loaded with `LD_PRELOAD` into a tenant's processes, it holds the tenant
//! to its memory cap on every device allocation path and shows the
//! application the cap as if it were the whole GPU, and holds its launches
//! to its tenant's share of each device's time (`compute`).
//!
//! # How a call flows
//! A driver or NVML call reaches an exported hook (`hooks/`) by direct
//! binding, through our `dlsym`, or through `cuGetProcAddress`. The hook
//! takes the per-thread re-entrancy guard (`guard`), asks [`runtime`] for
//! the process's state, and hands the safe core ([`accounting`], one file
//! per concern) a closure that makes the real call (`real`). The hooks, their
//! real slots and the `cuGetProcAddress` version table ([`procaddr`]) come
//! from one list in `hooks`. A panic never crosses the boundary: the hook
//! catches it and returns `CUDA_ERROR_UNKNOWN`.
//!
//! # Initialisation
//! An explicit state machine, advanced by compare-and-swap:
//! `Uninit → Initialising → Ready | Disabled | Refused`.
//! It runs on the first hooked call that needs it (normally `cuInit`), never
//! at load time, so a process that never uses CUDA pays nothing but the
//! loader's work. Initialising parses the environment ([`config`](mod@config)), opens
//! the tenant's ledger (one `mmap`), initialises the real driver, claims
//! this process's slot, and registers each device by UUID, deciding the
//! tenant's cap and compute limit there. At load the library only registers
//! its fork handler and finds the real `dlsym`. What can wait for a use
//! waits: `/proc/self` is read once, when the slot is claimed (and its
//! status file only in a PID namespace of its own); the helper thread and
//! the monitor's socket wait for the first context
//! ([`compute::join::join_device`]); the compute bucket's lanes for a
//! device with a limit.
//! - `Ready`: every allocation is accounted.
//! - `Disabled`: no cap and no compute limit is configured and the ledger
//!   cannot be used (for example, its directory cannot be created): calls
//!   pass straight through, and the application sees exactly what it would
//!   without the shim.
//! - `Refused` (fail closed): an invalid environment value, or a ledger file
//!   that is corrupt, truncated, of another layout version or not a ledger
//!   (never rewritten), or a cap or limit that cannot be recorded. `cuInit` returns
//!   `CUDA_ERROR_NOT_PERMITTED` without initialising the driver, every
//!   accounted call returns it too, and stderr says why once.
//!
//! Other threads wait while one initialises (a call let through uncounted
//! could pass the cap); a call made from inside initialisation on the same
//! thread passes through by the guard.
//!
//! # fork and exit
//! A `pthread_atfork` child handler closes the child's copy of the ledger
//! lock descriptor (so the parent's death still frees the parent's slot) and
//! sends the child back to `Uninit`: a child that uses CUDA registers as its
//! own process; one that does not is unaffected. A library destructor
//! releases the slot at normal exit; after `kill -9` the kernel drops the
//! slot's lock and the tenant's next allocation that needs room reclaims it.
//! After the destructor ran, threads still working are refused every
//! allocation (`CUDA_ERROR_OUT_OF_MEMORY`) rather than let through uncounted;
//! their frees are forwarded.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[macro_use]
mod log;
pub mod accounting;
pub mod compute;
pub mod config;
mod ffi;
mod guard;
mod hooks;
mod overhead;
pub mod placement;
pub mod procaddr;
mod real;
mod symbols;
mod thread;

/// A symbol only this library exports, by which `gpuslice run` finds out,
/// in a process started as its command will be, that the loader really
/// preloaded the shim (a loader that cannot load it only says so on stderr
/// and runs the program without it). Its value is the ledger layout the
/// shim reads and writes.
#[export_name = "gpuslice_shim_loaded"]
pub static SHIM_LOADED: u32 = ledger::layout::LAYOUT_VERSION;

use abi::cuda::*;
use accounting::{Device, Runtime};
use config::Config;
use ledger::{Decision, Ledger, OpenError};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::time::Instant;

const UNINIT: u8 = 0;
const INITIALISING: u8 = 1;
const READY: u8 = 2;
const DISABLED: u8 = 3;
const REFUSED: u8 = 4;

/// The result code of everything the shim refuses when it fails closed.
pub const REFUSED_RESULT: CUresult = CUDA_ERROR_NOT_PERMITTED;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// The process's runtime once `Ready`. Leaked on purpose: hooks may run
/// during exit, and a forked child abandons its parent's.
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(core::ptr::null_mut());

/// What a hook may do now.
pub enum Access {
    /// Account with this runtime.
    Ready(&'static Runtime),
    /// Forward untouched.
    PassThrough,
    /// Fail closed with this result.
    Refused(CUresult),
}

fn ready_runtime() -> Option<&'static Runtime> {
    let ptr = RUNTIME.load(Ordering::Acquire);
    // SAFETY: RUNTIME only ever holds null or a pointer from Box::into_raw
    // that is never freed.
    unsafe { ptr.as_ref() }
}

/// The process's state, initialising it on first use. `Err` carries a
/// driver error from initialisation (nothing changed; the next call tries
/// again).
pub fn runtime() -> Result<Access, CUresult> {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => {
                return Ok(match ready_runtime() {
                    Some(rt) => Access::Ready(rt),
                    None => Access::PassThrough,
                })
            }
            DISABLED => return Ok(Access::PassThrough),
            REFUSED => return Ok(Access::Refused(REFUSED_RESULT)),
            INITIALISING => std::thread::sleep(std::time::Duration::from_micros(50)),
            _ => {
                if STATE.compare_exchange(UNINIT, INITIALISING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // A panic must not leave the state at Initialising, where
                    // every other thread would wait for ever: fail closed.
                    let (next, result) = guard::boundary(guard::Or((REFUSED, Ok(()))), initialise);
                    STATE.store(next, Ordering::Release);
                    result?;
                }
            }
        }
    }
}

/// The state without initialising: `None` while nothing decided it yet.
pub fn runtime_if_started() -> Option<Access> {
    match STATE.load(Ordering::Acquire) {
        READY => Some(ready_runtime().map_or(Access::PassThrough, Access::Ready)),
        DISABLED => Some(Access::PassThrough),
        REFUSED => Some(Access::Refused(REFUSED_RESULT)),
        _ => None,
    }
}

/// The configuration, or the message that refuses it (printed once).
pub fn config() -> Option<&'static Config> {
    config::get_config().as_ref().ok()
}

fn refuse(message: std::fmt::Arguments<'_>) -> (u8, Result<(), CUresult>) {
    log::write(config::LogLevel::Error, format_args!("{message}; refusing GPU access (cuInit returns CUDA_ERROR_NOT_PERMITTED)"));
    (REFUSED, Ok(()))
}

/// A `GPUSLICE_DIR` that does not exist: a typo there would otherwise make
/// a ledger directory no monitor watches.
fn missing_dir(config: &Config) -> Option<String> {
    if !config.dir_given || ledger::is_default_dir(&config.dir) {
        return None;
    }
    match std::fs::symlink_metadata(&config.dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "GPUSLICE_DIR={:?} is invalid: no such directory; expected the monitor's ledger directory (it creates it at \
             start), or unset it for the default",
            config.dir.display().to_string()
        )),
        _ => None,
    }
}

/// What stands at the tenant's ledger path, when something does.
fn name_taken(config: &Config) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = ledger::tenant_path(&config.dir, &config.tenant);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    Some(format!("{} is {} of uid {}", path.display(), ledger::FileKind::of(&meta), meta.uid()))
}

/// Whether an open error is about the file's contents (always fail closed)
/// rather than about reaching it.
fn is_bad_file(e: &OpenError) -> bool {
    !matches!(e, OpenError::Io { .. })
}

/// One initialisation attempt: returns the next state and, for a driver
/// failure, its code (the state is then `Uninit` again).
fn initialise() -> (u8, Result<(), CUresult>) {
    let started = Instant::now();
    let config = match config::get_config() {
        Ok(config) => config,
        Err(e) => return refuse(format_args!("{e}")),
    };
    log::set_level(config.log_level);
    // A compute limit alone fails closed as a cap does: a ledger that
    // cannot be used must not mean no limit.
    let capped = config.memory.any() || config.compute.any() || config.share.any() || config.priority.any();
    if let Some(problem) = missing_dir(config) {
        return refuse(format_args!("{problem}"));
    }
    let ledger = match Ledger::open_or_create(&config.dir, &config.tenant) {
        Ok(ledger) => ledger,
        Err(e) if capped || is_bad_file(&e) => return refuse(format_args!("{e}")),
        // Something else stands at the ledger's name (a file of another
        // user's, a link, a FIFO): the tenant may be one the monitor caps,
        // so the process does not run uncapped beside it.
        Err(e) if name_taken(config).is_some() => {
            let what = name_taken(config).unwrap_or_default();
            return refuse(format_args!("{e}; {what}, not a ledger this process can use (the monitor moves such a file aside)"));
        }
        Err(e) => {
            warn!("{e}; no cap or compute limit is set, so the shim steps aside for this process");
            return (DISABLED, Ok(()));
        }
    };
    let r = real::init(0);
    if r != CUDA_SUCCESS {
        return (UNINIT, Err(r));
    }
    // The slot first: processes of the tenant starting at the same time see
    // each other live when they decide the tenant's cap (`apply_cap`).
    let me = ledger::process::SelfProcess::read();
    let slot = match ledger.claim_slot_as(&me.identity) {
        Ok(slot) => slot,
        Err(e) if capped => return refuse(format_args!("ledger {}: {e}", ledger.path().display())),
        Err(e) => {
            warn!("ledger {}: {e}; no cap or compute limit is set, so the shim steps aside for this process", ledger.path().display());
            return (DISABLED, Ok(()));
        }
    };
    let devices = match register_devices(&ledger, &slot, config) {
        Ok(devices) => devices,
        Err(failure) => {
            ledger.release_slot(slot);
            return match failure {
                Failure::Driver(r) => (UNINIT, Err(r)),
                Failure::Ledger(message) if capped => refuse(format_args!("{message}")),
                Failure::Ledger(message) => {
                    warn!("{message}; no cap or compute limit is set, so the shim steps aside for this process");
                    (DISABLED, Ok(()))
                }
            };
        }
    };
    let runtime: &'static Runtime = Box::leak(Box::new(Runtime::new(ledger, slot, devices, me)));
    RUNTIME.store(runtime as *const Runtime as *mut Runtime, Ordering::Release);
    // Every device is asked for, so that whoever on it has a setting is
    // arbitrated; the bucket governs only where the monitor does not.
    compute::join::start(runtime);
    info!("tenant {:?}, ledger {}, ready in {} us", config.tenant, config.dir.display(), started.elapsed().as_micros());
    (READY, Ok(()))
}

enum Failure {
    Driver(CUresult),
    Ledger(String),
}

/// Registers every device this process sees in the ledger and applies the
/// environment's caps and compute limits to them.
fn register_devices(ledger: &Ledger, slot: &ledger::Slot, config: &Config) -> Result<Vec<Device>, Failure> {
    let count = real::device_count().map_err(Failure::Driver)?;
    config.memory.check_ordinals(count as u32).map_err(|e| Failure::Ledger(e.to_string()))?;
    config.compute.check_ordinals(count as u32).map_err(|e| Failure::Ledger(e.to_string()))?;
    config.share.check_ordinals(count as u32).map_err(|e| Failure::Ledger(e.to_string()))?;
    config.priority.check_ordinals(count as u32).map_err(|e| Failure::Ledger(e.to_string()))?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let cu_device = real::device_get(ordinal).map_err(Failure::Driver)?;
        let uuid = real::device_uuid(cu_device).map_err(Failure::Driver)?;
        let total = real::device_total_mem_bytes(cu_device).map_err(Failure::Driver)?;
        let ledger_index =
            ledger.device_index(&uuid, total).map_err(|e| Failure::Ledger(format!("ledger {}: {e}", ledger.path().display())))?;
        let alone = || !ledger.slots().iter().any(|s| s.alive && s.index != slot.index());
        if let Some(cap) = config.memory.for_device(ordinal as u32) {
            let decision = apply_environment::<ledger::MemoryCap>(ledger, ledger_index, ordinal, cap, &config.memory, alone, |bytes| {
                format!("{bytes} bytes")
            });
            // The cap in force, unless the monitor set it, is held in this
            // process's memory too.
            match decision {
                Decision::Set | Decision::Same | Decision::Replaced { .. } => ledger.hold_cap_at_most(ledger_index, cap),
                Decision::Kept { existing, source } if source != ledger::PolicySource::Monitor => {
                    ledger.hold_cap_at_most(ledger_index, existing)
                }
                Decision::Kept { .. } => {}
            }
        }
        if let Some(percent) = config.compute.for_device(ordinal as u32) {
            let ratio_e4 = ledger::compute::percent_ratio_e4(percent);
            apply_environment::<ledger::ComputeLimit>(ledger, ledger_index, ordinal, ratio_e4, &config.compute, alone, |ratio_e4| {
                format!("{}%", f64::from(ratio_e4) / 100.0)
            });
        }
        let share = config.share.for_device(ordinal as u32).map(ledger::compute::percent_ratio_e4);
        let priority = config.priority.for_device(ordinal as u32);
        if (share.is_some() || priority.is_some()) && !ledger.apply_environment_claim(ledger_index, share, priority) {
            let ignored: Vec<&str> = [(share.is_some(), config.share.source), (priority.is_some(), config.priority.source)]
                .into_iter()
                .filter_map(|(set, source)| set.then_some(source))
                .collect();
            warn!("device {ordinal}: the monitor sets this tenant's compute settings; {} ignored", ignored.join(" and "));
        }
        devices.push(Device { ordinal, cu_device, ledger_index, uuid });
    }
    Ok(devices)
}

/// Puts one of the environment's settings (its memory cap or its compute
/// limit, `asked` for device `ordinal`) in the ledger, as one decision
/// against the value in force (`Ledger::apply_environment`). The first
/// process of a tenant sets it; a later process with a different value
/// keeps the tenant's (one value per tenant), unless it is the only live
/// process of the tenant (`alone`) and the value came from an environment:
/// then its own value is the newer intent and replaces it. A monitor's
/// value always stands. Every process claims its slot before it decides,
/// so processes starting together see each other and the first decision
/// stands for all of them. `show` writes a value for the log.
///
/// For the memory cap, the caller also holds the process to the cap in
/// force when the monitor did not set it (`Ledger::hold_cap_at_most`): a
/// later write of the tenant's own page (the unlimited value, say) does not
/// raise it, and it is what the process tells the monitor when it joins,
/// so that the monitor pins it.
fn apply_environment<P: ledger::PolicyPair>(
    ledger: &Ledger,
    dev: usize,
    ordinal: i32,
    asked: P::Value,
    setting: &config::Setting<impl Copy>,
    alone: impl FnMut() -> bool,
    show: impl Fn(P::Value) -> String,
) -> Decision<P::Value> {
    let (what, source) = (setting.what, setting.source);
    let decision = ledger.apply_environment::<P>(dev, asked, alone);
    match decision {
        Decision::Set | Decision::Same => {}
        Decision::Replaced { previous } => info!("device {ordinal}: {what} changed from {} to {} ({source})", show(previous), show(asked)),
        Decision::Kept { existing, source: set_by } => warn!(
            "device {ordinal}: the tenant's {what} is {} (set by the {}); {source} asks for {} and is ignored",
            show(existing),
            if set_by == ledger::PolicySource::Monitor { "monitor" } else { "tenant's running processes" },
            show(asked)
        ),
    }
    decision
}

/// `pthread_atfork` child handler: see the module docs. Only closes a
/// descriptor and stores atomics (async-signal-safe).
/// A panic never unwinds out of it (that would abort the child); catching
/// allocates nothing unless one happens.
unsafe extern "C" fn after_fork_in_child() {
    guard::boundary((), || {
        let ptr = RUNTIME.swap(core::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: see ready_runtime; the pointer is leaked, never freed.
        if let Some(rt) = unsafe { ptr.as_ref() } {
            ffi::close_fd(rt.ledger.lock_fd());
        }
        // The monitor's connections are the parent's: the child closes its
        // copies (so the parent's exit still closes them) and joins anew.
        compute::gate::forget_all();
        compute::helper::forget();
        if matches!(STATE.load(Ordering::Acquire), READY | INITIALISING) {
            STATE.store(UNINIT, Ordering::Release);
        }
    });
}

/// Runs when the library is loaded: registers the fork handler and finds
/// the real `dlsym` (cheap; nothing CUDA happens here).
extern "C" fn on_load() {
    // No panic may unwind into the loader.
    guard::boundary((), || {
        ffi::at_fork_child(after_fork_in_child);
        let _ = ffi::real_dlsym();
    });
}

/// Runs at normal exit (or unload): releases this process's slot and every
/// byte it still holds. Other threads may still be inside a hook: the
/// runtime stays (it is never freed), but from here on it admits nothing
/// (allocations get `CUDA_ERROR_OUT_OF_MEMORY`) and releases nothing in the
/// ledger (frees are forwarded; the slot is drained as a whole). The
/// reservations and releases already under way are waited for, at most
/// 100 ms; if one is still running then, the slot is left as it is: exit
/// may cut that thread between the ledger's two steps, and a slot still
/// alive is reclaimed (its bytes returned, its in-flight mark settled, the
/// cut change's bytes found by the monitor's audit) once the process is
/// gone, while a released slot would hide the cut.
extern "C" fn on_unload() {
    // No panic may unwind into exit (a ledger bug must not abort the
    // process): the slot is then left to reclaim.
    guard::boundary((), release_at_exit);
}

fn release_at_exit() {
    // SAFETY: see ready_runtime; the pointer is leaked, never freed.
    let Some(rt) = (unsafe { RUNTIME.load(Ordering::Acquire).as_ref() }) else { return };
    if rt.owner_pid != std::process::id() || !rt.stop_admitting(std::time::Duration::from_millis(100)) {
        return;
    }
    // SAFETY: `Slot` is plain data (an index and a generation) with no Drop;
    // the runtime is never dropped, and the ledger refuses every later use
    // of the released slot's generation, so this copy is the only one that
    // changes it.
    let slot = unsafe { core::ptr::read(&rt.slot) };
    rt.ledger.release_slot(slot);
    accounting::team::release_all_at_exit();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
