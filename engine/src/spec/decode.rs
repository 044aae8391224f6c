//! Helpers that read typed values out of the node tree, reporting every problem.
//!
//! Each helper returns `None` after reporting an error, so a decoder goes on to the next field
//! and a file's problems are all found in one pass. Messages name the field by its path
//! relative to the thing being read (`retry.limit`) and the expected type in words.

use std::time::Duration;

use super::diagnostic::{Diagnostics, Pos};
use super::template::{self, Scope, Template};
use super::units;
use super::yaml::{Entry, Node, Source, Typed, Value};

/// A templated field as read; its errors are reported. `template` holds every reference that
/// parsed (a bad one is left as text) so that those are checked too; with errors it never
/// runs, as the file does not validate.
pub struct Templated {
    pub template: Template,
    /// No template error was found.
    pub clean: bool,
}

pub struct Cx<'a> {
    pub src: &'a Source,
    pub d: &'a mut Diagnostics,
}

impl Cx<'_> {
    /// Reports a wrong type: `FIELD: expected WHAT, found X`.
    pub fn expected(&mut self, node: &Node, field: &str, what: &str) {
        let found = node.describe();
        let d = self
            .d
            .error(node.pos, format!("{field}: expected {what}, found {found}"));
        if let Value::Scalar(s) = &node.value
            && s.plain
            && what.starts_with("a string")
            && !matches!(s.typed(), Typed::Null)
        {
            d.help(format!(
                "YAML reads this as {found}; quote it: \"{}\"",
                s.text
            ));
        }
        if let Value::Scalar(s) = &node.value
            && !s.plain
        {
            if what == "true or false" && matches!(s.text.as_str(), "true" | "false" | "yes" | "no")
            {
                d.help("write true or false, without quotes");
            } else if (what.starts_with("a number") || what.ends_with("integer"))
                && s.text.parse::<f64>().is_ok()
            {
                d.help(format!("write {}, without quotes", s.text));
            }
        }
        if let Value::Scalar(s) = &node.value
            && what.starts_with("a list")
            && !matches!(s.typed(), Typed::Null)
            && (s.text.contains(',') || !s.text.contains(' '))
        {
            let items: Vec<&str> = s
                .text
                .split(',')
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .collect();
            d.help(format!(
                "write a YAML list: {field}: [{}]",
                items.join(", ")
            ));
        }
    }

    /// The entries of a mapping, after reporting any key not in `allowed`.
    pub fn fields<'n>(
        &mut self,
        node: &'n Node,
        field: &str,
        allowed: &[&str],
    ) -> Option<&'n [Entry]> {
        self.fields_and(node, field, allowed, false)
    }

    /// [`fields`](Self::fields) of a resource map (`resources`, `quota`, `borrowLimit`,
    /// `price`): keys naming extended resources (`nvidia.com/mig-1g.10gb`) are allowed too.
    /// `nvidia.com/gpu` is refused: it is `gpu`.
    pub fn resource_fields<'n>(
        &mut self,
        node: &'n Node,
        field: &str,
        allowed: &[&str],
    ) -> Option<&'n [Entry]> {
        self.fields_and(node, field, allowed, true)
    }

    fn fields_and<'n>(
        &mut self,
        node: &'n Node,
        field: &str,
        allowed: &[&str],
        extended: bool,
    ) -> Option<&'n [Entry]> {
        let Some(entries) = node.as_map() else {
            self.expected(node, field, "a mapping");
            return None;
        };
        for e in entries {
            if extended && crate::scheduler::extended::GPU_NAMES.contains(&e.key.as_str()) {
                self.d
                    .error(e.key_pos, format!("write 'gpu', not '{}', in {field}", e.key))
                    .help("sluice counts GPUs as gpu: N and asks Kubernetes for nvidia.com/gpu itself");
                continue;
            }
            if extended && crate::scheduler::extended::is_name(&e.key) {
                continue;
            }
            if !allowed.contains(&e.key.as_str()) {
                let where_ = if field.is_empty() {
                    String::new()
                } else {
                    format!(" in {field}")
                };
                let d = self
                    .d
                    .error(e.key_pos, format!("unknown field '{}'{where_}", e.key));
                // Suggest only fields not already set: `namespace` is not a typo of a `name`
                // that is right there.
                let unset = allowed
                    .iter()
                    .copied()
                    .filter(|a| !entries.iter().any(|x| x.key == *a));
                d.suggest(&e.key, unset);
                if let Some(hint) = moved_field(&e.key, field) {
                    d.help.clear();
                    d.help(hint);
                }
                if d.help.is_empty() {
                    d.help(format!("expected one of: {}", allowed.join(", ")));
                }
                if extended && d.help.iter().all(|h| !h.contains("did you mean")) {
                    d.help(
                        "or an extended resource, named DOMAIN/NAME as on Kubernetes: nvidia.com/mig-1g.10gb",
                    );
                }
            }
        }
        Some(entries)
    }

    pub fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match node.as_scalar().map(|s| s.typed()) {
            Some(Typed::Str(s)) => Some(s.to_owned()),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    /// A string that must not contain templates (templates work only in some fields).
    pub fn plain_string(&mut self, node: &Node, field: &str) -> Option<String> {
        let s = self.string(node, field)?;
        if let Some(at) = find_template(&s) {
            let pos = self.pos_in(node, &s, at, "{{");
            self.d
                .error(pos, format!("templates are not expanded in '{field}'"))
                .help("templates work in run, command, env, workdir, when, forEach and cache.key");
            return None;
        }
        Some(s)
    }

    /// A scalar of any type read as text (env values: `PORT: 8080` is fine).
    pub fn text(&mut self, node: &Node, field: &str) -> Option<String> {
        match node.as_scalar() {
            Some(s) if s.typed() != Typed::Null => Some(s.text.clone()),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    pub fn bool(&mut self, node: &Node, field: &str) -> Option<bool> {
        match node.as_scalar().map(|s| s.typed()) {
            Some(Typed::Bool(b)) => Some(b),
            _ => {
                self.expected(node, field, "true or false");
                None
            }
        }
    }

    /// A whole number of at least `min` (`min` 0: non-negative; 1: positive).
    pub fn uint(&mut self, node: &Node, field: &str, min: u64) -> Option<u64> {
        let what = if min == 0 {
            "a non-negative integer"
        } else {
            "a positive integer"
        };
        match node.as_scalar().map(|s| s.typed()) {
            Some(Typed::Int(i)) if i >= 0 && i as u64 >= min => Some(i as u64),
            _ => {
                self.expected(node, field, what);
                None
            }
        }
    }

    pub fn u32(&mut self, node: &Node, field: &str, min: u64) -> Option<u32> {
        let n = self.uint(node, field, min)?;
        match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.d.error(node.pos, format!("{field}: {n} is too large"));
                None
            }
        }
    }

    pub fn number(&mut self, node: &Node, field: &str) -> Option<f64> {
        match node.as_scalar().map(|s| s.typed()) {
            Some(Typed::Int(i)) => Some(i as f64),
            Some(Typed::Float(f)) if f.is_finite() => Some(f),
            _ => {
                self.expected(node, field, "a number");
                None
            }
        }
    }

    pub fn duration(&mut self, node: &Node, field: &str) -> Option<Duration> {
        const WHAT: &str = "a duration such as 90s, 15m or 1h30m";
        match node.as_scalar().map(|s| s.typed()) {
            Some(Typed::Str(s)) => match units::parse_duration(s) {
                Ok(d) => Some(d),
                Err(why) => {
                    self.d
                        .error(node.pos, format!("{field}: expected {WHAT}, found {:?}", s))
                        .help(why);
                    None
                }
            },
            Some(Typed::Int(i)) => {
                self.expected(node, field, WHAT);
                self.d
                    .push_help_last(format!("add a unit: '{i}s' or '{i}m'"));
                None
            }
            _ => {
                self.expected(node, field, WHAT);
                None
            }
        }
    }

    /// A list of strings (each without templates): the good items, after reporting the
    /// others, so that a bad item does not hide what is wrong with the rest (a `needs` entry
    /// naming no step). `None` when it is not a list.
    pub fn string_list(
        &mut self,
        node: &Node,
        field: &str,
        what: &str,
    ) -> Option<Vec<(String, Pos)>> {
        let Some(items) = node.as_seq() else {
            self.expected(node, field, what);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if let Some(s) = self.plain_string(item, field) {
                out.push((s, item.pos));
            }
        }
        Some(out)
    }

    /// Parses a templated string, reporting every template error at its own column.
    pub fn template(&mut self, node: &Node, field: &str, scope: Scope<'_>) -> Option<Templated> {
        let text = self.string(node, field)?;
        Some(self.template_of(node, &text, scope))
    }

    /// Parses `text`, the decoded text of `node`, to its end: one bad reference does not hide
    /// the next, nor the references that parsed from the checks that follow.
    pub fn template_of(&mut self, node: &Node, text: &str, scope: Scope<'_>) -> Templated {
        let (mut template, errors) = Template::parse_partial(text, scope);
        let clean = errors.is_empty();
        self.template_errors(node, text, errors);
        for part in &mut template.parts {
            if let template::Part::Ref(r) = part {
                r.pos = self.pos_in(node, text, r.offset, &r.raw);
            }
        }
        Templated { template, clean }
    }

    /// Reports errors found in templates of `text`, the decoded text of `node`.
    pub fn template_errors(&mut self, node: &Node, text: &str, errors: Vec<template::Error>) {
        for e in errors {
            let pos = self.pos_in(node, text, e.offset, &e.raw);
            let d = self.d.error(pos, e.message);
            if let Some(h) = e.help {
                d.help(h);
            }
        }
    }

    /// Where `needle`, found at byte `offset` of a scalar's decoded text, stands in the
    /// source. Plain and quoted scalars hold it literally; when it cannot be found (an escape
    /// or a folded line changed it), the scalar's own position is the best answer.
    pub fn pos_in(&self, node: &Node, text: &str, offset: usize, needle: &str) -> Pos {
        if needle.is_empty() {
            return node.pos;
        }
        let nth = text
            .get(..offset)
            .map_or(0, |before| before.matches(needle).count());
        let Some(raw) = self.src.text.get(node.start..node.end.max(node.start)) else {
            return node.pos;
        };
        match raw.match_indices(needle).nth(nth) {
            Some((i, _)) => self.src.pos_of(node.start + i),
            None => node.pos,
        }
    }
}

