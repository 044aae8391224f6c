//! The API objects: every object as JSON, one global resource version, the watch history.
//!
//! Objects are kept as `serde_json::Value` (what a client sent, plus what the API server
//! fills in), so the fake speaks the protocol rather than sharing Rust types with its
//! clients.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

/// A resource the fake serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub plural: &'static str,
    pub kind: &'static str,
    pub api_version: &'static str,
    pub namespaced: bool,
}

pub const KINDS: [Kind; 6] = [
    Kind::new("nodes", "Node", "v1", false),
    Kind::new("pods", "Pod", "v1", true),
    Kind::new("services", "Service", "v1", true),
    Kind::new("events", "Event", "v1", true),
    Kind::new("secrets", "Secret", "v1", true),
    Kind::new("jobs", "Job", "batch/v1", true),
];

impl Kind {
    const fn new(
        plural: &'static str,
        kind: &'static str,
        api_version: &'static str,
        namespaced: bool,
    ) -> Self {
        Kind {
            plural,
            kind,
            api_version,
            namespaced,
        }
    }

    /// The kind served under `plural` in the group `api_version` (`v1`, `batch/v1`).
    pub fn find(api_version: &str, plural: &str) -> Option<Kind> {
        KINDS
            .into_iter()
            .find(|k| k.plural == plural && k.api_version == api_version)
    }

    pub fn named(plural: &str) -> Kind {
        KINDS
            .into_iter()
            .find(|k| k.plural == plural)
            .unwrap_or(KINDS[1])
    }
}

/// One watch event, as sent on the wire (`{"type","object"}`), with its resource version.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub plural: &'static str,
    pub kind: &'static str,
    pub object: Value,
}

/// An API error, answered as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<(String, String)>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(plural: &str, name: &str) -> Self {
        ApiError {
            details: Some((name.to_owned(), plural.to_owned())),
            ..Self::new(404, "NotFound", format!("{plural} \"{name}\" not found"))
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": self.reason, "code": self.code,
            "message": self.message,
        });
        if let Some((name, kind)) = &self.details {
            v["details"] = json!({"name": name, "kind": kind});
        }
        v
    }
}

/// How many times a pod name was created, for `GET /fake/pods`.
#[derive(Debug, Clone)]
pub struct PodRecord {
    pub node: String,
    pub created: u64,
    pub deleted: bool,
    pub phase: String,
}

pub struct Store {
    rv: u64,
    uids: u64,
    /// (plural, namespace or "", name) -> object.
    objects: BTreeMap<(&'static str, String, String), Value>,
    history: VecDeque<Arc<Change>>,
    history_max: usize,
    /// The newest resource version no longer in the history: a watch from before it is 410.
    pub compacted: u64,
    pub tx: broadcast::Sender<Arc<Change>>,
    pub calls: BTreeMap<String, u64>,
    pub pods: BTreeMap<(String, String), PodRecord>,
    pub bad_images: std::collections::BTreeSet<String>,
    /// The Job controller's memory, by Job uid.
    pub jobs: BTreeMap<String, crate::jobs::Memo>,
    /// The fake Kueue, when `--kueue-gpus` turned it on.
    pub kueue: Option<crate::kueue::Kueue>,
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Store {
    pub fn new(history_max: usize) -> Self {
        let (tx, _) = broadcast::channel(8192);
        Store {
            rv: 0,
            uids: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_max: history_max.max(1),
            compacted: 0,
            tx,
            calls: BTreeMap::new(),
            pods: BTreeMap::new(),
            bad_images: Default::default(),
            jobs: BTreeMap::new(),
            kueue: None,
        }
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The events newer than `rv` still in the history (the caller checked `compacted`).
    pub fn since(&self, rv: u64) -> Vec<Arc<Change>> {
        self.history.iter().filter(|c| c.rv > rv).cloned().collect()
    }

    fn emit(&mut self, plural: &'static str, kind: &'static str, object: Value) {
        let change = Arc::new(Change {
            rv: self.rv,
            plural,
            kind,
            object,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_max {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.tx.send(change);
    }

    fn uid(&mut self) -> String {
        self.uids += 1;
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64;
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (nanos >> 32) as u32,
            (nanos >> 16) & 0xffff,
            nanos & 0xfff,
            self.uids & 0xfff,
            self.uids
        )
    }

    pub fn get(&self, plural: &'static str, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(plural, ns.to_owned(), name.to_owned()))
    }

    /// Every object of `plural` (in `ns` when given), in name order.
    pub fn list(&self, plural: &'static str, ns: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((p, n, _), _)| *p == plural && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Creates `obj` (kind, apiVersion and the server's metadata filled in): ADDED.
    pub fn create(&mut self, kind: Kind, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        let meta = obj
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
        let Some(meta) = meta.filter(|m| m.is_object()) else {
            return Err(ApiError::bad_request("metadata is not an object"));
        };
        let mut name = meta["name"].as_str().unwrap_or_default().to_owned();
        if name.is_empty()
            && let Some(prefix) = meta["generateName"].as_str()
        {
            name = format!("{prefix}{:05x}", (self.uids * 7919 + self.rv) % 0xfffff);
        }
        if name.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "{} \"\" is invalid: metadata.name: Required value",
                    kind.kind
                ),
            ));
        }
        let ns = if kind.namespaced { ns } else { "" };
        let key = (kind.plural, ns.to_owned(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError {
                details: Some((name.clone(), kind.plural.to_owned())),
                ..ApiError::new(
                    409,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", kind.plural),
                )
            });
        }
        self.rv += 1;
        let uid = self.uid();
        meta["name"] = json!(name);
        meta["uid"] = json!(uid);
        meta["resourceVersion"] = json!(self.rv.to_string());
        meta["creationTimestamp"] = json!(now());
        if kind.namespaced {
            meta["namespace"] = json!(ns);
        }
        obj["kind"] = json!(kind.kind);
        obj["apiVersion"] = json!(kind.api_version);
        self.objects.insert(key, obj.clone());
        self.emit(kind.plural, "ADDED", obj.clone());
        Ok(obj)
    }

    /// Changes an object in place (if it is there and, when `uid` is given, still the same
    /// object): MODIFIED, unless `change` left it as it was.
    pub fn update(
        &mut self,
        plural: &'static str,
        ns: &str,
        name: &str,
        uid: Option<&str>,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let key = (plural, ns.to_owned(), name.to_owned());
        let obj = self.objects.get_mut(&key)?;
        if uid.is_some_and(|u| obj["metadata"]["uid"].as_str() != Some(u)) {
            return None;
        }
        let before = obj.clone();
        change(obj);
        if *obj == before {
            return Some(before);
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let obj = obj.clone();
        self.emit(plural, "MODIFIED", obj.clone());
        Some(obj)
    }

    /// Removes an object: DELETED (with a new resource version, as the API server does).
    pub fn remove(
        &mut self,
        plural: &'static str,
        ns: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Option<Value> {
        let key = (plural, ns.to_owned(), name.to_owned());
        let obj = self.objects.get(&key)?;
        if uid.is_some_and(|u| obj["metadata"]["uid"].as_str() != Some(u)) {
            return None;
        }
        let mut obj = self.objects.remove(&key)?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(plural, "DELETED", obj.clone());
        Some(obj)
    }
}

/// `obj` at a dotted path (`metadata.name`, `spec.nodeName`), as text ("" when missing).
pub fn field(obj: &Value, path: &str) -> String {
    let v = path.split('.').fold(obj, |v, key| &v[key]);
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
