//! The one-line sweep's parameter specs (`-p lr=log:1e-5:1e-1`), and `-p` on a sweep file.
//!
//! A space spec makes a parameter searched: `float:MIN:MAX`, `log:MIN:MAX`, `int:MIN:MAX`,
//! `choice:A,B,C`. Anything else is a literal that fixes the parameter (a categorical of one
//! value, so every algorithm handles it alike; the trial sees the text).

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
        match self.param() {
            SweepParam::Float { min, max, log, .. } => {
                let mut v = serde_json::json!({"type": "float", "min": min, "max": max});
                if log {
                    v["scale"] = "log".into();
                }
                v
            }
            SweepParam::Int { min, max, .. } => {
                serde_json::json!({"type": "int", "min": min, "max": max})
            }
            SweepParam::Categorical { values } => {
                serde_json::json!({"type": "categorical", "values": values})
            }
        }
    }
}

const KINDS: &str = "float:MIN:MAX, log:MIN:MAX, int:MIN:MAX or choice:A,B,C";

/// Splits `NAME=VALUE`.
pub fn split(arg: &str) -> Result<(&str, &str), String> {
    match arg.split_once('=') {
        Some((n, v)) if !n.is_empty() => Ok((n, v)),
        _ => Err(format!(
            "-p {arg}: expected NAME=VALUE, where VALUE is a literal or a space ({KINDS})"
        )),
    }
}

/// Reads the VALUE of `-p NAME=VALUE`.
pub fn parse(name: &str, text: &str) -> Result<Spec, String> {
    let Some((kind, rest)) = text.split_once(':') else {
        return Ok(Spec::Fixed(text.to_owned()));
    };
    let range = |what: &str| -> Result<(&str, &str), String> {
        rest.split_once(':').ok_or_else(|| {
            format!("-p {name}={text}: expected {kind}:MIN:MAX (for example {what})")
        })
    };
    let number = |s: &str| -> Result<f64, String> {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("-p {name}={text}: '{s}' is not a number"))
    };
    let ordered = |lo: f64, hi: f64| -> Result<(), String> {
        if lo < hi {
            Ok(())
        } else {
            Err(format!(
                "-p {name}={text}: MIN must be less than MAX (to fix a value, write -p {name}=VALUE)"
            ))
        }
    };
    let param = match kind {
        "float" | "log" => {
            let (lo, hi) = range(if kind == "log" {
                "log:1e-5:1e-1"
            } else {
                "float:0:0.5"
            })?;
            let (lo, hi) = (number(lo)?, number(hi)?);
            ordered(lo, hi)?;
            if kind == "log" && lo <= 0.0 {
                return Err(format!(
                    "-p {name}={text}: a log scale needs MIN > 0 (for example log:1e-5:1e-1)"
                ));
            }
            SweepParam::Float {
                min: lo,
                max: hi,
                log: kind == "log",
                step: None,
            }
        }
        "int" => {
            let (lo, hi) = range("int:2:8")?;
            let int = |s: &str| -> Result<i64, String> {
                s.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("-p {name}={text}: '{s}' is not an integer"))
            };
            let (lo, hi) = (int(lo)?, int(hi)?);
            ordered(lo as f64, hi as f64)?;
            SweepParam::Int {
                min: lo,
                max: hi,
                log: false,
                step: 1,
            }
        }
        "choice" => {
            let values: Vec<String> = rest
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            if values.is_empty() {
                return Err(format!(
                    "-p {name}={text}: expected choice:A,B,C (at least one value)"
                ));
            }
            SweepParam::Categorical { values }
        }
        // `a:b` that is not a space (a URL, a time): a literal.
        _ => return Ok(Spec::Fixed(text.to_owned())),
    };
    Ok(Spec::Space(param))
}

/// Applies `-p NAME=VALUE` given with a sweep file: each names one of its parameters.
pub fn apply(sweep: &mut Sweep, overrides: &[(String, String)]) -> Result<(), String> {
    for (name, text) in overrides {
        if !sweep.params.contains_key(name) {
            let known: Vec<&str> = sweep.params.keys().map(String::as_str).collect();
            let hint = super::diagnostic::nearest(name, known.iter().copied())
                .map(|s| format!("; did you mean '{s}'?"))
                .unwrap_or_default();
            return Err(format!(
                "-p {name}: the sweep has no parameter '{name}' (it has {}){hint}",
                known.join(", ")
            ));
        }
        sweep
            .params
            .insert(name.clone(), parse(name, text)?.param());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_specs_say_what_is_expected() {
        let e = parse("lr", "log:0:1").expect_err("an error");
        assert!(e.contains("MIN > 0"), "{e}");
        let e = parse("lr", "float:1:0").expect_err("an error");
        assert!(e.contains("less than MAX"), "{e}");
        let e = parse("n", "int:a:3").expect_err("an error");
        assert!(e.contains("not an integer"), "{e}");
        let e = parse("lr", "float:1").expect_err("an error");
        assert!(e.contains("float:MIN:MAX"), "{e}");
        assert!(split("=3").is_err());
    }
}
