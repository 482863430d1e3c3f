//! Open-file-description byte locks: the kernel's word on whether a slot's
//! owner is alive.
//!
//! An OFD lock belongs to the open file description, not to a process: it is
//! dropped when the last descriptor referring to that description closes,
//! which happens when the owner exits however it exits. Locks taken through
//! the same description never conflict with each other, so callers must know
//! which bytes their own description holds.

use std::io;
use std::os::fd::RawFd;

/// What a probe of a byte found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Another open file description holds a lock on the byte.
    Held,
    /// Nobody else holds it.
    Free,
}

fn flock_for(kind: libc::c_short, offset: u64) -> libc::flock {
    // SAFETY: flock is a plain C struct; all-zero is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = offset as libc::off_t;
    lock.l_len = 1;
    lock.l_pid = 0; // required by OFD locks
    lock
}

/// Takes a write lock on one byte without waiting. `Ok(false)` when another
/// description holds it.
pub fn try_lock(fd: RawFd, offset: u64) -> io::Result<bool> {
    let lock = flock_for(libc::F_WRLCK as libc::c_short, offset);
    // SAFETY: fd is a descriptor the caller owns; lock is a valid flock.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &lock) };
    if rc == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(error),
    }
}

/// Drops this description's lock on one byte.
pub fn unlock(fd: RawFd, offset: u64) -> io::Result<()> {
    let lock = flock_for(libc::F_UNLCK as libc::c_short, offset);
    // SAFETY: as in try_lock.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &lock) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks whether another description holds one byte, without taking it.
pub fn probe(fd: RawFd, offset: u64) -> io::Result<Probe> {
    let mut lock = flock_for(libc::F_WRLCK as libc::c_short, offset);
    // SAFETY: as in try_lock; F_OFD_GETLK writes into lock.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut lock) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if lock.l_type == libc::F_UNLCK as libc::c_short { Probe::Free } else { Probe::Held })
}
