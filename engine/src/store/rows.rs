//! Rows and the queries over them.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{Error, Store};

/// A run as submitted: its identity, its source and its step instances.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: String,
    pub name: String,
    pub team: String,
    pub file: String,
    pub workdir: String,
    pub objects: String,
    pub source: String,
    pub document: Option<String>,
    pub params: String,
    /// The Cluster file given with `--cluster` (`{"file", "source"}`), if any.
    pub cluster: Option<String>,
    pub steps: Vec<StepRow>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub name: String,
    pub team: String,
    pub state: String,
    pub reason: Option<String>,
    pub file: String,
    pub workdir: String,
    pub objects: String,
    pub source: String,
    pub document: Option<String>,
    pub params: String,
    pub created_at: String,
    pub ended_at: Option<String>,
    pub cancel_requested: bool,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    /// When the lease holder's process started (clock ticks since boot), if known.
    pub lease_started: Option<i64>,
    /// The Cluster file given with `--cluster` (`{"file", "source"}`), if any.
    pub cluster: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct StepRow {
    pub name: String,
    pub step: String,
    pub item: Option<String>,
    pub state: String,
    pub reason: Option<String>,
    pub attempts: i64,
    pub retries_used: i64,
    pub not_before: Option<i64>,
    pub metrics: Option<String>,
    pub outputs: Option<String>,
    pub cache_key: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct AttemptRow {
    pub step: String,
    pub number: i64,
    pub state: String,
    pub dir: String,
    pub millicpu: i64,
    pub memory: i64,
    /// GPU indices of this machine held while Running, comma-separated.
    pub gpus: Option<String>,
    pub pid: Option<i64>,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub reason: Option<String>,
    /// The last value of each metric the attempt reported, a JSON object.
    pub metrics: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Cluster mode: what it asked of the scheduler (JSON) and each worker's node (JSON array).
    pub job: Option<String>,
    pub nodes: Option<String>,
}

/// The engine holding a run's lease: its name (`PID@HOST`), until when (unix ms), and when its
/// process started (clock ticks since boot; to tell it from a later process with its PID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub until: i64,
    pub started: Option<i64>,
}

impl Holder {
    /// The holder the lease columns name, if an engine took the lease and has not let go.
    pub(super) fn of(
        owner: Option<String>,
        until: Option<i64>,
        started: Option<i64>,
    ) -> Option<Holder> {
        Some(Holder {
            owner: owner?,
            until: until?,
            started,
        })
    }
}

impl RunRow {
    /// The engine holding the lease, if one took it and has not let go.
    pub fn holder(&self) -> Option<Holder> {
        Holder::of(
            self.lease_owner.clone(),
            self.lease_until,
            self.lease_started,
        )
    }
}

/// An event for the run's append-only log.
#[derive(Clone, Debug)]
pub struct Event {
    pub step: Option<String>,
    pub kind: String,
    pub detail: Option<String>,
}

pub(super) fn run_row(r: &SqliteRow) -> RunRow {
    RunRow {
        id: r.get("id"),
        name: r.get("name"),
        team: r.get("team"),
        state: r.get("state"),
        reason: r.get("reason"),
        file: r.get("file"),
        workdir: r.get("workdir"),
        objects: r.get("objects"),
        source: r.get("source"),
        document: r.get("document"),
        params: r.get("params"),
        created_at: r.get("created_at"),
        ended_at: r.get("ended_at"),
        cancel_requested: r.get::<i64, _>("cancel_requested") != 0,
        lease_owner: r.get("lease_owner"),
        lease_until: r.get("lease_until"),
        lease_started: r.get("lease_started"),
        cluster: r.get("cluster"),
    }
}

fn step_row(r: &SqliteRow) -> StepRow {
    StepRow {
        name: r.get("name"),
        step: r.get("step"),
        item: r.get("item"),
        state: r.get("state"),
        reason: r.get("reason"),
        attempts: r.get("attempts"),
        retries_used: r.get("retries_used"),
        not_before: r.get("not_before"),
        metrics: r.get("metrics"),
        outputs: r.get("outputs"),
        cache_key: r.get("cache_key"),
        started_at: r.get("started_at"),
        ended_at: r.get("ended_at"),
    }
}

pub(super) fn attempt_row(r: &SqliteRow) -> AttemptRow {
    AttemptRow {
        step: r.get("step"),
        number: r.get("number"),
        state: r.get("state"),
        dir: r.get("dir"),
        millicpu: r.get("millicpu"),
        memory: r.get("memory"),
        gpus: r.get("gpus"),
        pid: r.get("pid"),
        exit_code: r.get("exit_code"),
        signal: r.get("signal"),
        reason: r.get("reason"),
        metrics: r.get("metrics"),
        started_at: r.get("started_at"),
        ended_at: r.get("ended_at"),
        job: r.get("job"),
        nodes: r.get("nodes"),
    }
}

