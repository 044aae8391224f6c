//! `sluice lint PATH... [--plan] [-p NAME=VALUE]... [--cluster FILE]`

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use crate::dag::{self, Plan};
use crate::spec::model::Document;
use crate::spec::{self, Diagnostic, Diagnostics, Severity, capacity, params};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files and folders to check.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Also print each pipeline's plan: its steps expanded into instances, by level.
    #[arg(long)]
    pub plan: bool,

    /// Set a parameter, checked against its declared type (repeatable).
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,

    /// A Cluster file: also refuse steps that no pool can hold.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report<'a> {
    files: Vec<FileReport>,
    errors: usize,
    warnings: usize,
    diagnostics: &'a [Diagnostic],
    #[serde(skip_serializing_if = "Option::is_none")]
    plans: Option<&'a [Plan]>,
}

#[derive(Serialize)]
struct FileReport {
    path: String,
    /// YAML documents read, including those too broken to name.
    yaml_documents: usize,
    documents: Vec<DocReport>,
}

#[derive(Serialize)]
struct DocReport {
    kind: String,
    name: String,
    team: String,
}

pub fn run(args: &Args, format: Format) -> Result<Outcome, Error> {
    let mut all: Vec<Diagnostic> = Vec::new();
    let mut files = Vec::new();
    let mut plans = Vec::new();

    let cluster = match &args.cluster {
        None => None,
        Some(path) => {
            let shown = path.display().to_string();
            match std::fs::read_to_string(path) {
                Err(e) => {
                    all.push(Diagnostic::error(
                        &shown,
                        None,
                        format!("cannot read the cluster file: {e}"),
                    ));
                    None
                }
                Ok(text) => {
                    let loaded = spec::load(&shown, text);
                    let mut d = loaded.diagnostics.clone();
                    let cap = capacity::read(&loaded, &mut d);
                    // `load` checked the Cluster whole; its pools read again here may repeat
                    // some of those problems.
                    let mut errors: Vec<Diagnostic> = d
                        .into_sorted()
                        .into_iter()
                        .filter(|d| d.severity == Severity::Error)
                        .collect();
                    errors.dedup();
                    // A broken Cluster is reported; steps are not checked against it.
                    let cap = cap.filter(|_| errors.is_empty());
                    all.extend(errors);
                    cap
                }
            }
        }
    };

    let mut uncounted = 0;
    let mut paths = Vec::new();
    for p in &args.paths {
        collect(p, &mut paths, &mut all);
    }
    for path in paths {
        let shown = path.display().to_string();
        let text = match std::fs::read(&path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(_) => {
                    all.push(Diagnostic::error(
                        &shown,
                        None,
                        "the file is not UTF-8 text",
                    ));
                    continue;
                }
            },
            Err(e) => {
                all.push(Diagnostic::error(&shown, None, format!("cannot read: {e}")));
                continue;
            }
        };
        let started = std::time::Instant::now();
        let loaded = spec::load(&shown, text);
        tracing::info!(path = %shown, elapsed_ms = started.elapsed().as_millis() as u64, "loaded");
        let mut d = loaded.diagnostics;
        let mut docs = Vec::new();
        for doc in &loaded.documents {
            let meta = doc.metadata();
            docs.push(DocReport {
                kind: doc.kind().to_owned(),
                name: meta.name.clone(),
                team: meta.team.clone(),
            });
            let Document::Pipeline(p) = doc else {
                continue;
            };
            let started = std::time::Instant::now();
            let graph = dag::graph::build(p, &mut d);
            tracing::info!(pipeline = %meta.name, elapsed_ms = started.elapsed().as_millis() as u64, "graph built");
            if let Some(cap) = &cluster {
                capacity::check(p, cap, &loaded.source, &mut d);
            }
            let values = match params::resolve(p, &args.params, false) {
                Ok(v) => Some(v),
                Err(errors) => {
                    d.extend(errors);
                    None
                }
            };
            // A plan of a file with errors would show something that cannot run.
            if let (true, false, Some(graph), Some(values)) =
                (args.plan, d.has_errors(), graph, values)
            {
                let started = std::time::Instant::now();
                plans.push(dag::plan::expand(p, &graph, values));
                tracing::info!(pipeline = %meta.name, elapsed_ms = started.elapsed().as_millis() as u64, "planned");
            }
        }
        files.push(FileReport {
            path: shown,
            yaml_documents: loaded.yaml_documents,
            documents: docs,
        });
        // The errors past those a file keeps count too (its last note says how many).
        uncounted += d.errors_not_kept();
        all.extend(d.into_sorted());
    }
    let errors = all.iter().filter(|d| d.severity == Severity::Error).count() + uncounted;
    let warnings = all
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    let io = |e| Error::Io {
        context: "cannot write the output".into(),
        source: e,
    };
    match format {
        Format::Json => output::json(&Report {
            files,
            errors,
            warnings,
            diagnostics: &all,
            plans: args.plan.then_some(plans.as_slice()),
        })
        .map_err(io)?,
        Format::Text => {
            output::diagnostics(&all);
            if args.plan {
                output::text(|out| {
                    for plan in &plans {
                        write_plan(out, plan)?;
                    }
                    Ok(())
                })
                .map_err(io)?;
            }
            let documents: usize = files.iter().map(|f| f.yaml_documents).sum();
            let verdict = match errors {
                0 => "no errors".to_owned(),
                1 => "1 error".to_owned(),
                n => format!("{n} errors"),
            };
            super::output::say(format_args!(
                "sluice lint: {} file{}, {documents} document{}: {verdict}",
                files.len(),
                plural(files.len()),
                plural(documents),
            ));
        }
    }
    Ok(if errors == 0 {
        Outcome::Success
    } else {
        Outcome::Invalid
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Files to check: a file as given, or a folder's `*.yaml`/`*.yml` files, recursively, in
/// name order, skipping hidden folders (`.git`, `.sluice`).
pub(super) fn collect(path: &Path, out: &mut Vec<PathBuf>, diags: &mut Vec<Diagnostic>) {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            let mut d = Diagnostics::new(shown.clone());
            d.push(Diagnostic::error(&shown, None, format!("cannot read: {e}")));
            diags.extend(d.into_sorted());
            return;
        }
    };
    if !meta.is_dir() {
        out.push(path.to_owned());
        return;
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            diags.push(Diagnostic::error(
                &shown,
                None,
                format!("cannot read the folder: {e}"),
            ));
            return;
        }
    };
    entries.sort();
    for entry in entries {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if entry.is_dir() {
            collect(&entry, out, diags);
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(entry);
        }
    }
}

