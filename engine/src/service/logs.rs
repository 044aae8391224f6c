//! A run's logs as `sluice logs` prints them and the server's API streams them: an attempt's
//! log (`output.log` in its folder, kept in the object store once it ended) holds one line per
//! line its program wrote: `TIME STREAM TEXT`, the stream being `out` or `err` (`out[2]` for
//! worker 2 of a gang). Text prints those lines as they are (marked with their step when every
//! step's are asked for); JSON prints one object per line. What is printed goes to a
//! [`Sink`]: standard output for the CLI, the response body for the API, so both print the
//! same bytes.

use std::collections::BTreeMap;
use std::io::Seek;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::{Error, Principal, Service};
use crate::run::state::{attempt, run as rs};
use crate::store::{AttemptRow, Store};

/// Which logs, and how.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// A run id, an unambiguous prefix of one, @latest or NAME@latest.
    pub run: String,
    /// One step; without it, every step's, each line marked with its step.
    pub step: Option<String>,
    /// Keep printing new lines until the step (or the run) has ended.
    pub follow: bool,
    /// Which attempt of `step` (default: the latest).
    pub attempt: Option<i64>,
    /// One JSON object per line instead of the lines as they are.
    pub json: bool,
}

/// Where log lines go. `write` gets whole lines; `note` is a remark for the reader (on
/// standard error in the CLI), not part of the log.
pub trait Sink: Send {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    fn note(&mut self, text: &str);
}

/// How often `-f` looks for new lines and attempts.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

fn log_path(a: &AttemptRow) -> PathBuf {
    PathBuf::from(&a.dir).join(sluice_runtime::contract::LOG_FILE)
}

/// A running attempt's log as it is now: its folder's file, or on Kubernetes its pod's log
/// (worker 0's, through the pod log API); None when there is none (yet, or any more).
async fn live(a: &AttemptRow) -> Option<Vec<u8>> {
    if crate::executor::kubernetes::is_handle(&a.dir) {
        if a.state != attempt::RUNNING {
            return None;
        }
        return crate::executor::kubernetes::live_log(&a.dir).await;
    }
    std::fs::read(log_path(a)).ok()
}

/// One line of a log, as JSON gives it.
#[derive(Debug, Serialize)]
struct Line<'a> {
    time: &'a str,
    step: &'a str,
    attempt: i64,
    worker: u32,
    stream: &'a str,
    line: &'a str,
}

/// Prints log lines of one attempt into a sink, in the chosen format.
struct Printer<'s> {
    sink: &'s mut dyn Sink,
    json: bool,
    /// Mark each text line with its step and attempt (every step's logs at once).
    mark: bool,
}

fn sink_failed(e: std::io::Error) -> Error {
    Error::io("cannot write the logs", e)
}

impl Printer<'_> {
    /// Prints the whole lines of `bytes` (a piece of attempt `a`'s log).
    fn print(&mut self, a: &AttemptRow, bytes: &[u8]) -> Result<(), Error> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut out: Vec<u8> = Vec::with_capacity(bytes.len() + 64);
        for raw in bytes.split_inclusive(|b| *b == b'\n') {
            let text = String::from_utf8_lossy(raw);
            let text = text.trim_end_matches(['\n', '\r']);
            if self.json {
                let (time, rest) = text.split_once(' ').unwrap_or(("", text));
                let (stream, line) = rest.split_once(' ').unwrap_or((rest, ""));
                let (stream, worker) = match stream.split_once('[') {
                    Some((s, w)) => (s, w.trim_end_matches(']').parse().unwrap_or(0)),
                    None => (stream, 0),
                };
                let v = Line {
                    time,
                    step: &a.step,
                    attempt: a.number,
                    worker,
                    stream,
                    line,
                };
                serde_json::to_writer(&mut out, &v)
                    .map_err(|e| sink_failed(std::io::Error::from(e)))?;
                out.push(b'\n');
            } else if self.mark {
                out.extend_from_slice(format!("[{} #{}] {text}\n", a.step, a.number).as_bytes());
            } else {
                out.extend_from_slice(text.as_bytes());
                out.push(b'\n');
            }
        }
        self.sink.write(&out).map_err(sink_failed)
    }
}

