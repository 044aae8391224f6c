//! Submission in two steps: [`check`] validates a request (the pipeline or sweep, its
//! parameters, the Cluster file) without touching the state store, so that a bad file
//! creates no home; [`Service::submit`] then resolves the object store, reaches it, and
//! records the run. Warnings (`bayesianoptimization runs as tpe`, images the local executor
//! does not use) go to the caller's `warn` as they are found, so that they are seen even when
//! a later check fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Error, Principal, Service};
use crate::dag::Dag;
use crate::spec::model::{ClusterSpec, Document, ParamValue, Pipeline};
use crate::spec::{self, Diagnostic, params};

/// A run to submit, as a front end received it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// How the file is named in messages and diagnostics (its path as given, or what stands
    /// for it, as the one-line sweep's flags do).
    pub shown: String,
    /// The YAML text.
    pub text: String,
    /// The folder steps run in by default (the file's).
    pub workdir: PathBuf,
    /// `NAME=VALUE` parameters (a sweep's `NAME=SPEC`).
    pub params: Vec<String>,
    /// Which document to run, when the file holds several.
    pub name: Option<String>,
    /// A Cluster file: steps are admitted onto its nodes by the scheduler.
    pub cluster: Option<PathBuf>,
    /// The object store's URL; default: the Cluster's `objects`, else the home's folder.
    pub objects: Option<String>,
    /// The applied document's version this runs (`submit NAME`, a schedule's fire), and the
    /// schedule that fired it.
    pub applied_version: Option<i64>,
    pub schedule: Option<String>,
}

/// A validated request: only [`check`] makes one.
pub struct Checked {
    request: Request,
    /// The file holds several documents (the run keeps which).
    several: bool,
    pipeline: Pipeline,
    graph: Dag,
    values: BTreeMap<String, ParamValue>,
    cluster: Option<Cluster>,
}

impl Checked {
    /// The pipeline that will run (a sweep as its one-step pipeline), with its team.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The Cluster file's `state:` (the store its runs keep state in), read into a location
    /// (a relative `sqlite://` path from the current folder); an unreadable URL is an error
    /// at its line. None without a Cluster or without `state:`.
    pub fn cluster_state(&self) -> Result<Option<crate::store::Location>, Error> {
        let Some(c) = &self.cluster else {
            return Ok(None);
        };
        let Some((url, pos)) = cluster_setting(&c.loaded, "state") else {
            return Ok(None);
        };
        let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("."));
        crate::store::Location::parse(&url, &cwd)
            .map(Some)
            .map_err(|e| {
                invalid(
                    &c.shown,
                    vec![Diagnostic::error(&c.shown, pos, e.to_string())],
                )
            })
    }
}

/// A `--cluster` file, read and validated.
#[derive(Debug)]
struct Cluster {
    shown: String,
    text: String,
    spec: ClusterSpec,
    loaded: spec::Loaded,
}

/// A tick of a schedule decided and not yet recorded: its fire and, when it starts one, the
/// run's rows ([`Service::decide_fire`], [`Service::record_fires`]).
#[derive(Debug)]
pub struct Decided {
    pub fire: crate::store::FireRow,
    run: Option<Prepared>,
}

impl Decided {
    /// A tick that starts nothing (missed or skipped, its reason in `fire`).
    pub fn record(fire: crate::store::FireRow) -> Decided {
        Decided { fire, run: None }
    }
}

/// A checked run's rows, ready to be recorded.
#[derive(Debug)]
struct Prepared {
    run: crate::store::NewRun,
    max_queued: Option<u64>,
    cluster: Option<Cluster>,
    team: String,
    name: String,
}

/// A recorded run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub id: String,
    /// The pipeline's (or sweep's) name.
    pub name: String,
    /// The run an earlier submission with the same `Idempotency-Key` recorded, answered
    /// again (nothing new was recorded).
    pub replayed: bool,
}

