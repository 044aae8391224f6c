//! The one-line sweep's parameter specs (`-p lr=log:1e-5:1e-1`), and `-p` on a sweep file.
//!
//! A space spec makes a parameter searched: `float:MIN:MAX[:STEP]`, `log:MIN:MAX`,
//! `int:MIN:MAX[:STEP]`, `choice:A,B,C`. Anything else is a literal that fixes the parameter
//! (a categorical of one value, so every algorithm handles it alike; the trial sees the text).
//! A step makes a number a grid's axis (grid search needs one on every float); a log scale
//! takes none (as in a Sweep file, where `step` and `scale: log` do not go together): a grid
//! over a log range lists its values with `choice:`.
//!
//! Problems are [`Diagnostic`]s whose path is the flag as the user wrote it (`-p lr=log:0:1`),
//! with no line: the same form `sluice run -p` uses.
//!
//! [`form`] turns the flags of the one-line form into the Sweep document they stand for.

pub mod form;

use super::diagnostic::Diagnostic;
use super::model::{Sweep, SweepParam};

/// One `-p NAME=VALUE` of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// A searched parameter.
    Space(SweepParam),
    /// A fixed value.
    Fixed(String),
}

impl Spec {
    /// The parameter the sweep searches (a fixed value is a choice of one).
    pub fn param(&self) -> SweepParam {
        match self {
            Spec::Space(p) => p.clone(),
            Spec::Fixed(v) => SweepParam::Categorical {
                values: vec![v.clone()],
            },
        }
    }

    /// The parameter as the `params:` of a Sweep file writes it.
    pub fn to_json(&self) -> serde_json::Value {
        param_json(&self.param())
    }
}

/// A parameter as the `params:` of a Sweep file writes it.
pub fn param_json(p: &SweepParam) -> serde_json::Value {
    match p {
        SweepParam::Float {
            min,
            max,
            log,
            step,
        } => {
            let mut v = serde_json::json!({"type": "float", "min": min, "max": max});
            if *log {
                v["scale"] = "log".into();
            }
            if let Some(s) = step {
                v["step"] = (*s).into();
            }
            v
        }
        SweepParam::Int { min, max, step, .. } => {
            let mut v = serde_json::json!({"type": "int", "min": min, "max": max});
            if *step != 1 {
                v["step"] = (*step).into();
            }
            v
        }
        SweepParam::Categorical { values } => {
            serde_json::json!({"type": "categorical", "values": values})
        }
    }
}

const KINDS: &str = "float:MIN:MAX[:STEP], log:MIN:MAX, int:MIN:MAX[:STEP] or choice:A,B,C";

/// An error about one flag as the user wrote it (`-p lr=log:0:1`), with help lines.
pub fn flag_error(flag: impl Into<String>, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(&flag.into(), None, message)
}

/// Splits `NAME=VALUE`.
pub fn split(arg: &str) -> Result<(&str, &str), Diagnostic> {
    match arg.split_once('=') {
        Some((n, v)) if !n.is_empty() => Ok((n, v)),
        _ => Err(flag_error(format!("-p {arg}"), "expected NAME=VALUE")
            .with_help(format!(
                "VALUE is a literal, or a space to search: {KINDS} (for example -p lr=log:1e-5:1e-1)"
            ))),
    }
}

