//! Rows and the queries over them.

use sqlx::any::AnyRow;

use super::read::Reader;
use super::{Error, Tx};
pub use crate::run::state::EventKind;
use crate::run::state::{AttemptState, RunState, StepState};

/// A run as submitted: its identity, its source and its step instances.
#[derive(Clone, Debug, Default)]
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
    /// The version of the applied document it runs (`sluice submit NAME`, a schedule).
    pub applied_version: Option<i64>,
    /// The schedule that started it.
    pub schedule: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub name: String,
    pub team: String,
    pub state: RunState,
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
    /// The version of the applied document it runs, and the schedule that started it.
    pub applied_version: Option<i64>,
    pub schedule: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct StepRow {
    pub name: String,
    pub step: String,
    pub item: Option<String>,
    pub state: StepState,
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
    pub state: AttemptState,
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
    pub kind: EventKind,
    pub detail: Option<String>,
}

pub(super) fn run_row(r: &AnyRow) -> Result<RunRow, Error> {
    let id: String = Reader::new(r, "a run").get("id")?;
    let r = Reader::new(r, format!("run {id}"));
    Ok(RunRow {
        id: r.get("id")?,
        name: r.get("name")?,
        team: r.get("team")?,
        state: r.state("state")?,
        reason: r.get("reason")?,
        file: r.get("file")?,
        workdir: r.get("workdir")?,
        objects: r.get("objects")?,
        source: r.get("source")?,
        document: r.get("document")?,
        params: r.get("params")?,
        created_at: r.get("created_at")?,
        ended_at: r.get("ended_at")?,
        cancel_requested: r.flag("cancel_requested")?,
        lease_owner: r.get("lease_owner")?,
        // The later of the run's own lease and its engine process's, when the query joined
        // it (`LEASE_UNTIL`).
        lease_until: match r.optional::<Option<i64>>("lease_live")? {
            Some(live) => live,
            None => r.get("lease_until")?,
        },
        lease_started: r.get("lease_started")?,
        cluster: r.get("cluster")?,
        applied_version: r.get("applied_version")?,
        schedule: r.get("schedule")?,
    })
}

pub(super) fn step_row(r: &AnyRow) -> Result<StepRow, Error> {
    let run: String = Reader::new(r, "a step").get("run_id")?;
    let name: String = Reader::new(r, "a step").get("name")?;
    let r = Reader::new(r, format!("step {name} of run {run}"));
    Ok(StepRow {
        name: r.get("name")?,
        step: r.get("step")?,
        item: r.get("item")?,
        state: r.state("state")?,
        reason: r.get("reason")?,
        attempts: r.get("attempts")?,
        retries_used: r.get("retries_used")?,
        not_before: r.get("not_before")?,
        metrics: r.get("metrics")?,
        outputs: r.get("outputs")?,
        cache_key: r.get("cache_key")?,
        started_at: r.get("started_at")?,
        ended_at: r.get("ended_at")?,
    })
}

pub(super) fn attempt_row(r: &AnyRow) -> Result<AttemptRow, Error> {
    let run: String = Reader::new(r, "an attempt").get("run_id")?;
    let step: String = Reader::new(r, "an attempt").get("step")?;
    let r = Reader::new(r, format!("an attempt of step {step} of run {run}"));
    Ok(AttemptRow {
        step: r.get("step")?,
        number: r.get("number")?,
        state: r.state("state")?,
        dir: r.get("dir")?,
        millicpu: r.get("millicpu")?,
        memory: r.get("memory")?,
        gpus: r.get("gpus")?,
        pid: r.get("pid")?,
        exit_code: r.get("exit_code")?,
        signal: r.get("signal")?,
        reason: r.get("reason")?,
        metrics: r.get("metrics")?,
        started_at: r.get("started_at")?,
        ended_at: r.get("ended_at")?,
        job: r.get("job")?,
        nodes: r.get("nodes")?,
    })
}

const INSERT_STEP: &str = "INSERT INTO steps (run_id, name, step, item, state, reason, attempts, retries_used, not_before, metrics, outputs, cache_key, started_at, ended_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
const UPDATE_STEP: &str = "UPDATE steps SET item = $1, state = $2, reason = $3, attempts = $4, retries_used = $5, not_before = $6, metrics = $7, outputs = $8, cache_key = $9, started_at = $10, ended_at = $11 WHERE run_id = $12 AND name = $13";
pub(super) const START_ATTEMPT: &str = "INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, pid, exit_code, signal, reason, started_at, ended_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 FROM (SELECT COALESCE(SUM(millicpu), 0) AS cpu, COALESCE(SUM(memory), 0) AS mem FROM attempts WHERE state = 'Running' AND job IS NULL) AS used WHERE (used.cpu + $15 <= $16 AND used.mem + $17 <= $18) OR (used.cpu = 0 AND used.mem = 0)";
const UPDATE_ATTEMPT: &str = "UPDATE attempts SET state = $1, pid = $2, exit_code = $3, signal = $4, reason = $5, metrics = $6, ended_at = $7 WHERE run_id = $8 AND step = $9 AND number = $10";
/// As `UPDATE_ATTEMPT`, only while the row still says `Running` (another process's record of
/// an end never overwrites the one the run's engine made).
const UPDATE_RUNNING_ATTEMPT: &str = "UPDATE attempts SET state = $1, pid = $2, exit_code = $3, signal = $4, reason = $5, metrics = $6, ended_at = $7 WHERE run_id = $8 AND step = $9 AND number = $10 AND state = 'Running'";

