//! What an attempt's pods say, as the watches last saw them, turned into the attempt's
//! outcome: its end (its runtimes' records, or what Kubernetes says instead) or its loss; and
//! what is done once it has one.

use std::time::Instant;

use sluice_runtime::contract::{self, End};

use super::status::{self, Worker};
use super::{Kube, record};
use crate::executor::Event;

/// How an attempt came out, decided from its workers.
pub(super) enum Outcome {
    Ended(contract::Result),
    Lost(String),
}

impl Kube {
    /// Looks at an attempt's pods as the watches last saw them; an outcome once it has one.
    /// A Job (`admission: kueue`) not admitted yet waits; its loss is said as Kueue's
    /// eviction when Kueue suspended it again.
    pub(super) async fn assess(&mut self, step: &str) -> Option<Outcome> {
        let at = self.watched.get(step)?.at.clone();
        if at.job
            && let Some(waiting) = self.unadmitted(step).await
        {
            return waiting;
        }
        match self.assess_pods(step).await {
            Some(Outcome::Lost(why)) if at.job => {
                Some(Outcome::Lost(self.why_lost(&at, why).await))
            }
            outcome => outcome,
        }
    }

    async fn assess_pods(&mut self, step: &str) -> Option<Outcome> {
        let (at, since) = {
            let w = self.watched.get(step)?;
            (w.at.clone(), w.since)
        };
        let now = Instant::now();
        let mut workers = Vec::with_capacity(at.workers as usize);
        // A pod deleted by anyone but sluice (kubectl, a drain) is lost, once its runtime has
        // ended (and synced its last checkpoint); one sluice deleted ends as its runtime says.
        let asked = self
            .conn
            .stopping
            .lock()
            .is_ok_and(|s| s.contains(at.handle().as_str()));
        {
            let seen = self.conn.seen();
            for i in 0..at.workers {
                let name = at.pod(i);
                let found = if let Some(p) = seen.pods.get(&name) {
                    let mut state = status::of(p);
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    if matches!(state, Worker::Running | Worker::Pending(_))
                        && let Some(node) = node
                        && let Some(n) = seen.nodes.get(&node)
                        && let Some((why, t)) = &n.not_ready
                        && now.duration_since(*t) >= self.settings.heartbeat_timeout
                    {
                        state = Worker::Lost(format!("node {node} lost ({why})"));
                    }
                    let deleting = p.metadata.deletion_timestamp.is_some();
                    if deleting && !asked && matches!(state, Worker::Ended { killed: None }) {
                        state = Worker::Lost(format!("the pod {name} was deleted"));
                    }
                    Some((state, false))
                } else {
                    seen.deleted.get(&name).map(|p| match status::of(p) {
                        Worker::Lost(why) => (Worker::Lost(why), true),
                        _ if !asked => (Worker::Lost(format!("the pod {name} was deleted")), true),
                        other => (other, true),
                    })
                };
                workers.push(found);
            }
        }
        // The records of workers whose pods ended or are gone, read once each.
        for (i, found) in workers.iter().enumerate() {
            let finished = match found {
                Some((Worker::Ended { .. }, _)) | Some((_, true)) => true,
                None => {
                    self.conn.seen().pods_listed
                        && now.duration_since(since) > self.spec.pod_start_timeout
                }
                _ => false,
            };
            let unread = self
                .watched
                .get(step)
                .is_some_and(|w| w.results.get(i).is_some_and(Option::is_none));
            if finished && unread {
                let record = record::result(&self.objects, &at.record(i as u32)).await;
                if let Some(w) = self.watched.get_mut(step)
                    && let Some(slot) = w.results.get_mut(i)
                {
                    *slot = Some(record);
                }
            }
        }
        let results = self.watched.get(step)?.results.clone();
        let mut done: Vec<contract::Result> = Vec::new();
        for (i, found) in workers.iter().enumerate() {
            let record = results.get(i).cloned().flatten();
            match (found, record) {
                (Some((Worker::Failed(why), _)), _) => return Some(Outcome::Ended(failed(why))),
                (Some((Worker::Ended { killed: Some(why) }, _)), record) => {
                    let mut r = record.flatten().unwrap_or_else(|| failed(why));
                    r.end = End::Failed;
                    r.exit_code = Some(137);
                    r.reason = Some(why.clone());
                    return Some(Outcome::Ended(r));
                }
                (Some((Worker::Lost(why), _)), _) => return Some(Outcome::Lost(why.clone())),
                (Some((Worker::Ended { killed: None }, _)) | Some((_, true)), Some(Some(r))) => {
                    if r.end != End::Succeeded {
                        return Some(Outcome::Ended(r));
                    }
                    done.push(r);
                }
                (Some((Worker::Ended { killed: None }, _)), Some(None)) => {
                    return Some(Outcome::Lost(format!(
                        "the pod {} ended without its runtime's record",
                        at.pod(i as u32)
                    )));
                }
                (Some((_, true)), Some(None)) => {
                    return Some(Outcome::Lost(format!(
                        "the pod {} was deleted",
                        at.pod(i as u32)
                    )));
                }
                (None, Some(Some(r))) => {
                    if r.end != End::Succeeded {
                        return Some(Outcome::Ended(r));
                    }
                    done.push(r);
                }
                (None, Some(None)) => {
                    return Some(Outcome::Lost(format!(
                        "the pod {} was not found",
                        at.pod(i as u32)
                    )));
                }
                (Some((Worker::Pending(why), _)), _)
                    if now.duration_since(since) > self.spec.pod_start_timeout =>
                {
                    let why = match why {
                        Some(w) => w.clone(),
                        None => self
                            .conn
                            .pod_events(&at.pod(i as u32))
                            .await
                            .unwrap_or_else(|| "not started".into()),
                    };
                    return Some(Outcome::Lost(format!(
                        "{why} (the pod did not start within {})",
                        crate::spec::units::format_duration(self.spec.pod_start_timeout)
                    )));
                }
                _ => {}
            }
        }
        if done.len() == at.workers as usize {
            // Every worker succeeded: rank 0's record is the attempt's (its metrics).
            return done.into_iter().next().map(Outcome::Ended);
        }
        // Still going: why a worker waits, when Kubernetes says something worth showing.
        let waiting = workers.iter().find_map(|w| match w {
            Some((Worker::Pending(Some(why)), _))
                if why.starts_with("Unschedulable") || why.starts_with("ErrImagePull") =>
            {
                Some(why.clone())
            }
            _ => None,
        });
        if let Some(w) = self.watched.get_mut(step)
            && w.shown != waiting
        {
            w.shown = waiting.clone();
            self.events.push_back(Event::Waiting {
                attempt: w.id.clone(),
                reason: waiting,
            });
        }
        None
    }

    /// Stops following an attempt that came out, deletes what is left of it, and says so.
    pub(super) fn conclude(&mut self, step: &str, outcome: Outcome) {
        let Some(w) = self.watched.remove(step) else {
            return;
        };
        // Finished pods go at once; a gang's other workers get their grace period.
        let removal = self.forget(&w.at, self.grace_seconds());
        self.uploads.spawn(removal);
        self.events.push_back(match outcome {
            Outcome::Ended(result) => Event::Ended {
                attempt: w.id,
                result: Some(Box::new(result)),
            },
            Outcome::Lost(reason) => Event::Lost {
                attempt: w.id,
                reason,
            },
        });
    }
}

/// A failed attempt that never ran, with its reason.
pub(super) fn failed(why: &str) -> contract::Result {
    let now = crate::time::now_rfc3339();
    contract::Result {
        end: End::Failed,
        exit_code: None,
        signal: None,
        started_at: now.clone(),
        ended_at: now,
        reason: Some(why.to_owned()),
        metrics: Default::default(),
    }
}