fn invalid(shown: &str, diagnostics: Vec<Diagnostic>) -> Error {
    Error::diagnostics(format!("{shown} is not valid"), diagnostics)
}

fn errors_only(diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    diagnostics
        .into_iter()
        .filter(|d| d.severity == spec::Severity::Error)
        .collect()
}

/// Validates `request` as `who` would submit it: the document to run, its graph and
/// parameters, the Cluster file and the pipeline checked against it, and the run's team.
/// Every problem of the file is in the `Invalid` error's diagnostics.
pub fn check(
    who: &Principal,
    request: Request,
    warn: &mut dyn FnMut(&[Diagnostic]),
) -> Result<Checked, Error> {
    who.check_role("submit runs")?;
    let shown = request.shown.clone();
    let mut loaded = spec::load(&shown, request.text.clone());
    let diagnostics = std::mem::take(&mut loaded.diagnostics);
    if diagnostics.has_errors() {
        return Err(invalid(&shown, errors_only(diagnostics.into_sorted())));
    }
    let warnings: Vec<Diagnostic> = diagnostics
        .into_sorted()
        .into_iter()
        .filter(|d| d.severity == spec::Severity::Warning)
        .collect();
    if !warnings.is_empty() {
        warn(&warnings);
    }
    let several = loaded.documents.len() > 1;
    let index = pick(&loaded, &shown, request.name.as_deref())?;
    let mut overrides = None;
    let mut pipeline = match loaded.documents.swap_remove(index) {
        Document::Pipeline(p) => *p,
        Document::Sweep(s) => {
            let mut s = *s;
            match spec::oneline::apply_args(&mut s, &request.params) {
                Ok(pairs) => overrides = Some(pairs),
                Err(diags) => return Err(invalid(&shown, diags)),
            }
            Pipeline::of_sweep(&s, &shown)
        }
        Document::Schedule(_) => {
            return Err(Error::invalid(format!(
                "{shown}: kind Schedule cannot be run: a schedule is applied to a `sluice server` (sluice apply -f FILE), which runs its pipeline at its times"
            )));
        }
        Document::Pending(p) => {
            let what = match p.kind.as_str() {
                "Cluster" => "a Cluster file configures the engine: pass it with --cluster",
                "Workload" => {
                    "a Workload is replayed in virtual time: sluice simulate --cluster CLUSTER --workload FILE"
                }
                _ => "this version of sluice cannot run it",
            };
            return Err(Error::invalid(format!(
                "{shown}: kind {} cannot be run: {what}",
                p.kind
            )));
        }
    };
    team_of(who, &shown, &mut pipeline)?;
    let mut d = spec::Diagnostics::new(shown.clone());
    let Some(graph) = crate::dag::graph::build(&pipeline, &mut d) else {
        return Err(invalid(&shown, d.into_sorted()));
    };
    if d.has_errors() {
        return Err(invalid(&shown, d.into_sorted()));
    }
    let values = match overrides {
        // A sweep file's `-p NAME=SPEC` are kept as the run's parameters.
        Some(pairs) => pairs
            .into_iter()
            .map(|(n, v)| (n, ParamValue::String(v)))
            .collect(),
        None => params::resolve(&pipeline, &request.params, true)
            .map_err(|errors| invalid(&shown, errors))?,
    };
    let cluster = match &request.cluster {
        None => None,
        Some(file) => Some(cluster(file, &pipeline, &loaded.source, &shown)?),
    };
    Ok(Checked {
        request,
        several,
        pipeline,
        graph,
        values,
        cluster,
    })
}