/// Reads the VALUE of `-p NAME=VALUE`.
pub fn parse(name: &str, text: &str) -> Result<Spec, Diagnostic> {
    let flag = format!("-p {name}={text}");
    let err = |message: String, help: String| flag_error(&flag, message).with_help(help);
    let Some((kind, rest)) = text.split_once(':') else {
        return Ok(Spec::Fixed(text.to_owned()));
    };
    let example = match kind {
        "float" => "float:0:0.5, or float:0:0.5:0.1 for a grid",
        "log" => "log:1e-5:1e-1",
        "int" => "int:2:8, or int:2:8:2 for every second value",
        "choice" => "choice:adam,sgd",
        // `a:b` that is not a space (a URL, a time): a literal.
        _ => return Ok(Spec::Fixed(text.to_owned())),
    };
    if kind == "choice" {
        let values: Vec<String> = rest
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Err(err(
                "a choice needs at least one value".into(),
                format!("for example -p {name}={example}"),
            ));
        }
        return Ok(Spec::Space(SweepParam::Categorical { values }));
    }
    let parts: Vec<&str> = rest.split(':').collect();
    let (lo, hi, step) = match parts.as_slice() {
        [lo, hi] => (*lo, *hi, None),
        [lo, hi, step] if kind != "log" => (*lo, *hi, Some(*step)),
        [_, _, _] => {
            return Err(err(
                "a log scale takes no step".into(),
                format!(
                    "a log range is searched continuously: -p {name}=log:MIN:MAX; for a grid, list the values: -p {name}=choice:1e-5,1e-4,1e-3"
                ),
            ));
        }
        _ => {
            let shape = if kind == "log" { "" } else { "[:STEP]" };
            return Err(err(
                format!("expected {kind}:MIN:MAX{shape}"),
                format!("for example -p {name}={example}"),
            ));
        }
    };
    if kind == "int" {
        let int = |s: &str| -> Result<i64, Diagnostic> {
            s.trim().parse::<i64>().map_err(|_| {
                err(
                    format!("'{s}' is not an integer"),
                    format!("an int range has whole bounds and step: -p {name}={example}"),
                )
            })
        };
        let (lo, hi) = (int(lo)?, int(hi)?);
        let step = step.map(int).transpose()?.unwrap_or(1);
        ordered(&flag, name, lo as f64, hi as f64)?;
        if step < 1 || step > hi - lo {
            return Err(err(
                format!(
                    "the step must be at least 1 and at most MAX - MIN ({})",
                    hi - lo
                ),
                format!("for example -p {name}=int:{lo}:{hi}:1"),
            ));
        }
        return Ok(Spec::Space(SweepParam::Int {
            min: lo,
            max: hi,
            log: false,
            step,
        }));
    }
    let number = |s: &str| -> Result<f64, Diagnostic> {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                err(
                    format!("'{s}' is not a number"),
                    format!("for example -p {name}={example}"),
                )
            })
    };
    let (lo, hi) = (number(lo)?, number(hi)?);
    let step = step.map(number).transpose()?;
    ordered(&flag, name, lo, hi)?;
    if kind == "log" && lo <= 0.0 {
        return Err(err(
            "a log scale needs MIN > 0".into(),
            format!("use a small positive MIN: -p {name}=log:1e-6:{hi}"),
        ));
    }
    if let Some(s) = step
        && (s <= 0.0 || s > hi - lo)
    {
        return Err(err(
            format!(
                "the step must be above 0 and at most MAX - MIN ({})",
                hi - lo
            ),
            format!("for example -p {name}=float:{lo}:{hi}:{}", (hi - lo) / 10.0),
        ));
    }
    Ok(Spec::Space(SweepParam::Float {
        min: lo,
        max: hi,
        log: kind == "log",
        step,
    }))
}

fn ordered(flag: &str, name: &str, lo: f64, hi: f64) -> Result<(), Diagnostic> {
    if lo < hi {
        Ok(())
    } else {
        Err(flag_error(flag, "MIN must be less than MAX")
            .with_help(format!("to fix a value, write -p {name}=VALUE")))
    }
}

/// Reads each `-p NAME=VALUE` given with a sweep file and applies it ([`apply`]). Every bad
/// flag is reported; the pairs applied are returned (the run keeps them, and `resume`
/// applies them again).
pub fn apply_args(
    sweep: &mut Sweep,
    args: &[String],
) -> Result<Vec<(String, String)>, Vec<Diagnostic>> {
    let mut pairs = Vec::new();
    let mut errors = Vec::new();
    for arg in args {
        match split(arg) {
            Ok((n, v)) => pairs.push((n.to_owned(), v.to_owned())),
            Err(d) => errors.push(d),
        }
    }
    if let Err(more) = apply(sweep, &pairs) {
        errors.extend(more);
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(errors)
    }
}

