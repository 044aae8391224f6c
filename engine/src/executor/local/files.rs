//! What a local attempt's folder holds besides its lock: the launch the engine writes, and the
//! metrics and log its runtime writes.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sluice_runtime::contract;

/// Where one attempt's files live: `HOME/attempts/RUN/STEP.N`.
pub fn attempt_dir(home: &Path, run: &str, step: &str, number: i64) -> PathBuf {
    home.join("attempts")
        .join(run)
        .join(format!("{step}.{number}"))
}

/// Writes the attempt's folder and `launch.json`. The runtime starts only after this returns,
/// so the file needs no atomic rename: an engine that dies while writing it never starts the
/// runtime, and the attempt is given up.
pub fn write_launch(dir: &Path, launch: &contract::Launch) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let text = serde_json::to_vec(launch).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(contract::LAUNCH_FILE), text)
}

/// The values of `metric` in an attempt's metrics file: (step, value) in the order reported;
/// a value without a step is numbered by its place.
pub fn curve(dir: &Path, metric: &str) -> Vec<(u64, f64)> {
    let Ok(text) = std::fs::read_to_string(dir.join(contract::METRICS_FILE)) else {
        return Vec::new();
    };
    curve_of(&text, metric)
}

/// The values of `metric` in the text of a `metrics.jsonl`, as [`curve`] gives them.
pub fn curve_of(text: &str, metric: &str) -> Vec<(u64, f64)> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|o| o.get("name").and_then(serde_json::Value::as_str) == Some(metric))
        .enumerate()
        .filter_map(|(i, o)| {
            let v = o.get("value")?.as_f64()?;
            let step = o
                .get("step")
                .and_then(serde_json::Value::as_f64)
                .map_or(i as u64 + 1, |s| s.max(0.0) as u64);
            Some((step, v))
        })
        .collect()
}

/// The attempt's log from byte `from` on (nothing yet: empty).
pub fn log(dir: &Path, from: u64) -> std::io::Result<Vec<u8>> {
    let mut file = match std::fs::File::open(dir.join(contract::LOG_FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(from))?;
    let mut out = Vec::new();
    file.read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_keeps_the_metric_asked_for_in_order_with_steps() {
        let dir = std::env::temp_dir().join(format!("sluice-curve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        std::fs::write(
            dir.join(contract::METRICS_FILE),
            "{\"name\":\"loss\",\"value\":3.0}\n{\"name\":\"acc\",\"value\":0.1}\nnot json\n{\"name\":\"loss\",\"value\":2.0,\"step\":10}\n",
        )
        .expect("metrics file");
        assert_eq!(curve(&dir, "loss"), vec![(1, 3.0), (10, 2.0)]);
        assert_eq!(curve(&dir, "missing"), Vec::new());
        assert_eq!(log(&dir, 0).expect("no log yet"), Vec::<u8>::new());
        std::fs::write(dir.join(contract::LOG_FILE), b"one\ntwo\n").expect("log");
        assert_eq!(log(&dir, 4).expect("the log's tail"), b"two\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
