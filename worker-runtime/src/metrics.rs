//! Metrics: `NAME=VALUE` pairs in lines of standard output and standard error (or what Katib's
//! `metricsFormat` regular expressions match), JSON lines in `$SLUICE_METRICS_FILE`, and the
//! file of Katib's `File` collector; and the value each metric ends with.
//!
//! Everything observed goes to the attempt's `metrics.jsonl`, one observation per line, so that
//! the engine reads curves (early stopping) from one place whatever the source.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::contract::{FileFormat, MetricsFile, Strategy};

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

/// Katib's expressions are Go's (RE2), where a `{` that does not open a repetition (`{2}`,
/// `{2,}`, `{2,5}`) is a literal brace: its own example filter starts `{metricName: ...`.
/// Rust's `regex` reads the same syntax but refuses such a brace, so it is escaped first.
fn go_braces(filter: &str) -> String {
    let chars: Vec<char> = filter.chars().collect();
    let mut out = String::with_capacity(filter.len() + 4);
    let mut i = 0;
    let mut class = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(&next) = chars.get(i + 1) {
                    out.push(next);
                }
                i += 2;
                continue;
            }
            '[' if !class => {
                class = true;
                out.push(c);
                // `[]` and `[^]` open a class whose first member is `]`.
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if chars.get(i + 1) == Some(&']') {
                    out.push(']');
                    i += 1;
                }
            }
            '[' if chars.get(i + 1) == Some(&':') => {
                // A POSIX class inside a class, `[:alpha:]`, copied whole.
                let end = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == ':' && chars[j + 1] == ']');
                let stop = end.map_or(i + 1, |j| j + 2);
                out.extend(&chars[i..stop]);
                i = stop;
                continue;
            }
            ']' if class => {
                class = false;
                out.push(c);
            }
            '{' if !class => {
                let rest: String = chars[i + 1..].iter().take_while(|c| **c != '}').collect();
                let closed = i + 1 + rest.chars().count() < chars.len();
                let (lo, hi) = rest.split_once(',').unwrap_or((rest.as_str(), "0"));
                let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
                let repeat = closed && !lo.is_empty() && digits(lo) && digits(hi);
                out.push_str(if repeat { "{" } else { "\\{" });
            }
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// The expression compiled, or what is wrong with it in one line (`unclosed group`).
fn compile(filter: &str) -> Result<Regex, String> {
    Regex::new(&go_braces(filter)).map_err(|e| {
        let text = e.to_string();
        text.lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .map_or_else(|| text.replace('\n', " "), str::to_owned)
    })
}

/// Whether `filter` can be one of Katib's `metricsFormat` expressions: it compiles (as Go
/// reads it), and has the two groups (name, value) a match is read from. The error says why
/// not.
pub fn check_filter(filter: &str) -> Result<(), String> {
    let re = compile(filter)?;
    if re.captures_len() < 3 {
        return Err(format!(
            "it has {} group(s); the metric's name is read from the first and its value from the second",
            re.captures_len() - 1
        ));
    }
    Ok(())
}

/// Reads the metrics in lines of text (output lines, or a `Text` metrics file), numbering
/// their steps: a `step=` or `epoch=` pair on the same line is the step, otherwise each
/// metric's observations count 1, 2, 3...
#[derive(Default)]
pub struct LineMetrics {
    /// Katib's `metricsFormat`; empty: the `NAME=VALUE` convention.
    filters: Vec<Regex>,
    counters: HashMap<String, u64>,
}

impl LineMetrics {
    /// A reader with Katib's `metricsFormat` expressions, or the `NAME=VALUE` convention when
    /// there are none. An expression that [`check_filter`] refuses is an error.
    pub fn new(filters: &[String]) -> Result<Self, String> {
        let mut compiled = Vec::with_capacity(filters.len());
        for f in filters {
            check_filter(f).map_err(|e| format!("metrics filter '{f}': {e}"))?;
            compiled.push(compile(f).map_err(|e| format!("metrics filter '{f}': {e}"))?);
        }
        Ok(LineMetrics {
            filters: compiled,
            counters: HashMap::new(),
        })
    }

