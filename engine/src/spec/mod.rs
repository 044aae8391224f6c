//! YAML to validated spec: the first stage of the data path.
//!
//! `load` reads a file's text into a span-carrying node tree ([`yaml`]), picks a decoder by
//! `apiVersion` and `kind`, and decodes each document into the typed [`model`], collecting
//! every problem as a [`diagnostic::Diagnostic`]. Nothing outside this module sees YAML.

pub mod capacity;
pub mod cluster;
mod decode;
pub mod diagnostic;
pub mod expr;
mod katib;
pub mod kubernetes;
pub mod model;
pub mod oneline;
pub mod params;
pub mod paths;
mod pipeline;
mod schedule;
mod sweep;
pub mod template;
pub mod units;
pub mod workload;
pub mod yaml;

use std::collections::BTreeMap;

use decode::Cx;
pub use decode::name_problem;
pub use diagnostic::{Diagnostic, Diagnostics, Pos, Severity};
use model::{Document, Metadata, Pending};
use yaml::{Node, Source, Typed};

pub const API_VERSION: &str = "sluice.dev/v1";
pub const KATIB_API_VERSION: &str = "kubeflow.org/v1beta1";
const KINDS: &[&str] = &["Pipeline", "Sweep", "Cluster", "Schedule", "Workload"];
const TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
/// The one kind of Katib's API that sluice reads.
const KATIB_KIND: &str = "Experiment";
/// A Katib file may hold what `kubectl get -o yaml` writes: its `status` is not read.
const KATIB_TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];

/// What a file held: its documents (decoded as far as they could be) and its problems.
#[derive(Debug)]
pub struct Loaded {
    pub source: Source,
    /// YAML documents in the file, whether or not they decoded.
    pub yaml_documents: usize,
    pub documents: Vec<Document>,
    /// Where each of `documents` is in the text (byte range of its root node): `apply`
    /// keeps each document's own text.
    pub spans: Vec<std::ops::Range<usize>>,
    pub diagnostics: Diagnostics,
}

impl Loaded {
    /// The text of document `i` of `documents`.
    pub fn text_of(&self, i: usize) -> Option<&str> {
        self.spans
            .get(i)
            .and_then(|r| self.source.text.get(r.clone()))
    }
}

/// Reads and validates the text of one file.
pub fn load(path: &str, text: String) -> Loaded {
    let source = Source::new(path, text);
    let mut diagnostics = Diagnostics::new(path);
    let started = std::time::Instant::now();
    let nodes = yaml::parse(&source, &mut diagnostics);
    tracing::debug!(
        path,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "parsed YAML"
    );
    let mut documents = Vec::new();
    let mut spans = Vec::new();
    let real: Vec<&Node> = nodes.iter().filter(|n| !n.is_null()).collect();
    let yaml_documents = real.len();
    if real.is_empty() && !diagnostics.has_errors() {
        diagnostics
            .error(Pos::START, "the file holds no YAML document")
            .help("a pipeline starts with apiVersion: sluice.dev/v1 and kind: Pipeline");
    }
    let mut cx = Cx {
        src: &source,
        d: &mut diagnostics,
    };
    for node in real {
        if let Some(doc) = document(&mut cx, node) {
            documents.push(doc);
            spans.push(node.start..node.end.max(node.start));
        }
    }
    Loaded {
        source,
        yaml_documents,
        documents,
        spans,
        diagnostics,
    }
}