/// Applies `NAME=VALUE` pairs given with a sweep file: each names one of its parameters.
pub fn apply(sweep: &mut Sweep, pairs: &[(String, String)]) -> Result<(), Vec<Diagnostic>> {
    let mut errors = Vec::new();
    for (name, text) in pairs {
        if !sweep.params.contains_key(name) {
            let known: Vec<&str> = sweep.params.keys().map(String::as_str).collect();
            let mut d = flag_error(
                format!("-p {name}={text}"),
                format!("the sweep has no parameter '{name}'"),
            );
            d.suggest(name, known.iter().copied());
            d.help(format!("its parameters are {}", known.join(", ")));
            errors.push(d);
            continue;
        }
        match parse(name, text) {
            Ok(spec) => {
                sweep.params.insert(name.clone(), spec.param());
            }
            Err(d) => errors.push(d),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<Spec, Diagnostic>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn space_specs() {
        assert_eq!(
            parse("lr", "log:1e-5:1e-1"),
            Ok(Spec::Space(SweepParam::Float {
                min: 1e-5,
                max: 0.1,
                log: true,
                step: None
            }))
        );
        assert_eq!(
            parse("layers", "int:2:8"),
            Ok(Spec::Space(SweepParam::Int {
                min: 2,
                max: 8,
                log: false,
                step: 1
            }))
        );
        assert_eq!(
            parse("opt", "choice:adam, sgd"),
            Ok(Spec::Space(SweepParam::Categorical {
                values: vec!["adam".into(), "sgd".into()]
            }))
        );
        assert_eq!(parse("epochs", "5"), Ok(Spec::Fixed("5".into())));
        assert_eq!(parse("url", "http://x"), Ok(Spec::Fixed("http://x".into())));
    }

    #[test]
    fn steps_make_grid_axes() {
        assert_eq!(
            parse("dropout", "float:0:0.5:0.1"),
            Ok(Spec::Space(SweepParam::Float {
                min: 0.0,
                max: 0.5,
                log: false,
                step: Some(0.1)
            }))
        );
        assert_eq!(
            parse("layers", "int:2:8:2"),
            Ok(Spec::Space(SweepParam::Int {
                min: 2,
                max: 8,
                log: false,
                step: 2
            }))
        );
        let json = parse("d", "float:0:0.5:0.1").map(|s| s.to_json());
        assert_eq!(
            json,
            Ok(serde_json::json!({"type": "float", "min": 0.0, "max": 0.5, "step": 0.1}))
        );
    }

    #[test]
    fn bad_specs_name_the_flag_and_say_what_is_expected() {
        assert_eq!(
            message(parse("lr", "log:0:1")),
            "-p lr=log:0:1: error: a log scale needs MIN > 0\n  help: use a small positive MIN: -p lr=log:1e-6:1"
        );
        assert!(message(parse("lr", "float:1:0")).contains("MIN must be less than MAX"));
        assert!(message(parse("n", "int:a:3")).contains("'a' is not an integer"));
        assert!(message(parse("lr", "float:1")).contains("expected float:MIN:MAX[:STEP]"));
        assert!(message(parse("lr", "log:1e-5:1:0.1")).contains("a log scale takes no step"));
        assert!(message(parse("d", "float:0:1:2")).contains("at most MAX - MIN (1)"));
        assert!(message(parse("d", "float:0:1:0")).contains("above 0"));
        assert!(message(parse("n", "int:1:9:0")).contains("at least 1"));
        assert!(message(parse("n", "int:1:9:1.5")).contains("'1.5' is not an integer"));
        assert!(message(parse("o", "choice:")).contains("at least one value"));
        let e = split("=3").expect_err("an error").to_string();
        assert!(e.starts_with("-p =3: error: expected NAME=VALUE"), "{e}");
    }
}
