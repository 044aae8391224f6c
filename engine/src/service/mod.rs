//! The engine's operations, as any front end calls them: submit, list, status, logs, cancel,
//! retry, resume, preempt and usage. Each takes the [`Principal`] asking and returns a typed
//! [`Error`]; the CLI maps errors to exit codes (`cli::exit`), the server's API will map them
//! to HTTP statuses ([`Error::status_code`]). Nothing here prints or parses flags.
//!
//! Operations record what is asked (a new run, a cancel request, steps reopened, a preempt
//! request); driving a run is the engine's (`run::Driver`, in the foreground of `sluice run`
//! today, in the server later).
//!
//! The team of a submitted run is the principal's when it is bound to a team (a member or
//! viewer: a file naming another team is refused, one naming none takes the principal's),
//! else the file's `metadata.team` as before (the local principal, an admin).

pub mod apply;
mod control;
mod error;
pub mod logs;
mod principal;
mod read;
mod resolve;
pub mod schedules;
pub mod submit;
#[cfg(test)]
mod tests;
pub mod tokens;
pub mod usage;
pub mod view;

use std::sync::Arc;

pub use control::{Preempted, Retried};
pub use error::{Error, InTheWay, Io};
pub use principal::{Principal, Role};
pub use read::{Detail, Filter, Listing, Waiting};
pub use submit::{Checked, Request, Submitted};
pub use tokens::{Authenticated, Created};
pub use usage::{Usage, UsageQuery};
pub use view::RunView;

use crate::clock::Clock;
use crate::store::{RunRow, Store};

/// The operations over one state store.
#[derive(Clone, Debug)]
pub struct Service {
    store: Store,
    clock: Arc<dyn Clock>,
    /// Messages name the home (`no run 'x' in /home/me/.sluice`): true for the embedded
    /// CLI, false for a server, whose clients neither know nor need its folders (a run that
    /// is not found is an `unknown run`, as the server contract says).
    shows_home: bool,
    /// Past days' usage, kept once read (`usage::days`).
    days: Arc<usage::days::Days>,
}

impl Service {
    pub fn new(store: Store, clock: Arc<dyn Clock>) -> Self {
        Service {
            // The times the store writes are the service's clock's.
            store: store.with_clock(clock.clone()),
            clock,
            shows_home: true,
            days: Arc::default(),
        }
    }

    /// The service as a server offers it to its clients: messages do not name its folders.
    pub fn for_clients(store: Store, clock: Arc<dyn Clock>) -> Self {
        Service {
            store: store.with_clock(clock.clone()),
            clock,
            shows_home: false,
            days: Arc::default(),
        }
    }

    /// A run that is not there, in this service's words.
    pub(crate) fn unknown_run(&self, reference: &str) -> Error {
        Error::NotFound(if self.shows_home {
            format!("no run '{reference}' in {}", self.store.home.display())
        } else {
            format!("unknown run '{reference}'")
        })
    }

    /// ` in HOME` for the embedded CLI, nothing for a server's clients.
    pub(crate) fn in_home(&self) -> String {
        if self.shows_home {
            format!(" in {}", self.store.home.display())
        } else {
            String::new()
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Where the time comes from (the engines this process drives read the same).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The run `reference` names (an id, a prefix, `@latest`, `NAME@latest`), if the
    /// principal sees its team; another team's run is not found, with the message of a run
    /// that does not exist.
    async fn lookup(&self, who: &Principal, reference: &str) -> Result<RunRow, Error> {
        let id = self.resolve(who, reference).await?;
        self.by_id(who, &id, reference).await
    }

    /// Run `id` (named `reference` by the caller), if the principal sees its team.
    async fn by_id(&self, who: &Principal, id: &str, reference: &str) -> Result<RunRow, Error> {
        let run = match self.store.run(id).await {
            Err(crate::store::Error::NotFound(_)) => return Err(self.unknown_run(reference)),
            other => other?,
        };
        if !who.sees(&run.team) {
            return Err(self.unknown_run(reference));
        }
        Ok(run)
    }

    /// Run `reference`, if the principal may change it (`what`, for the refusal).
    async fn lookup_to_change(
        &self,
        who: &Principal,
        reference: &str,
        what: &str,
    ) -> Result<RunRow, Error> {
        let run = self.lookup(who, reference).await?;
        who.check_role(what)?;
        Ok(run)
    }
}
