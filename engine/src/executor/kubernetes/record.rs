//! What the pods' runtimes leave in the object store, under each worker's record
//! (`KEY/pods/N/`, `sluice-runtime pod`): `result.json` last, `output.log` and
//! `metrics.jsonl` before it. Read once a pod has ended, so that nothing polls a live pod.

use sluice_runtime::contract::{self, End};
use sluice_runtime::objects::Objects;

use super::Where;

/// Worker record `record`'s end (None: it has none).
pub async fn result(objects: &Objects, record: &str) -> Option<contract::Result> {
    let bytes = objects
        .get_bytes(&format!("{record}/{}", contract::RESULT_FILE))
        .await
        .ok()
        .flatten()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every worker's end, in rank order.
pub async fn results(objects: &Objects, at: &Where) -> Vec<Option<contract::Result>> {
    let mut out = Vec::with_capacity(at.workers as usize);
    for w in 0..at.workers {
        out.push(result(objects, &at.record(w)).await);
    }
    out
}

/// The attempt's end from its workers' (all of them recorded): the first that did not
/// succeed, else rank 0's. None when some worker has no record; an error when none has.
pub fn combine(records: Vec<Option<contract::Result>>) -> Option<Result<contract::Result, String>> {
    if records.iter().all(Option::is_none) {
        return None;
    }
    if records.iter().any(Option::is_none) {
        return Some(Err(
            "some workers of the gang ended without their runtime's record".into(),
        ));
    }
    let all: Vec<contract::Result> = records.into_iter().flatten().collect();
    let unsuccessful = all.iter().position(|r| r.end != End::Succeeded);
    let pick = unsuccessful.unwrap_or(0);
    all.into_iter().nth(pick).map(Ok)
}

/// The values of `metric` rank 0 reported so far.
pub async fn curve(objects: &Objects, at: &Where, metric: &str) -> Vec<(u64, f64)> {
    let key = format!("{}/{}", at.record(0), contract::METRICS_FILE);
    match objects.get_bytes(&key).await {
        Ok(Some(bytes)) => {
            crate::executor::local::files::curve_of(&String::from_utf8_lossy(&bytes), metric)
        }
        _ => Vec::new(),
    }
}

/// The attempt's log, as the local runtime writes a gang's: every worker's lines in time
/// order, a gang's streams marked with their worker (`out[1]`).
pub async fn log(objects: &Objects, at: &Where) -> Vec<u8> {
    let mut lines: Vec<(String, String)> = Vec::new();
    for w in 0..at.workers {
        let key = format!("{}/{}", at.record(w), contract::LOG_FILE);
        let Ok(Some(bytes)) = objects.get_bytes(&key).await else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            let mut parts = line.splitn(3, ' ');
            let (Some(time), Some(stream)) = (parts.next(), parts.next()) else {
                continue;
            };
            let text = parts.next().unwrap_or("");
            let stream = if at.workers > 1 {
                format!("{stream}[{w}]")
            } else {
                stream.to_owned()
            };
            lines.push((time.to_owned(), format!("{time} {stream} {text}\n")));
        }
    }
    // Stable: lines of one worker at the same instant keep their order.
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    lines
        .into_iter()
        .flat_map(|(_, l)| l.into_bytes())
        .collect()
}
