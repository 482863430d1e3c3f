//! Why opening a ledger or using it can fail. Each error names the file and
//! what was wrong with it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a ledger file could not be opened or created. A file that gives one of
/// these errors is left exactly as it was found.
#[derive(Debug)]
pub enum OpenError {
    /// The tenant name breaks the naming rule.
    BadTenantName {
        /// The name given.
        tenant: String,
    },
    /// A system call on the file or its directory failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// What the system said.
        source: io::Error,
    },
    /// The file does not start with the ledger magic: it is not a ledger.
    NotALedger {
        /// The file.
        path: PathBuf,
        /// The first eight bytes found.
        found_magic: u64,
    },
    /// The file is a ledger of another layout version.
    OtherVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The file is shorter than a ledger (or still empty after waiting for
    /// its creator).
    Truncated {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The length of a ledger of this version.
        expected: u64,
    },
    /// The file is a sound ledger of another tenant (renamed or copied).
    OtherTenant {
        /// The file.
        path: PathBuf,
        /// The tenant named in the file.
        stored: String,
        /// The tenant asked for.
        expected: String,
    },
    /// The ledger directory is not safe to keep ledgers in: another user
    /// could replace or plant a ledger there (see the ledger crate's `open`
    /// module for the rule).
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it, and what to do.
        reason: String,
    },
    /// A field holds a value no writer of this version writes.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The field, as named in `include/gpuslice.h`.
        field: String,
        /// The value found.
        value: u64,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::BadTenantName { tenant } => {
                write!(f, "tenant name {tenant:?} is invalid: expected {}", crate::units::TENANT_FORMAT)
            }
            OpenError::Io { path, action, source } => {
                write!(f, "ledger {}: cannot {action}: {source}", path.display())
            }
            OpenError::NotALedger { path, found_magic } => write!(
                f,
                "{} is not a gpuslice ledger (its first bytes are {:02x?}, expected \"GPUSLICE\"); it was left untouched",
                path.display(),
                found_magic.to_le_bytes()
            ),
            OpenError::OtherVersion { path, found, expected } => write!(
                f,
                "ledger {} has layout version {found}, this build reads version {expected}; \
                 stop the processes using it or use another GPUSLICE_DIR (the file was left untouched)",
                path.display()
            ),
            OpenError::Truncated { path, len, expected } => {
                write!(f, "ledger {} is truncated: {len} bytes, a ledger has {expected}; it was left untouched", path.display())
            }
            OpenError::OtherTenant { path, stored, expected } => write!(
                f,
                "ledger {} belongs to tenant {stored:?}, not {expected:?} (was it renamed or copied?); it was left untouched",
                path.display()
            ),
            OpenError::UnsafeDir { path, reason } => {
                write!(f, "ledger directory {} is not safe to use: {reason}", path.display())
            }
            OpenError::Corrupt { path, field, value } => write!(
                f,
                "ledger {} is corrupt: field {field} holds {value:#x}, which no writer writes; it was left untouched",
                path.display()
            ),
        }
    }
}

impl OpenError {
    /// Whether the file may still be in the hands of its creator: it is
    /// empty, or its `initialised` word is still zero. Look again later
    /// rather than give up on it at once.
    pub fn is_uninitialised(&self) -> bool {
        match self {
            OpenError::Truncated { len, .. } => *len == 0,
            OpenError::Corrupt { field, value, .. } => field == "initialised" && *value == 0,
            _ => false,
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why an operation on an open ledger failed.
#[derive(Debug)]
pub enum LedgerError {
    /// The device table already holds [`crate::MAX_DEVICES`] other devices.
    DevicesFull,
    /// All [`crate::MAX_SLOTS`] process slots are taken by live processes.
    SlotsFull,
    /// A device index outside the device table.
    NoSuchDevice {
        /// The index given.
        index: usize,
    },
    /// Another live process kept a device entry half-written for too long
    /// (one that died there is taken over), or the entry holds a state no
    /// writer writes.
    DeviceEntryStuck {
        /// The entry's index.
        index: usize,
    },
    /// A lock operation on the ledger file failed.
    Lock(io::Error),
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::DevicesFull => {
                write!(f, "the ledger's device table is full ({} devices)", crate::MAX_DEVICES)
            }
            LedgerError::SlotsFull => write!(f, "all {} process slots of the tenant are taken by live processes", crate::MAX_SLOTS),
            LedgerError::NoSuchDevice { index } => {
                write!(f, "device index {index} is outside the ledger (0..{})", crate::MAX_DEVICES)
            }
            LedgerError::DeviceEntryStuck { index } => write!(
                f,
                "device entry {index} is being written by another live process (or holds a state no writer writes) \
                 and was not finished within a second"
            ),
            LedgerError::Lock(source) => write!(f, "cannot lock a process slot: {source}"),
        }
    }
}

impl std::error::Error for LedgerError {}

/// A reservation refused because it would pass the cap. Nothing changed
/// except the tenant's denied-allocation counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// What the tenant had reserved on the device when it was refused.
    pub used_bytes: u64,
    /// The cap.
    pub limit_bytes: u64,
    /// What was asked for.
    pub requested_bytes: u64,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes requested with {} of {} bytes in use", self.requested_bytes, self.used_bytes, self.limit_bytes)
    }
}
