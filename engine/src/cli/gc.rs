//! `sluice gc [--older-than 30d] [--keep-last N] [--dry-run]`: deletes old ended runs (as
//! `sluice delete` does) and what runs no longer in the store left behind.
//!
//! Which runs: every ended run whose end is older than `--older-than`, except the newest
//! `--keep-last` ended runs of each pipeline or sweep (runs with the same team and
//! `metadata.name`), which are kept however old. Runs whose delete was cut off (`Deleting`)
//! are always finished. Running runs are never touched.
//!
//! Orphans: folders under `attempts/`, logs under `engines/`, and objects under
//! `teams/TEAM/runs/RUN` and `teams/TEAM/checkpoints/RUN` of the home's own object folder
//! (`HOME/objects`), whose RUN is not in the store; and rows whose run is gone. Buckets and
//! folders given with `--objects` are not searched for orphans: other homes may share them.
//! The folders are listed before the store is read, so a run created meanwhile (its row is
//! committed before any of its files exist) is never taken for an orphan.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use sluice_runtime::objects::{self, Objects, Usage};

use super::delete::{files, remove, size};
use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format};
use crate::run::state::run as rs;
use crate::store::{RunRow, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Delete ended runs that ended longer ago than this (`30d`, `12h`; `0s` for all).
    #[arg(long, default_value = "30d", value_name = "DURATION")]
    pub older_than: String,
    /// Keep the newest N ended runs of each pipeline or sweep (same team and name), however
    /// old they are.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_last: usize,
    /// Print what would be removed and the space it would free; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `--output json`: what was removed (or would be, with `--dry-run`) and the bytes freed.
#[derive(Debug, Serialize)]
struct Report {
    dry_run: bool,
    runs: Vec<RunGone>,
    orphans: Vec<Orphan>,
    /// Rows of runs no longer in the store, dropped (none counted in a dry run).
    orphan_rows: u64,
    freed_bytes: u64,
}

#[derive(Debug, Serialize)]
struct RunGone {
    id: String,
    name: String,
    team: String,
    /// `Deleted`; in a dry run, the state it has now.
    state: String,
    ended_at: Option<String>,
    freed_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Orphan {
    /// The run id it belonged to.
    run: String,
    /// Where: `attempts/RUN`, `engines/RUN.log`, or an object prefix `teams/TEAM/runs/RUN`.
    path: String,
    freed_bytes: u64,
}

pub async fn run(home: &Home, args: &Args, format: Format) -> Result<Outcome, Error> {
    let age = crate::spec::units::parse_duration(&args.older_than)
        .map_err(|e| Error::Usage(format!("--older-than: {e}")))?;
    // No home: nothing to collect, and none is made.
    let Some(store) = Store::open_existing(&home.path).await? else {
        output::say(format_args!("nothing to collect: {}", home.missing()));
        return Ok(Outcome::Success);
    };
    let cutoff = crate::time::now_ms() - i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
    let chosen = choose(store.ended_runs().await?, cutoff, args.keep_last);
    let mut report = Report {
        dry_run: args.dry_run,
        runs: Vec::new(),
        orphans: Vec::new(),
        orphan_rows: 0,
        freed_bytes: 0,
    };
    for row in chosen {
        let was = row.state;
        let (state, freed) = if args.dry_run {
            (
                row.state.as_str().to_owned(),
                files(&store, &row, false).await?,
            )
        } else {
            match remove(&store, &row.id).await? {
                Some((_, freed)) => ("Deleted".to_owned(), freed),
                // Retried meanwhile: it runs again, so it stays.
                None => continue,
            }
        };
        report.freed_bytes += freed.bytes;
        let gone = RunGone {
            id: row.id,
            name: row.name,
            team: row.team,
            state,
            ended_at: row.ended_at,
            freed_bytes: freed.bytes,
        };
        if format == Format::Text {
            output::text(|out| {
                writeln!(
                    out,
                    "{} {} {} ({was}, ended {}): {}",
                    if args.dry_run {
                        "would delete"
                    } else {
                        "deleted"
                    },
                    gone.id,
                    gone.name,
                    gone.ended_at.as_deref().unwrap_or("never"),
                    size(gone.freed_bytes)
                )
            })
            .map_err(Error::output)?;
        }
        report.runs.push(gone);
    }
    for orphan in orphans(&store, args.dry_run).await? {
        report.freed_bytes += orphan.freed_bytes;
        if format == Format::Text {
            output::text(|out| {
                writeln!(
                    out,
                    "{} orphan {} (run {} is gone): {}",
                    if args.dry_run {
                        "would remove"
                    } else {
                        "removed"
                    },
                    orphan.path,
                    orphan.run,
                    size(orphan.freed_bytes)
                )
            })
            .map_err(Error::output)?;
        }
        report.orphans.push(orphan);
    }
    if !args.dry_run {
        report.orphan_rows = store.forget_orphan_rows().await?;
    }
    match format {
        Format::Json => output::json(&report),
        Format::Text => output::text(|out| {
            let (verb, freed) = if args.dry_run {
                ("would be removed", "would be freed")
            } else {
                ("removed", "freed")
            };
            writeln!(
                out,
                "gc{}: {} run(s) and {} orphan(s) {verb}, {} {freed}",
                if args.dry_run { " --dry-run" } else { "" },
                report.runs.len(),
                report.orphans.len(),
                size(report.freed_bytes)
            )
        }),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// The runs to delete among `ended` (newest first): those whose delete was cut off, and
/// those that ended before `cutoff` (unix ms) and are not among the newest `keep_last` of
/// their pipeline or sweep (team and name). Oldest first.
fn choose(ended: Vec<RunRow>, cutoff: i64, keep_last: usize) -> Vec<RunRow> {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut chosen = Vec::new();
    for row in ended {
        if row.state == rs::DELETING {
            chosen.push(row);
            continue;
        }
        let newer = seen
            .entry((row.team.clone(), row.name.clone()))
            .or_insert(0);
        *newer += 1;
        if *newer <= keep_last {
            continue;
        }
        // A run that cannot be dated is kept (and said), never taken for an old one.
        let end = crate::time::parse_ms(row.ended_at.as_deref().unwrap_or(&row.created_at));
        match end {
            Err(e) => tracing::warn!(run = %row.id, "not collected: {e}"),
            Ok(end) if end < cutoff => chosen.push(row),
            Ok(_) => {}
        }
    }
    chosen.reverse();
    chosen
}

/// Files of runs no longer in the store, removed (or only measured in a dry run).
async fn orphans(store: &Store, dry_run: bool) -> Result<Vec<Orphan>, Error> {
    let home = &store.home;
    // Listed first, the store read after (see the module's doc).
    let mut found: Vec<(String, String)> = Vec::new();
    for entry in names_in(&home.join("attempts"))? {
        found.push((entry.clone(), format!("attempts/{entry}")));
    }
    for entry in names_in(&home.join("engines"))? {
        if let Some(id) = entry.strip_suffix(".log") {
            found.push((id.to_owned(), format!("engines/{entry}")));
        }
    }
    let own = home.join("objects");
    let objects = if own.is_dir() {
        Some(Objects::open(&objects::default_url(home)).map_err(Error::objects)?)
    } else {
        None
    };
    let mut keyed: Vec<(String, String)> = Vec::new();
    if let Some(objects) = &objects {
        for team in objects
            .folders_under("teams")
            .await
            .map_err(Error::objects)?
        {
            for kind in ["runs", "checkpoints"] {
                let under = format!("teams/{team}/{kind}");
                for id in objects
                    .folders_under(&under)
                    .await
                    .map_err(Error::objects)?
                {
                    keyed.push((id.clone(), format!("{under}/{id}")));
                }
            }
        }
    }
    let ids = store.run_ids().await?;
    let mut out = Vec::new();
    for (run, path) in found {
        if ids.contains(&run) {
            continue;
        }
        let at = home.join(&path);
        let usage = objects::tree_usage(&at).map_err(Error::objects)?;
        if !dry_run {
            objects::remove_tree(&at).map_err(Error::objects)?;
        }
        out.push(orphan(run, path, usage));
    }
    if let Some(objects) = &objects {
        for (run, prefix) in keyed {
            if ids.contains(&run) {
                continue;
            }
            let usage = if dry_run {
                objects.usage_under(&prefix).await
            } else {
                objects.delete_under(&prefix).await
            }
            .map_err(Error::objects)?;
            out.push(orphan(run, prefix, usage));
        }
    }
    Ok(out)
}

fn orphan(run: String, path: String, usage: Usage) -> Orphan {
    Orphan {
        run,
        path,
        freed_bytes: usage.bytes,
    }
}

/// The names in a folder, sorted; a missing folder has none.
fn names_in(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                context: format!("cannot list {}", dir.display()),
                source,
            });
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, name: &str, state: rs::RunState, ended_ms: i64) -> RunRow {
        RunRow {
            id: id.into(),
            name: name.into(),
            team: "t".into(),
            state,
            reason: None,
            file: String::new(),
            workdir: String::new(),
            objects: String::new(),
            source: String::new(),
            document: None,
            params: String::new(),
            created_at: ts(ended_ms - 1000),
            ended_at: Some(ts(ended_ms)),
            cancel_requested: false,
            lease_owner: None,
            lease_until: None,
            lease_started: None,
            cluster: None,
            applied_version: None,
            schedule: None,
        }
    }

    fn ts(ms: i64) -> String {
        crate::time::format(chrono::DateTime::from_timestamp_millis(ms).expect("in range"))
    }

    fn ids(rows: &[RunRow]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn old_runs_go_except_the_newest_of_each_name_and_cut_off_deletes_always_finish() {
        let day = 86_400_000;
        let now = 100 * day;
        // Newest first, as the store lists them.
        let ended = vec![
            row("a4", "a", rs::RunState::Succeeded, now - day),
            row("b2", "b", rs::RunState::Failed, now - 2 * day),
            row("a3", "a", rs::RunState::Failed, now - 40 * day),
            row("a2", "a", rs::RunState::Succeeded, now - 50 * day),
            row("x", "a", rs::DELETING, now - 60 * day),
            row("b1", "b", rs::RunState::Succeeded, now - 60 * day),
            row("a1", "a", rs::RunState::Cancelled, now - 70 * day),
        ];
        let cutoff = now - 30 * day;
        assert_eq!(
            ids(&choose(ended.clone(), cutoff, 0)),
            ["a1", "b1", "x", "a2", "a3"]
        );
        // The newest two of each name stay, however old; the Deleting run does not count.
        assert_eq!(ids(&choose(ended.clone(), cutoff, 2)), ["a1", "x", "a2"]);
        // Everything ended, but the newest of each name.
        assert_eq!(
            ids(&choose(ended.clone(), now, 1)),
            ["a1", "b1", "x", "a2", "a3"]
        );
        assert_eq!(ids(&choose(ended, now - 1000 * day, 0)), ["x"]);
    }
}
