//! Watch streams: newline-delimited `{"type","object"}` events in a chunked answer.
//!
//! From `resourceVersion` R, the events after R still in the history, then live ones, until
//! `timeoutSeconds` (default 300) ends the stream cleanly. Without R (or R = "0"), every
//! current object as ADDED first, as the API server does. An R older than the history: one
//! ERROR event carrying a 410 `Expired` Status, then the end. With `allowWatchBookmarks`, a
//! BOOKMARK every `--bookmark-ms`. `sendInitialEvents` and `resourceVersionMatch` are
//! accepted and ignored.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::Shared;
use crate::api::{channel_body, fail};
use crate::select::Selector;
use crate::store::{ApiError, Change, Kind};

fn line(kind: &str, object: &Value) -> Vec<u8> {
    let mut b = json!({"type": kind, "object": object})
        .to_string()
        .into_bytes();
    b.push(b'\n');
    b
}

fn expired(rv: u64, compacted: u64) -> Vec<u8> {
    let status = ApiError::new(
        410,
        "Expired",
        format!("too old resource version: {rv} ({compacted})"),
    )
    .status();
    line("ERROR", &status)
}

pub fn watch(app: Shared, kind: Kind, ns: Option<String>, q: &HashMap<String, String>) -> Response {
    let sel = Selector::new(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    );
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(300);
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("" | "0") => None,
        Some(rv) => match rv.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                return fail(&ApiError::bad_request(format!(
                    "invalid resourceVersion {rv:?}"
                )));
            }
        },
    };
    let wanted = move |c: &Change| {
        c.plural == kind.plural
            && ns
                .as_deref()
                .is_none_or(|ns| c.object["metadata"]["namespace"].as_str() == Some(ns))
            && sel.matches(&c.object)
    };
    let (first, sub, start_rv) = {
        let store = app.lock();
        let sub = store.tx.subscribe();
        let rv = store.rv();
        let first: Result<Vec<Vec<u8>>, Vec<u8>> = match from {
            Some(r) if r < store.compacted => Err(expired(r, store.compacted)),
            Some(r) => Ok(store
                .since(r)
                .iter()
                .filter(|c| wanted(c))
                .map(|c| line(c.kind, &c.object))
                .collect()),
            None => Ok(store
                .list(kind.plural, None)
                .iter()
                .map(|o| Change {
                    rv,
                    plural: kind.plural,
                    kind: "ADDED",
                    object: o.clone(),
                })
                .filter(&wanted)
                .map(|c| line("ADDED", &c.object))
                .collect()),
        };
        (first, sub, rv)
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>(1024);
    let period = app.bookmark;
    tokio::spawn(async move {
        match first {
            Err(error) => {
                let _ = tx.send(error).await;
            }
            Ok(lines) => {
                for l in lines {
                    if tx.send(l).await.is_err() {
                        return;
                    }
                }
                let until = Duration::from_secs(timeout);
                let _ = tokio::time::timeout(
                    until,
                    live(tx, sub, start_rv, kind, bookmarks, period, wanted),
                )
                .await;
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        channel_body(rx),
    )
        .into_response()
}

async fn live(
    tx: mpsc::Sender<Vec<u8>>,
    mut sub: broadcast::Receiver<Arc<Change>>,
    mut last_rv: u64,
    kind: Kind,
    bookmarks: bool,
    period: Duration,
    wanted: impl Fn(&Change) -> bool,
) {
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick(), if bookmarks => {
                let mark = json!({"kind": kind.kind, "apiVersion": kind.api_version,
                                  "metadata": {"resourceVersion": last_rv.to_string()}});
                if tx.send(line("BOOKMARK", &mark)).await.is_err() {
                    return;
                }
            }
            got = sub.recv() => match got {
                Ok(c) => {
                    if c.rv <= last_rv {
                        continue;
                    }
                    last_rv = c.rv;
                    if wanted(&c) && tx.send(line(c.kind, &c.object)).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // This stream fell behind: the client must re-list, as after a 410.
                    let _ = tx.send(expired(last_rv, last_rv)).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tx.closed() => return,
        }
    }
}
