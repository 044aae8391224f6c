//! Applied documents (`sluice apply`) and the fires of schedules.
//!
//! Every version of a document is kept; `apply` adds one only when a document's text changed,
//! and `--prune` marks the newest version of the team's documents the paths no longer hold.
//! A fire is one tick of one schedule, decided once: its row and the run it starts are written
//! in one transaction, and the row's key (team, schedule, tick) refuses a second decision.

use super::read::Reader;
use super::runs::insert_run;
use super::{Error, Lock, NewRun, Store};

/// The run a fire starts, with its team's `maxQueued`.
pub type RunOfFire<'a> = (&'a NewRun, Option<u64>);

/// One version of an applied document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedRow {
    pub team: String,
    pub kind: String,
    pub name: String,
    pub version: i64,
    pub source: String,
    pub path: String,
    pub workdir: String,
    pub applied_at: String,
    pub applied_by: String,
    pub pruned_at: Option<String>,
}

/// A document to apply.
#[derive(Clone, Debug)]
pub struct NewDocument {
    pub kind: String,
    pub name: String,
    pub source: String,
    pub path: String,
    pub workdir: String,
}

/// What applying did to a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Created,
    Configured,
    Unchanged,
    Pruned,
}

impl Applied {
    pub fn as_str(self) -> &'static str {
        match self {
            Applied::Created => "created",
            Applied::Configured => "configured",
            Applied::Unchanged => "unchanged",
            Applied::Pruned => "pruned",
        }
    }
}

/// A decided tick of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FireRow {
    pub team: String,
    pub schedule: String,
    /// The scheduled instant (RFC 3339 UTC).
    pub tick: String,
    /// `started`, `skipped` or `missed`.
    pub outcome: String,
    pub run_id: Option<String>,
    pub reason: Option<String>,
    pub version: i64,
    pub recorded_at: String,
}

fn applied_row(row: &sqlx::any::AnyRow) -> Result<AppliedRow, Error> {
    let r = Reader::new(row, "an applied document");
    Ok(AppliedRow {
        team: r.get("team")?,
        kind: r.get("kind")?,
        name: r.get("name")?,
        version: r.get("version")?,
        source: r.get("source")?,
        path: r.get("path")?,
        workdir: r.get("workdir")?,
        applied_at: r.get("applied_at")?,
        applied_by: r.get("applied_by")?,
        pruned_at: r.get("pruned_at")?,
    })
}

fn fire_row(row: &sqlx::any::AnyRow) -> Result<FireRow, Error> {
    let r = Reader::new(row, "a schedule's fire");
    Ok(FireRow {
        team: r.get("team")?,
        schedule: r.get("schedule")?,
        tick: r.get("tick")?,
        outcome: r.get("outcome")?,
        run_id: r.get("run_id")?,
        reason: r.get("reason")?,
        version: r.get("version")?,
        recorded_at: r.get("recorded_at")?,
    })
}

/// The newest version of each document (pruned ones included), of `team` or every team.
const NEWEST: &str = "SELECT a.* FROM applied a WHERE ($1 IS NULL OR a.team = $2) \
    AND a.version = (SELECT MAX(b.version) FROM applied b WHERE b.team = a.team AND b.kind = a.kind AND b.name = a.name) \
    ORDER BY a.team, a.kind, a.name";