fn write_plan(out: &mut dyn Write, plan: &Plan) -> std::io::Result<()> {
    writeln!(
        out,
        "pipeline {} (team {}) from {}: {} step{}, {} instance{}, {} level{}",
        plan.name,
        plan.team,
        plan.path,
        plan.steps,
        plural(plan.steps),
        plan.instances,
        plural(plan.instances),
        plan.levels.len(),
        plural(plan.levels.len()),
    )?;
    if !plan.params.is_empty() || !plan.unset_params.is_empty() {
        write!(out, "  params:")?;
        for (name, value) in &plan.params {
            write!(out, " {name}={}", value.to_text())?;
        }
        for name in &plan.unset_params {
            write!(out, " {name}=<required>")?;
        }
        writeln!(out)?;
    }
    let instance = |out: &mut dyn Write, i: &dag::plan::Instance| -> std::io::Result<()> {
        write!(out, "    {}", i.name)?;
        if !i.needs.is_empty() {
            write!(out, "  needs {}", i.needs.join(", "))?;
        }
        if i.workers > 1 || i.gpu > 0 {
            write!(
                out,
                "  [{} worker{} x {} GPU]",
                i.workers,
                plural(i.workers as usize),
                i.gpu
            )?;
        }
        if let Some(item) = &i.item {
            write!(out, "  item={item}")?;
        }
        if let Some(w) = &i.when {
            write!(out, "  when {w}")?;
        }
        if i.kind == "sweep" {
            write!(out, "  (sweep)")?;
        }
        writeln!(out)
    };
    for level in &plan.levels {
        writeln!(out, "  level {}:", level.level)?;
        for i in &level.steps {
            instance(out, i)?;
        }
    }
    if !plan.on_exit.is_empty() {
        writeln!(out, "  on exit:")?;
        for i in &plan.on_exit {
            instance(out, i)?;
        }
    }
    Ok(())
}
