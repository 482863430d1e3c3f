//! The `SIGBUS` handler of every gpuslice process that maps ledgers (the
//! monitor, `status`, `devices`, `top`): a tenant that cuts its ledger
//! short while one of them has it mapped must not kill it.
//!
//! An access past the end of a shortened file faults with `SIGBUS`. The
//! handler hands the fault to the ledger crate's guard
//! (`ledger::guard::absorb_fault`), which maps zero pages over that
//! ledger's mapping and marks it; the access then runs again and reads
//! zeros, and the reader finds the ledger marked (the monitor drops it
//! with one error line next round). A fault anywhere else is not ours: the
//! previous disposition is put back and the access, run again, meets it.
//!
//! Only the `gpuslice` command installs this (the shim never installs
//! signal handlers).

use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// The disposition the handler replaced, for faults that are not a ledger's.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_sigbus(_signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    if ledger::guard::absorb_fault(address) {
        return;
    }
    let previous = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: sigaction is async-signal-safe; `previous` is null or the
    // leaked disposition saved at installation, never freed.
    unsafe {
        if previous.is_null() {
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        } else {
            libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut());
        }
    }
}

/// Installs the handler (once per process) and turns guarding on for every
/// ledger mapped from now on.
pub fn install() -> io::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        // SAFETY: sa_mask is a sigset_t inside a struct we own.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        let previous = Box::into_raw(Box::new(
            // SAFETY: as above.
            unsafe { std::mem::zeroed::<libc::sigaction>() },
        ));
        // SAFETY: both pointers are valid for the call; `previous` is leaked
        // so that the handler may read it for the life of the process.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, previous) } != 0 {
            result = Err(io::Error::last_os_error());
            return;
        }
        PREVIOUS.store(previous, Ordering::Release);
        ledger::guard::enable();
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{Damage, Ledger};

    #[test]
    fn a_ledger_cut_short_under_the_mapping_reads_as_zeros_and_reports_it() {
        install().unwrap();
        let dir = std::env::temp_dir().join(format!("gpuslice-sigbus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        let dev = ledger.device_index(b"GPU-sigbus-uuid0", 1 << 30).unwrap();
        assert_eq!(ledger.damage(), None);
        std::fs::OpenOptions::new().write(true).open(ledger.path()).unwrap().set_len(0).unwrap();
        // Every access past the end faults; each is absorbed.
        assert_eq!(ledger.used_bytes(dev), 0);
        assert!(ledger.reclaim_dead().is_empty());
        assert_eq!(ledger.layout().slots[1000].state_word.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(ledger.damage(), Some(Damage::Faulted));
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
