//! Removing runs (`sluice delete`, `sluice gc`): the store's side.
//!
//! A run is removed in three moves, so that a delete cut off anywhere leaves nothing out of
//! reach and running it again finishes the job:
//!
//! 1. [`Store::mark_deleting`]: in one transaction, an ended run becomes `Deleting` (a
//!    tombstone that keeps its row, hence its team and object store, findable) and the cache
//!    entries pointing at its outputs are dropped, so no other run takes a hit on outputs
//!    about to go. A running run is refused; `sluice retry` refuses a `Deleting` one.
//! 2. The caller removes its files: objects, attempts' folders, the detached engine's log.
//! 3. [`Store::forget_run`]: its rows, in one transaction, last.

use std::collections::BTreeSet;

use super::read::{Reader, column};
use super::rows::run_row;
use super::{Error, Lock, RunRow, Store};
use crate::run::state::run as rs;

/// A run's rows, the run's own last.
const FORGET_RUN: &[&str] = &[
    "DELETE FROM events WHERE run_id = $1",
    "DELETE FROM attempts WHERE run_id = $1",
    "DELETE FROM steps WHERE run_id = $1",
    "DELETE FROM waiting WHERE run_id = $1",
    "DELETE FROM cache WHERE run_id = $1",
    "DELETE FROM runs WHERE id = $1",
];

/// Rows of runs that are gone.
const FORGET_ORPHANS: &[&str] = &[
    "DELETE FROM events WHERE run_id NOT IN (SELECT id FROM runs)",
    "DELETE FROM attempts WHERE run_id NOT IN (SELECT id FROM runs)",
    "DELETE FROM steps WHERE run_id NOT IN (SELECT id FROM runs)",
    "DELETE FROM waiting WHERE run_id NOT IN (SELECT id FROM runs)",
    "DELETE FROM cache WHERE run_id NOT IN (SELECT id FROM runs)",
];

/// What [`Store::mark_deleting`] found.
#[derive(Debug)]
pub enum Marked {
    /// The run is now `Deleting`; this is its row as it was (its state before).
    Deleting(Box<RunRow>),
    /// The run is running: nothing was changed.
    Running,
}

impl Store {
    /// Step 1 of removing a run: an ended (or already `Deleting`) run becomes `Deleting` and
    /// loses its cache entries, in one transaction; a running run is left alone.
    pub async fn mark_deleting(&self, id: &str) -> Result<Marked, Error> {
        let mut tx = self.write(Lock::Run(id)).await?;
        let row = match sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(row) => run_row(&row)?,
            None => return Err(Error::NotFound(format!("no run '{id}'"))),
        };
        if row.state == rs::RUNNING {
            return Ok(Marked::Running);
        }
        sqlx::query("UPDATE runs SET state = $1 WHERE id = $2")
            .bind(rs::DELETING.as_str())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM cache WHERE run_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Marked::Deleting(Box::new(row)))
    }

    /// Step 3 of removing a run: every row of a `Deleting` run, in one transaction.
    pub async fn forget_run(&self, id: &str) -> Result<(), Error> {
        let mut tx = self.write(Lock::Run(id)).await?;
        let state: Option<String> = match sqlx::query("SELECT state FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(row) => Some(Reader::new(&row, format!("run {id}")).at(0)?),
            None => None,
        };
        if state.as_deref().is_some_and(|s| s != rs::DELETING) {
            return Err(Error::NotFound(format!(
                "run {id} is not being deleted; nothing was removed"
            )));
        }
        for sql in FORGET_RUN {
            sqlx::query(*sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every run that is not running (ended, or `Deleting`), newest first.
    pub async fn ended_runs(&self) -> Result<Vec<RunRow>, Error> {
        let rows =
            sqlx::query("SELECT * FROM runs WHERE state <> $1 ORDER BY created_at DESC, id DESC")
                .bind(rs::RUNNING.as_str())
                .fetch_all(self.pool())
                .await?;
        rows.iter().map(run_row).collect()
    }

    /// The id of every run in the store.
    pub async fn run_ids(&self) -> Result<BTreeSet<String>, Error> {
        let rows = sqlx::query("SELECT id FROM runs")
            .fetch_all(self.pool())
            .await?;
        Ok(column::<String>(&rows, "a run id")?.into_iter().collect())
    }

    /// Drops rows whose run is gone (a write that raced a delete): returns how many.
    pub async fn forget_orphan_rows(&self) -> Result<u64, Error> {
        let mut tx = self.write(Lock::Room).await?;
        let mut dropped = 0;
        for sql in FORGET_ORPHANS {
            dropped += sqlx::query(*sql).execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewRun, StepRow};

    fn new_run(id: &str) -> NewRun {
        NewRun {
            id: id.into(),
            name: "p".into(),
            team: "t".into(),
            file: "p.yaml".into(),
            workdir: "/".into(),
            objects: "file:///nowhere".into(),
            source: String::new(),
            document: None,
            params: "{}".into(),
            cluster: None,
            applied_version: None,
            schedule: None,
            steps: vec![StepRow {
                name: "a".into(),
                step: "a".into(),
                state: crate::run::state::StepState::Pending,
                ..StepRow::default()
            }],
        }
    }

    async fn store(tag: &str) -> (Store, std::path::PathBuf) {
        let home =
            std::env::temp_dir().join(format!("sluice-housekeeping-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        (Store::open(&home).await.expect("open"), home)
    }

    #[tokio::test]
    async fn a_running_run_is_refused_and_an_ended_one_goes_in_two_steps() {
        let (store, home) = store("marks").await;
        store
            .create_run(&new_run("r1"), None)
            .await
            .expect("create");
        store
            .cache_put("t", "k1", "r1", "a", "teams/t/runs/r1/a/1/outputs")
            .await
            .expect("cache");
        assert!(matches!(
            store.mark_deleting("r1").await.expect("mark"),
            Marked::Running
        ));
        assert!(store.cache_get("t", "k1").await.expect("get").is_some());
        // Rows cannot be dropped before the tombstone.
        assert!(store.forget_run("r1").await.is_err());
        sqlx::query("UPDATE runs SET state = 'Failed' WHERE id = 'r1'")
            .execute(store.pool())
            .await
            .expect("end");
        let Marked::Deleting(before) = store.mark_deleting("r1").await.expect("mark") else {
            panic!("an ended run is marked");
        };
        assert_eq!(before.state, "Failed");
        assert_eq!(store.run("r1").await.expect("row").state, rs::DELETING);
        assert!(store.cache_get("t", "k1").await.expect("get").is_none());
        // Marking again (a delete run a second time) is fine.
        assert!(matches!(
            store.mark_deleting("r1").await.expect("mark"),
            Marked::Deleting(_)
        ));
        store.forget_run("r1").await.expect("forget");
        assert!(store.run("r1").await.is_err());
        assert!(store.steps("r1").await.expect("steps").is_empty());
        assert!(store.run_ids().await.expect("ids").is_empty());
        // Forgetting a run that is gone is not an error.
        store.forget_run("r1").await.expect("forget again");
        let _ = std::fs::remove_dir_all(home);
    }
}
