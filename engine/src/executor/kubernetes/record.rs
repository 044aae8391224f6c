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

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(end: End, reason: &str) -> contract::Result {
        contract::Result {
            end,
            exit_code: Some(0),
            signal: None,
            started_at: "2026-12-06T00:00:00.000Z".into(),
            ended_at: "2026-12-06T00:00:01.000Z".into(),
            reason: Some(reason.into()),
            metrics: Default::default(),
        }
    }

    #[test]
    fn a_gangs_end_is_its_first_unsuccessful_worker_else_rank_0() {
        assert!(combine(vec![None, None]).is_none(), "nothing recorded yet");
        assert!(
            matches!(
                combine(vec![Some(ended(End::Succeeded, "0")), None]),
                Some(Err(_))
            ),
            "a worker without its record"
        );
        let all = combine(vec![
            Some(ended(End::Succeeded, "0")),
            Some(ended(End::Succeeded, "1")),
        ]);
        assert_eq!(
            all.and_then(Result::ok).and_then(|r| r.reason),
            Some("0".into())
        );
        let failed = combine(vec![
            Some(ended(End::Succeeded, "0")),
            Some(ended(End::Failed, "1")),
            Some(ended(End::Terminated, "2")),
        ]);
        assert_eq!(
            failed.and_then(Result::ok).and_then(|r| r.reason),
            Some("1".into())
        );
    }

    #[tokio::test]
    async fn a_gangs_logs_are_merged_in_time_order_each_line_marked_with_its_worker() {
        let dir = std::env::temp_dir().join(format!("sluice-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp folder");
        let objects = Objects::open(&format!("file://{}", dir.display())).expect("a store");
        let at = Where {
            namespace: "ns".into(),
            base: "b".into(),
            workers: 2,
            key: "teams/t/runs/r/s/1".into(),
            job: false,
        };
        let put = |w: u32, text: &'static str| {
            let objects = objects.clone();
            let key = format!("{}/{}", at.record(w), contract::LOG_FILE);
            async move { objects.put_bytes(&key, text.as_bytes().to_vec()).await }
        };
        put(
            0,
            "2026-12-06T00:00:01.000Z out first\n2026-12-06T00:00:03.000Z err third\n",
        )
        .await
        .expect("put");
        put(1, "2026-12-06T00:00:02.000Z out second has spaces\n")
            .await
            .expect("put");
        let merged = String::from_utf8(log(&objects, &at).await).expect("text");
        assert_eq!(
            merged,
            "2026-12-06T00:00:01.000Z out[0] first\n\
             2026-12-06T00:00:02.000Z out[1] second has spaces\n\
             2026-12-06T00:00:03.000Z err[0] third\n"
        );
        let single = Where { workers: 1, ..at };
        let alone = String::from_utf8(log(&objects, &single).await).expect("text");
        assert!(
            alone.starts_with("2026-12-06T00:00:01.000Z out first\n"),
            "{alone}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