const INSERT_STEP: &str = "INSERT INTO steps (run_id, name, step, item, state, reason, attempts, retries_used, not_before, metrics, outputs, cache_key, started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const UPDATE_STEP: &str = "UPDATE steps SET item = ?, state = ?, reason = ?, attempts = ?, retries_used = ?, not_before = ?, metrics = ?, outputs = ?, cache_key = ?, started_at = ?, ended_at = ? WHERE run_id = ? AND name = ?";
const START_ATTEMPT: &str = "INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, pid, exit_code, signal, reason, started_at, ended_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM (SELECT COALESCE(SUM(millicpu), 0) AS cpu, COALESCE(SUM(memory), 0) AS mem FROM attempts WHERE state = 'Running' AND job IS NULL) AS used WHERE (used.cpu + ? <= ? AND used.mem + ? <= ?) OR (used.cpu = 0 AND used.mem = 0)";
const UPDATE_ATTEMPT: &str = "UPDATE attempts SET state = ?, pid = ?, exit_code = ?, signal = ?, reason = ?, metrics = ?, ended_at = ? WHERE run_id = ? AND step = ? AND number = ?";
/// As `UPDATE_ATTEMPT`, only while the row still says `Running` (another process's record of
/// an end never overwrites the one the run's engine made).
const UPDATE_RUNNING_ATTEMPT: &str = "UPDATE attempts SET state = ?, pid = ?, exit_code = ?, signal = ?, reason = ?, metrics = ?, ended_at = ? WHERE run_id = ? AND step = ? AND number = ? AND state = 'Running'";

pub(super) type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;

