//! `sluice apply`: the Pipeline, Sweep and Schedule documents of a team's files registered
//! as `kubectl apply` does. Every document is validated first, as `lint` does, and a
//! Schedule is checked against the pipeline it names (applied before, or in the same files)
//! and that pipeline's parameters; if anything is wrong nothing is applied. The store keeps
//! each document's own text, a new version only when it changed.

use std::collections::BTreeMap;

use super::{Error, Principal, Service};
use crate::spec::model::{Document, Pipeline};
use crate::spec::{self, Diagnostic};
use crate::store::{Applied, NewDocument};

/// A file to apply, as the client read it.
#[derive(Clone, Debug)]
pub struct File {
    /// How the file is named in diagnostics (its path on the client).
    pub path: String,
    pub text: String,
    /// The folder its steps run in by default.
    pub workdir: String,
}

/// What applying did to one document: `pipeline/retrain created`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// `pipeline`, `sweep` or `schedule`.
    pub kind: String,
    pub name: String,
    pub what: Applied,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} {}", self.kind, self.name, self.what.as_str())
    }
}

/// A validated document, ready to store.
struct Checked {
    team: String,
    doc: NewDocument,
}

impl Service {
    /// Applies `files` for the principal's team (an admin's: the documents' team, one for
    /// all of them). `by` names the applier in the store. `cluster` is the Cluster file their
    /// runs will have (a server's): on Kubernetes the paths its pipelines name are checked
    /// as a submission checks them (`spec::paths`).
    pub async fn apply(
        &self,
        who: &Principal,
        by: &str,
        files: &[File],
        prune: bool,
        dry_run: bool,
        cluster: Option<&std::path::Path>,
    ) -> Result<Vec<Line>, Error> {
        who.check_role("apply documents")?;
        let on_kubernetes = match cluster {
            Some(file) => super::submit::runs_on_kubernetes(file)?,
            None => false,
        };
        let mut errors: Vec<Diagnostic> = Vec::new();
        let mut checked: Vec<Checked> = Vec::new();
        // Pipelines and sweeps of these files by name: schedules may name them.
        let mut runnable: BTreeMap<String, Pipeline> = BTreeMap::new();
        let mut schedules = Vec::new();
        for file in files {
            let loaded = spec::load(&file.path, file.text.clone());
            let diagnostics = loaded.diagnostics.clone().into_sorted();
            let file_errors: Vec<Diagnostic> = diagnostics
                .into_iter()
                .filter(|d| d.severity == spec::Severity::Error)
                .collect();
            if !file_errors.is_empty() {
                errors.extend(file_errors);
                continue;
            }
            for (i, doc) in loaded.documents.iter().enumerate() {
                let text = loaded.text_of(i).unwrap_or_default().to_owned();
                let (kind, pipeline) = match doc {
                    Document::Pipeline(p) => ("Pipeline", Some((**p).clone())),
                    Document::Sweep(s) => ("Sweep", Some(Pipeline::of_sweep(s, &file.path))),
                    Document::Schedule(s) => {
                        schedules.push(((**s).clone(), file.path.clone()));
                        ("Schedule", None)
                    }
                    Document::Pending(p) => {
                        errors.push(Diagnostic::error(
                            &file.path,
                            Some(p.pos),
                            format!(
                                "kind {} cannot be applied: apply takes Pipeline, Sweep and Schedule documents",
                                p.kind
                            ),
                        ));
                        continue;
                    }
                };
                let mut meta = doc.metadata().clone();
                if let Some(own) = who.bound_team() {
                    if meta.team != own && meta.team != "default" {
                        // Refused as a submission of another team's file is (403).
                        return Err(Error::Forbidden(format!(
                            "{}: {} {}: metadata.team is '{}', but you act for team '{own}': drop metadata.team or make it '{own}'",
                            file.path,
                            kind.to_lowercase(),
                            meta.name,
                            meta.team
                        )));
                    }
                    meta.team = own.to_owned();
                }
                if let Some(p) = pipeline {
                    let mut d = spec::Diagnostics::new(file.path.clone());
                    if on_kubernetes {
                        spec::paths::check(&p, &mut d);
                    }
                    if crate::dag::graph::build(&p, &mut d).is_none() || d.has_errors() {
                        errors.extend(d.into_sorted());
                        continue;
                    }
                    runnable.insert(meta.name.clone(), p);
                }
                checked.push(Checked {
                    team: meta.team.clone(),
                    doc: NewDocument {
                        kind: kind.to_owned(),
                        name: meta.name.clone(),
                        source: text,
                        path: file.path.clone(),
                        workdir: file.workdir.clone(),
                    },
                });
            }
        }
        let team = match (who.bound_team(), checked.first()) {
            (Some(own), _) => own.to_owned(),
            (None, Some(c)) => c.team.clone(),
            (None, None) => "default".to_owned(),
        };
        if let Some(other) = checked.iter().find(|c| c.team != team) {
            return Err(Error::invalid(format!(
                "one apply is for one team: {} {} is of team '{}', others of '{team}'",
                other.doc.kind.to_lowercase(),
                other.doc.name,
                other.team
            )));
        }
        // Each schedule names a pipeline of these files or one already applied, and its
        // parameters are that pipeline's.
        for (s, path) in &schedules {
            let pipeline = match runnable.get(&s.pipeline) {
                Some(p) => Some(p.clone()),
                None => self.applied_pipeline(&team, &s.pipeline).await?,
            };
            let Some(pipeline) = pipeline else {
                let mut d = Diagnostic::error(
                    path,
                    Some(s.pipeline_pos),
                    format!(
                        "schedule {}: no pipeline or sweep named '{}' is applied for team {team}",
                        s.metadata.name, s.pipeline
                    ),
                );
                let mut names: Vec<String> = runnable.keys().cloned().collect();
                names.extend(
                    self.store
                        .applied(Some(&team))
                        .await?
                        .into_iter()
                        .filter(|r| r.kind != "Schedule")
                        .map(|r| r.name),
                );
                d = match spec::diagnostic::nearest(&s.pipeline, names.iter().map(String::as_str)) {
                    Some(n) => d.with_help(format!("did you mean '{n}'?")),
                    None => d.with_help(
                        "apply the pipeline too: sluice apply -f PIPELINE_FILE -f SCHEDULE_FILE",
                    ),
                };
                errors.push(d);
                continue;
            };
            let given: Vec<String> = s.params.iter().map(|(p, _)| p.clone()).collect();
            if let Err(diags) = spec::params::resolve(&pipeline, &given, true) {
                for d in diags {
                    // Said at the parameter's line in the schedule's file.
                    let at = s
                        .params
                        .iter()
                        .find(|(p, _)| d.path == format!("-p {p}"))
                        .map(|(_, pos)| *pos);
                    let mut placed = Diagnostic::error(
                        path,
                        at.or(Some(s.pipeline_pos)),
                        format!("schedule {}: {}", s.metadata.name, d.message),
                    );
                    for h in d.help {
                        placed = placed.with_help(h);
                    }
                    errors.push(placed);
                }
            }
        }
        if !errors.is_empty() {
            let n = errors.len();
            return Err(Error::diagnostics(
                format!("{n} problem(s) found: nothing was applied"),
                errors,
            ));
        }
        let docs: Vec<NewDocument> = checked.into_iter().map(|c| c.doc).collect();
        let done = self
            .store
            .apply(&team, &docs, prune, dry_run, by, &self.clock.now_rfc3339())
            .await?;
        Ok(done
            .into_iter()
            .map(|(kind, name, what)| Line {
                kind: kind.to_lowercase(),
                name,
                what,
            })
            .collect())
    }

    /// The pipeline (a sweep as its one-step pipeline) of team `team` applied as `name`.
    pub(crate) async fn applied_pipeline(
        &self,
        team: &str,
        name: &str,
    ) -> Result<Option<Pipeline>, Error> {
        let Some(row) = self
            .store
            .applied_named(team, &["Pipeline", "Sweep"], name)
            .await?
        else {
            return Ok(None);
        };
        let loaded = spec::load(&row.path, row.source.clone());
        Ok(loaded.documents.into_iter().find_map(|d| match d {
            Document::Pipeline(p) => Some(*p),
            Document::Sweep(s) => Some(Pipeline::of_sweep(&s, &row.path)),
            _ => None,
        }))
    }
}
