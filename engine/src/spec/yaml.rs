//! A YAML node tree that keeps the line and column of every node and key.
//!
//! Plain serde decoding stops at the first error and forgets positions, so the loader builds
//! its own tree from granit-parser's events (the pure-Rust parser behind serde-saphyr). The
//! tree resolves aliases (with a budget against alias bombs) and `<<` merge keys, and reports
//! duplicate keys at their later occurrence. Scalars keep their text and whether they were
//! written plain, so that typing follows YAML 1.2's core schema: `true` is a boolean,
//! `"true"` is a string.

use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle, Span};

use super::diagnostic::{Diagnostics, Pos};

/// A file's text with an index of line starts, to turn byte offsets into positions.
#[derive(Debug)]
pub struct Source {
    pub path: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl Source {
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            path: path.into(),
            text,
            line_starts,
        }
    }

    /// The position of a byte offset (clamped to the text).
    pub fn pos_of(&self, offset: usize) -> Pos {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count())
            + 1;
        Pos::new(to_u32(line), to_u32(column))
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A node with its position and the byte range of its source text.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pos: Pos,
    /// Byte range in the source; used to place errors inside a scalar (a template).
    pub start: usize,
    pub end: usize,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// A scalar's text and whether it was written plain (unquoted, not a block scalar).
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub text: String,
    pub plain: bool,
}

/// One `key: value` pair of a mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

/// What a scalar means under YAML 1.2's core schema.
#[derive(Clone, Debug, PartialEq)]
pub enum Typed<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

impl Scalar {
    pub fn typed(&self) -> Typed<'_> {
        if !self.plain {
            return Typed::Str(&self.text);
        }
        let t = self.text.as_str();
        match t {
            "" | "~" | "null" | "Null" | "NULL" => return Typed::Null,
            "true" | "True" | "TRUE" => return Typed::Bool(true),
            "false" | "False" | "FALSE" => return Typed::Bool(false),
            ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
                return Typed::Float(f64::INFINITY);
            }
            "-.inf" | "-.Inf" | "-.INF" => return Typed::Float(f64::NEG_INFINITY),
            ".nan" | ".NaN" | ".NAN" => return Typed::Float(f64::NAN),
            _ => {}
        }
        if let Some(i) = parse_int(t) {
            return Typed::Int(i);
        }
        if is_core_float(t)
            && let Ok(f) = t.parse::<f64>()
        {
            return Typed::Float(f);
        }
        Typed::Str(t)
    }
}

fn parse_int(t: &str) -> Option<i64> {
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if let Some(hex) = t.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = t.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().ok();
    }
    None
}

/// `[-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`
fn is_core_float(t: &str) -> bool {
    let b = t.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - s;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    i == b.len()
}

impl Node {
    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_scalar(&self) -> Option<&Scalar> {
        match &self.value {
            Value::Scalar(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar(s) if s.typed() == Typed::Null)
    }

    /// The value of `key` if this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|e| e.key == key)
            .map(|e| &e.value)
    }

    /// A short description of what the node holds, for "found ..." in type errors.
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Map(m) if m.is_empty() => "an empty mapping".to_owned(),
            Value::Map(_) => "a mapping".to_owned(),
            Value::Seq(s) if s.is_empty() => "an empty list".to_owned(),
            Value::Seq(_) => "a list".to_owned(),
            Value::Scalar(s) => match s.typed() {
                Typed::Null => "nothing".to_owned(),
                Typed::Bool(b) => b.to_string(),
                Typed::Int(i) => i.to_string(),
                Typed::Float(_) => s.text.clone(),
                Typed::Str(t) => {
                    let shown: String = t.chars().take(60).collect();
                    let ellipsis = if shown.len() < t.len() { "..." } else { "" };
                    format!("{:?}", format!("{shown}{ellipsis}"))
                }
            },
        }
    }

    /// Converts to JSON (for `forEach` items and parameter lists).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Map(m) => J::Object(
                m.iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
            Value::Seq(s) => J::Array(s.iter().map(Node::to_json).collect()),
            Value::Scalar(s) => match s.typed() {
                Typed::Null => J::Null,
                Typed::Bool(b) => J::Bool(b),
                Typed::Int(i) => J::from(i),
                Typed::Float(f) => serde_json::Number::from_f64(f)
                    .map_or_else(|| J::String(s.text.clone()), J::Number),
                Typed::Str(t) => J::String(t.to_owned()),
            },
        }
    }
}

