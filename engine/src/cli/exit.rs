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
    /// Bad input or usage (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The environment failed: store, files, processes (exit 3).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    #[error(transparent)]
    Driver(#[from] crate::run::driver::Error),
    #[error(transparent)]
    Service(#[from] crate::service::Error),
    /// A request to a server (`--server`) failed or was refused.
    #[error(transparent)]
    Client(#[from] crate::client::Error),
}

impl Error {
    pub fn outcome(&self) -> Outcome {
        use crate::run::driver::Error as D;
        use crate::store::Error as S;
        match self {
            Error::Usage(_)
            | Error::Store(S::NotFound(_) | S::BadUrl(_))
            | Error::Driver(D::Store(S::NotFound(_))) => Outcome::Invalid,
            Error::Driver(D::Invalid(_)) => Outcome::Invalid,
            Error::Io { .. } | Error::Store(_) | Error::Driver(_) => Outcome::Unavailable,
            Error::Service(e) => service_outcome(e),
            Error::Client(crate::client::Error::Unreachable { .. }) => Outcome::Unavailable,
            // The request's fault (bad input, no or a bad token, another team's run, a role
            // that may not) is 2, as in embedded mode; an overloaded or failing server is 3.
            Error::Client(crate::client::Error::Refused(r)) => match r.status {
                400..=428 => Outcome::Invalid,
                _ => Outcome::Unavailable,
            },
        }
    }

    /// Says the error on standard error: a file's diagnostics in the pinned
    /// `PATH:LINE:COL: error: MESSAGE` form, anything else as `sluice: error: MESSAGE`.
    pub fn report(&self) {
        match self {
            Error::Service(crate::service::Error::Invalid { diagnostics, .. })
                if !diagnostics.is_empty() =>
            {
                super::output::diagnostics(diagnostics);
            }
            Error::Client(crate::client::Error::Refused(r)) if !r.rendered.is_empty() => {
                for line in &r.rendered {
                    super::output::say(line);
                }
            }
            e => super::output::say(format_args!("sluice: error: {e}")),
        }
    }

    /// A bad URL is a usage error; a store that cannot be reached or written is the environment.
    pub fn objects(e: sluice_runtime::objects::Error) -> Self {
        use sluice_runtime::objects::Error as O;
        match e {
            O::Url { .. } => Error::Usage(e.to_string()),
            O::Local { op, path, source } => Error::Io {
                context: format!("object store: cannot {op} {}", path.display()),
                source,
            },
            other => Error::Io {
                context: other.to_string(),
                source: std::io::Error::other("object store"),
            },
        }
    }

    pub fn output(source: std::io::Error) -> Self {
        Error::Io {
            context: "cannot write the output".into(),
            source,
        }
    }
}

/// The exit code of a service error: the request's fault is 2 (an unknown run too, as the
/// contract says, and another team's run, which does not exist for the caller), the
/// environment's is 3.
pub fn service_outcome(e: &crate::service::Error) -> Outcome {
    use crate::service::Error as E;
    match e {
        E::NotFound(_)
        | E::Conflict { .. }
        | E::Invalid { .. }
        | E::Forbidden(_)
        | E::Unauthenticated(_) => Outcome::Invalid,
        E::Unavailable(_) => Outcome::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Error as E;

    #[test]
    fn service_errors_exit_2_for_the_request_and_3_for_the_environment() {
        let cases = [
            (E::NotFound("no run 'x'".into()), 2),
            (E::conflict("run x is still running", "x", "Running"), 2),
            (E::invalid("--limit -1"), 2),
            (E::Forbidden("a viewer cannot submit runs".into()), 2),
            (E::Unauthenticated("the token is expired".into()), 2),
            (E::io("cannot resolve x", std::io::Error::other("gone")), 3),
        ];
        for (e, code) in cases {
            assert_eq!(Error::from(e).outcome().code(), code);
        }
    }
}
