//! The one-line form of `sluice sweep` (flags and `-- COMMAND`) as the Sweep document it
//! stands for, which the run keeps so that `resume` and `status` read it like any other.
//!
//! Every problem is reported against the flag the user wrote, never against the generated
//! document (a file the user never saw). The flags are checked first, each with a message
//! and a `help:` line in their own terms (`--resource epochs=1:27`); the document is then
//! validated as any Sweep file is, and whatever that still finds (an unknown `{{params.X}}`
//! in the command, a bad `--name`) is mapped back to the flag that wrote the line it is on:
//! the document is written one flag's value per line for that.

use super::{Spec, flag_error, param_json, parse, split};
use crate::spec::Diagnostic;
use crate::spec::model::SweepParam;
use crate::spec::sweep::ALGORITHMS;

/// What stands for the generated document in messages that cannot name a flag.
pub const SHOWN: &str = "(sluice sweep)";

/// The flags of the one-line form as given (`None`: not given, the default applies).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--name` (default `sweep`).
    pub name: Option<String>,
    /// Each `-p NAME=SPEC`, as written.
    pub params: Vec<String>,
    /// `--objective GOAL:METRIC`.
    pub objective: Option<String>,
    /// `--algorithm` (default `tpe`).
    pub algorithm: Option<String>,
    pub trials: Option<u64>,
    /// `--parallel` (default 1).
    pub parallel: Option<u32>,
    /// `--seed` (default 0).
    pub seed: Option<u64>,
    pub max_failed: Option<u64>,
    /// `--resource NAME=MIN:MAX`: asha's and hyperband's budget parameter.
    pub resource: Option<String>,
    /// `--eta N` (default 3): asha and hyperband keep the best 1/eta of each rung.
    pub eta: Option<u64>,
    /// The words after `--`.
    pub command: Vec<String>,
}

/// The algorithms that read a trial's budget from a resource parameter.
const BUDGETED: &[&str] = &["asha", "hyperband"];

