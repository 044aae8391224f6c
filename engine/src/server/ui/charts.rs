//! A sweep's two charts as SVG, drawn here: the optimization history (each trial's value by
//! trial number, and the best so far as a step line, as optuna-dashboard draws it) and
//! parallel coordinates (an axis per parameter and one for the objective, a line per trial,
//! as Katib's UI draws it). Early-stopped trials are drawn in their own colour and say so in
//! their tooltip; categorical parameters take evenly spaced places on their axis.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::layout::escape;
use crate::run::driver::TrialReport;
use crate::run::state::step as st;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 36.0;

fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return None;
    }
    if hi - lo < 1e-12 {
        return Some((lo - 0.5, hi + 0.5));
    }
    Some((lo, hi))
}

fn class(t: &TrialReport) -> &'static str {
    match t.state.as_str() {
        s if s == st::STOPPED => "trial stopped",
        s if s == st::FAILED => "trial failed",
        _ => "trial",
    }
}

/// The optimization history; None when no trial has a value yet.
pub fn history(trials: &[TrialReport], minimize: bool, metric: &str) -> Option<String> {
    let valued: Vec<(&TrialReport, f64)> = trials
        .iter()
        .filter_map(|t| t.value.filter(|v| v.is_finite()).map(|v| (t, v)))
        .collect();
    let (lo, hi) = span(valued.iter().map(|(_, v)| *v))?;
    let last = trials.iter().map(|t| t.trial).max().unwrap_or(1).max(1) as f64;
    let px = |n: f64| LEFT + (n - 1.0).max(0.0) / (last - 1.0).max(1.0) * (WIDTH - LEFT - RIGHT);
    let py = |v: f64| TOP + (hi - v) / (hi - lo) * (HEIGHT - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart history" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="optimization history">"#
    );
    let _ = write!(
        s,
        r#"<line class="axis" x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}"/><line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}"/><text x="{LEFT}" y="{ty}">trial 1</text><text x="{r}" y="{ty}" text-anchor="end">trial {last}</text><text x="{lx}" y="{t0}" text-anchor="end">{hi}</text><text x="{lx}" y="{b}" text-anchor="end">{lo}</text><text x="{LEFT}" y="{tm}" dx="6">{m}</text>"#,
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT,
        ty = HEIGHT - BOTTOM + 18.0,
        lx = LEFT - 6.0,
        t0 = TOP + 8.0,
        tm = TOP + 8.0,
        hi = super::layout::number(hi),
        lo = super::layout::number(lo),
        m = escape(metric),
    );
    // The best so far, in trial order, among the trials that finished with a value.
    let mut order: Vec<&(&TrialReport, f64)> = valued
        .iter()
        .filter(|(t, _)| t.state == st::SUCCEEDED)
        .collect();
    order.sort_by_key(|(t, _)| t.trial);
    let mut best: Option<f64> = None;
    let mut path = String::new();
    for (t, v) in order {
        let better = best.is_none_or(|b| if minimize { *v < b } else { *v > b });
        let x = px(t.trial as f64);
        if better {
            if let Some(b) = best {
                let _ = write!(path, " L{x:.1},{:.1}", py(b));
            }
            best = Some(*v);
            let _ = write!(
                path,
                "{}{x:.1},{:.1}",
                if path.is_empty() { "M" } else { " L" },
                py(*v)
            );
        }
    }
    if let Some(b) = best {
        let _ = write!(path, " L{:.1},{:.1}", px(last), py(b));
        let _ = write!(
            s,
            r#"<path class="best" d="{path}"><title>best so far</title></path>"#
        );
    }
    for (t, v) in &valued {
        let _ = write!(
            s,
            r#"<circle class="{}" cx="{:.1}" cy="{:.1}" r="4" data-trial="{}"><title>trial {}: {} ({})</title></circle>"#,
            class(t),
            px(t.trial as f64),
            py(*v),
            t.trial,
            t.trial,
            super::layout::number(*v),
            escape(&t.state.to_ascii_lowercase()),
        );
    }
    s.push_str("</svg>");
    Some(s)
}

/// One axis: a parameter (or the objective) and how its values map onto [0, 1].
struct Axis {
    name: String,
    /// Numbers: (low, high). Categories: their sorted values.
    numeric: Option<(f64, f64)>,
    categories: Vec<String>,
}

impl Axis {
    fn of(name: &str, values: &[Option<&serde_json::Value>]) -> Axis {
        let numbers = values.iter().flatten().filter_map(|v| v.as_f64());
        let all_numbers = values.iter().flatten().all(|v| v.is_number());
        if all_numbers && let Some(span) = span(numbers) {
            return Axis {
                name: name.to_owned(),
                numeric: Some(span),
                categories: Vec::new(),
            };
        }
        let categories: BTreeSet<String> = values.iter().flatten().map(|v| text(v)).collect();
        Axis {
            name: name.to_owned(),
            numeric: None,
            categories: categories.into_iter().collect(),
        }
    }

    /// Where `v` sits, 0 at the bottom, 1 at the top.
    fn at(&self, v: &serde_json::Value) -> Option<f64> {
        match self.numeric {
            Some((lo, hi)) => v.as_f64().map(|x| (x - lo) / (hi - lo)),
            None => {
                let i = self.categories.iter().position(|c| *c == text(v))?;
                Some(if self.categories.len() == 1 {
                    0.5
                } else {
                    i as f64 / (self.categories.len() - 1) as f64
                })
            }
        }
    }

