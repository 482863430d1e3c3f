//! Where the ledgers are: the directory, and the ledger files in it.
//!
//! Two layouts live side by side in one ledger directory `<dir>`:
//! - *flat*: `<dir>/<tenant>.ledger`. Every tenant sees the whole directory
//!   (single host, systemd): simple, but any tenant can write any ledger.
//! - *tenant directories*: `<dir>/tenants/<tenant>/<tenant>.ledger`. A
//!   tenant's pod mounts only `<dir>/tenants/<tenant>` as its `GPUSLICE_DIR`,
//!   so its shim creates `<tenant>.ledger` there and it can neither see nor
//!   write another tenant's ledger, nor create one under another's name.
//!
//! A ledger counts only if its file name, its directory (in the tenant
//! layout) and the name stored in the file agree ([`check_tenant`]), so a
//! tenant cannot pass its ledger off as another's. Files are opened without
//! following links (the ledger crate opens with `O_NOFOLLOW`), and only
//! entries that are plain files are listed.

use std::path::{Path, PathBuf};

/// The subdirectory holding one directory per tenant.
pub const TENANTS_SUBDIR: &str = "tenants";

/// How tenants' ledgers are laid out in the ledger directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Layout {
    /// `<dir>/<tenant>.ledger`.
    Flat,
    /// `<dir>/tenants/<tenant>/<tenant>.ledger`.
    TenantDirs,
}

impl Layout {
    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::TenantDirs => "tenant-dirs",
        }
    }
}

/// Where `monitor` and `status` find the host's ledgers and NVML.
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// The ledger directory (default: GPUSLICE_DIR, else /run/gpuslice or the per-user fallback).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Which ledger wins when a tenant has one in both layouts, and (monitor)
    /// where new ledgers of configured tenants go: `flat`
    /// (<dir>/<tenant>.ledger) or `tenant-dirs`
    /// (<dir>/tenants/<tenant>/<tenant>.ledger, one directory per tenant to
    /// mount into its pods). Both layouts are always read.
    #[arg(long, value_enum, default_value = "flat")]
    pub layout: Layout,
    /// Load NVML from this file instead of libnvidia-ml.so.1 (e.g. simgpu's libsimgpu.so).
    #[arg(long, value_name = "PATH", env = "GPUSLICE_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// Do not use NVML: ledgers only.
    #[arg(long)]
    pub no_nvml: bool,
}

/// A ledger file found in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The tenant its path names.
    pub tenant: String,
    /// Which layout it was found in.
    pub layout: Layout,
    /// Its path.
    pub path: PathBuf,
}

/// `--dir`, else `GPUSLICE_DIR`, else the ledger crate's default.
pub fn ledger_dir(arg: Option<&Path>) -> PathBuf {
    if let Some(dir) = arg {
        return dir.to_path_buf();
    }
    match std::env::var_os("GPUSLICE_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => ledger::default_dir(),
    }
}

/// `<dir>/tenants`.
pub fn tenants_dir(dir: &Path) -> PathBuf {
    dir.join(TENANTS_SUBDIR)
}

/// The directory a tenant's ledger lives in under `layout`: what its
/// processes see as their `GPUSLICE_DIR`.
pub fn tenant_ledger_dir(dir: &Path, tenant: &str, layout: Layout) -> PathBuf {
    match layout {
        Layout::Flat => dir.to_path_buf(),
        Layout::TenantDirs => tenants_dir(dir).join(tenant),
    }
}

/// The tenant named by a ledger file name (`<tenant>.ledger`), if valid.
/// Temporary files being created start with a dot and are not ledgers.
fn tenant_of_file_name(name: &str) -> Option<&str> {
    let tenant = name.strip_suffix(ledger::LEDGER_SUFFIX)?;
    (!name.starts_with('.') && ledger::units::validate_tenant_name(tenant).is_ok()).then_some(tenant)
}

fn is_plain_file(entry: &std::fs::DirEntry) -> bool {
    // DirEntry::file_type does not follow links: a link is not a plain file.
    entry.file_type().map(|t| t.is_file()).unwrap_or(false)
}

/// Why `<dir>/tenants` is not read, if it is not: any local user may make
/// an entry of that name in a flat layout's directory (mode 1777), so only
/// a real directory (not a link) owned by root or by this process's user
/// holds tenants' directories. `None` when it is such a directory or when
/// there is none.
pub fn tenants_dir_problem(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = tenants_dir(dir);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_dir() {
        Some(format!("{} is not a directory (links are not followed): no ledger under it is read", path.display()))
    } else if meta.uid() != 0 && meta.uid() != me {
        Some(format!(
            "{} belongs to uid {}, neither root nor this process's user: no ledger under it is read (remove it or give it to root)",
            path.display(),
            meta.uid()
        ))
    } else {
        None
    }
}

