//! `sluice logs RUN [STEP] [-f] [--attempt N]`

use std::io::Seek;
use std::path::PathBuf;
use std::time::Duration;

use super::exit::{Error, Outcome};
use super::output;
use crate::run::state::attempt;
use crate::store::{AttemptRow, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id, or an unambiguous prefix of one.
    pub run: String,
    /// One step (`train`, `evaluate[1]`); without it, every step's latest attempt.
    pub step: Option<String>,
    /// Keep printing new lines until the attempt ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Which attempt (default: the latest).
    #[arg(long)]
    pub attempt: Option<i64>,
}

fn log_path(a: &AttemptRow) -> PathBuf {
    PathBuf::from(&a.dir).join(sluice_runtime::contract::LOG_FILE)
}

pub async fn run(store: &Store, args: &Args) -> Result<Outcome, Error> {
    let id = store.resolve(&args.run).await?;
    let attempts = store.attempts(&id).await?;
    let mut chosen: Vec<&AttemptRow> = Vec::new();
    match &args.step {
        Some(step) => {
            let mine: Vec<&AttemptRow> = attempts.iter().filter(|a| &a.step == step).collect();
            if mine.is_empty() {
                let steps = store.steps(&id).await?;
                if !steps.iter().any(|s| &s.name == step) {
                    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
                    let hint = crate::spec::diagnostic::nearest(step, names.iter().copied())
                        .map(|n| format!(" (did you mean '{n}'?)"))
                        .unwrap_or_default();
                    return Err(Error::Usage(format!("run {id} has no step '{step}'{hint}")));
                }
                if !args.follow {
                    eprintln!("step '{step}' has not started yet");
                    return Ok(Outcome::Success);
                }
                // Following a step that has not started: wait for its first attempt.
                follow_step(store, &id, step, None).await?;
                return Ok(Outcome::Success);
            }
            let pick = match args.attempt {
                Some(n) => mine
                    .into_iter()
                    .find(|a| a.number == n)
                    .ok_or_else(|| Error::Usage(format!("step '{step}' has no attempt {n}")))?,
                None => mine
                    .into_iter()
                    .max_by_key(|a| a.number)
                    .ok_or_else(|| Error::Usage(format!("step '{step}' has no attempts")))?,
            };
            chosen.push(pick);
        }
        None => {
            let mut latest: std::collections::BTreeMap<&str, &AttemptRow> = Default::default();
            for a in &attempts {
                let e = latest.entry(a.step.as_str()).or_insert(a);
                if a.number > e.number {
                    *e = a;
                }
            }
            chosen.extend(latest.values());
            chosen.sort_by(|a, b| a.started_at.cmp(&b.started_at));
        }
    }
    let prefix = args.step.is_none();
    let mut shown = 0;
    for a in &chosen {
        shown = print_file(store, &id, a, prefix).await?;
    }
    if args.follow
        && let (Some(step), [one]) = (&args.step, chosen.as_slice())
    {
        follow_step(store, &id, step, Some((one.number, shown))).await?;
    }
    Ok(Outcome::Success)
}

/// Prints an attempt's log: from its folder, or, once that is gone, from the object store
/// the runtime's log was kept in. Returns how many bytes of the local file were printed.
async fn print_file(store: &Store, run: &str, a: &AttemptRow, prefix: bool) -> Result<u64, Error> {
    let text = match std::fs::read(log_path(a)) {
        Ok(bytes) => bytes,
        Err(_) => stored_log(store, run, a).await.unwrap_or_default(),
    };
    let read = text.len() as u64;
    output::text(|out| {
        for line in text.split_inclusive(|b| *b == b'\n') {
            if prefix {
                write!(out, "[{} #{}] ", a.step, a.number)?;
            }
            out.write_all(line)?;
            if !line.ends_with(b"\n") {
                writeln!(out)?;
            }
        }
        Ok(())
    })
    .map_err(Error::output)?;
    Ok(read)
}

/// The copy of an ended attempt's log in the run's object store, if there is one.
async fn stored_log(store: &Store, run: &str, a: &AttemptRow) -> Option<Vec<u8>> {
    let row = store.run(run).await.ok()?;
    let objects = sluice_runtime::objects::Objects::open(&row.objects).ok()?;
    let key = format!(
        "{}/logs/output.log",
        crate::run::launch::object_key(&row.team, run, &a.step, a.number)
    );
    objects.get_bytes(&key).await.ok().flatten()
}

/// Prints a step's output as it is written, across its attempts (a retry's lines follow a
/// `--- attempt N ---` line), until the step has ended and its last log is drained.
/// `from`: the attempt already printed and how many bytes of it.
async fn follow_step(
    store: &Store,
    run: &str,
    step: &str,
    mut from: Option<(i64, u64)>,
) -> Result<(), Error> {
    loop {
        let steps = store.steps(run).await?;
        let finished = steps
            .iter()
            .find(|s| s.name == step)
            .is_none_or(|s| crate::run::state::step::is_terminal(&s.state));
        let attempts = store.attempts(run).await?;
        let latest = attempts
            .iter()
            .filter(|a| a.step == step)
            .max_by_key(|a| a.number);
        if let Some(a) = latest {
            let offset = match from {
                Some((n, offset)) if n == a.number => offset,
                Some(_) => {
                    output::text(|out| writeln!(out, "--- attempt {} ---", a.number))
                        .map_err(Error::output)?;
                    0
                }
                None => 0,
            };
            let ended = a.state != attempt::RUNNING;
            let offset = drain(&log_path(a), offset)?;
            from = Some((a.number, offset));
            if ended && finished {
                return Ok(());
            }
        } else if finished {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints the whole lines appended to `path` after `offset`; returns the new offset.
fn drain(path: &std::path::Path, offset: u64) -> Result<u64, Error> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Ok(offset);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len <= offset {
        return Ok(offset);
    }
    f.seek(std::io::SeekFrom::Start(offset))
        .map_err(Error::output)?;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut buf).map_err(Error::output)?;
    // Whole lines only; a partial last line waits for the next round.
    let upto = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    output::text(|out| out.write_all(&buf[..upto])).map_err(Error::output)?;
    Ok(offset + upto as u64)
}