impl Service {
    /// Writes the logs `query` asks for into `sink`: a step's latest (or chosen) attempt, or
    /// every step's latest attempt; with `follow`, new lines as they are written until the
    /// step (or the run) has ended. Another team's run is not found.
    pub async fn stream_logs(
        &self,
        who: &Principal,
        query: &Query,
        sink: &mut dyn Sink,
    ) -> Result<(), Error> {
        let (id, _, attempts) = self.logs(who, &query.run, query.step.as_deref()).await?;
        let store = &self.store;
        let Some(step) = &query.step else {
            let mut printer = Printer {
                sink,
                json: query.json,
                mark: true,
            };
            return every_step(store, &id, query.follow, &mut printer).await;
        };
        let mine: Vec<&AttemptRow> = attempts.iter().filter(|a| &a.step == step).collect();
        if mine.is_empty() {
            if let Some(n) = query.attempt {
                return Err(Error::invalid(format!(
                    "step '{step}' has no attempt {n} yet"
                )));
            }
            if !query.follow {
                sink.note(&format!("step '{step}' has not started yet"));
                return Ok(());
            }
            let mut printer = Printer {
                sink,
                json: query.json,
                mark: false,
            };
            // Following a step that has not started: wait for its first attempt.
            return follow_step(store, &id, step, None, &mut printer).await;
        }
        let pick = match query.attempt {
            Some(n) => mine.into_iter().find(|a| a.number == n).ok_or_else(|| {
                Error::invalid(format!(
                    "step '{step}' has no attempt {n} (it has attempts 1 to {})",
                    attempts
                        .iter()
                        .filter(|a| &a.step == step)
                        .map(|a| a.number)
                        .max()
                        .unwrap_or(0)
                ))
            })?,
            None => mine
                .into_iter()
                .max_by_key(|a| a.number)
                .ok_or_else(|| Error::invalid(format!("step '{step}' has no attempts")))?,
        };
        let mut printer = Printer {
            sink,
            json: query.json,
            mark: false,
        };
        let shown = print_whole(store, &id, pick, &mut printer).await?;
        // An older attempt has ended: there is nothing more to follow in it.
        if query.follow
            && query
                .attempt
                .is_none_or(|n| pick.state == attempt::RUNNING && n == pick.number)
        {
            follow_step(store, &id, step, Some((pick.number, shown)), &mut printer).await?;
        }
        Ok(())
    }
}

/// Prints an attempt's log: from its folder, or, once that is gone, from the object store
/// the runtime's log was kept in. Returns how many bytes of the local file were printed.
async fn print_whole(
    store: &Store,
    run: &str,
    a: &AttemptRow,
    printer: &mut Printer<'_>,
) -> Result<u64, Error> {
    let (text, local) = match live(a).await {
        Some(bytes) => (bytes, true),
        None => (stored_log(store, run, a).await.unwrap_or_default(), false),
    };
    // Whole lines only from a file still being written; a partial last line waits.
    let upto = if local && a.state == attempt::RUNNING {
        text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
    } else {
        text.len()
    };
    printer.print(a, &text[..upto])?;
    Ok(if local { upto as u64 } else { 0 })
}

/// The copy of an ended attempt's log in the run's object store, if there is one (on
/// Kubernetes, else the lines its pods' runtimes recorded there).
async fn stored_log(store: &Store, run: &str, a: &AttemptRow) -> Option<Vec<u8>> {
    let row = store.run(run).await.ok()?;
    let objects = sluice_runtime::objects::Objects::open(&row.objects).ok()?;
    let key = format!(
        "{}/logs/output.log",
        crate::run::launch::object_key(&row.team, run, &a.step, a.number)
    );
    if let Some(kept) = objects.get_bytes(&key).await.ok().flatten() {
        return Some(kept);
    }
    // On Kubernetes the merged copy is written just after the attempt ended; until then (or if
    // that write failed) the runtimes' own records hold the same lines.
    crate::executor::kubernetes::recorded_log(&a.dir, &objects).await
}

