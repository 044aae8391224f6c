//! Templates: `{{params.lr}}`, `{{steps.prep.outputs.dataset}}`, `{{item}}` and friends.
//!
//! A templated string is parsed once into text and references; validation checks each
//! reference against the pipeline, and execution substitutes values without re-parsing.
//! `\{{` writes a literal `{{`.

use std::fmt;

use super::diagnostic::Pos;

/// What a `{{...}}` refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ref {
    Param(String),
    /// `{{pipeline.params.NAME}}`, inside a sweep step's trial.
    PipelineParam(String),
    Output {
        step: String,
        name: String,
    },
    Metric {
        step: String,
        name: String,
    },
    BestParam {
        step: String,
        name: String,
    },
    /// `{{item}}` or `{{item.FIELD...}}`.
    Item(Vec<String>),
    RunId,
    RunName,
    RunState,
    Team,
}

impl Ref {
    /// The step this reference reads from, if any.
    pub fn step(&self) -> Option<&str> {
        match self {
            Ref::Output { step, .. } | Ref::Metric { step, .. } | Ref::BestParam { step, .. } => {
                Some(step)
            }
            _ => None,
        }
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ref::Param(n) => write!(f, "params.{n}"),
            Ref::PipelineParam(n) => write!(f, "pipeline.params.{n}"),
            Ref::Output { step, name } => write!(f, "steps.{step}.outputs.{name}"),
            Ref::Metric { step, name } => write!(f, "steps.{step}.metrics.{name}"),
            Ref::BestParam { step, name } => write!(f, "steps.{step}.best.params.{name}"),
            Ref::Item(path) if path.is_empty() => f.write_str("item"),
            Ref::Item(path) => write!(f, "item.{}", path.join(".")),
            Ref::RunId => f.write_str("run.id"),
            Ref::RunName => f.write_str("run.name"),
            Ref::RunState => f.write_str("run.state"),
            Ref::Team => f.write_str("team"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(String),
    Ref(RefAt),
}

/// A reference with where it stood in the string (a byte offset of its `{{`).
#[derive(Clone, Debug, PartialEq)]
pub struct RefAt {
    pub reference: Ref,
    pub offset: usize,
    /// The reference as written, braces included, to find it again in the source.
    pub raw: String,
    /// Where it stands in the file; set by the decoder, which knows the source.
    pub pos: Pos,
}

/// A parsed templated string.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Template {
    pub parts: Vec<Part>,
}

/// A problem in a template, at a byte offset of the string.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    pub offset: usize,
    pub raw: String,
    pub message: String,
    pub help: Option<String>,
}

pub const KNOWN: &str = "templates are {{params.NAME}}, {{steps.STEP.outputs.NAME}}, \
{{steps.STEP.metrics.NAME}}, {{steps.STEP.best.params.NAME}}, {{item}}, {{run.id}}, \
{{run.name}}, {{run.state}} and {{team}}";

impl Template {
    /// A template with no references.
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            parts: vec![Part::Text(text.into())],
        }
    }

    pub fn parse(text: &str) -> Result<Self, Vec<Error>> {
        let mut parts = Vec::new();
        let mut errors = Vec::new();
        let mut buf = String::new();
        let mut rest = text;
        let mut at = 0;
        while let Some(i) = rest.find("{{") {
            if rest[..i].ends_with('\\') {
                buf.push_str(&rest[..i - 1]);
                buf.push_str("{{");
                rest = &rest[i + 2..];
                at += i + 2;
                continue;
            }
            buf.push_str(&rest[..i]);
            let open = at + i;
            let after = &rest[i + 2..];
            let Some(close) = after.find("}}") else {
                errors.push(Error {
                    offset: open,
                    raw: "{{".into(),
                    message: "unclosed template: '{{' without '}}'".into(),
                    help: Some("write \\{{ for a literal {{".into()),
                });
                rest = "";
                break;
            };
            let raw = format!("{{{{{}}}}}", &after[..close]);
            match parse_ref(after[..close].trim()) {
                Ok(reference) => {
                    if !buf.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut buf)));
                    }
                    parts.push(Part::Ref(RefAt {
                        reference,
                        offset: open,
                        raw,
                        pos: Pos::START,
                    }));
                }
                Err((message, help)) => errors.push(Error {
                    offset: open,
                    raw,
                    message,
                    help,
                }),
            }
            rest = &after[close + 2..];
            at = open + 2 + close + 2;
        }
        buf.push_str(rest);
        if !buf.is_empty() {
            parts.push(Part::Text(buf));
        }
        if errors.is_empty() {
            Ok(Self { parts })
        } else {
            Err(errors)
        }
    }

    pub fn refs(&self) -> impl Iterator<Item = &RefAt> {
        self.parts.iter().filter_map(|p| match p {
            Part::Ref(r) => Some(r),
            Part::Text(_) => None,
        })
    }

    /// The whole string is one reference and nothing else.
    pub fn single_ref(&self) -> Option<&RefAt> {
        match self.parts.as_slice() {
            [Part::Ref(r)] => Some(r),
            _ => None,
        }
    }

    /// Substitutes every reference; the first one `resolve` cannot give ends it.
    pub fn render<E>(
        &self,
        mut resolve: impl FnMut(&Ref) -> Result<String, E>,
    ) -> Result<String, E> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Ref(r) => out.push_str(&resolve(&r.reference)?),
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Template {
    /// Writes the template back in source form, escaping literal `{{`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(&t.replace("{{", "\\{{"))?,
                Part::Ref(r) => write!(f, "{{{{{}}}}}", r.reference)?,
            }
        }
        Ok(())
    }
}

