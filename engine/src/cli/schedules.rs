//! `sluice apply`, `sluice submit NAME`, `sluice schedules` and `sluice schedule next`:
//! applied documents and schedules. On a home they work on its store (schedules fire only
//! under `sluice server`); with `--server` they go through its API.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format, say};
use crate::service::schedules::{ScheduleView, next_fires};
use crate::service::{Principal, Service, apply};

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Files and folders (searched for *.yaml and *.yml, as lint does).
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Delete the team's applied documents these paths no longer hold.
    #[arg(long)]
    pub prune: bool,
    /// Say what would be done, and do nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The applied pipeline or sweep.
    pub name: String,
    /// Set a parameter (repeatable).
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Print the run's id and return; without it, follow the run to its end.
    #[arg(long)]
    pub detach: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum ScheduleCommand {
    /// The next fire times of a schedule (a file, or an applied one's name with --server).
    Next(NextArgs),
}

#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub command: ScheduleCommand,
}

#[derive(Debug, clap::Args)]
pub struct NextArgs {
    /// A file holding a Schedule, or the name of an applied one.
    pub schedule: String,
    /// How many fires.
    #[arg(long, default_value_t = 5)]
    pub count: usize,
    /// Fires strictly after this RFC 3339 time (default: now).
    #[arg(long, value_name = "RFC3339")]
    pub from: Option<String>,
}

/// The files of `paths`, read.
fn read_files(paths: &[PathBuf]) -> Result<Vec<apply::File>, Error> {
    let mut found = Vec::new();
    let mut diags = Vec::new();
    for p in paths {
        super::lint::collect(p, &mut found, &mut diags);
    }
    if !diags.is_empty() {
        output::diagnostics(&diags);
        return Err(Error::Usage("cannot read what to apply".into()));
    }
    found
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f)
                .map_err(|e| Error::Usage(format!("cannot read {}: {e}", f.display())))?;
            let workdir = std::fs::canonicalize(f)
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or_else(|| PathBuf::from("."));
            Ok(apply::File {
                path: f.display().to_string(),
                text,
                workdir: workdir.display().to_string(),
            })
        })
        .collect()
}

fn print_applied(
    lines: &[(String, String, String)],
    dry_run: bool,
    format: Format,
) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&json!({
            "applied": lines.iter().map(|(k, n, r)| json!({"kind": k, "name": n, "result": r})).collect::<Vec<_>>(),
            "dry_run": dry_run,
        })),
        Format::Text => output::text(|out| {
            let tail = if dry_run { " (dry run)" } else { "" };
            for (k, n, r) in lines {
                writeln!(out, "{k}/{n} {r}{tail}")?;
            }
            Ok(())
        }),
    }
    .map_err(Error::output)
}