/// The ledger files in `dir`, in both layouts, sorted by tenant then layout
/// (flat first). A `tenants/` subdirectory that is missing or not to be
/// trusted ([`tenants_dir_problem`]) is skipped, and so is an entry that
/// cannot be read; only an unreadable `dir` is an error, so that nobody
/// who can write to `dir` can stop the listing.
pub fn ledger_files(dir: &Path) -> std::io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let Some(tenant) = name.to_str().and_then(tenant_of_file_name) else { continue };
        if is_plain_file(&entry) {
            found.push(Found { tenant: tenant.to_string(), layout: Layout::Flat, path: entry.path() });
        }
    }
    let tenants = match tenants_dir_problem(dir).map_or_else(|| std::fs::read_dir(tenants_dir(dir)).ok(), |_| None) {
        Some(entries) => entries,
        None => {
            found.sort_by(|a, b| (&a.tenant, a.layout).cmp(&(&b.tenant, b.layout)));
            return Ok(found);
        }
    };
    for entry in tenants.flatten() {
        // A tenant's directory is a real directory named after the tenant.
        if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let name = entry.file_name();
        let Some(tenant) = name.to_str().filter(|t| ledger::units::validate_tenant_name(t).is_ok()) else { continue };
        let path = ledger::tenant_path(&entry.path(), tenant);
        // Only `<tenant>/<tenant>.ledger`: a file with another tenant's name
        // in this directory is that tenant's processes writing where they
        // should not, and is not listed.
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_file() => {
                found.push(Found { tenant: tenant.to_string(), layout: Layout::TenantDirs, path });
            }
            _ => {}
        }
    }
    found.sort_by(|a, b| (&a.tenant, a.layout).cmp(&(&b.tenant, b.layout)));
    Ok(found)
}

/// Keeps one ledger per tenant: where a tenant has a ledger in both
/// layouts, the one in `preferred` wins. Returns (kept, shadowed).
pub fn one_per_tenant(found: Vec<Found>, preferred: Layout) -> (Vec<Found>, Vec<Found>) {
    let mut kept: Vec<Found> = Vec::new();
    let mut shadowed = Vec::new();
    for f in found {
        match kept.iter_mut().find(|k| k.tenant == f.tenant) {
            None => kept.push(f),
            Some(k) if f.layout == preferred && k.layout != preferred => shadowed.push(std::mem::replace(k, f)),
            Some(_) => shadowed.push(f),
        }
    }
    (kept, shadowed)
}

/// Why an opened ledger is not the tenant its path names.
pub fn check_tenant(found: &Found, stored_name: &str) -> Result<(), String> {
    if stored_name == found.tenant {
        Ok(())
    } else {
        Err(format!(
            "{} names tenant {:?} but the file says it belongs to {stored_name:?}: not watched",
            found.path.display(),
            found.tenant
        ))
    }
}