pub(super) async fn insert_step(tx: &mut Tx, run: &str, s: &StepRow) -> Result<(), Error> {
    sqlx::query(INSERT_STEP)
        .bind(run)
        .bind(&s.name)
        .bind(&s.step)
        .bind(&s.item)
        .bind(s.state.as_str())
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

pub(super) async fn update_step(tx: &mut Tx, run: &str, s: &StepRow) -> Result<(), Error> {
    sqlx::query(UPDATE_STEP)
        .bind(&s.item)
        .bind(s.state.as_str())
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

pub(super) async fn update_attempt(tx: &mut Tx, run: &str, a: &AttemptRow) -> Result<(), Error> {
    write_attempt(tx, run, a, UPDATE_ATTEMPT).await.map(|_| ())
}

/// Records an attempt's end unless its row no longer says `Running`; how many rows changed.
pub(super) async fn end_running_attempt(
    tx: &mut Tx,
    run: &str,
    a: &AttemptRow,
) -> Result<u64, Error> {
    write_attempt(tx, run, a, UPDATE_RUNNING_ATTEMPT).await
}

async fn write_attempt(
    tx: &mut Tx,
    run: &str,
    a: &AttemptRow,
    sql: &'static str,
) -> Result<u64, Error> {
    Ok(sqlx::query(sql)
        .bind(a.state.as_str())
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

/// Inserts `events` of run `run`, stamped `at` (the caller's clock).
pub(super) async fn insert_events(
    tx: &mut Tx,
    run: &str,
    events: &[Event],
    at: &str,
) -> Result<(), Error> {
    if events.is_empty() {
        return Ok(());
    }
    // One statement for them all (the state store is a round trip per statement); chunks keep
    // it under SQLite's limit of bound parameters.
    for chunk in events.chunks(1000) {
        let sql = format!(
            "INSERT INTO events (run_id, at, step, kind, detail) VALUES {}",
            placeholders(chunk.len(), 5)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for e in chunk {
            q = q
                .bind(run)
                .bind(at)
                .bind(e.step.clone())
                .bind(e.kind.as_str())
                .bind(e.detail.clone());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// `($1, $2, ...), ($n+1, ...)`: the VALUES of a multi-row insert of `rows` rows of `columns`
/// columns, in the `$N` form both dialects read (sqlx's `QueryBuilder` writes `?` for `Any`).
pub(super) fn placeholders(rows: usize, columns: usize) -> String {
    let mut out = String::new();
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..columns {
            if c > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("${}", r * columns + c + 1));
        }
        out.push(')');
    }
    out
}

/// A started attempt's step row (now `Running`) and its `attempt-started` event.
pub(super) async fn started(
    tx: &mut Tx,
    run: &str,
    step: &StepRow,
    number: i64,
    at: &super::At,
) -> Result<(), Error> {
    update_step(tx, run, step).await?;
    insert_events(
        tx,
        run,
        &[Event {
            step: Some(step.name.clone()),
            kind: EventKind::AttemptStarted,
            detail: Some(number.to_string()),
        }],
        &at.text,
    )
    .await
}

/// Writes `change` inside a transaction.
/// Applies `change` inside `tx`; true when it ends an attempt (its room is free), which is
/// recorded in the outbox too (`feed`), for the caller to say in this process once committed.
pub(super) async fn apply(
    tx: &mut Tx,
    dialect: super::Dialect,
    run: &str,
    change: &Change<'_>,
    at: &super::At,
) -> Result<bool, Error> {
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
        sqlx::query("UPDATE runs SET state = $1, reason = $2, ended_at = $3 WHERE id = $4")
            .bind(state.as_str())
            .bind(reason)
            .bind(&at.text)
            .bind(run)
            .execute(&mut **tx)
            .await?;
    }
    insert_events(tx, run, &change.events, &at.text).await?;
    let freed = change
        .attempts
        .iter()
        .any(|a| a.state != crate::run::state::attempt::RUNNING);
    if freed {
        super::feed::record(tx, dialect, super::feed::Kind::Freed, run, at.ms).await?;
    }
    Ok(freed)
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
    pub run_end: Option<(RunState, Option<String>)>,
    pub events: Vec<Event>,
}