pub(super) async fn insert_step(tx: &mut Tx<'_>, run: &str, s: &StepRow) -> Result<(), Error> {
    sqlx::query(INSERT_STEP)
        .bind(run)
        .bind(&s.name)
        .bind(&s.step)
        .bind(&s.item)
        .bind(&s.state)
        .bind(&s.reason)
        .bind(s.attempts)
        .bind(s.retries_used)
        .bind(s.not_before)
        .bind(&s.metrics)
        .bind(&s.outputs)
        .bind(&s.cache_key)
        .bind(&s.started_at)
        .bind(&s.ended_at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn update_step(tx: &mut Tx<'_>, run: &str, s: &StepRow) -> Result<(), Error> {
    sqlx::query(UPDATE_STEP)
        .bind(&s.item)
        .bind(&s.state)
        .bind(&s.reason)
        .bind(s.attempts)
        .bind(s.retries_used)
        .bind(s.not_before)
        .bind(&s.metrics)
        .bind(&s.outputs)
        .bind(&s.cache_key)
        .bind(&s.started_at)
        .bind(&s.ended_at)
        .bind(run)
        .bind(&s.name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn update_attempt(
    tx: &mut Tx<'_>,
    run: &str,
    a: &AttemptRow,
) -> Result<(), Error> {
    write_attempt(tx, run, a, UPDATE_ATTEMPT).await.map(|_| ())
}

/// Records an attempt's end unless its row no longer says `Running`; how many rows changed.
pub(super) async fn end_running_attempt(
    tx: &mut Tx<'_>,
    run: &str,
    a: &AttemptRow,
) -> Result<u64, Error> {
    write_attempt(tx, run, a, UPDATE_RUNNING_ATTEMPT).await
}

async fn write_attempt(
    tx: &mut Tx<'_>,
    run: &str,
    a: &AttemptRow,
    sql: &'static str,
) -> Result<u64, Error> {
    Ok(sqlx::query(sql)
        .bind(&a.state)
        .bind(a.pid)
        .bind(a.exit_code)
        .bind(a.signal)
        .bind(&a.reason)
        .bind(&a.metrics)
        .bind(&a.ended_at)
        .bind(run)
        .bind(&a.step)
        .bind(a.number)
        .execute(&mut **tx)
        .await?
        .rows_affected())
}

pub(super) async fn insert_events(
    tx: &mut Tx<'_>,
    run: &str,
    events: &[Event],
) -> Result<(), Error> {
    if events.is_empty() {
        return Ok(());
    }
    let at = crate::time::now_rfc3339();
    // One statement for them all (the state store is a round trip per statement); chunks keep
    // it under SQLite's limit of bound parameters.
    for chunk in events.chunks(1000) {
        let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO events (run_id, at, step, kind, detail) ",
        );
        q.push_values(chunk, |mut row, e| {
            row.push_bind(run)
                .push_bind(&at)
                .push_bind(&e.step)
                .push_bind(&e.kind)
                .push_bind(&e.detail);
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// A started attempt's step row (now `Running`) and its `attempt-started` event.
pub(super) async fn started(
    tx: &mut Tx<'_>,
    run: &str,
    step: &StepRow,
    number: i64,
) -> Result<(), Error> {
    update_step(tx, run, step).await?;
    insert_events(
        tx,
        run,
        &[Event {
            step: Some(step.name.clone()),
            kind: "attempt-started".into(),
            detail: Some(number.to_string()),
        }],
    )
    .await
}

/// Writes `change` inside a transaction.
pub(super) async fn apply(tx: &mut Tx<'_>, run: &str, change: &Change<'_>) -> Result<(), Error> {
    for s in &change.new_steps {
        insert_step(tx, run, s).await?;
    }
    for s in &change.steps {
        update_step(tx, run, s).await?;
    }
    for a in &change.attempts {
        update_attempt(tx, run, a).await?;
    }
    if let Some((state, reason)) = &change.run_end {
        sqlx::query("UPDATE runs SET state = ?, reason = ?, ended_at = ? WHERE id = ?")
            .bind(state)
            .bind(reason)
            .bind(crate::time::now_rfc3339())
            .bind(run)
            .execute(&mut **tx)
            .await?;
    }
    insert_events(tx, run, &change.events).await
}

/// What the machine's pool holds: shared by every `sluice` on the home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub millicpu: i64,
    pub memory: i64,
    /// GPU indices (found with nvidia-smi).
    pub gpus: Vec<u32>,
}

/// A change to commit at once: steps, attempts, the run's end, events.
#[derive(Debug, Default)]
pub struct Change<'a> {
    pub steps: Vec<&'a StepRow>,
    pub new_steps: Vec<&'a StepRow>,
    pub attempts: Vec<&'a AttemptRow>,
    /// (state, reason): the run ended.
    pub run_end: Option<(String, Option<String>)>,
    pub events: Vec<Event>,
}

impl Store {
    /// Records a new run and its steps. With `max_queued`, refuses it (`Error::QueueFull`,
    /// nothing written) when the team's Pending and Queued steps across its running runs, plus
    /// this run's, would exceed it; counted in the same transaction, so that two submissions
    /// at once cannot both squeeze under the limit.
    pub async fn create_run(&self, run: &NewRun, max_queued: Option<u64>) -> Result<(), Error> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        if let Some(limit) = max_queued {
            let queued: i64 = sqlx::query(
                "SELECT COUNT(*) FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.team = ? AND r.state = 'Running' AND s.state IN ('Pending', 'Queued')",
            )
            .bind(&run.team)
            .fetch_one(&mut *tx)
            .await?
            .get(0);
            let queued = u64::try_from(queued).unwrap_or(0);
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
        sqlx::query("INSERT INTO runs (id, name, team, state, file, workdir, objects, source, document, params, created_at, cluster) VALUES (?, ?, ?, 'Running', ?, ?, ?, ?, ?, ?, ?, ?)")
            .bind(&run.id)
            .bind(&run.name)
            .bind(&run.team)
            .bind(&run.file)
            .bind(&run.workdir)
            .bind(&run.objects)
            .bind(&run.source)
            .bind(&run.document)
            .bind(&run.params)
            .bind(crate::time::now_rfc3339())
            .bind(&run.cluster)
            .execute(&mut *tx)
            .await?;
        for s in &run.steps {
            insert_step(&mut tx, &run.id, s).await?;
        }
        insert_events(
            &mut tx,
            &run.id,
            &[Event {
                step: None,
                kind: "created".into(),
                detail: None,
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The one run `reference` names: its id, an unambiguous prefix of it, `@latest` (the
    /// newest run) or `NAME@latest` (the newest run of that pipeline or sweep).
    pub async fn resolve(&self, reference: &str) -> Result<String, Error> {
        if let Some(name) = reference.strip_suffix("@latest") {
            let row = sqlx::query(
                "SELECT id FROM runs WHERE (? = '' OR name = ?) ORDER BY created_at DESC, id DESC LIMIT 1",
            )
            .bind(name)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(r) = row {
                return Ok(r.get(0));
            }
            if name.is_empty() {
                return Err(Error::NotFound(format!(
                    "no runs yet in {}",
                    self.home.display()
                )));
            }
            let names: Vec<String> = sqlx::query("SELECT DISTINCT name FROM runs")
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
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
        let ids: Vec<String> =
            sqlx::query("SELECT id FROM runs WHERE id LIKE ? ORDER BY id LIMIT 3")
                .bind(pattern)
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
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
        let row = sqlx::query("SELECT * FROM runs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(run_row)
            .ok_or_else(|| Error::NotFound(format!("no run '{id}'")))
    }

    pub async fn runs(
        &self,
        team: Option<&str>,
        state: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RunRow>, Error> {
        let rows = sqlx::query("SELECT * FROM runs WHERE (? IS NULL OR team = ?) AND (? IS NULL OR state = ?) ORDER BY created_at DESC, id DESC LIMIT ?")
            .bind(team)
            .bind(team)
            .bind(state)
            .bind(state)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(run_row).collect())
    }

    pub async fn steps(&self, run: &str) -> Result<Vec<StepRow>, Error> {
        let rows = sqlx::query("SELECT * FROM steps WHERE run_id = ? ORDER BY rowid")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(step_row).collect())
    }

    pub async fn attempts(&self, run: &str) -> Result<Vec<AttemptRow>, Error> {
        let rows = sqlx::query("SELECT * FROM attempts WHERE run_id = ? ORDER BY step, number")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(attempt_row).collect())
    }

    /// Commits `change` in one transaction.
    pub async fn commit(&self, run: &str, change: Change<'_>) -> Result<(), Error> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        apply(&mut tx, run, &change).await?;
        tx.commit().await?;
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        // Changes decided earlier (attempt ends) go first: they may free the room this needs.
        apply(&mut tx, run, &before).await?;
        // GPUs: the lowest free indices, all or none.
        let mut assigned = Vec::new();
        if gpus > 0 {
            let held: std::collections::BTreeSet<u32> = sqlx::query(
                "SELECT gpus FROM attempts WHERE state = 'Running' AND gpus IS NOT NULL AND job IS NULL",
            )
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .flat_map(|r| {
                r.get::<String, _>(0)
                    .split(',')
                    .filter_map(|g| g.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
            assigned = capacity
                .gpus
                .iter()
                .copied()
                .filter(|g| !held.contains(g))
                .take(gpus as usize)
                .collect();
            if assigned.len() < gpus as usize {
                tx.commit().await?;
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
            .bind(&attempt.state)
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
            return Ok(None);
        }
        started(&mut tx, run, step, attempt.number).await?;
        tx.commit().await?;
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row =
            sqlx::query("SELECT lease_owner, lease_until, lease_started FROM runs WHERE id = ?")
                .bind(run)
                .fetch_one(&mut *tx)
                .await?;
        let holder = Holder::of(row.get(0), row.get(1), row.get(2));
        if let Some(h) = holder
            && h.owner != me.owner
            && !force
            && alive(&h)
        {
            return Ok(Err(h));
        }
        sqlx::query(
            "UPDATE runs SET lease_owner = ?, lease_until = ?, lease_started = ? WHERE id = ?",
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

    pub async fn release_lease(&self, run: &str, owner: &str) -> Result<(), Error> {
        sqlx::query("UPDATE runs SET lease_owner = NULL, lease_until = NULL, lease_started = NULL WHERE id = ? AND lease_owner = ?")
            .bind(run)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn request_cancel(&self, run: &str) -> Result<(), Error> {
        sqlx::query("UPDATE runs SET cancel_requested = 1 WHERE id = ?")
            .bind(run)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Whether a cancel was asked for, and the lease, re-read (other processes write them).
    pub async fn cancel_requested(&self, run: &str) -> Result<bool, Error> {
        let row = sqlx::query("SELECT cancel_requested FROM runs WHERE id = ?")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.get::<i64, _>(0) != 0)
    }

    /// Sets an ended run running again (`sluice retry`), clearing its end and cancel flag.
    pub async fn reopen(&self, run: &str, steps: &[StepRow]) -> Result<(), Error> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        // A run being deleted (`sluice delete`) is not reopened: its files are going.
        let reopened = sqlx::query("UPDATE runs SET state = 'Running', reason = NULL, ended_at = NULL, cancel_requested = 0 WHERE id = ? AND state <> 'Deleting'")
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
                kind: "retried".into(),
                detail: None,
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn cache_get(&self, team: &str, key: &str) -> Result<Option<String>, Error> {
        let row = sqlx::query("SELECT outputs FROM cache WHERE team = ? AND key = ?")
            .bind(team)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn cache_put(
        &self,
        team: &str,
        key: &str,
        run: &str,
        step: &str,
        outputs: &str,
    ) -> Result<(), Error> {
        sqlx::query("INSERT INTO cache (team, key, run_id, step, outputs, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (team, key) DO UPDATE SET run_id = excluded.run_id, step = excluded.step, outputs = excluded.outputs, created_at = excluded.created_at")
            .bind(team)
            .bind(key)
            .bind(run)
            .bind(step)
            .bind(outputs)
            .bind(crate::time::now_rfc3339())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn delete_cache(&self, team: &str, key: &str) -> Result<(), Error> {
        sqlx::query("DELETE FROM cache WHERE team = ? AND key = ?")
            .bind(team)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
