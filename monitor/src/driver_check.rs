//! Whether the NVIDIA driver can be loaded, checked before `gpuslice run`
//! hands a command to it.
//!
//! Without a loadable `libcuda.so.1` the shim passes every call through to a
//! driver that is not there, and the command fails later and obscurely (a
//! framework's "no CUDA GPUs are available", or a missing-symbol error). One
//! line naming `--sim` up front is clearer. The check asks the dynamic loader
//! itself, so it follows the same `LD_LIBRARY_PATH`, `ld.so.cache` and
//! default directories the command will: first whether the library is
//! already mapped (`RTLD_NOLOAD`), then whether it loads; the handle is
//! closed again, and the `exec` that follows replaces this process anyway.

use std::ffi::{CStr, CString};

/// The driver's file name as the shim and CUDA programs load it.
const DRIVER: &str = "libcuda.so.1";

/// Checks that the driver the command will use can be loaded: the file
/// `GPUSLICE_CUDA_LIB` names when it is set (the shim loads that one), else
/// `libcuda.so.1` as the loader finds it.
pub fn check_cuda_driver() -> Result<(), String> {
    let named = std::env::var_os("GPUSLICE_CUDA_LIB").filter(|v| !v.is_empty());
    let library = match &named {
        Some(path) => path.to_string_lossy().into_owned(),
        None => DRIVER.to_string(),
    };
    loadable(&library).map_err(|reason| match named {
        Some(_) => format!("GPUSLICE_CUDA_LIB={library} cannot be loaded ({reason}); name the NVIDIA driver's libcuda.so.1, or use --sim to run on the simulated GPU"),
        None => format!("no NVIDIA driver on this host: {DRIVER} cannot be loaded ({reason}); install the driver, or use --sim to run on the simulated GPU"),
    })
}

/// Opens and closes `library` with the dynamic loader; the loader's reason
/// when it cannot.
fn loadable(library: &str) -> Result<(), String> {
    let name = CString::new(library).map_err(|_| "the name contains a NUL byte".to_string())?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let mut handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        // SAFETY: as above. Loading runs the library's initialisers, as the
        // command's own loading of it would.
        handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY) };
    }
    if handle.is_null() {
        // SAFETY: dlerror returns null or a NUL-terminated string valid until
        // the next dl* call on this thread, and it is copied before that.
        let reason = unsafe { libc::dlerror() };
        let reason = if reason.is_null() {
            "unknown reason".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, see above.
            unsafe { CStr::from_ptr(reason) }.to_string_lossy().into_owned()
        };
        return Err(reason);
    }
    // SAFETY: `handle` came from a successful dlopen and is closed once.
    unsafe { libc::dlclose(handle) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_the_loader_has_loads_and_a_missing_one_says_why() {
        assert_eq!(loadable("libc.so.6"), Ok(()));
        let reason = loadable("libgpuslice-no-such-library.so.1").unwrap_err();
        assert!(reason.contains("libgpuslice-no-such-library.so.1"), "{reason}");
        assert!(loadable("a\0b").is_err());
    }
}