impl Diagnostics {
    /// Adds a help line to the last diagnostic (used after a shared helper reported it).
    pub fn push_help_last(&mut self, help: String) {
        if let Some(last) = self.last_mut() {
            last.help.push(help);
        }
    }
}

/// Help for fields that are real, but in another place (`labels` at the top level) or named
/// otherwise in sluice (Kubernetes' `namespace`).
fn moved_field(key: &str, field: &str) -> Option<String> {
    const SPEC: &[&str] = &[
        "params",
        "defaults",
        "parallelism",
        "failFast",
        "timeout",
        "onExit",
        "steps",
    ];
    match (field, key) {
        ("", "name" | "team" | "labels") => Some(format!("'{key}' belongs under metadata:")),
        ("", k) if SPEC.contains(&k) => Some(format!("'{key}' belongs under spec:")),
        ("metadata", "namespace") => {
            Some("sluice names a document's tenant with metadata.team".to_owned())
        }
        _ => None,
    }
}

/// The byte offset of the first unescaped `{{`.
pub fn find_template(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find("{{") {
        let at = from + i;
        if at > 0 && s.as_bytes()[at - 1] == b'\\' {
            from = at + 2;
            continue;
        }
        return Some(at);
    }
    None
}

/// What is wrong with `name` under the naming rule of documents, steps, teams and priority
/// classes (lowercase letters, digits and '-', starting with a letter, at most 63), or
/// `None` when it follows it.
pub fn name_problem(name: &str) -> Option<String> {
    let Some(first) = name.chars().next() else {
        return Some("it is empty".into());
    };
    let mut problems: Vec<String> = Vec::new();
    if !first.is_ascii_alphabetic() {
        problems.push(format!("it starts with {first:?}"));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        problems.push("it has uppercase letters".into());
    }
    let mut others: Vec<char> = name
        .chars()
        .filter(|c| !(c.is_ascii_alphanumeric() || *c == '-') && *c != first)
        .collect();
    if !first.is_ascii_alphanumeric() && first != '-' && name[first.len_utf8()..].contains(first) {
        others.push(first);
    }
    others.sort_unstable();
    others.dedup();
    if !others.is_empty() {
        let shown: Vec<String> = others.iter().map(|c| format!("{c:?}")).collect();
        problems.push(format!("it has {}", shown.join(", ")));
    }
    let len = name.chars().count();
    if len > 63 {
        problems.push(format!("it has {len} characters"));
    }
    match problems.len() {
        0 => None,
        1 => problems.pop(),
        _ => {
            let last = problems.pop().unwrap_or_default();
            Some(format!("{} and {last}", problems.join(", ")))
        }
    }
}

impl Cx<'_> {
    /// Reports `value` at `node` if it breaks the naming rule; true when it is valid.
    pub fn check_name(&mut self, node: &Node, what: &str, value: &str) -> bool {
        let Some(problem) = name_problem(value) else {
            return true;
        };
        let d = self.d.error(
            node.pos,
            format!("{what} '{value}' is not a valid name: {problem}"),
        );
        let fixed = fix_name(value);
        let rule = "names use lowercase letters, digits and '-', start with a letter and have at most 63 characters";
        if fixed.is_empty() {
            d.help(rule);
        } else {
            d.help(format!("{rule}: try '{fixed}'"));
        }
        false
    }
}

/// A suggested valid name for an invalid one (`Train_Model` -> `train-model`).
pub fn fix_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while out.starts_with(|c: char| !c.is_ascii_lowercase()) && !out.is_empty() {
        out.remove(0);
    }
    out.truncate(63);
    out.trim_end_matches('-').to_owned()
}

/// Identifiers: parameters, environment variables.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Output (artifact) names: a file name under `$SLUICE_OUTPUT_DIR`.
pub fn is_output_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