    /// The observations in one line, as JSON lines to append to the metrics file.
    pub fn parse(&mut self, line: &str) -> Vec<String> {
        let pairs: Vec<(String, f64)> = if self.filters.is_empty() {
            line.split_whitespace()
                .filter_map(|tok| {
                    let (name, value) = tok.split_once('=')?;
                    let value: f64 = value.trim_end_matches([',', ';']).parse().ok()?;
                    (is_metric_name(name) && value.is_finite()).then(|| (name.to_owned(), value))
                })
                .collect()
        } else {
            // As Katib's collector: every match of every expression, name and value trimmed.
            self.filters
                .iter()
                .flat_map(|re| re.captures_iter(line))
                .filter_map(|c| {
                    let name = c.get(1)?.as_str().trim();
                    let value: f64 = c.get(2)?.as_str().trim().parse().ok()?;
                    (!name.is_empty() && value.is_finite()).then(|| (name.to_owned(), value))
                })
                .collect()
        };
        self.observe(pairs, None)
    }

    /// The observations in one line of a JSON metrics file: the keys in `names` whose values
    /// are numbers or numeric strings (`cloudml-hypertune` writes `"0.91"`); `step`,
    /// `global_step` or `epoch` gives the step. A line that is not a JSON object is skipped.
    pub fn parse_json(&mut self, line: &str, names: &[String]) -> Vec<String> {
        let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(line)
        else {
            return Vec::new();
        };
        let number = |v: &serde_json::Value| match v {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        let step = ["step", "global_step", "epoch"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(number));
        let pairs = names
            .iter()
            .filter_map(|n| {
                let v = number(obj.get(n)?)?;
                v.is_finite().then(|| (n.clone(), v))
            })
            .collect();
        self.observe(pairs, step)
    }

    fn observe(&mut self, pairs: Vec<(String, f64)>, step: Option<f64>) -> Vec<String> {
        let explicit = step.or_else(|| {
            pairs
                .iter()
                .find(|(n, _)| n == "step" || n == "epoch")
                .map(|(_, v)| *v)
        });
        pairs
            .into_iter()
            .filter(|(n, _)| n != "step" && n != "epoch" || explicit.is_none())
            .map(|(name, value)| {
                let counter = self.counters.entry(name.clone()).or_default();
                *counter += 1;
                let step = explicit.unwrap_or(*counter as f64);
                serde_json::to_string(&Observation {
                    name,
                    value,
                    step: Some(step),
                })
                .unwrap_or_default()
            })
            .collect()
    }
}

/// Follows a metrics file the program writes (Katib's `File` collector): each poll reads the
/// complete lines added since the last one and appends their observations to the metrics
/// file.
pub struct FileTail {
    path: PathBuf,
    spec: MetricsFile,
    offset: u64,
    partial: Vec<u8>,
    lines: LineMetrics,
}

impl FileTail {
    pub fn new(path: PathBuf, spec: MetricsFile, lines: LineMetrics) -> Self {
        FileTail {
            path,
            spec,
            offset: 0,
            partial: Vec::new(),
            lines,
        }
    }