fn document(cx: &mut Cx<'_>, node: &Node) -> Option<Document> {
    if node.as_map().is_none() {
        cx.expected(
            node,
            "the document",
            "a mapping with apiVersion, kind, metadata and spec",
        );
        cx.d.push_help_last(format!(
            "a sluice file starts with apiVersion: {API_VERSION} and kind: Pipeline"
        ));
        return None;
    }
    let api = node.get("apiVersion");
    let kind_node = node.get("kind");
    let api_version = match api {
        None => {
            cx.d.error(node.pos, "missing 'apiVersion'")
                .help(format!("add apiVersion: {API_VERSION}"));
            None
        }
        Some(a) => cx.string(a, "apiVersion").map(|s| (s, a.pos)),
    };
    let kind = match kind_node {
        None => {
            cx.d.error(node.pos, "missing 'kind'")
                .help(format!("add kind: one of {}", KINDS.join(", ")));
            return None;
        }
        Some(k) => (cx.string(k, "kind")?, k.pos),
    };
    let katib = api_version
        .as_ref()
        .is_some_and(|(a, _)| a == KATIB_API_VERSION);
    match &api_version {
        Some((a, _)) if a == API_VERSION || katib => {}
        Some((a, pos)) => {
            cx.d.error(*pos, format!("unsupported apiVersion '{a}'"))
                .help(format!("sluice reads apiVersion: {API_VERSION}"));
        }
        None => {}
    }
    let kind = (
        known_kind(cx, kind.0, kind.1, api_version.as_ref())?,
        kind.1,
    );
    cx.fields(node, "", if katib { KATIB_TOP_FIELDS } else { TOP_FIELDS });
    let metadata = match node.get("metadata") {
        None => {
            cx.d.error(node.pos, "missing 'metadata'")
                .help("add metadata: {name: my-pipeline}");
            None
        }
        Some(m) => metadata(cx, m, katib),
    };
    let spec = node.get("spec");
    // Go on after a bad apiVersion or name: the rest of the document has problems to find too.
    let metadata = metadata.unwrap_or_else(|| Metadata {
        name: String::new(),
        team: "default".into(),
        labels: BTreeMap::new(),
    });
    if kind.0 == "Pipeline" {
        let Some(spec) = spec else {
            cx.d.error(node.pos, "missing 'spec'")
                .help("add spec: with the pipeline's steps");
            return None;
        };
        return Some(Document::Pipeline(Box::new(pipeline::decode(
            cx, metadata, spec,
        ))));
    }
    if kind.0 == "Sweep" {
        let Some(spec) = spec else {
            cx.d.error(node.pos, "missing 'spec'")
                .help("add spec: with the sweep's objective, algorithm, budget, params and trial");
            return None;
        };
        return sweep::decode(cx, metadata, spec).map(|s| Document::Sweep(Box::new(s)));
    }
    if katib {
        let Some(spec) = spec else {
            cx.d.error(node.pos, "missing 'spec'")
                .help("add spec: with the experiment's objective, algorithm, parameters and trialTemplate");
            return None;
        };
        return katib::decode(cx, metadata, spec).map(|s| Document::Sweep(Box::new(s)));
    }
    if kind.0 == "Cluster" {
        // Checked whole here, so that `lint` reports every problem of a Cluster file; the
        // engine reads it again with `cluster::read` when given `--cluster`.
        match spec {
            Some(spec) => {
                cluster::decode(cx, &metadata.name, spec);
            }
            None => {
                cx.d.error(node.pos, "the Cluster has no spec")
                    .help("add spec: with pools, teams and priorities");
            }
        }
        return Some(Document::Pending(Pending {
            kind: kind.0,
            metadata,
            pos: node.pos,
            spec: spec.cloned(),
        }));
    }
    if kind.0 == "Workload" {
        // Checked here, so `sluice lint` reports a Workload's problems; `sluice simulate`
        // reads it (`workload::read`).
        match spec {
            Some(spec) => workload::check(cx, spec),
            None => {
                cx.d.error(node.pos, "missing 'spec'")
                    .help("add spec: with jobs: [...] or generate: {...}");
            }
        }
        return Some(Document::Pending(Pending {
            kind: kind.0,
            metadata,
            pos: node.pos,
            spec: spec.cloned(),
        }));
    }
    if kind.0 == "Schedule" {
        let Some(spec) = spec else {
            cx.d.error(node.pos, "missing 'spec'")
                .help("add spec: with pipeline: NAME and cron: \"0 2 * * *\"");
            return None;
        };
        return schedule::decode(cx, metadata, spec).map(|s| Document::Schedule(Box::new(s)));
    }
    cx.d.note(
        kind.1,
        format!("kind {} is recognised but not validated yet", kind.0),
    )
    .help("this version of sluice cannot run it");
    Some(Document::Pending(Pending {
        kind: kind.0,
        metadata,
        pos: node.pos,
        spec: spec.cloned(),
    }))
}

/// The kind a document is validated as: `kind` itself when sluice knows it, else, after
/// reporting it, the known kind it misspells (see [`misspelled`]), so that the document's
/// other mistakes are found in the same run. `None` when it is far from every known kind.
fn known_kind(
    cx: &mut Cx<'_>,
    kind: String,
    pos: Pos,
    api_version: Option<&(String, Pos)>,
) -> Option<String> {
    let katib = api_version.is_some_and(|(a, _)| a == KATIB_API_VERSION);
    let known: &[&str] = if katib { &[KATIB_KIND] } else { KINDS };
    if known.contains(&kind.as_str()) {
        return Some(kind);
    }
    let d = if katib {
        cx.d.error(
            pos,
            format!("kind '{kind}' of {KATIB_API_VERSION} is not read by sluice"),
        )
    } else {
        cx.d.error(pos, format!("unknown kind '{kind}'"))
    };
    let meant = misspelled(&kind, known);
    match meant {
        Some(k) => {
            d.help(format!("did you mean '{k}'?"));
            let article = if k.starts_with(['A', 'E', 'I', 'O', 'U']) {
                "an"
            } else {
                "a"
            };
            d.help(format!(
                "the rest of the document is checked as {article} {k}"
            ));
        }
        None if katib => {
            d.help(format!(
                "sluice reads Katib experiments: kind: {KATIB_KIND}"
            ));
        }
        None => match foreign_kind(&kind) {
            Some(help) => {
                d.help(help);
            }
            None => {
                d.suggest(&kind, known.iter().copied());
                if d.help.is_empty() {
                    d.help(format!("kinds are {}", KINDS.join(", ")));
                }
            }
        },
    }
    meant.map(str::to_owned)
}

