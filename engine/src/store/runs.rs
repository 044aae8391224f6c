//! The operations on runs: submission, lookup, the engine's commits and attempt starts on
//! the machine's pool, the lease, cancel, retry and the cache.

use super::read::{Reader, column};
use super::rows::{
    AttemptRow, Capacity, Change, Event, EventKind, NewRun, RunRow, START_ATTEMPT, StepRow, apply,
    attempt_row, insert_events, insert_step, run_row, started, step_row, update_step,
};
use super::{Error, Holder, Lock, Store};
use crate::run::state::StepState;

/// Which runs [`Store::runs_matching`] returns: each filter that is set must hold.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunQuery<'a> {
    pub team: Option<&'a str>,
    pub state: Option<&'a str>,
    /// The pipeline's (or sweep's) name.
    pub name: Option<&'a str>,
    /// Created at or after this instant (RFC 3339 UTC, as the store writes times).
    pub since: Option<&'a str>,
    /// Started by this schedule.
    pub schedule: Option<&'a str>,
    /// At most this many, newest first.
    pub limit: i64,
    /// After skipping this many (the next page).
    pub offset: i64,
}

impl Store {
    /// Records a new run and its steps. With `max_queued`, refuses it (`Error::QueueFull`,
    /// nothing written) when the team's Pending and Queued steps across its running runs, plus
    /// this run's, would exceed it; counted in the same transaction, so that two submissions
    /// at once cannot both squeeze under the limit.
    pub async fn create_run(&self, run: &NewRun, max_queued: Option<u64>) -> Result<(), Error> {
        let mut tx = self.write(Lock::Room).await?;
        insert_run(&mut tx, run, max_queued, &self.at()).await?;
        super::feed::record(
            &mut tx,
            self.dialect,
            super::feed::Kind::Created,
            &run.id,
            self.at().ms,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The one run `reference` names: its id, an unambiguous prefix of it, `@latest` (the
    /// newest run) or `NAME@latest` (the newest run of that pipeline or sweep).
    /// The newest run of `team` (of the pipeline or sweep `name`, unless empty).
    pub async fn latest_in_team(&self, team: &str, name: &str) -> Result<Option<String>, Error> {
        let row = sqlx::query(
            "SELECT id FROM runs WHERE team = $1 AND ($2 = '' OR name = $3) ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .bind(team)
        .bind(name)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Reader::new(&r, "a run id").at(0)).transpose()
    }

    /// The ids of `team`'s runs that are `prefix` or start with it: the exact one first if
    /// there is one, else at most three in order.
    pub async fn ids_in_team(&self, team: &str, prefix: &str) -> Result<Vec<String>, Error> {
        let exact = sqlx::query("SELECT id FROM runs WHERE team = $1 AND id = $2")
            .bind(team)
            .bind(prefix)
            .fetch_optional(&self.pool)
            .await?;
        if let Some(r) = exact {
            return Ok(vec![Reader::new(&r, "a run id").at(0)?]);
        }
        let pattern = format!("{}%", prefix.replace(['%', '_'], ""));
        let rows =
            sqlx::query("SELECT id FROM runs WHERE team = $1 AND id LIKE $2 ORDER BY id LIMIT 3")
                .bind(team)
                .bind(pattern)
                .fetch_all(&self.pool)
                .await?;
        column(&rows, "a run id")
    }

    pub async fn resolve(&self, reference: &str) -> Result<String, Error> {
        if let Some(name) = reference.strip_suffix("@latest") {
            let row = sqlx::query(
                "SELECT id FROM runs WHERE ($1 = '' OR name = $2) ORDER BY created_at DESC, id DESC LIMIT 1",
            )
            .bind(name)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(r) = row {
                return Reader::new(&r, "a run id").at(0);
            }
            if name.is_empty() {
                return Err(Error::NotFound(format!(
                    "no runs yet in {}",
                    self.home.display()
                )));
            }
            let rows = sqlx::query("SELECT DISTINCT name FROM runs")
                .fetch_all(&self.pool)
                .await?;
            let names: Vec<String> = column(&rows, "a run name")?;
            let hint = crate::spec::diagnostic::nearest(name, names.iter().map(String::as_str))
                .map(|n| format!(" (did you mean '{n}@latest'?)"))
                .unwrap_or_default();
            return Err(Error::NotFound(format!(
                "no run of a pipeline or sweep named '{name}' in {}{hint}",
                self.home.display()
            )));
        }
        let prefix = reference;
        let pattern = format!("{}%", prefix.replace(['%', '_'], ""));
        let rows = sqlx::query("SELECT id FROM runs WHERE id LIKE $1 ORDER BY id LIMIT 3")
            .bind(pattern)
            .fetch_all(&self.pool)
            .await?;
        let ids: Vec<String> = column(&rows, "a run id")?;
        if let Some(exact) = ids.iter().find(|i| *i == prefix) {
            return Ok(exact.clone());
        }
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(Error::NotFound(format!(
                "no run '{prefix}' in {}{}",
                self.home.display(),
                if prefix.contains('@') {
                    " (name a run by its id, a prefix of it, @latest or NAME@latest)"
                } else {
                    ""
                }
            ))),
            many => Err(Error::NotFound(format!(
                "'{prefix}' is ambiguous: it starts {} and more; give more of the id",
                many.join(", ")
            ))),
        }
    }

    pub async fn run(&self, id: &str) -> Result<RunRow, Error> {
        let sql = format!(
            "SELECT r.*, {} AS lease_live FROM runs r {} WHERE r.id = $1",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => run_row(&row),
            None => Err(Error::NotFound(format!("no run '{id}'"))),
        }
    }

    pub async fn runs(
        &self,
        team: Option<&str>,
        state: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RunRow>, Error> {
        self.runs_matching(&RunQuery {
            team,
            state,
            limit,
            ..RunQuery::default()
        })
        .await
    }

    /// The runs `q` selects, newest first.
    pub async fn runs_matching(&self, q: &RunQuery<'_>) -> Result<Vec<RunRow>, Error> {
        let sql = format!(
            "SELECT r.*, {} AS lease_live FROM runs r {} \
             WHERE ($1 IS NULL OR r.team = $2) AND ($3 IS NULL OR r.state = $4) \
             AND ($5 IS NULL OR r.name = $6) AND ($7 IS NULL OR r.created_at >= $8) \
             AND ($9 IS NULL OR r.schedule = $10) \
             ORDER BY r.created_at DESC, r.id DESC LIMIT $11 OFFSET $12",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(q.team)
            .bind(q.team)
            .bind(q.state)
            .bind(q.state)
            .bind(q.name)
            .bind(q.name)
            .bind(q.since)
            .bind(q.since)
            .bind(q.schedule)
            .bind(q.schedule)
            .bind(q.limit)
            .bind(q.offset)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(run_row).collect()
    }

    pub async fn steps(&self, run: &str) -> Result<Vec<StepRow>, Error> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(steps_in_order(self.dialect())))
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(step_row).collect()
    }

    pub async fn attempts(&self, run: &str) -> Result<Vec<AttemptRow>, Error> {
        let rows = sqlx::query("SELECT * FROM attempts WHERE run_id = $1 ORDER BY step, number")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(attempt_row).collect()
    }

    /// A page of run `run`'s steps in the order they were created: at most `limit`, after the
    /// first `offset` (what `status` of a run of 100,000 steps reads instead of all of them).
    pub async fn steps_page(
        &self,
        run: &str,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<StepRow>, Error> {
        let sql = format!("{} LIMIT $2 OFFSET $3", steps_in_order(self.dialect()));
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run)
            .bind(limit)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(step_row).collect()
    }

    /// How many of run `run`'s steps are in each state (states with none left out).
    pub async fn step_counts(&self, run: &str) -> Result<Vec<(StepState, i64)>, Error> {
        let rows = sqlx::query(
            "SELECT state, COUNT(*) AS n FROM steps WHERE run_id = $1 GROUP BY state ORDER BY state",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, format!("the steps of run {run}"));
                Ok((r.state("state")?, r.get("n")?))
            })
            .collect()
    }

