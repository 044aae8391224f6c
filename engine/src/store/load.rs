//! What the store holds now, summed per team for `/metrics`: steps of running runs by state,
//! attempts by state, and cluster mode's queue. (GPUs held by pool come from
//! `Service::gpus_held`, which knows each worker's pool.)

use super::read::Reader;
use super::{Error, Store};

/// Steps and GPUs per team.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// (team, step state, how many).
    pub steps: Vec<(String, String, i64)>,
    /// (team, attempt state, how many attempts ever): admissions are all of them, outcomes
    /// by state (Succeeded, Failed, Timeout, Preempted, Lost, Cancelled, Running).
    pub attempts: Vec<(String, String, i64)>,
    /// (team, outcome, how many ticks): the schedules' fires, `started`, `skipped`, `missed`.
    pub fires: Vec<(String, String, i64)>,
    /// Cluster mode's queue: each waiting step's request (`run::cluster::Ask` as JSON: its
    /// team and priority) and when it started waiting (unix ms).
    pub waiting: Vec<(String, i64)>,
}

impl Store {
    pub async fn load_by_team(&self) -> Result<Load, Error> {
        let rows = sqlx::query(
            "SELECT r.team AS team, s.state AS state, COUNT(*) AS n FROM steps s \
             JOIN runs r ON r.id = s.run_id WHERE r.state = 'Running' \
             GROUP BY r.team, s.state ORDER BY r.team, s.state",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut load = Load::default();
        for row in &rows {
            let r = Reader::new(row, "a count of steps");
            load.steps
                .push((r.get("team")?, r.get("state")?, r.get("n")?));
        }
        let rows = sqlx::query(
            "SELECT r.team AS team, a.state AS state, COUNT(*) AS n FROM attempts a \
             JOIN runs r ON r.id = a.run_id GROUP BY r.team, a.state ORDER BY r.team, a.state",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in &rows {
            let r = Reader::new(row, "a count of attempts");
            load.attempts
                .push((r.get("team")?, r.get("state")?, r.get("n")?));
        }
        let rows = sqlx::query(
            "SELECT team, outcome, COUNT(*) AS n FROM fires GROUP BY team, outcome ORDER BY team, outcome",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in &rows {
            let r = Reader::new(row, "a count of fires");
            load.fires
                .push((r.get("team")?, r.get("outcome")?, r.get("n")?));
        }
        let rows = sqlx::query("SELECT job, submitted FROM waiting")
            .fetch_all(&self.pool)
            .await?;
        for row in &rows {
            let r = Reader::new(row, "a waiting step");
            load.waiting.push((r.get("job")?, r.get("submitted")?));
        }
        Ok(load)
    }
}

impl Store {
    /// Whether the store answers a query now (`/readyz`).
    pub async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
