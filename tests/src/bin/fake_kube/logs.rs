//! `GET pods/{name}/log`: a container's log file, each line stored as `RFC3339NANO TEXT`.
//!
//! The timestamps are stripped unless `timestamps=true`; `sinceSeconds` keeps newer lines;
//! `limitBytes` cuts the answer; `follow=true` streams new lines until the container ends.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use crate::Shared;
use crate::api::{channel_body, fail};
use crate::store::{ApiError, field};

struct Shape {
    timestamps: bool,
    since: Option<DateTime<Utc>>,
}

impl Shape {
    fn line(&self, line: &str) -> Option<String> {
        let (ts, text) = line.split_once(' ').unwrap_or(("", line));
        if let Some(cutoff) = self.since {
            let at = DateTime::parse_from_rfc3339(ts).ok()?;
            if at < cutoff {
                return None;
            }
        }
        Some(if self.timestamps {
            format!("{line}\n")
        } else {
            format!("{text}\n")
        })
    }
}

pub async fn get(app: Shared, ns: &str, name: &str, q: &HashMap<String, String>) -> Response {
    let Some(pod) = app.lock().get("pods", ns, name).cloned() else {
        return fail(&ApiError::not_found("pods", name));
    };
    let names: Vec<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| pod["spec"][l].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    let container = match q.get("container") {
        Some(c) => c.clone(),
        None => names.first().cloned().unwrap_or_default(),
    };
    if !names.contains(&container) {
        return fail(&ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let uid = field(&pod, "metadata.uid");
    let path = app
        .work
        .join(ns)
        .join(name)
        .join(format!("{container}.log"));
    if !path.is_file() {
        return fail(&ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    let since = q
        .get("sinceSeconds")
        .and_then(|s| s.parse::<i64>().ok())
        .map(|s| Utc::now() - chrono::Duration::seconds(s));
    let shape = Shape {
        timestamps: q.get("timestamps").is_some_and(|t| t == "true"),
        since,
    };
    let limit = q.get("limitBytes").and_then(|l| l.parse::<usize>().ok());
    if q.get("follow").is_some_and(|f| f == "true" || f == "1") {
        return follow(
            app,
            ns.to_owned(),
            name.to_owned(),
            uid,
            container,
            path,
            shape,
        );
    }
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return fail(&ApiError::new(500, "InternalError", format!("log: {e}"))),
    };
    let mut out: String = text.lines().filter_map(|l| shape.line(l)).collect();
    if let Some(limit) = limit {
        let mut cut = limit.min(out.len());
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    ([(header::CONTENT_TYPE, "text/plain")], out).into_response()
}

fn follow(
    app: Shared,
    ns: String,
    name: String,
    uid: String,
    container: String,
    path: std::path::PathBuf,
    shape: Shape,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(256);
    tokio::spawn(async move {
        let mut pos = 0u64;
        let mut partial = String::new();
        loop {
            // Whether it is over is asked before reading: what was written before the end
            // is read below, once more.
            let gone = app
                .lock()
                .get("pods", &ns, &name)
                .is_none_or(|p| field(p, "metadata.uid") != uid);
            let over = gone || app.kubelet.log_done(&uid, &container);
            let mut chunk = Vec::new();
            if let Ok(mut f) = std::fs::File::open(&path)
                && f.seek(SeekFrom::Start(pos)).is_ok()
                && let Ok(n) = f.read_to_end(&mut chunk)
            {
                pos += n as u64;
            }
            partial.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = partial.find('\n') {
                let line: String = partial.drain(..=end).collect();
                if let Some(out) = shape.line(line.trim_end_matches('\n'))
                    && tx.send(out.into_bytes()).await.is_err()
                {
                    return;
                }
            }
            if over || tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    ([(header::CONTENT_TYPE, "text/plain")], channel_body(rx)).into_response()
}