    /// The attempts of run `run`'s steps named in `steps`, by step and number.
    pub async fn attempts_of(&self, run: &str, steps: &[&str]) -> Result<Vec<AttemptRow>, Error> {
        let mut out = Vec::new();
        // Chunks keep a statement under SQLite's limit of bound parameters.
        for chunk in steps.chunks(500) {
            let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT * FROM attempts WHERE run_id = $1 AND step IN ({}) ORDER BY step, number",
                marks.join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(run);
            for step in chunk {
                q = q.bind(*step);
            }
            for row in q.fetch_all(&self.pool).await? {
                out.push(attempt_row(&row)?);
            }
        }
        Ok(out)
    }

    /// Commits `change` in one transaction.
    pub async fn commit(&self, run: &str, change: Change<'_>) -> Result<(), Error> {
        let mut tx = self.write(Lock::Run(run)).await?;
        let freed = apply(&mut tx, self.dialect, run, &change, &self.at()).await?;
        tx.commit().await?;
        if freed {
            self.feed.note(super::feed::Kind::Freed, run);
        }
        Ok(())
    }

    /// Commits `before`, then starts an attempt if the machine's pool has room for it: reserves
    /// its CPU, memory and `gpus` GPUs (the lowest free indices), records it `Running` and its
    /// step `Running`, all in one transaction. Returns the GPU indices it holds, or None when
    /// there is no room now (`before` is committed all the same).
    pub async fn start_attempt(
        &self,
        run: &str,
        step: &StepRow,
        attempt: &AttemptRow,
        capacity: &Capacity,
        gpus: u32,
        before: Change<'_>,
    ) -> Result<Option<Vec<u32>>, Error> {
        let mut tx = self.write(Lock::Room).await?;
        // Changes decided earlier (attempt ends) go first: they may free the room this needs.
        let freed = apply(&mut tx, self.dialect, run, &before, &self.at()).await?;
        let note = |store: &Store| {
            if freed {
                store.feed.note(super::feed::Kind::Freed, run);
            }
        };
        // GPUs: the lowest free indices, all or none.
        let mut assigned = Vec::new();
        if gpus > 0 {
            let rows = sqlx::query(
                "SELECT gpus FROM attempts WHERE state = 'Running' AND gpus IS NOT NULL AND job IS NULL",
            )
            .fetch_all(&mut *tx)
            .await?;
            let mut held = std::collections::BTreeSet::new();
            for list in column::<String>(&rows, "the GPUs of a running attempt")? {
                for g in list.split(',') {
                    held.insert(g.parse::<u32>().map_err(|_| {
                        Error::Corrupt(format!("a running attempt holds GPU '{g}' (of '{list}')"))
                    })?);
                }
            }
            assigned = capacity
                .gpus
                .iter()
                .copied()
                .filter(|g| !held.contains(g))
                .take(gpus as usize)
                .collect();
            if assigned.len() < gpus as usize {
                tx.commit().await?;
                note(self);
                return Ok(None);
            }
        }
        let gpu_list = (!assigned.is_empty()).then(|| {
            assigned
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        });
        // Reserve and record in one statement: the row is inserted only if the pool has room
        // (what running attempts hold, plus this one, within capacity), or if nothing runs: a
        // step larger than the whole machine still runs, alone, rather than never.
        let inserted = sqlx::query(START_ATTEMPT)
            .bind(run)
            .bind(&attempt.step)
            .bind(attempt.number)
            .bind(attempt.state.as_str())
            .bind(&attempt.dir)
            .bind(attempt.millicpu)
            .bind(attempt.memory)
            .bind(&gpu_list)
            .bind(attempt.pid)
            .bind(attempt.exit_code)
            .bind(attempt.signal)
            .bind(&attempt.reason)
            .bind(&attempt.started_at)
            .bind(&attempt.ended_at)
            .bind(attempt.millicpu)
            .bind(capacity.millicpu)
            .bind(attempt.memory)
            .bind(capacity.memory)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if inserted == 0 {
            tx.commit().await?;
            note(self);
            return Ok(None);
        }
        started(&mut tx, run, step, attempt.number, &self.at()).await?;
        tx.commit().await?;
        note(self);
        Ok(Some(assigned))
    }