/// Which document of the file runs: the only one, or the one `name` names.
fn pick(loaded: &spec::Loaded, shown: &str, name: Option<&str>) -> Result<usize, Error> {
    let names = |all: &mut dyn Iterator<Item = &Document>| -> String {
        all.map(|d| d.metadata().name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let candidates: Vec<usize> = (0..loaded.documents.len())
        .filter(|&i| name.is_none_or(|n| loaded.documents[i].metadata().name == n))
        .collect();
    match candidates.as_slice() {
        [one] => Ok(*one),
        [] => Err(Error::invalid(format!(
            "{shown} has no document named '{}'; it has {}",
            name.unwrap_or(""),
            names(&mut loaded.documents.iter())
        ))),
        many => Err(Error::invalid(format!(
            "{shown} holds several documents ({}); say which with --name",
            names(&mut many.iter().map(|&i| &loaded.documents[i]))
        ))),
    }
}

/// The team the run belongs to. A team-bound principal's: a file naming another team is
/// refused, one naming none (read as `default`) takes the principal's. Otherwise the
/// file's, as written.
fn team_of(who: &Principal, shown: &str, pipeline: &mut Pipeline) -> Result<(), Error> {
    let Some(own) = who.bound_team() else {
        return Ok(());
    };
    let written = &pipeline.metadata.team;
    if written != own && written != "default" {
        return Err(Error::Forbidden(format!(
            "{shown}: metadata.team is '{written}', but you act for team '{own}': drop metadata.team or make it '{own}'"
        )));
    }
    pipeline.metadata.team = own.to_owned();
    Ok(())
}

/// Whether the runs of Cluster file `file` run on Kubernetes (`executor: kubernetes`).
pub(crate) fn runs_on_kubernetes(file: &Path) -> Result<bool, Error> {
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::invalid(format!("cannot read {shown}: {e}")))?;
    let (_, spec) = spec::cluster::load(&shown, text).map_err(|diags| invalid(&shown, diags))?;
    Ok(spec.executor == crate::spec::model::ExecutorKind::Kubernetes)
}

/// Reads and validates a Cluster file, with lint's checks of the pipeline against its pools
/// and priority classes (and, on Kubernetes, of the paths it names).
fn cluster(
    file: &Path,
    pipeline: &Pipeline,
    source: &spec::yaml::Source,
    shown: &str,
) -> Result<Cluster, Error> {
    let cshown = file.display().to_string();
    let ctext = std::fs::read_to_string(file)
        .map_err(|e| Error::invalid(format!("cannot read {cshown}: {e}")))?;
    let (cloaded, spec) =
        spec::cluster::load(&cshown, ctext.clone()).map_err(|diags| invalid(&cshown, diags))?;
    let mut cd = spec::Diagnostics::new(cshown.clone());
    if let Some(cap) = spec::capacity::read(&cloaded, &mut cd) {
        let mut pd = spec::Diagnostics::new(shown.to_owned());
        spec::capacity::check(pipeline, &cap, source, &mut pd);
        if pd.has_errors() {
            return Err(invalid(shown, errors_only(pd.into_sorted())));
        }
    }
    Ok(Cluster {
        shown: cshown,
        text: ctext,
        spec,
        loaded: cloaded,
    })
}

impl Service {
    /// Records a checked run: the object store it uses is resolved and (S3) reached first,
    /// so that a bad store is an error before anything runs. A Cluster team's `maxQueued`
    /// that the run would pass refuses it, pointing at that setting.
    pub async fn submit(
        &self,
        who: &Principal,
        checked: Checked,
        warn: &mut (dyn FnMut(&[Diagnostic]) + Send),
    ) -> Result<Submitted, Error> {
        self.submit_keyed(who, checked, None, warn).await
    }

    /// [`Service::submit`] with the request's `Idempotency-Key`, recorded with the run: when
    /// another submission recorded the same key meanwhile, nothing is written and the answer
    /// is that submission's run (`Submitted::replayed`).
    pub async fn submit_keyed(
        &self,
        who: &Principal,
        checked: Checked,
        key: Option<&crate::store::IdempotencyKey>,
        warn: &mut (dyn FnMut(&[Diagnostic]) + Send),
    ) -> Result<Submitted, Error> {
        let Prepared {
            run,
            max_queued,
            cluster,
            team,
            name,
        } = self.prepare_run(who, checked, warn).await?;
        let created = match key {
            None => self.store.create_run(&run, max_queued).await,
            Some(key) => {
                let now = self.clock.now_ms();
                match self
                    .store
                    .create_run_keyed(&run, max_queued, key, now)
                    .await
                {
                    Err(crate::store::Error::KeyTaken) => {
                        return self.replay(key).await?.ok_or_else(|| {
                            Error::Conflict {
                                message: "this Idempotency-Key was used by a submission that is gone: send a new key".into(),
                                in_the_way: None,
                            }
                        });
                    }
                    other => other,
                }
            }
        };
        match (created, &cluster) {
            (Ok(()), _) => Ok(Submitted {
                id: run.id,
                name,
                replayed: false,
            }),
            (Err(e @ crate::store::Error::QueueFull { .. }), Some(c)) => {
                let pos = max_queued_pos(&c.loaded, &team);
                let d = Diagnostic::error(&c.shown, pos, format!("run refused: {e}"))
                    .with_help("wait for queued steps to start or end, cancel runs with `sluice cancel RUN`, or raise the team's maxQueued");
                // Said at the Cluster's setting that refuses it, as a diagnostic.
                Err(Error::diagnostics(format!("run refused: {e}"), vec![d]))
            }
            (Err(e), _) => Err(e.into()),
        }
    }

    /// The run an earlier submission with `key` recorded, if any: its answer again. The
    /// same key with another request is a conflict (a client reusing a key by mistake).
    pub async fn replay(
        &self,
        key: &crate::store::IdempotencyKey,
    ) -> Result<Option<Submitted>, Error> {
        let Some(recorded) = self.store.idempotent(key, self.clock.now_ms()).await? else {
            return Ok(None);
        };
        if recorded.hash != key.hash {
            return Err(Error::Conflict {
                message: format!(
                    "this Idempotency-Key was used for another request (it made run {}): send a new key for a new submission",
                    recorded.run_id
                ),
                in_the_way: None,
            });
        }
        Ok(Some(Submitted {
            id: recorded.run_id,
            name: recorded.name,
            replayed: true,
        }))
    }

    /// Decides a schedule's tick that starts a run: the run's rows made (as `submit` makes
    /// them), to be recorded with `fire` by [`Service::record_fires`].
    pub async fn decide_fire(
        &self,
        who: &Principal,
        checked: Checked,
        mut fire: crate::store::FireRow,
    ) -> Result<Decided, Error> {
        let mut quiet = |_: &[Diagnostic]| {};
        let run = self.prepare_run(who, checked, &mut quiet).await?;
        fire.run_id = Some(run.run.id.clone());
        Ok(Decided {
            fire,
            run: Some(run),
        })
    }

    /// Records decided ticks in one transaction, and returns the ids of the runs recorded
    /// (a tick decided already, by this server before a crash or by another, records
    /// nothing). When a run is refused past its team's `maxQueued`, the ticks are recorded
    /// one by one and that tick as skipped, saying why.
    pub async fn record_fires(&self, decided: &[Decided]) -> Result<Vec<String>, Error> {
        let batch: Vec<_> = decided
            .iter()
            .map(|d| (&d.fire, d.run.as_ref().map(|r| (&r.run, r.max_queued))))
            .collect();
        let written = match self.store.fires_at_once(&batch).await {
            Ok(written) => written,
            Err(crate::store::Error::QueueFull { .. }) => {
                let mut written = Vec::with_capacity(batch.len());
                for (fire, run) in batch {
                    match self.store.fire(fire, run).await {
                        Ok(done) => written.push(done),
                        Err(e @ crate::store::Error::QueueFull { .. }) => {
                            let skipped = crate::store::FireRow {
                                outcome: "skipped".into(),
                                run_id: None,
                                reason: Some(format!("run refused: {e}")),
                                ..fire.clone()
                            };
                            self.store.fire(&skipped, None).await?;
                            written.push(false);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                written
            }
            Err(e) => return Err(e.into()),
        };
        Ok(decided
            .iter()
            .zip(written)
            .filter(|(_, w)| *w)
            .filter_map(|(d, _)| d.run.as_ref().map(|r| r.run.id.clone()))
            .collect())
    }

    /// A checked run's rows, its object store resolved (and S3 reached).
    async fn prepare_run(
        &self,
        who: &Principal,
        checked: Checked,
        warn: &mut (dyn FnMut(&[Diagnostic]) + Send),
    ) -> Result<Prepared, Error> {
        who.check_role("submit runs")?;
        if who
            .bound_team()
            .is_some_and(|t| t != checked.pipeline.metadata.team)
        {
            return Err(Error::Forbidden(format!(
                "{who} cannot submit runs of team {}",
                checked.pipeline.metadata.team
            )));
        }
        let Checked {
            request,
            several,
            pipeline,
            graph,
            values,
            cluster,
        } = checked;
        let objects = self.objects_url(&request, cluster.as_ref())?;
        // Checked now, so that a bad store is an error before anything runs.
        let object_store = sluice_runtime::objects::Objects::open(&objects)?;
        if objects.starts_with("s3://") {
            reach(&object_store, &objects).await?;
        }
        // A local Cluster runs steps here too (as processes on the declared nodes' GPUs); on
        // Kubernetes, images are what steps run in.
        let on_kubernetes = cluster
            .as_ref()
            .is_some_and(|c| c.spec.executor == crate::spec::model::ExecutorKind::Kubernetes);
        if !on_kubernetes && let Some(d) = image_warning(&request.shown, &request.text, &pipeline) {
            warn(&[d]);
        }
        let document = several.then(|| pipeline.metadata.name.clone());
        let team = pipeline.metadata.team.clone();
        let max_queued = cluster.as_ref().and_then(|c| {
            c.spec
                .teams
                .iter()
                .find(|t| t.name == team)
                .and_then(|t| t.max_queued)
        });
        // On Kubernetes steps run in their containers: the run has no folder on this
        // machine, and whatever folder the request names is not read (`spec::paths`).
        let workdir = if on_kubernetes {
            String::new()
        } else {
            request.workdir.display().to_string()
        };
        let mut run = crate::run::submit::prepare(
            &pipeline,
            &graph,
            values,
            crate::run::Origin {
                source: &request.text,
                workdir: &workdir,
                objects: &objects,
                document,
                cluster: cluster
                    .as_ref()
                    .map(|c| crate::run::cluster::stored(&c.shown, &c.text)),
                max_queued,
                applied_version: request.applied_version,
                schedule: request.schedule.clone(),
            },
        );
        // No folder given (a client elsewhere, an applied document): the run's own, under
        // its attempts' folder, which `delete` and `gc` remove with it. Never the home,
        // beside every team's state. On Kubernetes the run has none (`spec::paths`).
        if run.workdir.is_empty() && !on_kubernetes {
            let own = self
                .store
                .home
                .join("attempts")
                .join(&run.id)
                .join("workdir");
            crate::store::create_private_dir(&own)
                .map_err(|e| Error::io(format!("cannot create {}", own.display()), e))?;
            run.workdir = own.display().to_string();
        }
        Ok(Prepared {
            run,
            max_queued,
            cluster,
            team,
            name: pipeline.metadata.name,
        })
    }

    /// The run's object store URL: the request's, else the Cluster file's `objects`, else
    /// the home's folder. A relative `file://` path (`file://.sluice/objects`, as the
    /// Cluster example writes it) is relative to here.
    fn objects_url(&self, request: &Request, cluster: Option<&Cluster>) -> Result<String, Error> {
        let from_cluster = match (&request.objects, cluster) {
            (None, Some(c)) => cluster_setting(&c.loaded, "objects").map(|(url, _)| url),
            _ => None,
        };
        Ok(match request.objects.as_ref().or(from_cluster.as_ref()) {
            Some(url) => match url.strip_prefix("file://") {
                Some(path) if !Path::new(path).is_absolute() => {
                    let path = std::path::absolute(path)
                        .map_err(|source| Error::io(format!("cannot resolve {url}"), source))?;
                    format!("file://{}", path.display())
                }
                _ => url.clone(),
            },
            None => {
                let home = &self.store.home;
                let home = std::fs::canonicalize(home).map_err(|source| {
                    Error::io(format!("cannot resolve {}", home.display()), source)
                })?;
                sluice_runtime::objects::default_url(&home)
            }
        })
    }
}

/// A bucket is only reached when a step needs it: reach it now, so that a wrong endpoint,
/// bucket or key is an error before anything runs, not a failed step later.
async fn reach(store: &sluice_runtime::objects::Objects, url: &str) -> Result<(), Error> {
    let reached = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        store.list_under("teams"),
    )
    .await;
    let why = match reached {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 20 s".to_owned(),
    };
    Err(Error::io(
        format!("cannot reach the object store {url}"),
        std::io::Error::other(why),
    ))
}

/// Steps that name an `image` run on this machine, not in it: said once per run, at the
/// first `image:` of the file, so that nobody believes their container was used.
fn image_warning(shown: &str, text: &str, pipeline: &Pipeline) -> Option<Diagnostic> {
    let mut images: Vec<&str> = pipeline
        .steps
        .iter()
        .filter_map(|s| s.image.as_deref())
        .collect();
    images.sort_unstable();
    images.dedup();
    let first = images.first()?;
    // The first `image:` key, in block (`image: x`) or flow (`{name: a, image: x}`) style.
    let pos = text.lines().enumerate().find_map(|(i, line)| {
        if line.trim_start().starts_with('#') {
            return None;
        }
        let col = line.match_indices("image:").map(|(c, _)| c).find(|&c| {
            line[..c]
                .chars()
                .next_back()
                .is_none_or(|b| matches!(b, ' ' | '\t' | '{' | ',' | '-'))
        })?;
        Some(spec::Pos {
            line: u32::try_from(i + 1).unwrap_or(u32::MAX),
            column: u32::try_from(col + 1).unwrap_or(u32::MAX),
        })
    });
    let more = match images.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    Some(Diagnostic::error(
        shown,
        pos,
        format!(
            "steps name the image '{first}'{more}, which the local executor does not use: their commands run on this machine, with its own tools and files"
        ),
    )
    .with_severity(spec::Severity::Warning)
    .with_help("install what the steps need here; images are used when steps run on Kubernetes (a Cluster with executor: kubernetes)"))
}

/// Where `maxQueued` of team `team` is written in a Cluster file.
fn max_queued_pos(loaded: &spec::Loaded, team: &str) -> Option<spec::Pos> {
    let spec = spec::capacity::cluster_document(loaded)?.spec.as_ref()?;
    let teams = spec.get("teams")?.as_seq()?;
    let entry = teams.iter().find(|t| {
        t.get("name")
            .and_then(|n| n.as_scalar())
            .is_some_and(|n| n.text == team)
    })?;
    let map = entry.as_map()?;
    map.iter()
        .find(|e| e.key == "maxQueued")
        .map(|e| e.key_pos)
        .or(Some(entry.pos))
}

/// A scalar setting of a loaded Cluster's `spec` (`objects`, `state`, `executor`) and where
/// it is written, if it sets one.
pub fn cluster_setting(loaded: &spec::Loaded, name: &str) -> Option<(String, Option<spec::Pos>)> {
    let spec = spec::capacity::cluster_document(loaded)?.spec.as_ref()?;
    let value = spec.get(name)?;
    let pos = spec
        .as_map()
        .and_then(|m| m.iter().find(|e| e.key == name))
        .map(|e| e.key_pos);
    value.as_scalar().map(|v| (v.text.clone(), pos))
}
