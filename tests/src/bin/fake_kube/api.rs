//! The Kubernetes API routes: discovery, then create, get, list, watch and delete of the
//! kinds in [`crate::store::KINDS`], and `pods/{name}/log`.
//!
//! Paths are parsed by hand (`/api/v1[/namespaces/NS]/PLURAL[/NAME[/log]]`,
//! `/apis/batch/v1[/namespaces/NS]/jobs[/NAME]`) so that every kind shares one handler.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::Shared;
use crate::select::Selector;
use crate::store::{ApiError, Kind, PodRecord, field};

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .fallback(dispatch)
}

/// A JSON answer.
pub fn reply(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub fn fail(e: &ApiError) -> Response {
    reply(e.code, &e.status())
}

async fn version() -> Response {
    reply(
        200,
        &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake",
                "platform": "linux/amd64"}),
    )
}

async fn api_versions() -> Response {
    reply(
        200,
        &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": "127.0.0.1"}]}),
    )
}

async fn api_groups() -> Response {
    let v = json!({"groupVersion": "batch/v1", "version": "v1"});
    reply(
        200,
        &json!({"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [{"name": "batch", "versions": [v], "preferredVersion": v}]}),
    )
}

/// What a request asks for.
struct Target {
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    log: bool,
}

fn target(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("v1", rest),
        ["apis", "batch", "v1", rest @ ..] => ("batch/v1", rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name, log) = match rest {
        [p] => (*p, None, false),
        [p, n] => (*p, Some((*n).to_owned()), false),
        ["pods", n, "log"] => ("pods", Some((*n).to_owned()), true),
        _ => return None,
    };
    let kind = Kind::find(group, plural)?;
    // A namespaced object is named in its namespace; a cluster-scoped one never is.
    if (kind.namespaced && name.is_some() && ns.is_none()) || (!kind.namespaced && ns.is_some()) {
        return None;
    }
    Some(Target {
        kind,
        ns,
        name,
        log,
    })
}

async fn dispatch(State(app): State<Shared>, req: Request) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let q: HashMap<String, String> = Query::try_from_uri(&uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let Some(t) = target(uri.path()) else {
        return fail(&ApiError::new(
            404,
            "NotFound",
            format!("the fake serves no {}", uri.path()),
        ));
    };
    let watching = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (&method, &t.name) {
        (&Method::GET, None) if watching => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, None) => "create",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::PATCH, Some(_)) if !t.log => "patch",
        _ => {
            return fail(&ApiError::new(
                405,
                "MethodNotAllowed",
                format!("the fake does not {method} {}", uri.path()),
            ));
        }
    };
    let resource = if t.log { "pods/log" } else { t.kind.plural };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    {
        let mut store = app.lock();
        *store.calls.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return fail(&ApiError::bad_request(format!("cannot read the body: {e}"))),
    };
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    match verb {
        "watch" => crate::watch::watch(app, t.kind, t.ns, &q),
        "list" => list(&app, t.kind, t.ns.as_deref(), &q),
        "get" if t.log => crate::logs::get(app, &ns, &name, &q).await,
        "get" => match app.lock().get(t.kind.plural, &ns, &name) {
            Some(obj) => reply(200, obj),
            None => fail(&ApiError::not_found(t.kind.plural, &name)),
        },
        "create" => match serde_json::from_slice::<Value>(&body) {
            Ok(obj) => match create(&app, t.kind, &ns, obj) {
                Ok(obj) => reply(201, &obj),
                Err(e) => fail(&e),
            },
            Err(e) => fail(&ApiError::bad_request(format!("the body is not JSON: {e}"))),
        },
        "patch" => patch(&app, t.kind, &ns, &name, &content_type, &body),
        _ => delete(&app, t.kind, &ns, &name, &q, &body),
    }
}

