//! What the store holds now, summed per team for `/metrics`: steps of running runs by state
//! (Pending and Queued steps are the queue), and the GPUs running attempts hold.

use super::read::Reader;
use super::{Error, Store};

/// Steps and GPUs per team.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// (team, step state, how many).
    pub steps: Vec<(String, String, i64)>,
    /// (team, GPUs held by its running attempts).
    pub gpus: Vec<(String, i64)>,
    /// (team, attempt state, how many attempts ever): admissions are all of them, outcomes
    /// by state (Succeeded, Failed, Timeout, Preempted, Lost, Cancelled, Running).
    pub attempts: Vec<(String, String, i64)>,
    /// (team, when its longest-waiting step started waiting, unix ms): cluster mode's queue.
    pub oldest_wait: Vec<(String, i64)>,
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
            "SELECT r.team AS team, a.gpus AS gpus FROM attempts a \
             JOIN runs r ON r.id = a.run_id WHERE a.state = 'Running' ORDER BY r.team",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in &rows {
            let r = Reader::new(row, "an attempt's GPUs");
            let team: String = r.get("team")?;
            let gpus: Option<String> = r.get("gpus")?;
            let n = gpus.map_or(0, |g| g.split(',').filter(|s| !s.is_empty()).count());
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            match load.gpus.last_mut() {
                Some((t, total)) if *t == team => *total += n,
                _ => load.gpus.push((team, n)),
            }
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
            "SELECT r.team AS team, MIN(w.submitted) AS since FROM waiting w \
             JOIN runs r ON r.id = w.run_id GROUP BY r.team ORDER BY r.team",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in &rows {
            let r = Reader::new(row, "the queue's age");
            load.oldest_wait.push((r.get("team")?, r.get("since")?));
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