impl Store {
    /// Applies `docs` for `team` in one transaction: each document created, configured (a
    /// new version) or unchanged; with `prune`, the team's documents not among them pruned.
    /// With `dry_run` nothing is written. Returns what happened to each, by kind and name.
    pub async fn apply(
        &self,
        team: &str,
        docs: &[NewDocument],
        prune: bool,
        dry_run: bool,
        by: &str,
        at: &str,
    ) -> Result<Vec<(String, String, Applied)>, Error> {
        let mut tx = self.write(Lock::Room).await?;
        let rows = sqlx::query(NEWEST)
            .bind(Some(team))
            .bind(Some(team))
            .fetch_all(&mut *tx)
            .await?;
        let newest: Vec<AppliedRow> = rows.iter().map(applied_row).collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for d in docs {
            let current = newest.iter().find(|r| r.kind == d.kind && r.name == d.name);
            let what = match current {
                Some(r) if r.pruned_at.is_none() && r.source == d.source => Applied::Unchanged,
                Some(r) if r.pruned_at.is_none() => Applied::Configured,
                _ => Applied::Created,
            };
            if what != Applied::Unchanged {
                let version = current.map_or(1, |r| r.version + 1);
                sqlx::query(
                    "INSERT INTO applied (team, kind, name, version, source, path, workdir, applied_at, applied_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(team)
                .bind(&d.kind)
                .bind(&d.name)
                .bind(version)
                .bind(&d.source)
                .bind(&d.path)
                .bind(&d.workdir)
                .bind(at)
                .bind(by)
                .execute(&mut *tx)
                .await?;
            }
            out.push((d.kind.clone(), d.name.clone(), what));
        }
        if prune {
            for r in newest.iter().filter(|r| r.pruned_at.is_none()) {
                if docs.iter().any(|d| d.kind == r.kind && d.name == r.name) {
                    continue;
                }
                sqlx::query(
                    "UPDATE applied SET pruned_at = $1 WHERE team = $2 AND kind = $3 AND name = $4 AND version = $5",
                )
                .bind(at)
                .bind(team)
                .bind(&r.kind)
                .bind(&r.name)
                .bind(r.version)
                .execute(&mut *tx)
                .await?;
                out.push((r.kind.clone(), r.name.clone(), Applied::Pruned));
            }
        }
        if dry_run {
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
        Ok(out)
    }

    /// The applied documents in force (newest versions, not pruned), of `team` or all teams.
    pub async fn applied(&self, team: Option<&str>) -> Result<Vec<AppliedRow>, Error> {
        let rows = sqlx::query(NEWEST)
            .bind(team)
            .bind(team)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(applied_row)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|r| r.pruned_at.is_none())
            .collect())
    }

    /// The document of `team` named `name` in force, of one of `kinds` (the first of
    /// `kinds` that has one).
    pub async fn applied_named(
        &self,
        team: &str,
        kinds: &[&str],
        name: &str,
    ) -> Result<Option<AppliedRow>, Error> {
        for kind in kinds {
            let row = sqlx::query(
                "SELECT * FROM applied WHERE team = $1 AND kind = $2 AND name = $3 ORDER BY version DESC LIMIT 1",
            )
            .bind(team)
            .bind(kind)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = row.as_ref().map(applied_row).transpose()?
                && row.pruned_at.is_none()
            {
                return Ok(Some(row));
            }
        }
        Ok(None)
    }

    /// One version of a document, as it was applied.
    pub async fn applied_version(
        &self,
        team: &str,
        kind: &str,
        name: &str,
        version: i64,
    ) -> Result<Option<AppliedRow>, Error> {
        let row = sqlx::query(
            "SELECT * FROM applied WHERE team = $1 AND kind = $2 AND name = $3 AND version = $4",
        )
        .bind(team)
        .bind(kind)
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(applied_row).transpose()
    }