/// Opens one ledger per tenant in `dir` (see [`one_per_tenant`] and
/// [`check_tenant`]). Returns the ledgers and, in words, the files that were
/// shadowed or could not be used. A missing `dir` is the caller's to judge.
pub fn open_ledgers(dir: &Path, preferred: Layout) -> std::io::Result<(Vec<ledger::Ledger>, Vec<String>)> {
    let (files, shadowed) = one_per_tenant(ledger_files(dir)?, preferred);
    let mut ledgers = Vec::new();
    let mut problems: Vec<String> = shadowed
        .iter()
        .map(|f| format!("tenant {} also has {}, not shown ({} layout preferred)", f.tenant, f.path.display(), preferred.name()))
        .collect();
    for file in files {
        match ledger::Ledger::open(&file.path) {
            Ok(ledger) => match check_tenant(&file, &ledger.tenant()) {
                Ok(()) => ledgers.push(ledger),
                Err(e) => problems.push(e),
            },
            Err(e) => problems.push(e.to_string()),
        }
    }
    Ok((ledgers, problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-discovery-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn both_layouts_are_found_and_only_well_named_plain_files() {
        let dir = temp_dir("layouts");
        std::fs::write(dir.join("flat-a.ledger"), b"").unwrap();
        std::fs::write(dir.join(".flat-a.ledger.1.2.tmp"), b"").unwrap();
        std::fs::write(dir.join("notes.txt"), b"").unwrap();
        std::fs::write(dir.join("bad name.ledger"), b"").unwrap();
        symlink(dir.join("flat-a.ledger"), dir.join("linked.ledger")).unwrap();
        let tenants = tenants_dir(&dir);
        for t in ["team-a", "team-b", "team-c", "team-d"] {
            std::fs::create_dir_all(tenants.join(t)).unwrap();
        }
        std::fs::write(tenants.join("team-a/team-a.ledger"), b"").unwrap();
        // Another tenant's name inside team-b's directory: not listed.
        std::fs::write(tenants.join("team-b/team-a.ledger"), b"").unwrap();
        // A link in place of the ledger: not listed.
        symlink(tenants.join("team-a/team-a.ledger"), tenants.join("team-c/team-c.ledger")).unwrap();
        // A directory where the ledger should be: not listed.
        std::fs::create_dir_all(tenants.join("team-d/team-d.ledger")).unwrap();
        // A file, not a directory, in tenants/: not listed.
        std::fs::write(tenants.join("team-e"), b"").unwrap();

        let found = ledger_files(&dir).unwrap();
        let summary: Vec<(&str, Layout)> = found.iter().map(|f| (f.tenant.as_str(), f.layout)).collect();
        assert_eq!(summary, vec![("flat-a", Layout::Flat), ("team-a", Layout::TenantDirs)]);
        assert_eq!(found[1].path, tenants.join("team-a/team-a.ledger"));
        assert_eq!(tenant_ledger_dir(&dir, "team-a", Layout::TenantDirs), tenants.join("team-a"));
        assert_eq!(tenant_ledger_dir(&dir, "team-a", Layout::Flat), dir);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn flat_only_directory_needs_no_tenants_subdirectory() {
        let dir = temp_dir("flat");
        std::fs::write(dir.join("x.ledger"), b"").unwrap();
        let found = ledger_files(&dir).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].layout, Layout::Flat);
        assert!(ledger_files(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tenants_entry_that_is_no_trusted_directory_stops_nothing() {
        let dir = temp_dir("tenants-squatted");
        std::fs::write(dir.join("x.ledger"), b"").unwrap();
        // A file where `tenants/` would be.
        std::fs::write(tenants_dir(&dir), b"").unwrap();
        assert!(tenants_dir_problem(&dir).unwrap().contains("not a directory"));
        assert_eq!(ledger_files(&dir).unwrap().len(), 1);
        // A link to a directory of someone else's ledgers.
        std::fs::remove_file(tenants_dir(&dir)).unwrap();
        let elsewhere = temp_dir("tenants-elsewhere");
        std::fs::create_dir_all(elsewhere.join("victim")).unwrap();
        std::fs::write(elsewhere.join("victim/victim.ledger"), b"").unwrap();
        symlink(&elsewhere, tenants_dir(&dir)).unwrap();
        assert!(tenants_dir_problem(&dir).is_some());
        assert_eq!(ledger_files(&dir).unwrap().len(), 1, "nothing is read through the link");
        // A directory of another user.
        std::fs::remove_file(tenants_dir(&dir)).unwrap();
        std::fs::create_dir_all(tenants_dir(&dir).join("victim")).unwrap();
        std::fs::write(tenants_dir(&dir).join("victim/victim.ledger"), b"").unwrap();
        assert_eq!(ledger_files(&dir).unwrap().len(), 2);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(tenants_dir(&dir), Some(4242), None).unwrap();
            assert!(tenants_dir_problem(&dir).unwrap().contains("uid 4242"));
            assert_eq!(ledger_files(&dir).unwrap().len(), 1);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&elsewhere);
    }

    #[test]
    fn a_tenant_in_both_layouts_keeps_the_preferred_one() {
        let flat = Found { tenant: "a".into(), layout: Layout::Flat, path: "/d/a.ledger".into() };
        let dirs = Found { tenant: "a".into(), layout: Layout::TenantDirs, path: "/d/tenants/a/a.ledger".into() };
        let other = Found { tenant: "b".into(), layout: Layout::Flat, path: "/d/b.ledger".into() };
        let all = vec![flat.clone(), dirs.clone(), other.clone()];
        let (kept, shadowed) = one_per_tenant(all.clone(), Layout::TenantDirs);
        assert_eq!(kept, vec![dirs.clone(), other.clone()]);
        assert_eq!(shadowed, vec![flat.clone()]);
        let (kept, shadowed) = one_per_tenant(all, Layout::Flat);
        assert_eq!(kept, vec![flat, other]);
        assert_eq!(shadowed, vec![dirs]);
    }

    #[test]
    fn the_stored_name_must_match_the_path() {
        let found = Found { tenant: "a".into(), layout: Layout::TenantDirs, path: "/d/tenants/a/a.ledger".into() };
        assert!(check_tenant(&found, "a").is_ok());
        let e = check_tenant(&found, "b").unwrap_err();
        assert!(e.contains("\"b\"") && e.contains("/d/tenants/a/a.ledger"), "{e}");
    }
}