/// PATCH with a JSON merge patch (RFC 7386) or a strategic merge patch, which the fake applies
/// as a merge patch: right for maps and scalars (`spec.suspend`, labels, annotations), not
/// for lists merged by key (a list in the patch replaces the whole list). JSON patch and
/// server-side apply are refused (415).
fn patch(
    app: &Shared,
    kind: Kind,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &[u8],
) -> Response {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if !matches!(
        media,
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    ) {
        return fail(&ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the fake applies merge and strategic merge patches, not {media:?}"),
        ));
    }
    let change: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return fail(&ApiError::bad_request(format!(
                "the patch is not JSON: {e}"
            )));
        }
    };
    if !change.is_object() {
        return fail(&ApiError::bad_request("the patch is not a JSON object"));
    }
    match app.lock().update(kind.plural, ns, name, None, |obj| {
        let kept = [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
        ]
        .map(|k| (k, obj["metadata"][k].clone()));
        merge(obj, &change);
        for (k, v) in kept {
            match v {
                Value::Null => {}
                v => obj["metadata"][k] = v,
            }
        }
    }) {
        Some(obj) => reply(200, &obj),
        None => fail(&ApiError::not_found(kind.plural, name)),
    }
}

/// RFC 7386: objects merged key by key, `null` removes, anything else replaces. The server's
/// own metadata (name, namespace, uid, resourceVersion) is kept.
pub fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in fields {
        if k.starts_with('$') {
            continue;
        }
        let Some(obj) = target.as_object_mut() else {
            return;
        };
        if v.is_null() {
            obj.remove(k);
        } else {
            merge(obj.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn list(app: &Shared, kind: Kind, ns: Option<&str>, q: &HashMap<String, String>) -> Response {
    let sel = Selector::new(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    );
    let store = app.lock();
    let items: Vec<Value> = store
        .list(kind.plural, ns)
        .into_iter()
        .filter(|o| sel.matches(o))
        .collect();
    reply(
        200,
        &json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": store.rv().to_string()}, "items": items}),
    )
}

/// Creates an object; a pod is handed to the kubelet (the Job controller sees a Job's
/// creation on the store's changes).
pub fn create(app: &Shared, kind: Kind, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
    match kind.plural {
        "secrets" => crate::container::secret_string_data(&mut obj),
        "services" if field(&obj, "spec.clusterIP").is_empty() && obj["spec"].is_object() => {
            obj["spec"]["clusterIP"] = json!("127.0.0.1");
        }
        "pods" if !obj["status"].is_object() || obj["status"]["phase"].is_null() => {
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        _ => {}
    }
    let made = app.lock().create(kind, ns, obj)?;
    if kind.plural == "pods" {
        let name = field(&made, "metadata.name");
        let mut store = app.lock();
        let record = store
            .pods
            .entry((ns.to_owned(), name))
            .or_insert(PodRecord {
                node: String::new(),
                created: 0,
                deleted: false,
                phase: String::new(),
            });
        record.created += 1;
        record.deleted = false;
        record.node = field(&made, "spec.nodeName");
        record.phase = "Pending".into();
        drop(store);
        crate::kubelet::start(app.clone(), made.clone());
    }
    Ok(made)
}

/// An integer option of a delete, from its body (`DeleteOptions`) or its query.
fn delete_option(q: &HashMap<String, String>, body: &Value, key: &str) -> Option<String> {
    match &body[key] {
        Value::Null => q.get(key).cloned(),
        Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

fn delete(
    app: &Shared,
    kind: Kind,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Response {
    let opts: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let grace = delete_option(q, &opts, "gracePeriodSeconds").and_then(|g| g.parse::<i64>().ok());
    let policy = delete_option(q, &opts, "propagationPolicy").unwrap_or_default();
    let result = match kind.plural {
        "pods" => crate::kubelet::delete(app, ns, name, grace),
        "jobs" => crate::jobs::delete(app, ns, name, &policy),
        _ => app.lock().remove(kind.plural, ns, name, None),
    };
    match result {
        Some(obj) => reply(200, &obj),
        None => fail(&ApiError::not_found(kind.plural, name)),
    }
}

/// A chunked body from a channel of byte chunks: it ends when the sender is dropped.
pub fn channel_body(rx: tokio::sync::mpsc::Receiver<Vec<u8>>) -> Body {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    Body::from_stream(stream)
}