/// The Sweep document the flags stand for, or every problem, each naming its flag.
pub fn document(flags: &Flags) -> Result<String, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let checked = check(flags, &mut errors);
    let Some(checked) = checked.filter(|_| errors.is_empty()) else {
        return Err(errors);
    };
    let doc = write(flags, &checked);
    let loaded = crate::spec::load(SHOWN, doc.text.clone());
    let errors: Vec<Diagnostic> = loaded
        .diagnostics
        .into_sorted()
        .into_iter()
        .filter(|d| d.severity == crate::spec::Severity::Error)
        .map(|d| {
            let origin = d
                .pos
                .and_then(|p| doc.origins.get(p.line.saturating_sub(1) as usize))
                .map_or(SHOWN, String::as_str);
            // The field the document gave it is no name the user wrote.
            let message = match d.message.strip_prefix("metadata.name ") {
                Some(rest) if origin.starts_with("--name") => rest.to_owned(),
                _ => d.message,
            };
            Diagnostic {
                path: origin.to_owned(),
                pos: None,
                message,
                ..d
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(doc.text)
    } else {
        Err(errors)
    }
}

/// The flags, read and checked.
struct Checked {
    goal: String,
    metric: String,
    algorithm: String,
    /// Each parameter with the flag that declared it.
    params: Vec<(String, SweepParam, String)>,
    /// `--resource`: the parameter's name, its range and the flag.
    resource: Option<(String, f64, f64, String)>,
}

fn check(flags: &Flags, errors: &mut Vec<Diagnostic>) -> Option<Checked> {
    let algorithm = flags.algorithm.clone().unwrap_or_else(|| "tpe".into());
    let known_algorithm = ALGORITHMS.contains(&algorithm.as_str());
    if !known_algorithm {
        let mut d = flag_error(
            format!("--algorithm {algorithm}"),
            format!("unknown algorithm '{algorithm}'"),
        );
        d.suggest(&algorithm, ALGORITHMS.iter().copied());
        d.help(format!("the algorithms are {}", ALGORITHMS.join(", ")));
        errors.push(d);
    }
    let objective = objective(flags.objective.as_deref(), errors);
    let resource = flags
        .resource
        .as_deref()
        .and_then(|r| resource(r, &algorithm, known_algorithm, errors));
    let params = params(flags, &algorithm, resource.as_ref(), errors);
    let budgeted = BUDGETED.contains(&algorithm.as_str());
    if budgeted && flags.resource.is_none() {
        // A `-p epochs=int:1:27` is the likeliest attempt at naming the budget.
        let guess = params.iter().find_map(|(n, p, _)| match p {
            SweepParam::Int { min, max, .. } if looks_like_budget(n) => {
                Some((n.clone(), format!("{n}={}:{max}", (*min).max(1))))
            }
            _ => None,
        });
        let mut d = flag_error(
            format!("--algorithm {algorithm}"),
            format!(
                "{algorithm} needs a resource parameter: the budget each trial is given (epochs, steps)"
            ),
        );
        match guess {
            Some((name, flag)) => d.help(format!(
                "declare it with --resource {flag} in place of its -p (the trial reads it as {{{{params.{name}}}}})"
            )),
            None => d.help(
                "add --resource epochs=1:27 (its name, the smallest and the largest budget), and pass {{params.epochs}} to the trial",
            ),
        };
        errors.push(d);
    }
    if let Some(eta) = flags.eta {
        if !budgeted && known_algorithm {
            errors.push(
                flag_error(
                    format!("--eta {eta}"),
                    format!(
                        "eta is for --algorithm asha or hyperband (the algorithm is {algorithm})"
                    ),
                )
                .with_help("drop --eta, or use --algorithm asha --resource epochs=1:27"),
            );
        } else if eta < 2 {
            errors.push(
                flag_error(format!("--eta {eta}"), "eta must be at least 2")
                    .with_help("each rung keeps the best 1/eta of its trials; 3 is usual"),
            );
        }
    }
    budget(flags, &algorithm, errors);
    if flags.command.is_empty() {
        errors.push(
            flag_error("--", "the one-line form needs the trial's command after --").with_help(
                "for example: -- python3 train.py --lr {{params.lr}} (an argument vector, no shell)",
            ),
        );
    }
    let (goal, metric) = objective?;
    Some(Checked {
        goal,
        metric,
        algorithm,
        params,
        resource,
    })
}

fn objective(objective: Option<&str>, errors: &mut Vec<Diagnostic>) -> Option<(String, String)> {
    const GOALS: [&str; 2] = ["maximize", "minimize"];
    let Some(text) = objective else {
        errors.push(
            flag_error(
                "--objective",
                "the one-line form needs --objective GOAL:METRIC",
            )
            .with_help(
                "for example --objective maximize:accuracy, for trials that print accuracy=0.91",
            ),
        );
        return None;
    };
    let flag = format!("--objective {text}");
    let example = |metric: &str| {
        let metric = if metric.is_empty() {
            "accuracy"
        } else {
            metric
        };
        format!("write --objective maximize:{metric} or --objective minimize:{metric}")
    };
    let Some((goal, metric)) = text.split_once(':') else {
        errors.push(flag_error(&flag, "expected GOAL:METRIC").with_help(example(text)));
        return None;
    };
    if GOALS.contains(&goal) && !metric.is_empty() {
        return Some((goal.to_owned(), metric.to_owned()));
    }
    let mut d = if metric.is_empty() {
        flag_error(&flag, "the metric is missing")
    } else if GOALS.contains(&metric) {
        // `accuracy:maximize`: the two the other way round.
        let d = flag_error(&flag, "the goal comes first");
        d.with_help(format!("write --objective {metric}:{goal}"))
    } else {
        flag_error(&flag, format!("unknown goal '{goal}'"))
    };
    if d.help.is_empty() {
        let near = GOALS
            .iter()
            .find(|g| goal.len() >= 3 && g.starts_with(&goal.to_lowercase()))
            .copied()
            .or_else(|| crate::spec::diagnostic::nearest(goal, GOALS));
        if let Some(g) = near {
            d.help(format!("did you mean '{g}'?"));
        }
        d.help(example(metric));
    }
    errors.push(d);
    None
}

/// A parameter name that reads as a training budget (`epochs`, `num_steps`, `max_iter`).
fn looks_like_budget(name: &str) -> bool {
    let n = name.to_lowercase();
    ["epoch", "step", "iter", "budget", "resource", "round"]
        .iter()
        .any(|w| n.contains(w))
}

/// `--resource NAME=MIN:MAX`: the parameter asha and hyperband hand each trial its budget in.
fn resource(
    text: &str,
    algorithm: &str,
    known_algorithm: bool,
    errors: &mut Vec<Diagnostic>,
) -> Option<(String, f64, f64, String)> {
    let flag = format!("--resource {text}");
    if known_algorithm && !BUDGETED.contains(&algorithm) {
        errors.push(
            flag_error(
                &flag,
                format!(
                    "a resource is for --algorithm asha or hyperband (the algorithm is {algorithm})"
                ),
            )
            .with_help(format!(
                "add --algorithm asha, or search it as any parameter: -p {}",
                text.replacen('=', "=int:", 1)
            )),
        );
        return None;
    }
    let example =
        "for example --resource epochs=1:27: the parameter, the smallest and the largest budget";
    let parsed = text.split_once('=').and_then(|(name, range)| {
        let (lo, hi) = range.split_once(':')?;
        Some((name, lo.trim(), hi.trim()))
    });
    let Some((name, lo, hi)) = parsed.filter(|(n, _, _)| !n.is_empty()) else {
        errors.push(flag_error(&flag, "expected NAME=MIN:MAX").with_help(example));
        return None;
    };
    let number = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
    let (Some(min), Some(max)) = (number(lo), number(hi)) else {
        let bad = if number(lo).is_none() { lo } else { hi };
        errors.push(flag_error(&flag, format!("'{bad}' is not a number")).with_help(example));
        return None;
    };
    if !(min > 0.0 && min < max) {
        errors.push(
            flag_error(&flag, "the budgets must be 0 < MIN < MAX")
                .with_help("each rung multiplies the budget by eta from MIN up to MAX; for example --resource epochs=1:27"),
        );
        return None;
    }
    Some((name.to_owned(), min, max, flag))
}

fn params(
    flags: &Flags,
    algorithm: &str,
    resource: Option<&(String, f64, f64, String)>,
    errors: &mut Vec<Diagnostic>,
) -> Vec<(String, SweepParam, String)> {
    if flags.params.is_empty() && flags.resource.is_none() {
        errors.push(
            flag_error(
                "-p",
                "the one-line form needs at least one -p NAME=SPEC to search",
            )
            .with_help("for example -p lr=log:1e-5:1e-1 -p layers=int:2:8 -p opt=choice:adam,sgd"),
        );
    }
    let mut out: Vec<(String, SweepParam, String)> = Vec::new();
    for arg in &flags.params {
        let flag = format!("-p {arg}");
        let (name, text) = match split(arg) {
            Ok(both) => both,
            Err(d) => {
                errors.push(d);
                continue;
            }
        };
        if out.iter().any(|(n, _, _)| n == name) {
            errors.push(
                flag_error(&flag, format!("parameter '{name}' is given twice"))
                    .with_help("keep one -p for it"),
            );
            continue;
        }
        if let Some((r, min, max, _)) = resource
            && r == name
        {
            errors.push(
                flag_error(&flag, format!("'{name}' is the --resource parameter")).with_help(
                    format!(
                        "drop this -p: --resource {name}={min}:{max} declares it and its range"
                    ),
                ),
            );
            continue;
        }
        let spec = match parse(name, text) {
            Ok(spec) => spec,
            Err(d) => {
                errors.push(d);
                continue;
            }
        };
        if algorithm == "grid"
            && let Spec::Space(SweepParam::Float {
                min,
                max,
                log,
                step: None,
            }) = &spec
        {
            let help = if *log {
                format!(
                    "a grid cannot step a log scale: list the values, -p {name}=choice:{},{}",
                    min, max
                )
            } else {
                format!(
                    "give a step: -p {name}=float:{min}:{max}:{} (or use --algorithm random, sobol or tpe)",
                    (max - min) / 10.0
                )
            };
            errors.push(
                flag_error(&flag, "grid search needs a step for a float parameter").with_help(help),
            );
            continue;
        }
        out.push((name.to_owned(), spec.param(), flag));
    }
    if let Some((name, min, max, flag)) = resource {
        let whole = |v: f64| v.fract() == 0.0 && v.abs() < 9.0e15;
        let param = if whole(*min) && whole(*max) {
            SweepParam::Int {
                min: *min as i64,
                max: *max as i64,
                log: false,
                step: 1,
            }
        } else {
            SweepParam::Float {
                min: *min,
                max: *max,
                log: false,
                step: None,
            }
        };
        out.push((name.clone(), param, flag.clone()));
    }
    out
}

fn budget(flags: &Flags, algorithm: &str, errors: &mut Vec<Diagnostic>) {
    match flags.trials {
        Some(0) => errors.push(
            flag_error("--trials 0", "a sweep needs at least one trial")
                .with_help("for example --trials 30"),
        ),
        None if algorithm != "grid" && ALGORITHMS.contains(&algorithm) => errors.push(
            flag_error("--trials", format!("--algorithm {algorithm} needs a number of trials"))
                .with_help(
                    "add --trials N, for example --trials 30 (only grid may omit it: it runs every point)",
                ),
        ),
        _ => {}
    }
    if flags.parallel == Some(0) {
        errors.push(
            flag_error("--parallel 0", "at least one trial must run at a time")
                .with_help("--parallel 1 runs the trials one after another"),
        );
    }
    if flags.max_failed == Some(0) {
        errors.push(
            flag_error("--max-failed 0", "must be at least 1")
                .with_help("--max-failed 1 fails the sweep at its first failed trial"),
        );
    }
}

/// The document's text, and for each of its lines the flag that wrote it.
struct Written {
    text: String,
    origins: Vec<String>,
}

impl Written {
    fn line(&mut self, origin: &str, line: String) {
        self.text.push_str(&line);
        self.text.push('\n');
        self.origins.push(origin.to_owned());
    }
}

/// A JSON string (a YAML flow scalar that reads back exactly).
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn write(flags: &Flags, c: &Checked) -> Written {
    let mut w = Written {
        text: String::new(),
        origins: Vec::new(),
    };
    let form = SHOWN;
    w.line(
        form,
        "# The Sweep that `sluice sweep`'s one-line form stands for.".into(),
    );
    w.line(form, format!("apiVersion: {}", crate::spec::API_VERSION));
    w.line(form, "kind: Sweep".into());
    w.line(form, "metadata:".into());
    let name = flags.name.clone().unwrap_or_else(|| "sweep".into());
    w.line(
        &format!("--name {name}"),
        format!("  name: {}", quoted(&name)),
    );
    w.line(form, "spec:".into());
    let objective = format!("--objective {}:{}", c.goal, c.metric);
    w.line(&objective, "  objective:".into());
    w.line(&objective, format!("    metric: {}", quoted(&c.metric)));
    w.line(&objective, format!("    goal: {}", c.goal));
    let algorithm = format!("--algorithm {}", c.algorithm);
    w.line(&algorithm, "  algorithm:".into());
    w.line(&algorithm, format!("    name: {}", quoted(&c.algorithm)));
    let seed = flags.seed.unwrap_or(0);
    w.line(&format!("--seed {seed}"), format!("    seed: {seed}"));
    if let Some((name, min, max, flag)) = &c.resource {
        w.line(flag, "    settings:".into());
        w.line(flag, format!("      resource: {}", quoted(name)));
        w.line(
            flag,
            format!("      minResource: {}", serde_json::json!(min)),
        );
        w.line(
            flag,
            format!("      maxResource: {}", serde_json::json!(max)),
        );
        let eta = flags.eta.unwrap_or(3);
        w.line(&format!("--eta {eta}"), format!("      eta: {eta}"));
    }
    w.line(form, "  budget:".into());
    if let Some(n) = flags.trials {
        w.line(&format!("--trials {n}"), format!("    maxTrials: {n}"));
    }
    let parallel = flags.parallel.unwrap_or(1);
    w.line(
        &format!("--parallel {parallel}"),
        format!("    parallelism: {parallel}"),
    );
    if let Some(n) = flags.max_failed {
        w.line(
            &format!("--max-failed {n}"),
            format!("    maxFailedTrials: {n}"),
        );
    }
    w.line(form, "  params:".into());
    for (name, param, flag) in &c.params {
        w.line(flag, format!("    {}: {}", quoted(name), param_json(param)));
    }
    w.line(form, "  trial:".into());
    if BUDGETED.contains(&c.algorithm.as_str()) {
        // A promoted trial continues from its own checkpoint (sweep.md), which needs one.
        w.line(&algorithm, "    checkpoint: true".into());
    }
    w.line("--", "    command:".into());
    for (i, word) in flags.command.iter().enumerate() {
        w.line(
            &format!("-- COMMAND (word {})", i + 1),
            format!("      - {}", quoted(word)),
        );
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::Document;

    fn flags(params: &[&str], command: &[&str]) -> Flags {
        Flags {
            params: params.iter().map(|s| (*s).to_owned()).collect(),
            objective: Some("minimize:loss".into()),
            trials: Some(5),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            ..Flags::default()
        }
    }

    fn errors(f: &Flags) -> Vec<String> {
        document(f)
            .expect_err("errors")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_document_reads_back_as_the_sweep_the_flags_describe() {
        let mut f = flags(
            &[
                "lr=log:1e-5:1e-1",
                "opt=choice:adam,sgd",
                "d=float:0:0.5:0.1",
            ],
            &["python3", "t.py", "{{params.lr}}", "{{params.epochs}}"],
        );
        f.algorithm = Some("asha".into());
        f.resource = Some("epochs=1:27".into());
        f.eta = Some(3);
        f.name = Some("quick".into());
        let text = document(&f).expect("valid");
        let loaded = crate::spec::load(SHOWN, text);
        assert!(!loaded.diagnostics.has_errors());
        let Some(Document::Sweep(s)) = loaded.documents.first() else {
            panic!("a sweep");
        };
        assert_eq!(s.metadata.name, "quick");
        assert_eq!(s.algorithm.name, "asha");
        assert_eq!(s.algorithm.resource.as_deref(), Some("epochs"));
        assert_eq!(s.algorithm.min_resource, Some(1.0));
        assert_eq!(s.algorithm.max_resource, Some(27.0));
        assert_eq!(
            s.params.get("epochs"),
            Some(&SweepParam::Int {
                min: 1,
                max: 27,
                log: false,
                step: 1
            })
        );
        assert_eq!(
            s.params.get("d"),
            Some(&SweepParam::Float {
                min: 0.0,
                max: 0.5,
                log: false,
                step: Some(0.1)
            })
        );
        assert_eq!(s.budget.max_trials, Some(5));
    }

    #[test]
    fn asha_without_a_resource_points_at_the_flag_to_add() {
        let mut f = flags(&["lr=float:0:1"], &["t", "{{params.lr}}"]);
        f.algorithm = Some("asha".into());
        assert_eq!(
            errors(&f),
            [
                "--algorithm asha: error: asha needs a resource parameter: the budget each trial is given (epochs, steps)\n  help: add --resource epochs=1:27 (its name, the smallest and the largest budget), and pass {{params.epochs}} to the trial"
            ]
        );
    }

    #[test]
    fn problems_the_document_finds_name_the_flag_that_wrote_the_line() {
        let f = flags(&["lr=float:0:1"], &["t", "--lr", "{{params.lrr}}"]);
        assert_eq!(
            errors(&f),
            [
                "-- COMMAND (word 3): error: {{params.lrr}}: the sweep has no parameter 'lrr'\n  help: did you mean 'lr'?"
            ]
        );
        let mut f = flags(&["lr=float:0:1"], &["t"]);
        f.name = Some("Bad Name".into());
        let e = errors(&f);
        assert!(e[0].starts_with("--name Bad Name: error: "), "{e:?}");
        let f = flags(&["1lr=float:0:1"], &["t"]);
        let e = errors(&f);
        assert!(e[0].starts_with("-p 1lr=float:0:1: error: "), "{e:?}");
    }

    #[test]
    fn every_bad_flag_is_reported_at_once() {
        let f = Flags {
            params: vec!["lr=log:0:1".into(), "n=int:1:3".into(), "n=2".into()],
            objective: Some("accuracy:maximize".into()),
            algorithm: Some("tpx".into()),
            parallel: Some(0),
            ..Flags::default()
        };
        let e = errors(&f);
        let starts: Vec<&str> = e
            .iter()
            .map(|l| l.split(": error: ").next().unwrap_or(""))
            .collect();
        assert_eq!(
            starts,
            [
                "--algorithm tpx",
                "--objective accuracy:maximize",
                "-p lr=log:0:1",
                "-p n=2",
                "--parallel 0",
                "--"
            ],
            "{e:#?}"
        );
        assert!(e[0].contains("did you mean 'tpe'?"), "{}", e[0]);
        assert!(
            e[1].contains("write --objective maximize:accuracy"),
            "{}",
            e[1]
        );
    }

    #[test]
    fn grid_floats_need_a_step_and_say_how() {
        let mut f = flags(&["lr=float:0:1", "w=log:0.001:0.1"], &["t"]);
        f.algorithm = Some("grid".into());
        f.trials = None;
        let e = errors(&f);
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(
            e[0].contains("help: give a step: -p lr=float:0:1:0.1"),
            "{}",
            e[0]
        );
        assert!(e[1].contains("choice:0.001,0.1"), "{}", e[1]);
        f.params = vec!["lr=float:0:1:0.25".into(), "n=int:1:9:4".into()];
        assert!(document(&f).is_ok());
    }

    #[test]
    fn resource_and_eta_belong_to_asha_and_hyperband() {
        let mut f = flags(&["lr=float:0:1"], &["t"]);
        f.resource = Some("epochs=1:27".into());
        f.eta = Some(3);
        let e = errors(&f);
        assert!(
            e[0].starts_with(
                "--resource epochs=1:27: error: a resource is for --algorithm asha or hyperband"
            ),
            "{e:#?}"
        );
        assert!(e[1].starts_with("--eta 3: error: eta is for"), "{e:#?}");
        f.algorithm = Some("hyperband".into());
        for (bad, want) in [
            ("epochs", "expected NAME=MIN:MAX"),
            ("epochs=0:27", "0 < MIN < MAX"),
            ("epochs=9:3", "0 < MIN < MAX"),
            ("epochs=1:x", "'x' is not a number"),
        ] {
            f.resource = Some(bad.into());
            f.eta = Some(1);
            let e = errors(&f);
            assert!(e[0].contains(want), "{bad}: {e:#?}");
            assert!(
                e[1].starts_with("--eta 1: error: eta must be at least 2"),
                "{e:#?}"
            );
        }
        f.eta = None;
        f.resource = Some("lr=1:9".into());
        let e = errors(&f);
        assert!(
            e[0].starts_with("-p lr=float:0:1: error: 'lr' is the --resource parameter"),
            "{e:#?}"
        );
    }
}
