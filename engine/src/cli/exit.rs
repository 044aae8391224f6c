//! The one place where outcomes become the exit codes pinned in the CLI contract.

use std::process::ExitCode;

/// How a command ended, in the contract's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 0: success.
    Success,
    /// 1: the run or sweep ended unsuccessfully.
    Unsuccessful,
    /// 2: invalid input or usage.
    Invalid,
    /// 3: the state store, object store or server could not be reached.
    Unavailable,
    /// 130: interrupted.
    Interrupted,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Unsuccessful => 1,
            Outcome::Invalid => 2,
            Outcome::Unavailable => 3,
            Outcome::Interrupted => 130,
        }
    }
}

impl From<Outcome> for ExitCode {
    fn from(o: Outcome) -> Self {
        ExitCode::from(o.code())
    }
}

/// Errors a command can end with, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Usage(_) => Outcome::Invalid,
            Error::Io { .. } => Outcome::Unavailable,
        }
    }
}