    /// Takes the run's lease for `me` (its `until` set) unless another engine holds it and
    /// `alive` says that engine still runs (`force`: take it whatever). Returns the holder
    /// when refused.
    pub async fn take_lease(
        &self,
        run: &str,
        me: &Holder,
        alive: impl FnOnce(&Holder) -> bool,
        force: bool,
    ) -> Result<Result<(), Holder>, Error> {
        let mut tx = self.write(Lock::Run(run)).await?;
        let sql = format!(
            "SELECT r.lease_owner, {}, r.lease_started FROM runs r {} WHERE r.id = $1",
            super::LEASE_UNTIL,
            super::JOIN_ENGINE
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no run '{run}'")))?;
        let r = Reader::new(&row, format!("the lease of run {run}"));
        let holder = Holder::of(r.at(0)?, r.at(1)?, r.at(2)?);
        if let Some(h) = holder
            && h.owner != me.owner
            && !force
            && alive(&h)
        {
            return Ok(Err(h));
        }
        sqlx::query(
            "UPDATE runs SET lease_owner = $1, lease_until = $2, lease_started = $3 WHERE id = $4",
        )
        .bind(&me.owner)
        .bind(me.until)
        .bind(me.started)
        .bind(run)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Lets run `run`'s lease go (if `owner` holds it), through the fenced write path.
    pub async fn release_lease(&self, run: &str, owner: &str) -> Result<(), Error> {
        let mut tx = self.write(Lock::Run(run)).await?;
        sqlx::query("UPDATE runs SET lease_owner = NULL, lease_until = NULL, lease_started = NULL WHERE id = $1 AND lease_owner = $2")
            .bind(run)
            .bind(owner)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Asks the run's engine to cancel it: recorded, and said to the engine at once (in this
    /// process) or by the store's change feed (another process).
    pub async fn request_cancel(&self, run: &str) -> Result<(), Error> {
        let mut tx = self.write(Lock::Run(run)).await?;
        sqlx::query("UPDATE runs SET cancel_requested = 1 WHERE id = $1")
            .bind(run)
            .execute(&mut *tx)
            .await?;
        super::feed::record(
            &mut tx,
            self.dialect,
            super::feed::Kind::Cancel,
            run,
            self.at().ms,
        )
        .await?;
        tx.commit().await?;
        self.feed.note(super::feed::Kind::Cancel, run);
        Ok(())
    }

    /// Whether a cancel was asked for, and the lease, re-read (other processes write them).
    pub async fn cancel_requested(&self, run: &str) -> Result<bool, Error> {
        let row = sqlx::query("SELECT cancel_requested FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no run '{run}'")))?;
        Reader::new(&row, format!("run {run}")).flag("cancel_requested")
    }

    /// Sets an ended run running again (`sluice retry`), clearing its end and cancel flag.
    pub async fn reopen(&self, run: &str, steps: &[StepRow]) -> Result<(), Error> {
        let mut tx = self.write(Lock::Run(run)).await?;
        // A run being deleted (`sluice delete`) is not reopened: its files are going.
        let reopened = sqlx::query("UPDATE runs SET state = 'Running', reason = NULL, ended_at = NULL, cancel_requested = 0 WHERE id = $1 AND state <> 'Deleting'")
            .bind(run)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if reopened == 0 {
            return Err(Error::NotFound(format!("run {run} is being deleted")));
        }
        for s in steps {
            update_step(&mut tx, run, s).await?;
        }
        insert_events(
            &mut tx,
            run,
            &[Event {
                step: None,
                kind: EventKind::Retried,
                detail: None,
            }],
            &self.at().text,
        )
        .await?;
        super::feed::record(
            &mut tx,
            self.dialect,
            super::feed::Kind::Reopened,
            run,
            self.at().ms,
        )
        .await?;
        tx.commit().await?;
        self.feed.note(super::feed::Kind::Reopened, run);
        Ok(())
    }

    pub async fn cache_get(&self, team: &str, key: &str) -> Result<Option<String>, Error> {
        let row = sqlx::query("SELECT outputs FROM cache WHERE team = $1 AND key = $2")
            .bind(team)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Reader::new(&r, format!("cache entry {key} of team {team}")).at(0))
            .transpose()
    }

