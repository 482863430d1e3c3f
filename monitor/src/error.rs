//! Why a verb failed, and the exit code that says so.
//!
//! - [`Error::Usage`], exit 2 (as for the options `clap` refuses): the
//!   command line is wrong, or what it names is: a ledger directory or job
//!   that does not exist, a job that is not the caller's, a configuration
//!   file that does not parse, a group that does not exist.
//! - [`Error::Failed`], exit 1: the host could not do what was asked:
//!   reading or writing a file, loading a library, listening on a port,
//!   handling a signal, starting a process, drawing on the terminal.
//!
//! Either way the message is printed as `gpuslice: MESSAGE` on stderr.
//! `gpuslice run` (and `run --queue`) keeps exit 2 for every failure of its
//! own, and 75 when `--timeout` passes. The command of `run` or `sim` that
//! does not exist exits 127, one that cannot be executed 126, as under a
//! shell ([`crate::libs::exec`]).

use std::fmt;
use std::process::ExitCode;

/// The exit code of a usage mistake.
pub const EXIT_USAGE: u8 = 2;
/// The exit code of a failure of the host.
pub const EXIT_FAILED: u8 = 1;

/// A verb's failure: its category and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The command line, or what it names, is wrong.
    Usage(String),
    /// The host could not do what was asked.
    Failed(String),
}

impl Error {
    /// The process's exit code for this failure.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_) => ExitCode::from(EXIT_USAGE),
            Error::Failed(_) => ExitCode::from(EXIT_FAILED),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) | Error::Failed(message) => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_exits_2_and_failures_1_with_the_message_unchanged() {
        let usage = Error::Usage("--dir /x: no such directory".into());
        let failed = Error::Failed("cannot listen on 1.2.3.4:5: refused".into());
        assert_eq!((usage.exit_code(), usage.to_string()), (ExitCode::from(2), "--dir /x: no such directory".to_string()));
        assert_eq!((failed.exit_code(), failed.to_string()), (ExitCode::from(1), "cannot listen on 1.2.3.4:5: refused".to_string()));
    }
}