pub async fn apply(home: &Home, args: &ApplyArgs, format: Format) -> Result<Outcome, Error> {
    let files = read_files(&args.paths)?;
    if let Some(c) = super::remote::server() {
        let body = json!({
            "files": files.iter().map(|f| json!({"path": f.path, "text": f.text, "workdir": f.workdir})).collect::<Vec<_>>(),
            "prune": args.prune,
            "dry_run": args.dry_run,
        });
        let v = c
            .json(Method::POST, "/api/v1/apply", &[], Some(&body))
            .await?;
        let lines: Vec<(String, String, String)> = v["applied"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|l| {
                        let s = |k: &str| l[k].as_str().unwrap_or("").to_owned();
                        (s("kind"), s("name"), s("result"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        print_applied(&lines, args.dry_run, format)?;
        return Ok(Outcome::Success);
    }
    let store = crate::store::Store::open(&home.path).await?;
    let service = Service::new(store, crate::clock::system());
    let lines = service
        .apply(
            &Principal::local(),
            "local",
            &files,
            args.prune,
            args.dry_run,
            None,
        )
        .await?;
    let lines: Vec<(String, String, String)> = lines
        .into_iter()
        .map(|l| (l.kind, l.name, l.what.as_str().to_owned()))
        .collect();
    print_applied(&lines, args.dry_run, format)?;
    Ok(Outcome::Success)
}

pub async fn schedules(home: &Home, format: Format) -> Result<Outcome, Error> {
    if let Some(c) = super::remote::server() {
        let q = [(
            "format",
            if format == Format::Json {
                "json"
            } else {
                "text"
            }
            .to_owned(),
        )];
        let body = c.text(Method::GET, "/api/v1/schedules", &q).await?;
        return print_body(&body, format);
    }
    let views = match crate::store::Store::open_existing(&home.path).await? {
        Some(store) => {
            Service::new(store, crate::clock::system())
                .schedules(&Principal::local())
                .await?
        }
        None => Vec::new(),
    };
    match format {
        Format::Json => output::json(&views),
        Format::Text => output::text(|out| write_list(out, &views)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

fn print_body(body: &str, format: Format) -> Result<Outcome, Error> {
    match format {
        Format::Json => output::text(|out| writeln!(out, "{}", body.trim_end())),
        Format::Text => output::text(|out| write!(out, "{body}")),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// `sluice status NAME` for a schedule: every fire.
pub async fn status(home: &Home, name: &str, format: Format) -> Result<Option<Outcome>, Error> {
    if let Some(c) = super::remote::server() {
        let q = [(
            "format",
            if format == Format::Json {
                "json"
            } else {
                "text"
            }
            .to_owned(),
        )];
        let path = format!("/api/v1/schedules/{}", crate::client::segment(name));
        return match c.text(Method::GET, &path, &q).await {
            Ok(body) => print_body(&body, format).map(Some),
            Err(crate::client::Error::Refused(r)) if r.status == 404 => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    let Some(store) = crate::store::Store::open_existing(&home.path).await? else {
        return Ok(None);
    };
    let service = Service::new(store, crate::clock::system());
    match service.schedule(&Principal::local(), name).await {
        Ok(v) => {
            match format {
                Format::Json => output::json(&v),
                Format::Text => output::text(|out| write_one(out, &v)),
            }
            .map_err(Error::output)?;
            Ok(Some(Outcome::Success))
        }
        Err(crate::service::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The schedules as a table: name, pipeline, cron and zone, last fire, next fire.
pub fn write_list(out: &mut dyn Write, views: &[ScheduleView]) -> std::io::Result<()> {
    if views.is_empty() {
        return writeln!(out, "no schedules applied (sluice apply -f FILE)");
    }
    let name_w = views.iter().map(|v| v.name.len()).max().unwrap_or(0).max(4);
    let pipe_w = views
        .iter()
        .map(|v| v.pipeline.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let when = |v: &ScheduleView| format!("{} ({})", v.cron, v.timezone);
    let when_w = views
        .iter()
        .map(|v| when(v).len())
        .max()
        .unwrap_or(0)
        .max(8);
    writeln!(
        out,
        "{:name_w$}  {:pipe_w$}  {:when_w$}  {:32}  NEXT",
        "NAME", "PIPELINE", "SCHEDULE", "LAST"
    )?;
    for v in views {
        let last = v
            .last
            .as_ref()
            .map_or_else(|| "-".to_owned(), |f| format!("{} {}", f.tick, f.outcome));
        let next = if v.suspend {
            "suspended".to_owned()
        } else {
            v.next.clone().unwrap_or_else(|| "never".to_owned())
        };
        writeln!(
            out,
            "{:name_w$}  {:pipe_w$}  {:when_w$}  {:32}  {next}",
            v.name,
            v.pipeline,
            when(v),
            last
        )?;
    }
    Ok(())
}

/// One schedule and every fire.
pub fn write_one(out: &mut dyn Write, v: &ScheduleView) -> std::io::Result<()> {
    writeln!(
        out,
        "schedule {} (team {}, version {}): {} {} in {}{}",
        v.name,
        v.team,
        v.version,
        v.pipeline,
        v.cron,
        v.timezone,
        if v.suspend { ", suspended" } else { "" }
    )?;
    if let Some(n) = &v.next {
        writeln!(out, "  next fire: {n}")?;
    }
    let fires = v.fires.as_deref().unwrap_or_default();
    if fires.is_empty() {
        return writeln!(out, "  no fire yet");
    }
    writeln!(out, "{:24}  {:8}  {:12}  REASON", "TICK", "OUTCOME", "RUN")?;
    for f in fires {
        writeln!(
            out,
            "{:24}  {:8}  {:12}  {}",
            f.tick,
            f.outcome,
            f.run.as_deref().unwrap_or("-"),
            f.reason.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

/// `sluice schedule next`: from a file (no server needed), or an applied schedule by name.
pub async fn next(args: &ScheduleArgs, format: Format) -> Result<Outcome, Error> {
    let ScheduleCommand::Next(a) = &args.command;
    let from: DateTime<Utc> = match &a.from {
        Some(t) => crate::time::parse(t).map_err(|e| {
            Error::Usage(format!(
                "--from {t}: {e} (an RFC 3339 time, 2026-12-01T00:00:00Z)"
            ))
        })?,
        None => Utc::now(),
    };
    let (cron, zone) = if Path::new(&a.schedule).is_file() {
        let text = std::fs::read_to_string(&a.schedule)
            .map_err(|e| Error::Usage(format!("cannot read {}: {e}", a.schedule)))?;
        let loaded = crate::spec::load(&a.schedule, text);
        let errors: Vec<_> = loaded
            .diagnostics
            .clone()
            .into_sorted()
            .into_iter()
            .filter(|d| d.severity == crate::spec::Severity::Error)
            .collect();
        if !errors.is_empty() {
            output::diagnostics(&errors);
            return Err(Error::Usage(format!("{} is not valid", a.schedule)));
        }
        let s = loaded
            .documents
            .into_iter()
            .find_map(|d| match d {
                crate::spec::model::Document::Schedule(s) => Some(*s),
                _ => None,
            })
            .ok_or_else(|| Error::Usage(format!("{} holds no Schedule", a.schedule)))?;
        (s.cron, s.timezone)
    } else if let Some(c) = super::remote::server() {
        let path = format!("/api/v1/schedules/{}", crate::client::segment(&a.schedule));
        let v: Value = c.json(Method::GET, &path, &[], None).await?;
        (
            v["cron"].as_str().unwrap_or("").to_owned(),
            v["timezone"].as_str().unwrap_or("UTC").to_owned(),
        )
    } else {
        return Err(Error::Usage(format!(
            "{}: no such file (an applied schedule's name needs --server)",
            a.schedule
        )));
    };
    let fires = next_fires(&cron, &zone, from, a.count)?;
    match format {
        Format::Json => output::json(&json!({
            "fires": fires.iter().map(|t| crate::time::format(*t)).collect::<Vec<_>>(),
        })),
        Format::Text => output::text(|out| {
            let tz = crate::schedule::cron::zone(&zone).ok();
            for t in &fires {
                match tz {
                    Some(tz) => writeln!(
                        out,
                        "{}  {}",
                        crate::time::format(*t),
                        t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z")
                    )?,
                    None => writeln!(out, "{}", crate::time::format(*t))?,
                }
            }
            Ok(())
        }),
    }
    .map_err(Error::output)?;
    if fires.is_empty() {
        say("it never fires again");
    }
    Ok(Outcome::Success)
}
