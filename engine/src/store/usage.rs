//! What `sluice usage` reads: every attempt that held something during a window, with its
//! run's team and pipeline and the step of the file it is an instance of.

use super::read::Reader;
use super::{Error, Store};

/// An attempt as usage accounts it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct UsageRow {
    pub run_id: String,
    pub team: String,
    /// The run's pipeline (or sweep): its file's `metadata.name`.
    pub pipeline: String,
    /// The step instance, and the step of the file it comes from.
    pub step: String,
    pub file_step: String,
    pub number: i64,
    pub state: String,
    /// Every worker's CPU together, in thousandths of a core.
    pub millicpu: i64,
    /// GPU indices held, comma-separated (cluster mode: worker after worker).
    pub gpus: Option<String>,
    pub started_at: String,
    /// None while it runs.
    pub ended_at: Option<String>,
    /// Cluster mode: its request (JSON) and each worker's node (JSON array).
    pub job: Option<String>,
    pub nodes: Option<String>,
}

/// The columns `usage_row` reads, and the joins they come from.
macro_rules! usage_select {
    () => {
        "SELECT a.run_id, r.team, r.name, a.step, s.step, a.number, a.state, a.millicpu, \
         a.gpus, a.started_at, a.ended_at, a.job, a.nodes \
         FROM attempts a \
         JOIN runs r ON r.id = a.run_id \
         JOIN steps s ON s.run_id = a.run_id AND s.name = a.step "
    };
}

impl Store {
    /// The attempts of runs of `team` (every team's with None) that held their resources
    /// at some time in `[since, until)` (RFC 3339 as `crate::time::format` writes them, which
    /// sorts as the time does; open where None): those started before `until` and not ended
    /// by `since`, running ones included. Ordered by run, step and number.
    pub async fn usage(
        &self,
        team: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
    ) -> Result<Vec<UsageRow>, Error> {
        let rows = sqlx::query(concat!(
            usage_select!(),
            "WHERE ($1 IS NULL OR r.team = $2) \
             AND ($3 IS NULL OR a.started_at < $4) \
             AND ($5 IS NULL OR a.ended_at IS NULL OR a.ended_at > $6) \
             ORDER BY a.run_id, a.step, a.number"
        ))
        .bind(team)
        .bind(team)
        .bind(until)
        .bind(until)
        .bind(since)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(usage_row).collect()
    }

    /// The attempts running now (as the store says), every team's, as `usage` reads them:
    /// what GPUs are held now (`/metrics`, the web UI's queue). By the index on attempts'
    /// state, not a pass over every attempt.
    pub async fn usage_running(&self) -> Result<Vec<UsageRow>, Error> {
        let rows = sqlx::query(concat!(
            usage_select!(),
            "WHERE a.state = 'Running' ORDER BY a.run_id, a.step, a.number"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(usage_row).collect()
    }
}

/// A row of `usage`'s query.
fn usage_row(row: &sqlx::any::AnyRow) -> Result<UsageRow, Error> {
    let head = Reader::new(row, "an attempt");
    let run_id: String = head.at(0)?;
    let step: String = head.at(3)?;
    let r = Reader::new(row, format!("an attempt of step {step} of run {run_id}"));
    Ok(UsageRow {
        team: r.at(1)?,
        pipeline: r.at(2)?,
        file_step: r.at(4)?,
        number: r.at(5)?,
        state: r.at(6)?,
        millicpu: r.at(7)?,
        gpus: r.at(8)?,
        started_at: r.at(9)?,
        ended_at: r.at(10)?,
        job: r.at(11)?,
        nodes: r.at(12)?,
        run_id,
        step,
    })
}

impl Store {
    /// For each of `ends` (RFC 3339 as the store writes it): how many runs of `team` were
    /// created before it. One pass over the team's runs, whatever the number of ends.
    pub async fn runs_before(&self, team: &str, ends: &[String]) -> Result<Vec<i64>, Error> {
        let mut out = Vec::with_capacity(ends.len());
        for chunk in ends.chunks(100) {
            let counts: Vec<String> = (0..chunk.len())
                .map(|i| format!("COUNT(CASE WHEN created_at < ${} THEN 1 END)", i + 2))
                .collect();
            let sql = format!("SELECT {} FROM runs WHERE team = $1", counts.join(", "));
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(team);
            for end in chunk {
                q = q.bind(end.clone());
            }
            let row = q.fetch_one(&self.pool).await?;
            let r = Reader::new(&row, "counts of runs");
            for i in 0..chunk.len() {
                out.push(r.at(i)?);
            }
        }
        Ok(out)
    }

    /// When the earliest attempt of `team` that is still running (as the store says: its
    /// engine may have died since) started, if one is.
    pub async fn first_running(&self, team: &str) -> Result<Option<String>, Error> {
        let row = sqlx::query(
            "SELECT MIN(started_at) FROM attempts WHERE state = 'Running' \
             AND run_id IN (SELECT id FROM runs WHERE team = $1)",
        )
        .bind(team)
        .fetch_one(&self.pool)
        .await?;
        Reader::new(&row, "the first running attempt").at(0)
    }

    /// The teams with a run created at or after `at` (RFC 3339), by name.
    pub async fn teams_since(&self, at: &str) -> Result<Vec<String>, Error> {
        let rows =
            sqlx::query("SELECT DISTINCT team FROM runs WHERE created_at >= $1 ORDER BY team")
                .bind(at)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|row| Reader::new(row, "a team").at(0))
            .collect()
    }

    /// How long, in ms, the last `limit` successful attempts of step `file_step` took in runs
    /// of pipeline `pipeline` of `team`, newest first: a step's history, for the scheduler's
    /// estimate of a step that sets no `timeout`. Attempts whose times cannot be read are
    /// left out (an estimate, not an account).
    pub async fn durations(
        &self,
        team: &str,
        pipeline: &str,
        file_step: &str,
        limit: i64,
    ) -> Result<Vec<u64>, Error> {
        let rows = sqlx::query(
            "SELECT a.started_at, a.ended_at \
             FROM attempts a \
             JOIN runs r ON r.id = a.run_id \
             JOIN steps s ON s.run_id = a.run_id AND s.name = a.step \
             WHERE r.team = $1 AND r.name = $2 AND s.step = $3 AND a.state = $4 \
             AND a.ended_at IS NOT NULL \
             ORDER BY a.ended_at DESC LIMIT $5",
        )
        .bind(team)
        .bind(pipeline)
        .bind(file_step)
        .bind(crate::run::state::attempt::SUCCEEDED.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let r = Reader::new(row, "an attempt");
                let started: String = r.at(0).ok()?;
                let ended: String = r.at(1).ok()?;
                let ms =
                    crate::time::parse_ms(&ended).ok()? - crate::time::parse_ms(&started).ok()?;
                u64::try_from(ms).ok()
            })
            .collect())
    }
}