type RefError = (String, Option<String>);

fn parse_ref(inner: &str) -> Result<Ref, RefError> {
    let unknown = |hint: Option<String>| -> RefError {
        (
            format!("unknown template '{{{{{inner}}}}}'"),
            Some(hint.unwrap_or_else(|| KNOWN.to_owned())),
        )
    };
    if inner.is_empty() {
        return Err(("empty template '{{}}'".into(), Some(KNOWN.into())));
    }
    let segs: Vec<&str> = inner.split('.').map(str::trim).collect();
    if segs.iter().any(|s| s.is_empty()) {
        return Err(unknown(None));
    }
    let name = |s: &str| s.to_owned();
    match segs.as_slice() {
        ["params", n] => Ok(Ref::Param(name(n))),
        ["pipeline", "params", n] => Ok(Ref::PipelineParam(name(n))),
        ["steps", s, "outputs", n] => Ok(Ref::Output {
            step: name(s),
            name: name(n),
        }),
        ["steps", s, "metrics", n] => Ok(Ref::Metric {
            step: name(s),
            name: name(n),
        }),
        ["steps", s, "best", "params", n] => Ok(Ref::BestParam {
            step: name(s),
            name: name(n),
        }),
        ["steps", s, kind, ..] => {
            let kinds = ["outputs", "metrics", "best"];
            let hint = match super::diagnostic::nearest(kind, kinds) {
                Some(k) => format!("did you mean '{{{{steps.{s}.{k}...}}}}'?"),
                None => "after the step name comes outputs.NAME, metrics.NAME or best.params.NAME"
                    .to_owned(),
            };
            Err(unknown(Some(hint)))
        }
        ["steps", ..] => Err(unknown(Some(
            "write {{steps.STEP.outputs.NAME}}, {{steps.STEP.metrics.NAME}} or \
             {{steps.STEP.best.params.NAME}}"
                .into(),
        ))),
        ["item", path @ ..] => Ok(Ref::Item(path.iter().map(|s| name(s)).collect())),
        ["run", "id"] => Ok(Ref::RunId),
        ["run", "name"] => Ok(Ref::RunName),
        ["run", "state"] => Ok(Ref::RunState),
        ["team"] => Ok(Ref::Team),
        [root, ..] => {
            let roots = ["params", "steps", "item", "run", "team", "pipeline"];
            let hint = super::diagnostic::nearest(root, roots).map(|r| {
                let rest: Vec<&str> = segs[1..].to_vec();
                if rest.is_empty() {
                    format!("did you mean '{{{{{r}}}}}'?")
                } else {
                    format!("did you mean '{{{{{r}.{}}}}}'?", rest.join("."))
                }
            });
            Err(unknown(hint))
        }
        [] => Err(unknown(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_and_references() {
        let t = Template::parse("python t.py --lr {{params.lr}} --data {{ steps.prep.outputs.d }}")
            .expect("parses");
        let refs: Vec<&Ref> = t.refs().map(|r| &r.reference).collect();
        assert_eq!(
            refs,
            vec![
                &Ref::Param("lr".into()),
                &Ref::Output {
                    step: "prep".into(),
                    name: "d".into()
                }
            ]
        );
        assert_eq!(t.refs().nth(1).map(|r| r.offset), Some(38));
    }

    #[test]
    fn escapes_literal_braces() {
        let t = Template::parse(r"echo \{{not}} {{item}}").expect("parses");
        let out: Result<String, ()> = t.render(|_| Ok("X".into()));
        assert_eq!(out, Ok("echo {{not}} X".into()));
    }

    #[test]
    fn reports_unknown_and_unclosed() {
        let e = Template::parse("a {{param.lr}} b {{steps.x.output.m}} {{").expect_err("bad");
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].message, "unknown template '{{param.lr}}'");
        assert_eq!(e[0].help.as_deref(), Some("did you mean '{{params.lr}}'?"));
        assert_eq!(
            e[1].help.as_deref(),
            Some("did you mean '{{steps.x.outputs...}}'?")
        );
        assert_eq!(e[2].message, "unclosed template: '{{' without '}}'");
    }

    #[test]
    fn round_trips_through_display() {
        for s in [r"a \{{b}} {{params.x}}", "{{item.f.g}}-{{run.id}}", "plain"] {
            let t = Template::parse(s).expect(s);
            assert_eq!(Template::parse(&t.to_string()), Ok(t), "{s}");
        }
    }
}
