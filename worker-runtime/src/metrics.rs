//! Metrics: `NAME=VALUE` pairs on standard output, and JSON lines in `$SLUICE_METRICS_FILE`.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Observation {
    name: String,
    value: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step: Option<f64>,
}

fn is_metric_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Reads `NAME=VALUE` pairs from standard output lines, numbering their steps.
#[derive(Default)]
pub struct StdoutMetrics {
    counters: HashMap<String, u64>,
}

impl StdoutMetrics {
    /// The observations in one line, as JSON lines to append to the metrics file.
    pub fn parse(&mut self, line: &str) -> Vec<String> {
        let pairs: Vec<(&str, f64)> = line
            .split_whitespace()
            .filter_map(|tok| {
                let (name, value) = tok.split_once('=')?;
                let value: f64 = value.trim_end_matches([',', ';']).parse().ok()?;
                (is_metric_name(name) && value.is_finite()).then_some((name, value))
            })
            .collect();
        let explicit = pairs
            .iter()
            .find(|(n, _)| *n == "step" || *n == "epoch")
            .map(|(_, v)| *v);
        pairs
            .into_iter()
            .filter(|(n, _)| *n != "step" && *n != "epoch" || explicit.is_none())
            .map(|(name, value)| {
                let counter = self.counters.entry(name.to_owned()).or_default();
                *counter += 1;
                let step = explicit.unwrap_or(*counter as f64);
                serde_json::to_string(&Observation {
                    name: name.to_owned(),
                    value,
                    step: Some(step),
                })
                .unwrap_or_default()
            })
            .collect()
    }
}

/// Appends lines to the metrics file.
pub fn append(path: &Path, lines: &[String]) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut buf = String::new();
    for l in lines {
        buf.push_str(l);
        buf.push('\n');
    }
    f.write_all(buf.as_bytes())
}

/// The last value of each metric in the file; malformed lines are skipped.
pub fn last_values(path: &Path) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    for line in text.lines() {
        if let Ok(o) = serde_json::from_str::<Observation>(line)
            && o.value.is_finite()
        {
            out.insert(o.name, o.value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_with_their_step() {
        let mut m = StdoutMetrics::default();
        let lines = m.parse("epoch=3 loss=0.21 accuracy=0.914 note=fast");
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("\"loss\"") && lines[0].contains("\"step\":3.0"));
        // Without step= or epoch=, a metric's step is the count of its observations.
        let lines = m.parse("accuracy=0.5");
        assert!(lines[0].contains("\"step\":2.0"), "{lines:?}");
        let lines = m.parse("accuracy=0.6 x=nan loss=1");
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("\"step\":3.0"), "{lines:?}");
        assert!(lines[1].contains("\"step\":2.0"), "{lines:?}");
        assert!(m.parse("no pairs here, a=b").is_empty());
    }
}