    /// What changes whenever a document of `kind` is applied or pruned: the counts of its
    /// versions and of its pruned versions. Versions are only added and `pruned_at` only set,
    /// so any apply or prune changes one of them; the schedule loop reads this each second and
    /// the list of versions only when it changed.
    pub async fn applied_generation(&self, kind: &str) -> Result<(i64, i64), Error> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS versions, COUNT(pruned_at) AS pruned FROM applied WHERE kind = $1",
        )
        .bind(kind)
        .fetch_one(&self.pool)
        .await?;
        let r = Reader::new(&row, "the applied documents' counts");
        Ok((r.get("versions")?, r.get("pruned")?))
    }

    /// The (team, name, version) of every document of `kind` in force, without their text:
    /// what the schedule loop reads each second to see what `apply` changed.
    pub async fn applied_versions(&self, kind: &str) -> Result<Vec<(String, String, i64)>, Error> {
        let rows = sqlx::query(
            "SELECT a.team, a.name, a.version, a.pruned_at FROM applied a WHERE a.kind = $1 \
             AND a.version = (SELECT MAX(b.version) FROM applied b WHERE b.team = a.team AND b.kind = a.kind AND b.name = a.name)",
        )
        .bind(kind)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let r = Reader::new(row, "an applied document");
            if r.get::<Option<String>>("pruned_at")?.is_none() {
                out.push((r.get("team")?, r.get("name")?, r.get("version")?));
            }
        }
        Ok(out)
    }

    /// The newest decided tick of every schedule that has one, by (team, schedule).
    pub async fn last_ticks(&self) -> Result<Vec<(String, String, String)>, Error> {
        let rows = sqlx::query(
            "SELECT team, schedule, MAX(tick) AS tick FROM fires GROUP BY team, schedule",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, "a schedule's last fire");
                Ok((r.get("team")?, r.get("schedule")?, r.get("tick")?))
            })
            .collect()
    }

    /// How many ended runs each schedule has, by (team, schedule), for `keepRuns`.
    pub async fn schedules_ended(&self) -> Result<Vec<(String, String, i64)>, Error> {
        let rows = sqlx::query(
            "SELECT team, schedule, COUNT(*) AS n FROM runs WHERE schedule IS NOT NULL AND state IN ('Succeeded', 'Failed', 'Cancelled') GROUP BY team, schedule",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, "a schedule's ended runs");
                Ok((r.get("team")?, r.get("schedule")?, r.get("n")?))
            })
            .collect()
    }

    /// Decides one tick: records `fire` and, when it starts one, `run` (refused, with
    /// nothing written, past `max_queued`), in one transaction. False when the tick was
    /// decided already (by this server before a crash, or by another).
    pub async fn fire(&self, fire: &FireRow, run: Option<RunOfFire<'_>>) -> Result<bool, Error> {
        let done = self.fires_at_once(&[(fire, run)]).await?;
        Ok(done.first().copied().unwrap_or(false))
    }

    /// Decides several ticks in one transaction, as [`Store::fire`] decides one: the schedule
    /// loop records a minute's thousand fires without taking the write lock a thousand times.
    /// For each, whether it was written (false: decided already). All or nothing: one run
    /// refused past its `max_queued` writes none of them.
    pub async fn fires_at_once(
        &self,
        fires: &[(&FireRow, Option<RunOfFire<'_>>)],
    ) -> Result<Vec<bool>, Error> {
        let mut tx = self.write(Lock::Room).await?;
        let mut written = Vec::with_capacity(fires.len());
        for (fire, run) in fires {
            let done = sqlx::query(
                "INSERT INTO fires (team, schedule, tick, outcome, run_id, reason, version, recorded_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (team, schedule, tick) DO NOTHING",
            )
            .bind(&fire.team)
            .bind(&fire.schedule)
            .bind(&fire.tick)
            .bind(&fire.outcome)
            .bind(&fire.run_id)
            .bind(&fire.reason)
            .bind(fire.version)
            .bind(&fire.recorded_at)
            .execute(&mut *tx)
            .await?;
            let done = done.rows_affected() > 0;
            if done && let Some((run, max_queued)) = run {
                insert_run(&mut tx, run, *max_queued, &self.at()).await?;
                super::feed::record(
                    &mut tx,
                    self.dialect,
                    super::feed::Kind::Created,
                    &run.id,
                    self.at().ms,
                )
                .await?;
            }
            written.push(done);
        }
        tx.commit().await?;
        Ok(written)
    }

    /// The fires of a schedule, oldest first.
    pub async fn fires(&self, team: &str, schedule: &str) -> Result<Vec<FireRow>, Error> {
        let rows =
            sqlx::query("SELECT * FROM fires WHERE team = $1 AND schedule = $2 ORDER BY tick")
                .bind(team)
                .bind(schedule)
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(fire_row).collect()
    }

    /// The newest decided tick of a schedule.
    pub async fn last_fire(&self, team: &str, schedule: &str) -> Result<Option<FireRow>, Error> {
        let row = sqlx::query(
            "SELECT * FROM fires WHERE team = $1 AND schedule = $2 ORDER BY tick DESC LIMIT 1",
        )
        .bind(team)
        .bind(schedule)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(fire_row).transpose()
    }

    /// The ids of a schedule's runs still running, oldest first.
    pub async fn schedule_running(&self, team: &str, schedule: &str) -> Result<Vec<String>, Error> {
        let rows = sqlx::query(
            "SELECT id FROM runs WHERE team = $1 AND schedule = $2 AND state = 'Running' ORDER BY created_at, id",
        )
        .bind(team)
        .bind(schedule)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Reader::new(r, "a scheduled run").get("id"))
            .collect()
    }

    /// The ids of a schedule's ended runs, newest first (for `keepRuns`).
    pub async fn schedule_ended(&self, team: &str, schedule: &str) -> Result<Vec<String>, Error> {
        let rows = sqlx::query(
            "SELECT id FROM runs WHERE team = $1 AND schedule = $2 AND state IN ('Succeeded', 'Failed', 'Cancelled') ORDER BY created_at DESC, id DESC",
        )
        .bind(team)
        .bind(schedule)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Reader::new(r, "a scheduled run").get("id"))
            .collect()
    }
}
