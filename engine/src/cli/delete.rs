//! `sluice delete RUN...`: removes ended runs with everything they left: their rows, their
//! attempts' folders, the detached engine's log, and their objects (outputs, logs,
//! checkpoints) in whichever store the run used; cache entries pointing at their outputs are
//! dropped. [`remove`] is shared with `sluice gc`.
//!
//! The order makes a delete safe to cut off (`store::housekeeping`): the run is marked
//! `Deleting` first (its cache entries dropped in the same transaction), then its files go,
//! then its rows. A delete that dies half-way leaves a `Deleting` run whose row still says
//! where its files are; `sluice delete` or `sluice gc` finishes it.

use std::path::Path;

use serde::Serialize;
use sluice_runtime::objects::{self, Objects, Usage};

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format};
use crate::run::launch::run_prefixes;
use crate::run::state::run as rs;
use crate::store::{Marked, RunRow, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Runs to delete: ids, unambiguous prefixes of ids, @latest or NAME@latest. Each must have
    /// ended.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<String>,
}

/// One deleted run, as `--output json` prints it (`{"id", "state": "Deleted"}` as the CLI
/// contract pins, and what it freed).
#[derive(Debug, Serialize)]
pub struct Deleted {
    pub id: String,
    pub state: &'static str,
    pub freed_bytes: u64,
}

/// `sluice delete RUN...`. Every RUN is resolved and checked first: an unknown, ambiguous or
/// running one is an error (exit 2) and nothing is deleted.
pub async fn run(home: &Home, args: &Args, format: Format) -> Result<Outcome, Error> {
    let first = args.runs.first().map_or("", String::as_str);
    let store = super::existing(home, first).await?;
    let mut ids: Vec<String> = Vec::new();
    for r in &args.runs {
        let id = store.resolve(r).await?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut running = Vec::new();
    for id in &ids {
        if store.run(id).await?.state == rs::RUNNING {
            running.push(id.as_str());
        }
    }
    if !running.is_empty() {
        return Err(still_running(&running));
    }
    let mut done = Vec::new();
    for id in &ids {
        let (row, freed) = match remove(&store, id).await? {
            Some(removed) => removed,
            None => return Err(still_running(&[id])),
        };
        if format == Format::Text {
            output::text(|out| {
                writeln!(
                    out,
                    "deleted {id} ({}, {}): {} freed",
                    row.name,
                    row.state,
                    size(freed.bytes)
                )
            })
            .map_err(Error::output)?;
        }
        done.push(Deleted {
            id: id.clone(),
            state: "Deleted",
            freed_bytes: freed.bytes,
        });
    }
    if format == Format::Json {
        // One RUN gives one object, several an array (in the order given).
        match done.as_slice() {
            [one] => output::json(one),
            many => output::json(&many),
        }
        .map_err(Error::output)?;
    }
    Ok(Outcome::Success)
}

fn still_running(ids: &[&str]) -> Error {
    let list = ids.join(" ");
    Error::Usage(format!(
        "{} still running: cancel first (sluice cancel {list}), then delete; nothing was deleted",
        if ids.len() == 1 {
            format!("run {list} is")
        } else {
            format!("runs {list} are")
        }
    ))
}

/// Removes one run: marks it `Deleting` (dropping its cache entries), removes its objects,
/// attempts' folders and engine log, then its rows. Returns its row as it was and what was
/// freed, or None when it is running (then nothing was changed). Running it again on a run
/// whose delete was cut off finishes the job.
pub async fn remove(store: &Store, id: &str) -> Result<Option<(RunRow, Usage)>, Error> {
    let row = match store.mark_deleting(id).await? {
        Marked::Deleting(row) => *row,
        Marked::Running => return Ok(None),
    };
    let freed = files(store, &row, true).await?;
    store.forget_run(id).await?;
    Ok(Some((row, freed)))
}

/// What a run's files take (objects, attempts' folders, engine log), removing them when
/// `delete`.
pub async fn files(store: &Store, row: &RunRow, delete: bool) -> Result<Usage, Error> {
    let mut usage = Usage::default();
    let objects = Objects::open(&row.objects).map_err(Error::objects)?;
    for prefix in run_prefixes(&row.team, &row.id) {
        usage += if delete {
            objects.delete_under(&prefix).await
        } else {
            objects.usage_under(&prefix).await
        }
        .map_err(Error::objects)?;
    }
    // Walking and removing folders blocks: on a blocking thread, so that a server removing
    // a thousand old runs (a schedule's `keepRuns`) does not stall its async workers.
    let paths = local_paths(&store.home, &row.id);
    let local = tokio::task::spawn_blocking(move || {
        let mut usage = Usage::default();
        for path in paths {
            usage += objects::tree_usage(&path)?;
            if delete {
                objects::remove_tree(&path)?;
            }
        }
        Ok(usage)
    })
    .await
    .map_err(|e| Error::Io {
        context: format!("removing the folders of run {}", row.id),
        source: std::io::Error::other(e),
    })?
    .map_err(Error::objects)?;
    usage += local;
    Ok(usage)
}

/// A run's files in the home: its attempts' folders and its detached engine's log.
pub fn local_paths(home: &Path, id: &str) -> [std::path::PathBuf; 2] {
    [
        home.join("attempts").join(id),
        home.join("engines").join(format!("{id}.log")),
    ]
}

/// Bytes for people: `512 B`, `1.5 KiB`, `95.4 MiB`, `2.0 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_du_h_does() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(100_000_000), "95.4 MiB");
    }
}
