//! Names and labels of an attempt's Kubernetes objects: pure functions of the attempt, so that
//! creating them again (a server killed between its commit and the create, or a new leader)
//! names the same objects, and "already exists" means "already created".

use sha2::{Digest, Sha256};

use crate::executor::AttemptId;

/// Every object sluice makes carries this label; the executor's watch selects on it.
pub const MANAGED: &str = "sluice.dev/managed";
pub const TEAM: &str = "sluice.dev/team";
pub const RUN: &str = "sluice.dev/run";
pub const STEP: &str = "sluice.dev/step";
pub const ATTEMPT: &str = "sluice.dev/attempt";
pub const WORKER: &str = "sluice.dev/worker";
/// The step instance's own name (`evaluate[1]`), which a label value cannot always hold.
pub const STEP_ANNOTATION: &str = "sluice.dev/step-name";

/// Room left in a 63-character name for `-WORKER` (gangs are at most a few hundred workers).
const BASE_MAX: usize = 56;

/// The lower-case, `[a-z0-9-]` form of `text`, starting with a letter (a Service's name must).
fn dns(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    let trimmed = out.trim_matches('-');
    if trimmed.starts_with(|c: char| c.is_ascii_lowercase()) {
        trimmed.to_owned()
    } else {
        format!("s-{trimmed}")
    }
}

fn hash8(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The attempt's base name: `RUN-STEP-ATTEMPT` made a DNS label, shortened with a hash of the
/// whole when too long (and whenever the cleaning changed it, so that `a.b` and `a-b` differ).
pub fn base(id: &AttemptId) -> String {
    let whole = format!("{}-{}-{}", id.run, id.step, id.number);
    let clean = dns(&whole);
    if clean == whole && clean.len() <= BASE_MAX {
        return clean;
    }
    let hash = hash8(&whole);
    let keep = BASE_MAX - hash.len() - 1;
    let head: String = clean.chars().take(keep).collect();
    format!("{}-{hash}", head.trim_end_matches('-'))
}

/// Worker `worker`'s pod.
pub fn pod(base: &str, worker: u32) -> String {
    format!("{base}-{worker}")
}

/// A label value: at most 63 of `[A-Za-z0-9._-]`, starting and ending alphanumeric; longer or
/// other text is shortened with a hash.
pub fn label_value(text: &str) -> String {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let clean: String = text.chars().map(|c| if ok(c) { c } else { '-' }).collect();
    let clean = clean
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned();
    if clean == text && clean.len() <= 63 {
        return clean;
    }
    let hash = hash8(text);
    let head: String = clean.chars().take(63 - 9).collect();
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

/// The labels of an attempt's objects (`worker` for pods).
pub fn labels(team: &str, id: &AttemptId, worker: Option<u32>) -> Vec<(String, String)> {
    let mut out = vec![
        (MANAGED.to_owned(), "true".to_owned()),
        (TEAM.to_owned(), label_value(team)),
        (RUN.to_owned(), label_value(&id.run)),
        (STEP.to_owned(), label_value(&id.step)),
        (ATTEMPT.to_owned(), id.number.to_string()),
    ];
    if let Some(w) = worker {
        out.push((WORKER.to_owned(), w.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(run: &str, step: &str, number: i64) -> AttemptId {
        AttemptId {
            run: run.into(),
            step: step.into(),
            number,
        }
    }

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }

    #[test]
    fn names_are_dns_labels_stable_and_distinct() {
        let cases = [
            id("diamond-20261206-abc", "fetch", 1),
            id("Diamond_Run", "evaluate[12]", 3),
            id("0abc", "x", 1),
            id(&"r".repeat(80), &"s".repeat(80), 7),
            id("a.b", "c", 1),
            id("a-b", "c", 1),
        ];
        let mut seen = std::collections::HashSet::new();
        for c in &cases {
            let b = base(c);
            assert!(is_dns_label(&b), "{b}");
            assert!(is_dns_label(&pod(&b, 255)), "{b}");
            assert_eq!(b, base(c), "a pure function");
            assert!(seen.insert(b.clone()), "{b} named twice");
        }
        assert_eq!(base(&cases[0]), "diamond-20261206-abc-fetch-1");
    }

    #[test]
    fn label_values_are_valid_and_keep_plain_names() {
        assert_eq!(label_value("vision"), "vision");
        for t in ["evaluate[1]", "-x-", &"y".repeat(100), "[]"] {
            let v = label_value(t);
            assert!(v.len() <= 63 && !v.is_empty(), "{v}");
            assert!(v.starts_with(|c: char| c.is_ascii_alphanumeric()), "{v}");
            assert!(v.ends_with(|c: char| c.is_ascii_alphanumeric()), "{v}");
        }
        assert_ne!(label_value("evaluate[1]"), label_value("evaluate-1"));
    }
}
