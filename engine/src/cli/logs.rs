//! `sluice logs RUN [STEP] [-f] [--attempt N]`

use std::io::{BufRead, Seek};
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
                eprintln!("step '{step}' has not started yet");
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
    for a in &chosen {
        print_file(a, prefix)?;
    }
    if args.follow
        && let [one] = chosen.as_slice()
    {
        follow(store, &id, one).await?;
    }
    Ok(Outcome::Success)
}

fn print_file(a: &AttemptRow, prefix: bool) -> Result<u64, Error> {
    let path = log_path(a);
    let Ok(file) = std::fs::File::open(&path) else {
        return Ok(0);
    };
    let mut read = 0u64;
    output::text(|out| {
        for line in std::io::BufReader::new(&file).lines() {
            let line = line?;
            read += line.len() as u64 + 1;
            if prefix {
                writeln!(out, "[{} #{}] {line}", a.step, a.number)?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        Ok(())
    })
    .map_err(Error::output)?;
    Ok(read)
}

/// Prints lines as they are appended, until the attempt has ended and the file is drained.
async fn follow(store: &Store, run: &str, a: &AttemptRow) -> Result<(), Error> {
    let path = log_path(a);
    let mut offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    loop {
        let ended = store
            .attempts(run)
            .await?
            .iter()
            .find(|x| x.step == a.step && x.number == a.number)
            .is_none_or(|x| x.state != attempt::RUNNING);
        if let Ok(mut f) = std::fs::File::open(&path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len > offset {
                f.seek(std::io::SeekFrom::Start(offset))
                    .map_err(Error::output)?;
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut buf).map_err(Error::output)?;
                // Print whole lines only; keep a partial last line for the next round.
                let upto = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                output::text(|out| out.write_all(&buf[..upto])).map_err(Error::output)?;
                offset += upto as u64;
            }
        }
        if ended {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
