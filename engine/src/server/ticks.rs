//! The schedule loop of the leader: every second, each applied schedule's due ticks are
//! decided (`schedule::plan`) and recorded, a tick's run in the same transaction as its record
//! (`Service::submit_fire`), so that a tick is decided once whatever crashes or second servers
//! happen. It writes through the leader's fenced store: a leader that was cut off records
//! nothing. It reads the time from the service's clock, so tests drive it.
//!
//! A schedule's ticks count from the later of its last decided tick and the time its current
//! version was applied: a schedule changed by `apply` fires from its next tick on, never at
//! once, and a new schedule fires nothing from before it existed.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::drivers::Drivers;
use crate::schedule::{cron, plan};
use crate::service::{self, Principal, Service};
use crate::spec::model::{Concurrency, Schedule};
use crate::store::{AppliedRow, FireRow, Store};

/// What the loop needs beside the store.
#[derive(Clone, Debug)]
pub struct Ticks {
    /// The service over the leader's fenced store.
    pub service: Service,
    pub drivers: Arc<Drivers>,
    /// The server's Cluster file and object store, as for runs submitted through the API.
    pub cluster: Option<PathBuf>,
    pub objects: Option<String>,
}

/// The most ticks of one schedule decided in one pass (a schedule every minute down for a
/// week is 10,080: decided over several passes).
const TICKS_PER_PASS: usize = 1_000;

impl Ticks {
    /// Decides every schedule's due ticks once.
    pub async fn pass(&self) -> Result<(), service::Error> {
        let store = self.service.store().clone();
        let now = self.service.clock().now();
        for row in store.applied(None).await? {
            if row.kind != "Schedule" {
                continue;
            }
            if let Err(e) = self.schedule(&store, &row, now).await {
                tracing::warn!("schedule {} of team {}: {e}", row.name, row.team);
            }
        }
        Ok(())
    }

    async fn schedule(
        &self,
        store: &Store,
        row: &AppliedRow,
        now: DateTime<Utc>,
    ) -> Result<(), service::Error> {
        let Some(s) = service::schedules::schedule_of(row) else {
            return Err(service::Error::invalid(format!(
                "its applied text (version {}) no longer reads as a Schedule",
                row.version
            )));
        };
        if s.suspend {
            return Ok(());
        }
        let expr = cron::parse(&s.cron).map_err(|e| service::Error::invalid(e.to_string()))?;
        let tz = cron::zone(&s.timezone).map_err(|(m, _)| service::Error::invalid(m))?;
        let applied = crate::time::parse(&row.applied_at)
            .map_err(|e| service::Error::invalid(e.to_string()))?;
        let last = store.last_fire(&row.team, &row.name).await?;
        let last_tick = match &last {
            Some(f) => Some(
                crate::time::parse(&f.tick).map_err(|e| service::Error::invalid(e.to_string()))?,
            ),
            None => None,
        };
        let from = last_tick.map_or(applied, |t| t.max(applied));
        let due = expr.fires_between(tz, from, now, TICKS_PER_PASS);
        let rules = plan::Rules {
            catch_up: s.catch_up,
            starting_deadline: s.starting_deadline,
        };
        for (tick, decision) in plan::decide(rules, &due, now) {
            let fire = FireRow {
                team: row.team.clone(),
                schedule: row.name.clone(),
                tick: crate::time::format(tick),
                outcome: String::new(),
                run_id: None,
                reason: None,
                version: row.version,
                recorded_at: self.service.clock().now_rfc3339(),
            };
            match decision {
                plan::Decision::Missed(why) => {
                    store
                        .fire(
                            &FireRow {
                                outcome: "missed".into(),
                                reason: Some(why),
                                ..fire
                            },
                            None,
                        )
                        .await?;
                }
                plan::Decision::Run => self.run(store, row, &s, fire).await?,
            }
        }
        if let Some(keep) = s.keep_runs {
            // The schedule's ended runs beyond the newest `keepRuns` are removed, as
            // `sluice delete` removes a run (its files and objects, then its rows).
            let ended = store.schedule_ended(&row.team, &row.name).await?;
            for id in ended
                .iter()
                .skip(usize::try_from(keep).unwrap_or(usize::MAX))
            {
                if let Err(e) = crate::cli::delete::remove(store, id).await {
                    tracing::warn!("schedule {}: cannot remove old run {id}: {e}", row.name);
                }
            }
        }
        Ok(())
    }

    /// Starts the run of one tick, as its concurrency allows.
    async fn run(
        &self,
        store: &Store,
        row: &AppliedRow,
        s: &Schedule,
        fire: FireRow,
    ) -> Result<(), service::Error> {
        let running = store.schedule_running(&row.team, &row.name).await?;
        if !running.is_empty() {
            match s.concurrency {
                Concurrency::Forbid => {
                    store
                        .fire(
                            &FireRow {
                                outcome: "skipped".into(),
                                reason: Some(format!(
                                    "run {} is still running (concurrency: forbid)",
                                    running.join(", ")
                                )),
                                ..fire
                            },
                            None,
                        )
                        .await?;
                    return Ok(());
                }
                Concurrency::Replace => {
                    // Cancelled as `cancel` does; the new run starts at once.
                    for id in &running {
                        store.request_cancel(id).await?;
                    }
                }
                Concurrency::Allow => {}
            }
        }
        let who = Principal::new(row.team.clone(), service::Role::Member);
        let pipeline = store
            .applied_named(&row.team, &["Pipeline", "Sweep"], &s.pipeline)
            .await?;
        let Some(pipeline) = pipeline else {
            store
                .fire(
                    &FireRow {
                        outcome: "skipped".into(),
                        reason: Some(format!(
                            "no pipeline or sweep named '{}' is applied (pruned?)",
                            s.pipeline
                        )),
                        ..fire
                    },
                    None,
                )
                .await?;
            return Ok(());
        };
        let request = service::Request {
            shown: pipeline.path.clone(),
            text: pipeline.source.clone(),
            workdir: PathBuf::from(&pipeline.workdir),
            params: s.params.iter().map(|(p, _)| p.clone()).collect(),
            name: None,
            cluster: self.cluster.clone(),
            objects: self.objects.clone(),
            applied_version: Some(pipeline.version),
            schedule: Some(row.name.clone()),
        };
        let mut quiet = |_: &[crate::spec::Diagnostic]| {};
        let outcome = match service::submit::check(&who, request, &mut quiet) {
            Ok(checked) => {
                let started = FireRow {
                    outcome: "started".into(),
                    ..fire.clone()
                };
                self.service.submit_fire(&who, checked, started).await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Some(submitted)) => {
                tracing::info!(
                    "schedule {} of team {}: tick {} started run {}",
                    row.name,
                    row.team,
                    fire.tick,
                    submitted.id
                );
                self.drivers.drive(&submitted.id);
            }
            Ok(None) => {}
            // The run cannot be made (its pipeline no longer checks, the team's queue is
            // full): the tick is recorded as skipped, saying why.
            Err(e @ (service::Error::Invalid { .. } | service::Error::Conflict { .. })) => {
                store
                    .fire(
                        &FireRow {
                            outcome: "skipped".into(),
                            reason: Some(e.to_string()),
                            ..fire
                        },
                        None,
                    )
                    .await?;
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
