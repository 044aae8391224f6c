//! Label and field selectors, as list and watch take them.
//!
//! Labels: comma-separated `k=v`, `k==v`, `k!=v`, `k` (exists), `!k` (absent). Set-based
//! forms (`k in (a,b)`) are not understood: such a selector matches nothing. Fields: `path=v`,
//! `path==v`, `path!=v` on any dotted path of the object (`metadata.name`, `spec.nodeName`,
//! `involvedObject.name`, `involvedObject.kind`, `status.phase`); a missing field is "".

use serde_json::Value;

use crate::store::field;

#[derive(Debug, Clone, Default)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    Absent(String),
    Never,
}

fn parse(text: &str, fields: bool) -> Vec<Req> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some((k, v)) = t.split_once("!=") {
                Req::Ne(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Req::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if fields || t.contains(' ') || t.contains('(') {
                Req::Never
            } else if let Some(k) = t.strip_prefix('!') {
                Req::Absent(k.trim().to_owned())
            } else {
                Req::Exists(t.to_owned())
            }
        })
        .collect()
}

impl Selector {
    pub fn new(labels: Option<&str>, fields: Option<&str>) -> Self {
        Selector {
            labels: labels.map(|l| parse(l, false)).unwrap_or_default(),
            fields: fields.map(|f| parse(f, true)).unwrap_or_default(),
        }
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label = |k: &str| labels[k].as_str().map(str::to_owned);
        let labels_ok = self.labels.iter().all(|r| match r {
            Req::Eq(k, v) => label(k).as_deref() == Some(v.as_str()),
            Req::Ne(k, v) => label(k).as_deref() != Some(v.as_str()),
            Req::Exists(k) => label(k).is_some(),
            Req::Absent(k) => label(k).is_none(),
            Req::Never => false,
        });
        labels_ok
            && self.fields.iter().all(|r| match r {
                Req::Eq(k, v) => field(obj, k) == *v,
                Req::Ne(k, v) => field(obj, k) != *v,
                _ => false,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_and_fields() {
        let pod = json!({"metadata": {"name": "a", "labels": {"app": "x", "tier": "web"}},
                         "spec": {"nodeName": "n1"}});
        let yes = |l: Option<&str>, f: Option<&str>| Selector::new(l, f).matches(&pod);
        assert!(yes(Some("app=x,tier==web"), None));
        assert!(yes(Some("app,!gone,tier!=db"), None));
        assert!(!yes(Some("app=y"), None));
        assert!(!yes(Some("!app"), None));
        assert!(yes(None, Some("metadata.name=a,spec.nodeName=n1")));
        assert!(!yes(None, Some("spec.nodeName!=n1")));
        assert!(!yes(Some("app in (x)"), None));
    }
}
