//! Reading and validating a member's files off the async workers. Parsing YAML and checking a
//! pipeline is CPU work that grows with the file (a 4 MiB body may expand, through aliases and
//! merge keys, to millions of nodes); on the async workers it would stall every other request
//! of every team, `/healthz`, `/readyz` and the leader's lease renewal with it. So it runs on a
//! blocking thread, a few files at a time, within a time budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::ApiError;
use crate::service::Error;

/// How long a file waits for a turn before the request is refused as busy (503).
const WAIT: Duration = Duration::from_secs(10);

/// How long one file may take to validate before its request is refused (400). The work is
/// bounded by the body limit and the alias budget, so the thread ends soon after.
const BUDGET: Duration = Duration::from_secs(15);

/// The turns: at most half the machine's cores validate at once, so that the async workers
/// always have a core.
#[derive(Debug)]
pub struct Validation {
    turns: Arc<Semaphore>,
}

impl Default for Validation {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Validation {
            turns: Arc::new(Semaphore::new((cores / 2).max(1))),
        }
    }
}

impl Validation {
    /// Runs `work` (reading and checking a file) on a blocking thread when a turn is free;
    /// its turn is held until the work really ends, even past a refusal.
    pub async fn run<T, F>(&self, work: F) -> Result<T, ApiError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let turn = match tokio::time::timeout(WAIT, self.turns.clone().acquire_owned()).await {
            Ok(Ok(turn)) => turn,
            Ok(Err(_)) | Err(_) => {
                return Err(Error::Unavailable(
                    format!(
                        "the server is busy validating other files (more than {} s in line): try again",
                        WAIT.as_secs()
                    )
                    .into(),
                )
                .into());
            }
        };
        let task = tokio::task::spawn_blocking(move || {
            let out = work();
            drop(turn);
            out
        });
        match tokio::time::timeout(BUDGET, task).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => {
                Err(Error::Unavailable(format!("validating the file failed: {e}").into()).into())
            }
            Err(_) => Err(Error::invalid(format!(
                "validating this file took longer than {} s: it is refused (a file that expands this much through aliases and merge keys, or this large, is not one the server reads)",
                BUDGET.as_secs()
            ))
            .into()),
        }
    }
}
