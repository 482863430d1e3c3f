//! The sealed memfds the monitor hands to processes (`SCM_RIGHTS`): the
//! grant pages ([`crate::grants`]) and the teams' pages
//! ([`crate::team_usage`]). Making one, sealing it, and checking one that
//! was handed over are the same steps for both; what each page seals and
//! how it is mapped are its own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new memfd named `gpuslice-<name>`, `bytes` long (zeros), that may be sealed.
pub(crate) fn create(name: &str, bytes: usize) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(format!("gpuslice-{name}")).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated name and valid flags.
    let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ftruncate on our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Adds `seals` to our own memfd.
pub(crate) fn seal(fd: &OwnedFd, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on our own descriptor.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Checks a descriptor handed over as `what` ("the grant page"): it holds
/// every one of `seals` and is `bytes` long, so it cannot be written or cut
/// short beyond what the seals allow.
pub(crate) fn check(fd: &OwnedFd, seals: libc::c_int, bytes: usize, what: &str) -> Result<(), String> {
    // SAFETY: fcntl on a descriptor we own.
    let held = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if held < 0 || held & seals != seals {
        return Err(format!("{what} handed over is not sealed"));
    }
    // SAFETY: an all-zero stat is valid.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a zeroed struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 || stat.st_size as usize != bytes {
        return Err(format!("{what} handed over has the wrong size"));
    }
    Ok(())
}
