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

    /// Parses a templated string; every bad reference is an error.
    pub fn parse(text: &str) -> Result<Self, Vec<Error>> {
        let (template, errors) = Self::parse_partial(text, Scope::default());
        if errors.is_empty() {
            Ok(template)
        } else {
            Err(errors)
        }
    }

    /// Parses a templated string to its end whatever it finds: the template holds every
    /// reference that parsed (a bad one stays as text), so that they are checked too, and the
    /// errors list every bad one. `scope` says which sluice reference an Argo-style one meant.
    pub fn parse_partial(text: &str, scope: Scope<'_>) -> (Self, Vec<Error>) {
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
                rest = &rest[i..];
                break;
            };
            let raw = format!("{{{{{}}}}}", &after[..close]);
            match parse_ref(after[..close].trim(), scope) {
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
                Err((message, help)) => {
                    buf.push_str(&raw);
                    errors.push(Error {
                        offset: open,
                        raw,
                        message,
                        help,
                    });
                }
            }
            rest = &after[close + 2..];
            at = open + 2 + close + 2;
        }
        buf.push_str(rest);
        if !buf.is_empty() {
            parts.push(Part::Text(buf));
        }
        (Self { parts }, errors)
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

/// Where a template is written, as far as parameters go: what `{{params.NAME}}` names there
/// decides which sluice reference an Argo-style `{{inputs.parameters.NAME}}` meant.
#[derive(Clone, Copy, Debug, Default)]
pub enum Scope<'a> {
    /// A pipeline's step or a Sweep file's trial: parameters are `{{params.NAME}}`.
    #[default]
    Params,
    /// A sweep step's trial: its sweep's parameters are `{{params.NAME}}`, the pipeline's
    /// `{{pipeline.params.NAME}}`. Each list holds the names declared, valid or not.
    Trial {
        sweep: &'a [String],
        pipeline: &'a [String],
    },
}

impl Scope<'_> {
    /// The sluice reference to parameter `name`; `workflow` when Argo named it as a parameter
    /// of the whole workflow (`{{workflow.parameters.NAME}}`) rather than of the template.
    fn param(self, name: &str, workflow: bool) -> String {
        match self {
            Scope::Params => format!("params.{name}"),
            Scope::Trial { sweep, pipeline } => {
                let of_sweep = sweep.iter().any(|s| s == name);
                let of_pipeline = pipeline.iter().any(|p| p == name);
                // A name declared in only one place is that one; otherwise Argo's own
                // words decide: a workflow's parameter is the pipeline's.
                let pipeline_param = match (of_sweep, of_pipeline) {
                    (true, false) => false,
                    (false, true) => true,
                    _ => workflow,
                };
                if pipeline_param {
                    format!("pipeline.params.{name}")
                } else {
                    format!("params.{name}")
                }
            }
        }
    }
}

type RefError = (String, Option<String>);

/// The help for a reference written as Argo writes it, naming the sluice form meant; `None`
/// when `segs` is not an Argo reference that sluice has an equivalent for.
fn argo(segs: &[&str], scope: Scope<'_>) -> Option<String> {
    let meant = match segs {
        ["inputs", "parameters", n] => scope.param(n, false),
        ["workflow", "parameters", n] => scope.param(n, true),
        // Argo's output parameters and artifacts are both a step's outputs here.
        [
            "steps" | "tasks",
            s,
            "outputs",
            "parameters" | "artifacts",
            n,
        ] => {
            format!("steps.{s}.outputs.{n}")
        }
        ["tasks", s, kind @ ("outputs" | "metrics"), n] => format!("steps.{s}.{kind}.{n}"),
        ["workflow", "name"] => "run.name".into(),
        ["workflow", "uid"] => "run.id".into(),
        ["workflow", "status"] => "run.state".into(),
        ["workflow", "namespace"] => "team".into(),
        ["inputs", "artifacts", n] => {
            return Some(format!(
                "a step reads an upstream step's artifact as '{{{{steps.STEP.outputs.{n}}}}}'"
            ));
        }
        _ => return None,
    };
    Some(format!("did you mean '{{{{{meant}}}}}'?"))
}