/// Nodes an alias may add to a file, in all: far above any real pipeline (a 100,000-step
/// pipeline with a shared anchor per step stays well below), far below an alias bomb.
const ALIAS_BUDGET: usize = 5_000_000;

/// Parses every document of a source. Syntax errors are reported and end the file: YAML
/// after a syntax error cannot be trusted to mean what its author meant.
pub fn parse(source: &Source, diags: &mut Diagnostics) -> Vec<Node> {
    let mut loader = Loader {
        stack: Vec::new(),
        anchors: HashMap::new(),
        docs: Vec::new(),
        alias_nodes: 0,
        budget_reported: false,
    };
    let mut parser = Parser::new_from_str(&source.text);
    loop {
        match parser.next_event() {
            None => break,
            Some(Ok((event, span))) => {
                if let Err(stop) = loader.event(event, span, diags) {
                    diags.error(stop.0, stop.1);
                    break;
                }
            }
            Some(Err(e)) => {
                let m = e.marker();
                let pos = Pos::new(to_u32(m.line().max(1)), to_u32(m.col() + 1));
                diags
                    .error(pos, format!("invalid YAML: {}", e.info()))
                    .help("check the indentation and quoting here, and for an unclosed '[', '{' or quote above");
                break;
            }
        }
    }
    loader.docs
}

enum Frame {
    Seq {
        start: Span,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        start: Span,
        anchor: usize,
        entries: Vec<Entry>,
        /// Where each key of `entries` is, to find a duplicate in constant time (a mapping
        /// of 100,000 keys must not cost 100,000² comparisons).
        seen: HashMap<String, Pos>,
        key: Option<Node>,
    },
}

struct Loader {
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize)>,
    docs: Vec<Node>,
    alias_nodes: usize,
    budget_reported: bool,
}

struct Stop(Pos, String);

impl Loader {
    /// The parser's own line and column (in characters) of a span's start: no need to
    /// count characters again.
    fn pos(&self, span: &Span) -> Pos {
        Pos::new(
            to_u32(span.start.line().max(1)),
            to_u32(span.start.col() + 1),
        )
    }

    fn offset(&self, m: &granit_parser::Marker) -> usize {
        m.byte_offset().unwrap_or(0)
    }