/// What sluice calls a kind of the tools its users come from: a spelling suggestion
/// (`Workflow`, `Workload`) would mislead there.
fn foreign_kind(kind: &str) -> Option<String> {
    Some(match kind {
        "Workflow" | "WorkflowTemplate" => {
            "Argo's Workflow is sluice's Pipeline: kind: Pipeline, with its steps under spec.steps"
                .to_owned()
        }
        "CronWorkflow" => "a pipeline run on a schedule is kind: Schedule".to_owned(),
        KATIB_KIND => format!("a Katib Experiment has apiVersion: {KATIB_API_VERSION}"),
        _ => return None,
    })
}

/// The known kind that `kind` is a misspelling of: at most two edits away (letters compared
/// without case, a swap of two neighbours one edit) and nearer than any other. Farther
/// kinds are not guessed at: validating Argo's `Workflow` as a sluice `Workload` would bury
/// the one real mistake under errors about fields the author never meant to write.
fn misspelled<'a>(kind: &str, known: &[&'a str]) -> Option<&'a str> {
    let kind = kind.to_lowercase();
    let mut by_distance: Vec<(usize, &'a str)> = known
        .iter()
        .map(|k| (strsim::osa_distance(&kind, &k.to_lowercase()), *k))
        .collect();
    by_distance.sort_unstable();
    match by_distance.as_slice() {
        [(d, k), rest @ ..] if *d <= 2 && rest.first().is_none_or(|(next, _)| next > d) => Some(*k),
        _ => None,
    }
}

fn metadata(cx: &mut Cx<'_>, node: &Node, katib: bool) -> Option<Metadata> {
    let allowed: &[&str] = if katib {
        // With the fields the API server adds, which `kubectl get -o yaml` writes.
        &[
            "name",
            "namespace",
            "labels",
            "annotations",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "finalizers",
        ]
    } else {
        &["name", "team", "labels"]
    };
    let entries = cx.fields(node, "metadata", allowed)?;
    let mut meta = Metadata {
        name: String::new(),
        team: "default".into(),
        labels: BTreeMap::new(),
    };
    let mut named = false;
    for e in entries {
        match e.key.as_str() {
            "name" | "team" => {
                let field = format!("metadata.{}", e.key);
                let Some(value) = cx.string(&e.value, &field) else {
                    continue;
                };
                cx.check_name(&e.value, &field, &value);
                if e.key == "name" {
                    named = true;
                    meta.name = value;
                } else {
                    meta.team = value;
                }
            }
            "labels" => match e.value.as_map() {
                Some(labels) => {
                    for l in labels {
                        match l.value.as_scalar().map(|s| s.typed()) {
                            Some(Typed::Null) | None => {
                                cx.expected(
                                    &l.value,
                                    &format!("metadata.labels.{}", l.key),
                                    "a string",
                                );
                            }
                            Some(_) => {
                                let text = l
                                    .value
                                    .as_scalar()
                                    .map(|s| s.text.clone())
                                    .unwrap_or_default();
                                meta.labels.insert(l.key.clone(), text);
                            }
                        }
                    }
                }
                None => cx.expected(&e.value, "metadata.labels", "a mapping of strings"),
            },
            _ => {}
        }
    }
    if !named {
        cx.d.error(node.pos, "missing 'metadata.name'")
            .help("add name: a lowercase name such as nightly-train");
    }
    Some(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_misspelled_when_two_edits_or_fewer_away() {
        assert_eq!(misspelled("Pipline", KINDS), Some("Pipeline"));
        assert_eq!(misspelled("pipeline", KINDS), Some("Pipeline"));
        assert_eq!(misspelled("Pipleine", KINDS), Some("Pipeline"));
        assert_eq!(misspelled("Sweeep", KINDS), Some("Sweep"));
        assert_eq!(misspelled("CLUSTER", KINDS), Some("Cluster"));
        assert_eq!(misspelled("Workloads", KINDS), Some("Workload"));
        assert_eq!(misspelled("Experimant", &[KATIB_KIND]), Some("Experiment"));
        // Far from every kind: Argo's, Kubernetes', nonsense.
        assert_eq!(misspelled("Workflow", KINDS), None);
        assert_eq!(misspelled("Job", KINDS), None);
        assert_eq!(misspelled("Pipe", KINDS), None);
        assert_eq!(misspelled("", KINDS), None);
    }

    #[test]
    fn a_kind_as_near_to_two_kinds_is_not_guessed() {
        assert_eq!(misspelled("ab", &["abc", "abd"]), None);
        assert_eq!(misspelled("ab", &["abc", "abde"]), Some("abc"));
    }
}
