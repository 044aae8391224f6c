//! Runs whose engine is gone: their attempts still marked running, and recording how those
//! ended, by any `sluice` on the home (see `run::reap`).

use super::read::Reader;
use super::rows::{
    AttemptRow, Event, EventKind, Holder, attempt_row, end_running_attempt, insert_events,
};
use super::{Error, Lock, Store};

/// A `Running` attempt of a `Running` run, with what tells whether the run's engine lives.
#[derive(Clone, Debug)]
pub struct Orphan {
    pub run_id: String,
    pub holder: Option<Holder>,
    pub cancel_requested: bool,
    pub attempt: AttemptRow,
}

impl Store {
    /// Every attempt still marked running, of every run still marked running.
    pub async fn running_attempts(&self) -> Result<Vec<Orphan>, Error> {
        let sql = format!(
            "SELECT a.*, r.lease_owner AS r_owner, {} AS r_until, r.lease_started AS r_started, r.cancel_requested AS r_cancel FROM attempts a JOIN runs r ON r.id = a.run_id {} WHERE a.state = 'Running' AND r.state = 'Running' ORDER BY a.run_id",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let attempt = attempt_row(row)?;
                let run_id: String = Reader::new(row, "a running attempt").get("run_id")?;
                let r = Reader::new(row, format!("run {run_id}"));
                Ok(Orphan {
                    holder: Holder::of(r.get("r_owner")?, r.get("r_until")?, r.get("r_started")?),
                    cancel_requested: r.flag("r_cancel")?,
                    run_id,
                    attempt,
                })
            })
            .collect()
    }

    /// The runs with steps in cluster mode's waiting list, with their leases.
    pub async fn waiting_runs(&self) -> Result<Vec<(String, Option<Holder>)>, Error> {
        let sql = format!(
            "SELECT DISTINCT r.id, r.lease_owner, {}, r.lease_started FROM waiting w JOIN runs r ON r.id = w.run_id {}",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, "a run waiting on the cluster");
                Ok((r.at(0)?, Holder::of(r.at(1)?, r.at(2)?, r.at(3)?)))
            })
            .collect()
    }

    /// Drops the waiting steps of `runs` (their engines are gone), through the fenced write
    /// path: a deposed leader writes nothing.
    pub async fn forget_waiting(&self, runs: &[String]) -> Result<(), Error> {
        if runs.is_empty() {
            return Ok(());
        }
        let mut tx = self.write(Lock::Room).await?;
        for run in runs {
            sqlx::query("DELETE FROM waiting WHERE run_id = $1")
                .bind(run)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The running runs whose lease is not `owner`'s, with their holders: what a server may
    /// have to adopt (read through an index, without the runs' rows).
    pub async fn running_not_held_by(
        &self,
        owner: &str,
    ) -> Result<Vec<(String, Option<Holder>)>, Error> {
        let sql = format!(
            "SELECT r.id, r.lease_owner, {} AS lease_until, r.lease_started FROM runs r {} WHERE r.state = 'Running' AND (r.lease_owner IS NULL OR r.lease_owner <> $1)",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, "a running run's lease");
                Ok((
                    r.get("id")?,
                    Holder::of(
                        r.get("lease_owner")?,
                        r.get("lease_until")?,
                        r.get("lease_started")?,
                    ),
                ))
            })
            .collect()
    }

    /// Records the ends of attempts `ended` (run id, attempt row with its end) found by a
    /// process that does not drive their runs, so that what they held is free again. Only
    /// rows still `Running` change: the run's own engine, if it came back and recorded the end
    /// first, wins. The runs' waiting steps no longer wait. Returns how many changed.
    pub async fn collect(&self, ended: &[(String, AttemptRow)]) -> Result<u64, Error> {
        if ended.is_empty() {
            return Ok(0);
        }
        let mut tx = self.write(Lock::Room).await?;
        let mut changed = 0;
        for (run, a) in ended {
            let n = end_running_attempt(&mut tx, run, a).await?;
            if n > 0 {
                changed += n;
                super::feed::record(
                    &mut tx,
                    self.dialect,
                    super::feed::Kind::Freed,
                    run,
                    self.at().ms,
                )
                .await?;
                insert_events(
                    &mut tx,
                    run,
                    &[Event {
                        step: Some(a.step.clone()),
                        kind: EventKind::AttemptCollected,
                        detail: Some(a.state.into()),
                    }],
                    &self.at().text,
                )
                .await?;
            }
            sqlx::query("DELETE FROM waiting WHERE run_id = $1")
                .bind(run)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if changed > 0 {
            self.feed.note(super::feed::Kind::Freed, "");
        }
        Ok(changed)
    }
}