    fn event(&mut self, event: Event<'_>, span: Span, diags: &mut Diagnostics) -> Result<(), Stop> {
        match event {
            Event::Scalar(text, style, anchor, _tag) => {
                let plain = matches!(style, ScalarStyle::Plain);
                let node = Node {
                    pos: self.pos(&span),
                    start: self.offset(&span.start),
                    end: self.offset(&span.end),
                    value: Value::Scalar(Scalar {
                        text: text.into_owned(),
                        plain,
                    }),
                };
                self.finish(node, anchor, diags)
            }
            Event::SequenceStart(_, anchor, _) => {
                self.stack.push(Frame::Seq {
                    start: span,
                    anchor,
                    items: Vec::new(),
                });
                Ok(())
            }
            Event::MappingStart(_, anchor, _) => {
                self.stack.push(Frame::Map {
                    start: span,
                    anchor,
                    entries: Vec::new(),
                    seen: HashMap::new(),
                    key: None,
                });
                Ok(())
            }
            Event::SequenceEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    start,
                    anchor,
                    items,
                }) => {
                    let node = Node {
                        pos: self.pos(&start),
                        start: self.offset(&start.start),
                        end: self.offset(&span.end),
                        value: Value::Seq(items),
                    };
                    self.finish(node, anchor, diags)
                }
                _ => Err(Stop(
                    self.pos(&span),
                    "invalid YAML: unbalanced sequence".into(),
                )),
            },
            Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Map {
                    start,
                    anchor,
                    entries,
                    ..
                }) => {
                    let entries = merge_keys(entries, diags);
                    let node = Node {
                        pos: self.pos(&start),
                        start: self.offset(&start.start),
                        end: self.offset(&span.end),
                        value: Value::Map(entries),
                    };
                    self.finish(node, anchor, diags)
                }
                _ => Err(Stop(
                    self.pos(&span),
                    "invalid YAML: unbalanced mapping".into(),
                )),
            },
            Event::Alias(id) => {
                let pos = self.pos(&span);
                let Some((node, count)) = self.anchors.get(&id) else {
                    return Err(Stop(pos, "invalid YAML: alias to an unknown anchor".into()));
                };
                self.alias_nodes += count;
                if self.alias_nodes > ALIAS_BUDGET {
                    if !self.budget_reported {
                        self.budget_reported = true;
                        return Err(Stop(
                            pos,
                            format!(
                                "aliases expand to more than {ALIAS_BUDGET} nodes; \
                                 this file is refused to protect the engine"
                            ),
                        ));
                    }
                    return Ok(());
                }
                let mut node = node.clone();
                node.pos = pos;
                self.finish(node, 0, diags)
            }
            Event::UnresolvedAlias(name) => Err(Stop(
                self.pos(&span),
                format!("invalid YAML: alias '*{name}' has no anchor before it"),
            )),
            Event::DocumentStart(..) => {
                self.anchors.clear();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Places a finished node into its parent (or as a document).
    fn finish(&mut self, node: Node, anchor: usize, diags: &mut Diagnostics) -> Result<(), Stop> {
        if anchor != 0 {
            let count = count_nodes(&node);
            self.anchors.insert(anchor, (node.clone(), count));
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, seen, key, ..
            }) => match key.take() {
                None => *key = Some(node),
                Some(k) => {
                    let key_pos = k.pos;
                    let key = match k.value {
                        Value::Scalar(s) => s.text,
                        _ => {
                            diags
                                .error(key_pos, "a mapping key must be a plain name")
                                .help("keys like `name:` are words, not lists or mappings");
                            return Ok(());
                        }
                    };
                    let first = if key == "<<" {
                        None
                    } else {
                        seen.get(&key).copied()
                    };
                    if let Some(line) = first {
                        diags
                            .error(key_pos, format!("duplicate key '{key}'"))
                            .help(format!("'{key}' is first set at {line}; remove one"));
                    } else {
                        if key != "<<" {
                            seen.insert(key.clone(), key_pos);
                        }
                        entries.push(Entry {
                            key,
                            key_pos,
                            value: node,
                        });
                    }
                }
            },
        }
        Ok(())
    }
}

fn count_nodes(node: &Node) -> usize {
    1 + match &node.value {
        Value::Scalar(_) => 0,
        Value::Seq(s) => s.iter().map(count_nodes).sum(),
        Value::Map(m) => m.iter().map(|e| 1 + count_nodes(&e.value)).sum(),
    }
}

