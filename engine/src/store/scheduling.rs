//! Cluster mode (`--cluster`): what every engine on this home has waiting and running on the
//! declared cluster, and the transaction that starts an attempt on the nodes the scheduler
//! chose.
//!
//! The store does not know the scheduler: it keeps each step's request as the JSON the driver
//! wrote, hands the rows to the driver, and lets a closure decide, inside the transaction,
//! whether the chosen nodes still have room. So two engines starting steps at once cannot both
//! take the same GPUs: the second one's transaction sees the first one's attempt.

use super::read::Reader;
use super::rows::{Change, StepRow, apply, placeholders, started};
use super::{AttemptRow, Error, Lock, Store, Tx};

/// A waiting or running step of some run, as cluster mode keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub run_id: String,
    pub step: String,
    /// What it asks of the scheduler (JSON written by the driver).
    pub job: String,
    /// Waiting: since when (unix ms). Running: when its attempt started (unix ms).
    pub since: i64,
    /// Running only: each worker's node (JSON array), its GPU indices, its attempt's folder.
    pub nodes: Option<String>,
    pub gpus: Option<String>,
    pub dir: Option<String>,
}

/// The running attempts on the cluster and the waiting steps of live runs (and of `run`,
/// whatever its lease), in the scheduler's order.
async fn every_claim(
    tx: &mut Tx,
    dialect: super::Dialect,
    run: &str,
    now: i64,
) -> Result<(Vec<Claim>, Vec<Claim>), Error> {
    let held = running(tx).await?;
    let sql = format!(
        "SELECT w.run_id, w.step, w.job, w.submitted FROM waiting w \
         JOIN runs r ON r.id = w.run_id \
         JOIN steps s ON s.run_id = w.run_id AND s.name = w.step {} \
         WHERE s.state = 'Queued' AND r.state = 'Running' AND (w.run_id = $1 OR {} > $2) \
         ORDER BY w.submitted, w.{}",
        super::JOIN_ENGINE,
        super::LEASE_UNTIL,
        dialect.insertion_order()
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(run)
        .bind(now)
        .fetch_all(&mut **tx)
        .await?;
    let waiting = rows
        .iter()
        .map(waiting_claim)
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((held, waiting))
}

async fn running(tx: &mut Tx) -> Result<Vec<Claim>, Error> {
    let rows = sqlx::query(
        "SELECT run_id, step, job, nodes, gpus, dir, started_at FROM attempts WHERE state = 'Running' AND job IS NOT NULL",
    )
    .fetch_all(&mut **tx)
    .await?;
    rows.iter()
        .map(|row| {
            let r = Reader::new(row, "a running attempt on the cluster");
            let run_id: String = r.at(0)?;
            let step: String = r.at(1)?;
            let started: String = r.at(6)?;
            let since = crate::time::parse_rfc3339(&started).ok_or_else(|| {
                Error::Corrupt(format!(
                    "step {step} of run {run_id} started at '{started}', not an RFC 3339 time"
                ))
            })?;
            Ok(Claim {
                job: r.at(2)?,
                nodes: r.at(3)?,
                gpus: r.at(4)?,
                dir: r.at(5)?,
                since,
                run_id,
                step,
            })
        })
        .collect()
}

impl Store {
    /// Commits `before`, records `mine` (this run's queued steps, `(step, job)`) as waiting,
    /// keeping the age of those already waiting and dropping this run's others, and returns
    /// what runs and what waits on the cluster: every run's, except runs no engine drives
    /// (lease expired at `now`) and steps no longer queued.
    pub async fn claims(
        &self,
        run: &str,
        before: Change<'_>,
        mine: &[(String, String)],
        now: i64,
    ) -> Result<(Vec<Claim>, Vec<Claim>), Error> {
        let mut tx = self.write(Lock::Room).await?;
        let freed = apply(&mut tx, self.dialect, run, &before, &self.at()).await?;
        let mut known = std::collections::HashMap::<String, i64>::new();
        for row in sqlx::query("SELECT step, submitted FROM waiting WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut *tx)
            .await?
        {
            let r = Reader::new(&row, format!("a waiting step of run {run}"));
            known.insert(r.at(0)?, r.at(1)?);
        }
        sqlx::query("DELETE FROM waiting WHERE run_id = $1")
            .bind(run)
            .execute(&mut *tx)
            .await?;
        for chunk in mine.chunks(300) {
            let sql = format!(
                "INSERT INTO waiting (run_id, step, job, submitted) VALUES {}",
                placeholders(chunk.len(), 4)
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (step, job) in chunk {
                q = q
                    .bind(run)
                    .bind(step.clone())
                    .bind(job.clone())
                    .bind(known.get(step).copied().unwrap_or(now));
            }
            q.execute(&mut *tx).await?;
        }
        let (held, waiting) = every_claim(&mut tx, self.dialect(), run, now).await?;
        tx.commit().await?;
        if freed {
            self.feed.note(super::feed::Kind::Freed, run);
        }
        Ok((held, waiting))
    }

    /// What runs and what waits on the cluster now, as [`Store::claims`] reads them, writing
    /// nothing: a process's scheduler looking again after an attempt ended.
    pub async fn read_claims(&self, now: i64) -> Result<(Vec<Claim>, Vec<Claim>), Error> {
        // One transaction, so that both lists are of one moment.
        let mut tx = self.pool.begin().await?;
        let claims = every_claim(&mut tx, self.dialect(), "", now).await?;
        tx.commit().await?;
        Ok(claims)
    }

    /// The waiting steps of `team`'s running runs that the cluster's scheduler considers
    /// (Queued, with a waiting row), oldest first, then in the order they were written: the
    /// order the scheduler numbers them in. Read only (the web UI's queue page).
    pub async fn waiting_of(&self, team: &str) -> Result<Vec<Claim>, Error> {
        let sql = format!(
            "SELECT w.run_id, w.step, w.job, w.submitted FROM waiting w \
             JOIN runs r ON r.id = w.run_id \
             JOIN steps s ON s.run_id = w.run_id AND s.name = w.step \
             WHERE s.state = 'Queued' AND r.state = 'Running' AND r.team = $1 \
             ORDER BY w.submitted, w.{}",
            self.dialect().insertion_order()
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(team)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(waiting_claim).collect()
    }

    /// Commits `before`, then starts `attempt` (its `job` and `nodes` set) if `place`, given
    /// what runs on the cluster now, still finds room on its nodes (`place` returns the GPU
    /// indices, comma-separated, worker after worker, empty for none; or None), and, for a
    /// trial (`rate`: its team and the interval between its trial starts, in ms), if the
    /// team's next start is due at `now`. The attempt and its step's `Running` are recorded,
    /// the step leaves the waiting list and the team's next start moves on, in one
    /// transaction.
    pub async fn start_placed(
        &self,
        run: &str,
        step: &StepRow,
        attempt: &AttemptRow,
        before: Change<'_>,
        rate: Option<Rate<'_>>,
        place: impl FnOnce(&[Claim]) -> Option<String>,
    ) -> Result<Placed, Error> {
        let mut tx = self.write(Lock::Room).await?;
        let freed = apply(&mut tx, self.dialect, run, &before, &self.at()).await?;
        let held = running(&mut tx).await?;
        let note = |store: &Store| {
            if freed {
                store.feed.note(super::feed::Kind::Freed, run);
            }
        };
        let Some(gpus) = place(&held) else {
            tx.commit().await?;
            note(self);
            return Ok(Placed::NoRoom);
        };
        if let Some(Rate {
            team,
            interval_ms: interval,
            now,
        }) = rate
        {
            let next: Option<i64> =
                match sqlx::query("SELECT next_at FROM trial_starts WHERE team = $1")
                    .bind(team)
                    .fetch_optional(&mut *tx)
                    .await?
                {
                    Some(row) => {
                        Some(Reader::new(&row, format!("team {team}'s trial rate")).at(0)?)
                    }
                    None => None,
                };
            if let Some(next) = next
                && next > now
            {
                tx.commit().await?;
                note(self);
                return Ok(Placed::RateLimited { until: next });
            }
            // Burst 1 (a bucket of one token): the next start is one interval after this one.
            let after = next.map_or(now, |n| n.max(now)) + interval;
            sqlx::query("INSERT INTO trial_starts (team, next_at) VALUES ($1, $2) ON CONFLICT (team) DO UPDATE SET next_at = excluded.next_at")
                .bind(team)
                .bind(after)
                .execute(&mut *tx)
                .await?;
        }
        let gpu_list = (!gpus.is_empty()).then_some(gpus.as_str());
        sqlx::query("INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, started_at, job, nodes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
            .bind(run)
            .bind(&attempt.step)
            .bind(attempt.number)
            .bind(attempt.state.as_str())
            .bind(&attempt.dir)
            .bind(attempt.millicpu)
            .bind(attempt.memory)
            .bind(gpu_list)
            .bind(&attempt.started_at)
            .bind(&attempt.job)
            .bind(&attempt.nodes)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM waiting WHERE run_id = $1 AND step = $2")
            .bind(run)
            .bind(&attempt.step)
            .execute(&mut *tx)
            .await?;
        started(&mut tx, run, step, attempt.number, &self.at()).await?;
        tx.commit().await?;
        note(self);
        Ok(Placed::Started(gpus))
    }
}

/// A trial's start under its team's rate limit.
#[derive(Clone, Copy, Debug)]
pub struct Rate<'a> {
    pub team: &'a str,
    /// Between two starts of the team's trials.
    pub interval_ms: i64,
    /// Unix ms.
    pub now: i64,
}

/// What `start_placed` did.
#[derive(Clone, Debug, PartialEq)]
pub enum Placed {
    /// Started, holding these GPU indices (comma-separated; empty for none).
    Started(String),
    /// Its nodes no longer have room (another engine took it first).
    NoRoom,
    /// Its team's next trial start is due at `until` (unix ms).
    RateLimited { until: i64 },
}

/// A row of `waiting` (run_id, step, job, submitted) as a waiting claim.
fn waiting_claim(row: &sqlx::any::AnyRow) -> Result<Claim, Error> {
    let r = Reader::new(row, "a waiting step on the cluster");
    Ok(Claim {
        run_id: r.at(0)?,
        step: r.at(1)?,
        job: r.at(2)?,
        since: r.at(3)?,
        nodes: None,
        gpus: None,
        dir: None,
    })
}