fn parse_ref(inner: &str, scope: Scope<'_>) -> Result<Ref, RefError> {
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
    if let Some(hint) = argo(&segs, scope) {
        return Err(unknown(Some(hint)));
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
        ["run", rest @ ..] => {
            let fields = ["id", "name", "state"];
            let hint = super::diagnostic::nearest(&rest.join("."), fields)
                .map(|f| format!("did you mean '{{{{run.{f}}}}}'?"))
                .unwrap_or_else(|| "a run is {{run.id}}, {{run.name}} or {{run.state}}".into());
            Err(unknown(Some(hint)))
        }
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
    fn a_bad_reference_hides_neither_the_next_nor_the_good_ones() {
        let text = "{{inputs.parameters.lr}} {{params.bs}} {{param.x}} {{steps.a.outputs.d}} {{";
        let (t, errors) = Template::parse_partial(text, Scope::default());
        let bad: Vec<usize> = errors.iter().map(|e| e.offset).collect();
        assert_eq!(bad, vec![0, 39, 73]);
        let good: Vec<(usize, String)> = t
            .refs()
            .map(|r| (r.offset, r.reference.to_string()))
            .collect();
        assert_eq!(
            good,
            vec![
                (25, "params.bs".to_owned()),
                (51, "steps.a.outputs.d".to_owned())
            ]
        );
        assert_eq!(Template::parse(text), Err(errors));
    }

    fn help(text: &str, scope: Scope<'_>) -> String {
        let (_, errors) = Template::parse_partial(text, scope);
        assert_eq!(errors.len(), 1, "{text}");
        errors[0].help.clone().unwrap_or_default()
    }

    #[test]
    fn argo_references_are_answered_with_the_sluice_form() {
        let cases = [
            ("{{inputs.parameters.lr}}", "{{params.lr}}"),
            ("{{workflow.parameters.lr}}", "{{params.lr}}"),
            (
                "{{steps.prep.outputs.parameters.n}}",
                "{{steps.prep.outputs.n}}",
            ),
            (
                "{{tasks.prep.outputs.parameters.n}}",
                "{{steps.prep.outputs.n}}",
            ),
            (
                "{{tasks.prep.outputs.artifacts.model}}",
                "{{steps.prep.outputs.model}}",
            ),
            (
                "{{tasks.prep.outputs.model}}",
                "{{steps.prep.outputs.model}}",
            ),
            ("{{workflow.name}}", "{{run.name}}"),
            ("{{workflow.uid}}", "{{run.id}}"),
            ("{{workflow.status}}", "{{run.state}}"),
        ];
        for (argo, sluice) in cases {
            assert_eq!(
                help(argo, Scope::Params),
                format!("did you mean '{sluice}'?"),
                "{argo}"
            );
        }
    }

    #[test]
    fn in_a_sweep_steps_trial_a_pipeline_parameter_is_pipeline_params() {
        let sweep = ["lr".to_owned(), "both".to_owned()];
        let pipeline = ["data".to_owned(), "both".to_owned()];
        let scope = Scope::Trial {
            sweep: &sweep,
            pipeline: &pipeline,
        };
        let cases = [
            ("{{inputs.parameters.lr}}", "{{params.lr}}"),
            ("{{inputs.parameters.data}}", "{{pipeline.params.data}}"),
            ("{{inputs.parameters.both}}", "{{params.both}}"),
            ("{{inputs.parameters.new}}", "{{params.new}}"),
            ("{{workflow.parameters.lr}}", "{{params.lr}}"),
            ("{{workflow.parameters.data}}", "{{pipeline.params.data}}"),
            ("{{workflow.parameters.both}}", "{{pipeline.params.both}}"),
            ("{{workflow.parameters.new}}", "{{pipeline.params.new}}"),
        ];
        for (argo, sluice) in cases {
            assert_eq!(
                help(argo, scope),
                format!("did you mean '{sluice}'?"),
                "{argo}"
            );
        }
    }

    #[test]
    fn round_trips_through_display() {
        for s in [r"a \{{b}} {{params.x}}", "{{item.f.g}}-{{run.id}}", "plain"] {
            let t = Template::parse(s).expect(s);
            assert_eq!(Template::parse(&t.to_string()), Ok(t), "{s}");
        }
    }
}
