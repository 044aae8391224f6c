//! Leader election among the servers sharing one state store: exactly one of them (the
//! leader) drives runs; all of them serve the API. The leader holds a lease in the store's
//! `leader` row and renews it every [`RENEW_EVERY`]; a server that finds the lease run out
//! takes over by raising the epoch (`Store::try_lead`). A leader that cannot renew steps down
//! before its lease runs out, and the epoch fences it anyway: its engine's writes check the
//! epoch they were elected with, so once another server has taken over they fail
//! (`store::Error::Fenced`) and nothing it decides is committed.
//!
//! A leader killed outright is replaced once its lease has run out: within
//! [`LEASE`] + [`RENEW_EVERY`] (11 s), inside the 15 s the server contract promises.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::store::Store;

/// How long a leader's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(10);

/// How often the leader renews and the others look whether the lease has run out.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// A leader that has not renewed for this long steps down (before its lease runs out and
/// another server may take over).
const STEP_DOWN_AFTER: Duration = Duration::from_secs(7);

/// This server's lead, when it has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elected {
    pub epoch: i64,
    /// The server that led before, if another: the runs it held are taken over at once,
    /// without waiting for their leases to run out.
    pub previous: Option<String>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Whether the lead read as `seen` is over at `now`: nobody holds it, its lease has run out,
/// it is this server's own (restarted with the same PID), or its holder is a process of this
/// machine that is gone (a server killed and started again takes over at once).
fn over(seen: &crate::store::Leadership, me: &str, now: i64) -> bool {
    let Some(holder) = &seen.holder else {
        return true;
    };
    if holder == me || seen.until_ms <= now {
        return true;
    }
    let lease = crate::store::Holder {
        owner: holder.clone(),
        until: seen.until_ms,
        started: None,
    };
    !crate::run::engine::alive(&lease, now)
}

/// Runs the election for server `me` (`PID@HOST`) until `stop` turns true, publishing the
/// lead in `lead` as it is won and lost.
pub async fn elect(
    store: Store,
    clock: Arc<dyn Clock>,
    me: String,
    lead: watch::Sender<Option<Elected>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut current: Option<i64> = None;
    let mut renewed_at = 0i64;
    loop {
        if *stop.borrow() {
            break;
        }
        let now = clock.now_ms();
        let until = now + ms(LEASE);
        match current {
            None => match store.leadership().await {
                Ok(seen) if !over(&seen, &me, now) => {}
                Ok(seen) => match store.try_lead(&seen, &me, until).await {
                    Ok(Some(epoch)) => {
                        current = Some(epoch);
                        renewed_at = now;
                        let previous = seen.holder.filter(|h| *h != me);
                        tracing::info!(
                            "this server leads now (epoch {epoch}{})",
                            previous
                                .as_deref()
                                .map(|p| format!(", after {p}"))
                                .unwrap_or_default()
                        );
                        let _ = lead.send(Some(Elected { epoch, previous }));
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!("cannot run for leader: {e}"),
                },
                Err(e) => tracing::warn!("cannot read who leads: {e}"),
            },
            Some(epoch) => {
                let kept = match store.renew_lead(epoch, &me, until).await {
                    Ok(true) => {
                        renewed_at = now;
                        true
                    }
                    Ok(false) => {
                        tracing::warn!("another server took the lead over (epoch {epoch} is gone)");
                        false
                    }
                    Err(e) => {
                        tracing::warn!("cannot renew the lead: {e}");
                        now - renewed_at < ms(STEP_DOWN_AFTER)
                    }
                };
                if !kept {
                    current = None;
                    let _ = lead.send(None);
                }
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Leadership;

    fn lead(holder: Option<&str>, until_ms: i64) -> Leadership {
        Leadership {
            epoch: 3,
            holder: holder.map(str::to_owned),
            until_ms,
        }
    }

    #[test]
    fn a_lead_is_over_when_free_run_out_or_its_process_is_gone() {
        let me = crate::run::engine::me(0).owner;
        let now = 1_000_000;
        assert!(over(&lead(None, 0), &me, now), "nobody leads");
        assert!(
            over(&lead(Some(&me), now + 5_000), &me, now),
            "this server's own"
        );
        // Another machine's server: only its lease tells.
        assert!(!over(&lead(Some("1@elsewhere"), now + 5_000), &me, now));
        assert!(over(&lead(Some("1@elsewhere"), now), &me, now));
        // A process of this machine that is gone leads no more, whatever its lease says.
        let host = me.split_once('@').map_or("", |(_, h)| h);
        let gone = format!("{}@{host}", u32::MAX - 7);
        assert!(over(&lead(Some(&gone), now + 5_000), &me, now));
        let alive = format!("{}@{host}", std::process::id());
        assert!(!over(&lead(Some(&alive), now + 5_000), "someone-else", now));
    }
}
