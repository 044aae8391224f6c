//! Submission: a validated pipeline and its parameters become a run in the store, with one
//! row per step instance (fan-out children included where their items are already known).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

use crate::dag::{self, Dag};
use crate::spec::model::{ParamValue, Pipeline};
use crate::store::{self, NewRun, StepRow, Store};

use super::state::step;

/// A new run id: 12 hex digits, random, so that a short prefix names a run unambiguously.
pub fn new_run_id() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

/// Where a submitted pipeline comes from and where its objects go.
pub struct Origin<'a> {
    /// The YAML text as submitted.
    pub source: &'a str,
    /// The folder holding the file: steps' default working directory.
    pub workdir: &'a str,
    /// The object store's URL.
    pub objects: &'a str,
    /// Which document of the file, when it holds several.
    pub document: Option<String>,
    /// The Cluster file given with `--cluster`, as the run keeps it (`cluster::stored`).
    pub cluster: Option<String>,
    /// The team's `maxQueued`: the run is refused if it would take the team past it.
    pub max_queued: Option<u64>,
    /// The applied document's version it runs, and the schedule that fired it.
    pub applied_version: Option<i64>,
    pub schedule: Option<String>,
}

/// Records a new run of `pipeline` and returns its id.
pub async fn submit(
    store: &Store,
    pipeline: &Pipeline,
    dag: &Dag,
    params: BTreeMap<String, ParamValue>,
    origin: Origin<'_>,
) -> Result<String, store::Error> {
    let max_queued = origin.max_queued;
    let run = prepare(pipeline, dag, params, origin);
    store.create_run(&run, max_queued).await?;
    Ok(run.id)
}

/// The rows of a new run of `pipeline` (its id chosen), not yet recorded.
pub fn prepare(
    pipeline: &Pipeline,
    dag: &Dag,
    params: BTreeMap<String, ParamValue>,
    origin: Origin<'_>,
) -> NewRun {
    let id = new_run_id();
    let params_json = serde_json::Value::Object(
        params
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect(),
    )
    .to_string();
    let plan = dag::plan::expand(pipeline, dag, params);
    let mut steps = Vec::with_capacity(plan.instances);
    // Rows in file order: `status` lists steps as the file does.
    let mut instances: Vec<&dag::plan::Instance> = plan
        .levels
        .iter()
        .flat_map(|l| l.steps.iter())
        .chain(plan.on_exit.iter())
        .collect();
    let order: std::collections::HashMap<&str, usize> = pipeline
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    instances.sort_by_key(|i| {
        (
            order.get(i.step.as_str()).copied().unwrap_or(usize::MAX),
            i.index,
        )
    });
    for inst in instances {
        steps.push(StepRow {
            name: inst.name.clone(),
            step: inst.step.clone(),
            item: inst.item.as_ref().map(ToString::to_string),
            state: step::PENDING,
            ..StepRow::default()
        });
    }
    NewRun {
        id,
        name: pipeline.metadata.name.clone(),
        team: pipeline.metadata.team.clone(),
        file: pipeline.path.clone(),
        workdir: origin.workdir.to_owned(),
        objects: origin.objects.to_owned(),
        source: origin.source.to_owned(),
        document: origin.document,
        params: params_json,
        cluster: origin.cluster,
        steps,
        applied_version: origin.applied_version,
        schedule: origin.schedule,
    }
}