/// Every step's latest attempt, oldest first; with `follow`, then every new line of every
/// attempt (a retry's or a later step's included) until the run has ended.
async fn every_step(
    store: &Store,
    run: &str,
    follow: bool,
    printer: &mut Printer<'_>,
) -> Result<(), Error> {
    let attempts = store.attempts(run).await?;
    let mut latest: BTreeMap<&str, &AttemptRow> = BTreeMap::new();
    for a in &attempts {
        let e = latest.entry(a.step.as_str()).or_insert(a);
        if a.number > e.number {
            *e = a;
        }
    }
    let mut chosen: Vec<&AttemptRow> = latest.into_values().collect();
    chosen.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    // Where each attempt's local log was printed up to; older attempts are not followed.
    let mut offsets: BTreeMap<(String, i64), u64> = BTreeMap::new();
    for a in &attempts {
        offsets.insert((a.step.clone(), a.number), u64::MAX);
    }
    for a in chosen {
        let shown = print_whole(store, run, a, printer).await?;
        // A running attempt's log is created at its first line: one not there yet is followed
        // from its start, not taken for a log moved away.
        let local_gone = a.state != attempt::RUNNING
            && (crate::executor::kubernetes::is_handle(&a.dir) || !log_path(a).is_file());
        offsets.insert(
            (a.step.clone(), a.number),
            if local_gone { u64::MAX } else { shown },
        );
    }
    if !follow {
        return Ok(());
    }
    let mut stall = Stall::default();
    loop {
        // Read the run's state before the logs: lines written before it ended are all read
        // in this round.
        let row = store.run(run).await?;
        let ended = row.state != rs::RUNNING || stall.check(store, &row, &mut *printer.sink).await;
        let mut attempts = store.attempts(run).await?;
        attempts.sort_by(|a, b| a.started_at.cmp(&b.started_at));
        for a in &attempts {
            let offset = offsets.entry((a.step.clone(), a.number)).or_insert(0);
            if *offset == u64::MAX {
                continue;
            }
            *offset = drain(*offset, a, printer).await?;
        }
        if ended {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// Prints a step's output as it is written, across its attempts (a retry's lines follow a
/// `--- attempt N ---` line), until the step has ended and its last log is drained.
/// `from`: the attempt already printed and how many bytes of it.
async fn follow_step(
    store: &Store,
    run: &str,
    step: &str,
    mut from: Option<(i64, u64)>,
    printer: &mut Printer<'_>,
) -> Result<(), Error> {
    let mut stall = Stall::default();
    loop {
        let steps = store.steps(run).await?;
        let row = store.run(run).await?;
        let finished = steps
            .iter()
            .find(|s| s.name == step)
            .is_none_or(|s| crate::run::state::step::is_terminal(s.state))
            || row.state != rs::RUNNING
            || stall.check(store, &row, &mut *printer.sink).await;
        let attempts = store.attempts(run).await?;
        let latest = attempts
            .iter()
            .filter(|a| a.step == step)
            .max_by_key(|a| a.number);
        if let Some(a) = latest {
            let offset = match from {
                Some((n, offset)) if n == a.number => offset,
                Some(_) => {
                    if !printer.json {
                        printer
                            .sink
                            .write(format!("--- attempt {} ---\n", a.number).as_bytes())
                            .map_err(sink_failed)?;
                    }
                    0
                }
                None => 0,
            };
            let ended = a.state != attempt::RUNNING;
            let offset = drain(offset, a, printer).await?;
            from = Some((a.number, offset));
            if ended && finished {
                return Ok(());
            }
        } else if finished {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// Whether following should stop because the run's engine is gone and nothing of it runs any
/// more (the run will not end until someone resumes it). Looked at every second: the ends of
/// the dead engine's attempts are collected first, as `status` does.
#[derive(Default)]
struct Stall {
    last: Option<std::time::Instant>,
}

impl Stall {
    async fn check(
        &mut self,
        store: &Store,
        row: &crate::store::RunRow,
        sink: &mut dyn Sink,
    ) -> bool {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return false;
        }
        self.last = Some(std::time::Instant::now());
        let Some(gone) = crate::run::engine::gone(row) else {
            return false;
        };
        let _ = crate::run::reap::collect(store, None, &crate::clock::SystemClock).await;
        let running = store
            .attempts(&row.id)
            .await
            .map(|a| a.iter().any(|a| a.state == attempt::RUNNING))
            .unwrap_or(true);
        if running {
            return false;
        }
        sink.note(&format!(
            "run {}: {gone} and none of its steps runs; `sluice resume {}` continues it",
            row.id, row.id
        ));
        true
    }
}

/// Prints the whole lines appended to `path` after `offset`; returns the new offset.
async fn drain(offset: u64, a: &AttemptRow, printer: &mut Printer<'_>) -> Result<u64, Error> {
    let buf = if crate::executor::kubernetes::is_handle(&a.dir) {
        let Some(all) = live(a).await else {
            return Ok(offset);
        };
        match all.get(usize::try_from(offset).unwrap_or(usize::MAX)..) {
            Some(rest) if !rest.is_empty() => rest.to_vec(),
            _ => return Ok(offset),
        }
    } else {
        let path = log_path(a);
        let Ok(mut f) = std::fs::File::open(&path) else {
            return Ok(offset);
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len <= offset {
            return Ok(offset);
        }
        f.seek(std::io::SeekFrom::Start(offset))
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut buf)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        buf
    };
    // Whole lines only; a partial last line waits for the next round.
    let upto = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    printer.print(a, &buf[..upto])?;
    Ok(offset + upto as u64)
}