    fn ends(&self) -> (String, String) {
        match self.numeric {
            Some((lo, hi)) => (super::layout::number(lo), super::layout::number(hi)),
            None => (
                self.categories.first().cloned().unwrap_or_default(),
                self.categories.last().cloned().unwrap_or_default(),
            ),
        }
    }
}

fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parallel coordinates over the trials with parameters; None when there are none.
pub fn parallel(trials: &[TrialReport], metric: &str) -> Option<String> {
    let names: BTreeSet<String> = trials
        .iter()
        .filter_map(|t| t.params.as_object())
        .flat_map(|o| o.keys().cloned())
        .collect();
    if names.is_empty() {
        return None;
    }
    let mut axes: Vec<Axis> = names
        .iter()
        .map(|n| {
            let values: Vec<Option<&serde_json::Value>> =
                trials.iter().map(|t| t.params.get(n)).collect();
            Axis::of(n, &values)
        })
        .collect();
    let values: Vec<Option<serde_json::Value>> = trials
        .iter()
        .map(|t| {
            t.value
                .and_then(|v| serde_json::Number::from_f64(v).map(Into::into))
        })
        .collect();
    let refs: Vec<Option<&serde_json::Value>> = values.iter().map(Option::as_ref).collect();
    axes.push(Axis::of(metric, &refs));
    let gap = (WIDTH - LEFT - RIGHT) / (axes.len() - 1).max(1) as f64;
    let ax = |i: usize| LEFT + i as f64 * gap;
    let py = |f: f64| TOP + (1.0 - f) * (HEIGHT - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart parallel" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="parallel coordinates">"#
    );
    let value_span = axes.last().and_then(|a| a.numeric);
    for (k, t) in trials.iter().enumerate() {
        let mut d = String::new();
        for (i, a) in axes.iter().enumerate() {
            let v = if i + 1 == axes.len() {
                values[k].as_ref()
            } else {
                t.params.get(&a.name)
            };
            let Some(f) = v.and_then(|v| a.at(v)) else {
                continue;
            };
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if d.is_empty() { "M" } else { " L" },
                ax(i),
                py(f)
            );
        }
        if d.is_empty() {
            continue;
        }
        // Coloured by value: blue (low) to red (high); grey without a value.
        let colour = match (t.value, value_span) {
            (Some(v), Some((lo, hi))) => {
                let f = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
                format!("hsl({:.0},70%,45%)", 220.0 - 220.0 * f)
            }
            _ => "#9aa6b6".to_owned(),
        };
        let dash = if t.state == st::STOPPED {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<path class="pc" stroke="{colour}"{dash} d="{d}" data-trial="{}"><title>trial {} ({})</title></path>"#,
            t.trial,
            t.trial,
            escape(&t.state.to_ascii_lowercase())
        );
    }
    for (i, a) in axes.iter().enumerate() {
        let (lo, hi) = a.ends();
        let _ = write!(
            s,
            r#"<line class="axis" x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{b}"/><text x="{x:.1}" y="{ty}" text-anchor="middle" font-weight="600">{n}</text><text x="{tx:.1}" y="{t0}">{hi}</text><text x="{tx:.1}" y="{b}">{lo}</text>"#,
            x = ax(i),
            b = HEIGHT - BOTTOM,
            ty = HEIGHT - BOTTOM + 20.0,
            tx = ax(i) + 4.0,
            t0 = TOP + 8.0,
            n = escape(&a.name),
            hi = escape(&hi),
            lo = escape(&lo),
        );
    }
    s.push_str("</svg>");
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(n: u64, state: &str, lr: f64, opt: &str, value: Option<f64>) -> TrialReport {
        TrialReport {
            step: format!("trial[{n}]"),
            trial: n,
            state: state.into(),
            params: serde_json::json!({"lr": lr, "optimizer": opt}),
            value,
            reason: None,
        }
    }

    #[test]
    fn the_history_draws_every_valued_trial_and_the_best_so_far() {
        let trials = vec![
            trial(1, st::SUCCEEDED.as_str(), 0.1, "sgd", Some(0.5)),
            trial(2, st::SUCCEEDED.as_str(), 0.01, "adam", Some(0.3)),
            trial(3, st::STOPPED.as_str(), 0.2, "sgd", Some(0.9)),
            trial(4, st::RUNNING.as_str(), 0.05, "adam", None),
        ];
        let svg = history(&trials, true, "loss").expect("a chart");
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains(r#"class="trial stopped""#), "{svg}");
        assert!(svg.contains(r#"class="best""#));
        assert!(history(&trials[3..], true, "loss").is_none());
    }

    #[test]
    fn parallel_coordinates_have_an_axis_per_parameter_and_the_objective() {
        let trials = vec![
            trial(1, st::SUCCEEDED.as_str(), 0.1, "sgd", Some(0.5)),
            trial(2, st::STOPPED.as_str(), 0.01, "adam", Some(0.3)),
        ];
        let svg = parallel(&trials, "loss").expect("a chart");
        assert_eq!(svg.matches(r#"class="axis""#).count(), 3);
        assert_eq!(svg.matches(r#"class="pc""#).count(), 2);
        assert!(
            svg.contains("stroke-dasharray"),
            "the stopped trial is dashed"
        );
        assert!(svg.contains(">optimizer<") && svg.contains(">adam<"));
    }
}