    /// Reads what was added to the file and appends its observations to `out`. `last`: the
    /// program has ended, so a final line without its newline counts too. A file not written
    /// yet is not an error; one that shrank (rewritten) is read again from its start.
    pub fn poll(&mut self, out: &Path, last: bool) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if len > self.offset && f.seek(SeekFrom::Start(self.offset)).is_ok() {
            let mut buf = Vec::new();
            if let Ok(n) = f.take(len - self.offset).read_to_end(&mut buf) {
                self.offset += n as u64;
                self.partial.extend_from_slice(&buf);
            }
        }
        let mut observed = Vec::new();
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            observed.extend(self.read(&String::from_utf8_lossy(&line)));
        }
        if last && !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            observed.extend(self.read(&String::from_utf8_lossy(&line)));
        }
        let _ = append(out, &observed);
    }

    fn read(&mut self, line: &str) -> Vec<String> {
        let line = line.trim_end_matches(['\n', '\r']);
        match self.spec.format {
            FileFormat::Text => self.lines.parse(line),
            FileFormat::Json => self.lines.parse_json(line, &self.spec.names),
        }
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

/// The value of each metric in the file: its last observation, or its largest or smallest
/// where `strategies` says so. Malformed lines are skipped.
pub fn values(path: &Path, strategies: &BTreeMap<String, Strategy>) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    for line in text.lines() {
        let Ok(o) = serde_json::from_str::<Observation>(line) else {
            continue;
        };
        if !o.value.is_finite() {
            continue;
        }
        let strategy = strategies.get(&o.name).copied().unwrap_or_default();
        match out.get_mut(&o.name) {
            None => {
                out.insert(o.name, o.value);
            }
            Some(v) => match strategy {
                Strategy::Latest => *v = o.value,
                Strategy::Max => *v = v.max(o.value),
                Strategy::Min => *v = v.min(o.value),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_with_their_step() {
        let mut m = LineMetrics::default();
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

    #[test]
    fn katib_filters_replace_the_convention() {
        let f = "{metricName: ([\\w|-]+), metricValue: ((-?\\d+)(\\.\\d+)?)}".to_owned();
        let mut m = LineMetrics::new(&[f]).expect("compiles");
        let lines = m.parse(
            "2024-01-01T00:00:00Z INFO {metricName: accuracy, metricValue: 0.9712};{metricName: loss, metricValue: 0.0925}",
        );
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("\"accuracy\"") && lines[0].contains("0.9712"));
        assert!(lines[1].contains("\"loss\"") && lines[1].contains("0.0925"));
        // The convention is off: NAME=VALUE is not what the filter matches.
        assert!(m.parse("loss=0.5").is_empty());
        assert!(LineMetrics::new(&["(unclosed".into()]).is_err());
        assert!(check_filter("(\\w+)").is_err(), "one group is not enough");
        assert!(check_filter("(\\w+)=(\\d+)").is_ok());
        // Go's literal braces, and its repetitions, read as Go reads them.
        assert_eq!(go_braces("{a: (x{2,3})}"), "\\{a: (x{2,3})}");
        assert_eq!(go_braces("[{](\\{)x{,2}"), "[{](\\{)x\\{,2}");
        assert_eq!(go_braces("[[:alpha:]{]{"), "[[:alpha:]{]\\{");
    }

    #[test]
    fn json_lines_read_the_named_keys_with_their_step() {
        let mut m = LineMetrics::default();
        let names = vec!["accuracy".to_owned(), "loss".to_owned()];
        let lines = m.parse_json(
            r#"{"timestamp": 1700000000.5, "trial": "0", "loss": "0.25", "accuracy": 0.9, "global_step": "2"}"#,
            &names,
        );
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines.iter().all(|l| l.contains("\"step\":2.0")),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains("timestamp")));
        assert!(m.parse_json("not json", &names).is_empty());
    }

    #[test]
    fn strategies_pick_the_largest_or_smallest() {
        let dir = std::env::temp_dir().join(format!("sluice-metrics-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("m.jsonl");
        let mut m = LineMetrics::default();
        for line in ["acc=0.5 loss=3", "acc=0.9 loss=1", "acc=0.7 loss=2"] {
            append(&path, &m.parse(line)).expect("append");
        }
        let latest = values(&path, &BTreeMap::new());
        assert_eq!((latest["acc"], latest["loss"]), (0.7, 2.0));
        let strategies = BTreeMap::from([
            ("acc".to_owned(), Strategy::Max),
            ("loss".to_owned(), Strategy::Min),
        ]);
        let best = values(&path, &strategies);
        assert_eq!((best["acc"], best["loss"]), (0.9, 1.0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_followed_file_is_read_line_by_line_as_it_grows() {
        let dir = std::env::temp_dir().join(format!("sluice-tail-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let (file, out) = (dir.join("metrics.log"), dir.join("m.jsonl"));
        let spec = MetricsFile {
            path: "/katib/metrics.log".into(),
            format: FileFormat::Text,
            names: Vec::new(),
        };
        let mut tail = FileTail::new(file.clone(), spec, LineMetrics::default());
        tail.poll(&out, false);
        std::fs::write(&file, "loss=3\nloss=2").expect("write");
        tail.poll(&out, false);
        assert_eq!(
            values(&out, &BTreeMap::new())["loss"],
            3.0,
            "half a line waits"
        );
        tail.poll(&out, true);
        assert_eq!(values(&out, &BTreeMap::new())["loss"], 2.0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