    pub async fn cache_put(
        &self,
        team: &str,
        key: &str,
        run: &str,
        step: &str,
        outputs: &str,
    ) -> Result<(), Error> {
        // Through a write transaction, so that a fenced leader's engine cannot add entries.
        let mut tx = self.write(Lock::Run(run)).await?;
        sqlx::query("INSERT INTO cache (team, key, run_id, step, outputs, created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (team, key) DO UPDATE SET run_id = excluded.run_id, step = excluded.step, outputs = excluded.outputs, created_at = excluded.created_at")
            .bind(team)
            .bind(key)
            .bind(run)
            .bind(step)
            .bind(outputs)
            .bind(self.at().text)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets a cache entry (its outputs are gone), through the fenced write path.
    pub async fn delete_cache(&self, team: &str, key: &str) -> Result<(), Error> {
        let mut tx = self.write(Lock::Room).await?;
        sqlx::query("DELETE FROM cache WHERE team = $1 AND key = $2")
            .bind(team)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A run's steps in the order they were created (the order of the file).
fn steps_in_order(dialect: super::Dialect) -> String {
    format!(
        "SELECT * FROM steps WHERE run_id = $1 ORDER BY {}",
        dialect.insertion_order()
    )
}

/// Records a new run with its steps inside `tx`, refusing it (nothing written) if it would
/// take its team past `max_queued` queued steps.
pub(super) async fn insert_run(
    tx: &mut super::Tx,
    run: &NewRun,
    max_queued: Option<u64>,
    at: &super::At,
) -> Result<(), Error> {
    if let Some(limit) = max_queued {
        let queued: i64 = sqlx::query(
            "SELECT COUNT(*) FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.team = $1 AND r.state = 'Running' AND s.state IN ('Pending', 'Queued')",
        )
        .bind(&run.team)
        .fetch_one(&mut **tx)
        .await
        .map_err(Error::from)
        .and_then(|r| Reader::new(&r, format!("team {}'s queue", run.team)).at(0))?;
        let queued = u64::try_from(queued).map_err(|_| {
            Error::Corrupt(format!("team {}'s queue counts {queued} steps", run.team))
        })?;
        let adding = run.steps.len() as u64;
        if queued + adding > limit {
            return Err(Error::QueueFull {
                team: run.team.clone(),
                queued,
                adding,
                limit,
            });
        }
    }
    sqlx::query("INSERT INTO runs (id, name, team, state, file, workdir, objects, source, document, params, created_at, cluster, applied_version, schedule) VALUES ($1, $2, $3, 'Running', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)")
        .bind(&run.id)
        .bind(&run.name)
        .bind(&run.team)
        .bind(&run.file)
        .bind(&run.workdir)
        .bind(&run.objects)
        .bind(&run.source)
        .bind(&run.document)
        .bind(&run.params)
        .bind(&at.text)
        .bind(&run.cluster)
        .bind(run.applied_version)
        .bind(&run.schedule)
        .execute(&mut **tx)
        .await?;
    for s in &run.steps {
        insert_step(tx, &run.id, s).await?;
    }
    insert_events(
        tx,
        &run.id,
        &[Event {
            step: None,
            kind: EventKind::Created,
            detail: None,
        }],
        &at.text,
    )
    .await?;
    Ok(())
}
