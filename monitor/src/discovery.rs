//! Where the ledgers are: the directory, and the ledger files in it.

use std::path::{Path, PathBuf};

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

/// The ledger files in `dir` (`<tenant>.ledger`; temporary files being
/// created start with a dot and are skipped), sorted by name.
pub fn ledger_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !name.ends_with(ledger::LEDGER_SUFFIX) {
            continue;
        }
        if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}
