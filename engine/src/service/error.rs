//! What a service operation can fail with, by kind: each caller maps the kind to its own
//! terms (the CLI to exit codes in `cli::exit`, the HTTP API to statuses with
//! [`Error::status_code`]). Messages are the ones users read; the kind is what callers match.

use crate::spec::Diagnostic;

/// The run (or step) whose state is in the way of a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InTheWay {
    /// The run's id.
    pub run: String,
    /// The state that refuses the change (the run's, or the step's for `preempt`).
    pub state: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such run or step, or one the principal may not see (another team's run does not
    /// exist for it, as the server contract says).
    #[error("{0}")]
    NotFound(String),
    /// The run's state refuses the change: cancel an ended run, retry a running one,
    /// preempt a step that is not running, a team's queue full.
    #[error("{message}")]
    Conflict {
        message: String,
        in_the_way: Option<InTheWay>,
    },
    /// The request is wrong: a pipeline with errors (every one in `diagnostics`, each at its
    /// line and column) or a bad argument (`message` alone, `diagnostics` empty).
    #[error("{message}")]
    Invalid {
        message: String,
        diagnostics: Vec<Diagnostic>,
    },
    /// The principal's role or team does not allow the operation.
    #[error("{0}")]
    Forbidden(String),
    /// No principal: a token missing, unknown, expired or revoked (the message says which).
    #[error("{0}")]
    Unauthenticated(String),
    /// The state store, the object store, the file system or a process could not be used:
    /// trying again later may work.
    #[error(transparent)]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

/// An I/O failure with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct Io {
    pub context: String,
    #[source]
    pub source: std::io::Error,
}

impl Error {
    /// A bad argument, said in one message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid {
            message: message.into(),
            diagnostics: Vec::new(),
        }
    }

    /// A file or pipeline with errors, each a diagnostic.
    pub fn diagnostics(message: impl Into<String>, diagnostics: Vec<Diagnostic>) -> Self {
        Error::Invalid {
            message: message.into(),
            diagnostics,
        }
    }

    /// A change refused by the state of run `run`.
    pub fn conflict(message: impl Into<String>, run: &str, state: &str) -> Self {
        Error::Conflict {
            message: message.into(),
            in_the_way: Some(InTheWay {
                run: run.to_owned(),
                state: state.to_owned(),
            }),
        }
    }

    /// The environment failed while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Unavailable(Box::new(Io {
            context: context.into(),
            source,
        }))
    }

    /// The HTTP status the server's API answers this error with.
    pub fn status_code(&self) -> u16 {
        match self {
            Error::Invalid { .. } => 400,
            Error::Unauthenticated(_) => 401,
            Error::Forbidden(_) => 403,
            Error::NotFound(_) => 404,
            Error::Conflict { .. } => 409,
            Error::Unavailable(_) => 503,
        }
    }
}

impl From<crate::store::Error> for Error {
    fn from(e: crate::store::Error) -> Self {
        use crate::store::Error as S;
        match e {
            S::NotFound(message) => Error::NotFound(message),
            e @ (S::QueueFull { .. } | S::KeyTaken) => Error::Conflict {
                message: e.to_string(),
                in_the_way: None,
            },
            S::BadUrl(message) => Error::invalid(message),
            S::Sql(e) if unstorable(&e) => Error::invalid(
                "the request holds a NUL character, which no name, id or file has (and the state store cannot hold)",
            ),
            e @ (S::Unavailable(_) | S::Sql(_) | S::Corrupt(_) | S::Fenced(_)) => {
                Error::Unavailable(Box::new(e))
            }
        }
    }
}

/// PostgreSQL's refusal of text it cannot hold (SQLSTATE 22021, `character_not_in_repertoire`:
/// a NUL character, which SQLite takes): the request's fault, not the store's.
fn unstorable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("22021"))
}

impl From<crate::run::driver::Error> for Error {
    fn from(e: crate::run::driver::Error) -> Self {
        use crate::run::driver::Error as D;
        match e {
            D::Store(s) => s.into(),
            D::Invalid(message) => Error::invalid(message),
            e @ (D::Io { .. } | D::Objects(_) | D::HomeGone(_) | D::Executor(_)) => {
                Error::Unavailable(Box::new(e))
            }
        }
    }
}

/// An executor that cannot stop or start an attempt is the environment's fault.
impl From<crate::executor::Error> for Error {
    fn from(e: crate::executor::Error) -> Self {
        Error::Unavailable(Box::new(e))
    }
}

/// An object store URL that is wrong is the request's fault; one that cannot be reached or
/// written is the environment's.
impl From<sluice_runtime::objects::Error> for Error {
    fn from(e: sluice_runtime::objects::Error) -> Self {
        use sluice_runtime::objects::Error as O;
        match e {
            O::Url { .. } => Error::invalid(e.to_string()),
            O::Local { op, path, source } => Error::io(
                format!("object store: cannot {op} {}", path.display()),
                source,
            ),
            other => Error::io(other.to_string(), std::io::Error::other("object store")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_http_status() {
        let unavailable = Error::io("cannot resolve x", std::io::Error::other("gone"));
        assert_eq!(unavailable.to_string(), "cannot resolve x: gone");
        let cases = [
            (Error::NotFound("no run 'x'".into()), 404),
            (
                Error::conflict("run x already ended: Succeeded", "x", "Succeeded"),
                409,
            ),
            (Error::invalid("--limit -1: give a number of runs"), 400),
            (Error::Forbidden("a viewer cannot submit".into()), 403),
            (Error::Unauthenticated("the token is revoked".into()), 401),
            (unavailable, 503),
        ];
        for (e, status) in cases {
            assert_eq!(e.status_code(), status, "{e}");
        }
    }

    #[test]
    fn store_errors_keep_their_kind_and_message() {
        use crate::store::Error as S;
        let e: Error = S::NotFound("no run 'abc' in /h".into()).into();
        assert!(matches!(&e, Error::NotFound(m) if m == "no run 'abc' in /h"));
        let e: Error = S::Unavailable("the state store in /h is busy".into()).into();
        assert!(matches!(e, Error::Unavailable(_)));
        assert_eq!(e.to_string(), "the state store in /h is busy");
        let full = S::QueueFull {
            team: "vision".into(),
            queued: 3,
            adding: 2,
            limit: 4,
        };
        let e: Error = full.into();
        assert_eq!(e.status_code(), 409);
    }
}
