//! The pipeline, parameters and deadline a run was submitted with, read again from what it
//! stored. What cannot be read is an error naming the run, never a default.

use std::collections::BTreeMap;

use super::Error;
use crate::spec::model::{Document, ParamType, ParamValue, Pipeline};
use crate::store::RunRow;

/// The pipeline a run was submitted with, read again from the text it stored.
pub fn pipeline_of(run: &RunRow) -> Result<Pipeline, Error> {
    let loaded = crate::spec::load(&run.file, run.source.clone());
    if loaded.diagnostics.has_errors() {
        return Err(Error::Invalid(format!(
            "run {} holds a pipeline this version cannot read: {}",
            run.id,
            loaded
                .diagnostics
                .into_sorted()
                .first()
                .map(ToString::to_string)
                .unwrap_or_default()
        )));
    }
    let mut found = None;
    for d in loaded.documents {
        let p = match d {
            Document::Pipeline(p) => *p,
            Document::Sweep(mut s) => {
                if run.document.as_ref().is_some_and(|n| &s.metadata.name != n) {
                    continue;
                }
                // `-p NAME=SPEC` given with the file, kept as the run's parameters.
                let overrides: Vec<(String, String)> =
                    stored_params::<String>(run)?.into_iter().collect();
                if crate::spec::oneline::apply(&mut s, &overrides).is_err() {
                    continue;
                }
                Pipeline::of_sweep(&s, &run.file)
            }
            Document::Schedule(_) | Document::Pending(_) => continue,
        };
        if run.document.as_ref().is_none_or(|n| &p.metadata.name == n) {
            found = Some(p);
            break;
        }
    }
    found.ok_or_else(|| Error::Invalid(format!("run {} holds no pipeline", run.id)))
}

/// The run's stored parameters, by name.
fn stored_params<T: serde::de::DeserializeOwned>(
    run: &RunRow,
) -> Result<BTreeMap<String, T>, Error> {
    serde_json::from_str(&run.params).map_err(|e| {
        Error::Invalid(format!(
            "run {} holds parameters that cannot be read ({e}): {}",
            run.id, run.params
        ))
    })
}

/// The run's parameters, typed as its pipeline declares them.
pub(super) fn params_of(run: &RunRow, p: &Pipeline) -> Result<BTreeMap<String, ParamValue>, Error> {
    let json: BTreeMap<String, serde_json::Value> = stored_params(run)?;
    let mut out = BTreeMap::new();
    for (name, v) in json {
        let ty = p.param(&name).map(|p| p.ty);
        let value = match (ty, v) {
            (Some(ParamType::Int), serde_json::Value::Number(n)) if n.is_i64() => {
                ParamValue::Int(n.as_i64().unwrap_or_default())
            }
            (_, serde_json::Value::Number(n)) => match n.as_f64() {
                Some(f) => ParamValue::Float(f),
                None => {
                    return Err(Error::Invalid(format!(
                        "run {}: parameter '{name}' holds {n}, which is not a number this version can read",
                        run.id
                    )));
                }
            },
            (_, serde_json::Value::Bool(b)) => ParamValue::Bool(b),
            (_, serde_json::Value::Array(a)) => ParamValue::List(a),
            (_, serde_json::Value::String(s)) => ParamValue::String(s),
            (_, other) => ParamValue::String(other.to_string()),
        };
        out.insert(name, value);
    }
    Ok(out)
}

/// When the run times out (unix ms), from its pipeline's `timeout` and its creation time.
pub(super) fn deadline_of(run: &RunRow, p: &Pipeline) -> Result<Option<i64>, Error> {
    let Some(timeout) = p.timeout else {
        return Ok(None);
    };
    let created = crate::time::parse_rfc3339(&run.created_at).ok_or_else(|| {
        Error::Invalid(format!(
            "run {} holds a creation time that cannot be read: '{}'",
            run.id, run.created_at
        ))
    })?;
    Ok(Some(created.saturating_add(
        i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
    )))
}