/// Applies `<<` merge keys: the mapping's own keys win, then earlier merged mappings.
fn merge_keys(entries: Vec<Entry>, diags: &mut Diagnostics) -> Vec<Entry> {
    if !entries.iter().any(|e| e.key == "<<") {
        return entries;
    }
    let mut own = Vec::with_capacity(entries.len());
    let mut merged = Vec::new();
    for entry in entries {
        if entry.key != "<<" {
            own.push(entry);
            continue;
        }
        let sources: Vec<Node> = match entry.value.value {
            Value::Map(_) => vec![entry.value],
            Value::Seq(items) => items,
            Value::Scalar(_) => vec![entry.value],
        };
        for source in sources {
            match source.value {
                Value::Map(m) => merged.extend(m),
                _ => {
                    diags
                        .error(
                            source.pos,
                            "a merge key '<<' takes a mapping or a list of mappings",
                        )
                        .help("write `<<: *anchor` where the anchor names a mapping");
                }
            }
        }
    }
    // Linear in the entries (a mapping merged from a mapping of thousands of keys, hundreds
    // of times, must not cost their product squared).
    let mut keys: std::collections::HashSet<String> = own.iter().map(|e| e.key.clone()).collect();
    for entry in merged {
        if keys.insert(entry.key.clone()) {
            own.push(entry);
        }
    }
    own
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> (Vec<Node>, Vec<String>) {
        let source = Source::new("t.yaml", text);
        let mut d = Diagnostics::new("t.yaml");
        let docs = parse(&source, &mut d);
        (
            docs,
            d.into_sorted().iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn keeps_positions_of_keys_and_values() {
        let (docs, errs) = load("a: 1\nb:\n  c: [x, 'y']\n");
        assert!(errs.is_empty(), "{errs:?}");
        let b = docs[0].get("b").expect("b");
        assert_eq!(b.pos, Pos::new(3, 3));
        let c = b.get("c").expect("c").as_seq().expect("seq");
        assert_eq!(c[1].pos, Pos::new(3, 10));
        assert_eq!(c[1].as_scalar().expect("scalar").typed(), Typed::Str("y"));
    }

    #[test]
    fn types_scalars_by_the_core_schema() {
        let (docs, _) = load("[true, 'true', 3, 1.5, 1e-5, ~, 0x1f, abc, 1.0e-5, '3']");
        let items: Vec<Typed> = docs[0]
            .as_seq()
            .expect("seq")
            .iter()
            .map(|n| n.as_scalar().expect("scalar").typed())
            .collect();
        assert_eq!(
            items,
            vec![
                Typed::Bool(true),
                Typed::Str("true"),
                Typed::Int(3),
                Typed::Float(1.5),
                Typed::Float(1e-5),
                Typed::Null,
                Typed::Int(31),
                Typed::Str("abc"),
                Typed::Float(1e-5),
                Typed::Str("3"),
            ]
        );
    }

    #[test]
    fn reports_duplicate_keys_at_the_later_one() {
        let (_, errs) = load("a: 1\nb: 2\na: 3\n");
        assert_eq!(
            errs,
            vec![
                "t.yaml:3:1: error: duplicate key 'a'\n  help: 'a' is first set at 1:1; remove one"
            ]
        );
    }

    #[test]
    fn merges_and_resolves_aliases() {
        let (docs, errs) = load("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\nl: *b\n");
        assert!(errs.is_empty(), "{errs:?}");
        let m = docs[0].get("m").expect("m");
        assert_eq!(m.get("x").map(|n| n.to_json()), Some(serde_json::json!(1)));
        assert_eq!(m.get("y").map(|n| n.to_json()), Some(serde_json::json!(3)));
        assert!(docs[0].get("l").is_some());
    }

    #[test]
    fn refuses_alias_bombs() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let prev = (b'a' + i - 1) as char;
            let name = (b'a' + i) as char;
            text.push_str(&format!(
                "{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let (_, errs) = load(&text);
        assert!(
            errs.iter().any(|e| e.contains("aliases expand")),
            "{errs:?}"
        );
    }

    #[test]
    fn reports_syntax_errors_with_a_position() {
        let (_, errs) = load("a: [1, 2\nb: 3\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("t.yaml:"), "{errs:?}");
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        let s = Source::new("x", "é: ab\n");
        assert_eq!(s.pos_of(4), Pos::new(1, 4));
    }
}
