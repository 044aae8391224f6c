//! Durations (`500ms`, `90s`, `1h30m`) and Kubernetes quantities (`500m`, `512Mi`, `4Gi`).

use std::time::Duration;

/// Parses a duration made of number-unit pairs, largest unit first: `1h30m`, `1.5s`, `500ms`.
/// Units: `ms`, `s`, `m`, `h`, `d`. A bare number is refused: `30` could mean anything.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_exact(text).map_err(|why| match suggest_duration(text) {
        Some(s) => format!("{why}: write '{s}'"),
        None => why,
    })
}

/// A valid spelling of what was meant: `10 seconds` is `10s`, `1 hour 30 min` is `1h30m`.
fn suggest_duration(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| -> Option<()> {
        if word.is_empty() {
            return Some(());
        }
        let unit = match word.to_lowercase().as_str() {
            "ms" | "msec" | "millis" | "millisecond" | "milliseconds" => "ms",
            "s" | "sec" | "secs" | "second" | "seconds" => "s",
            "m" | "min" | "mins" | "minute" | "minutes" => "m",
            "h" | "hr" | "hrs" | "hour" | "hours" => "h",
            "d" | "day" | "days" => "d",
            _ => return None,
        };
        out.push_str(unit);
        word.clear();
        Some(())
    };
    for c in text.trim().chars() {
        if c.is_ascii_digit() || c == '.' {
            flush(&mut word, &mut out)?;
            out.push(c);
        } else if c.is_alphabetic() {
            word.push(c);
        } else if !c.is_whitespace() {
            return None;
        }
    }
    flush(&mut word, &mut out)?;
    (out != text && parse_duration_exact(&out).is_ok()).then_some(out)
}

fn parse_duration_exact(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.contains(char::is_whitespace) {
        return Err(format!("'{t}' has spaces"));
    }
    if t.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = t;
    let mut total = 0f64;
    let mut last_rank = usize::MAX;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("'{t}' is not a duration"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("'{}' is not a number", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let (rank, seconds) = match unit {
            "d" => (0, 86_400.0),
            "h" => (1, 3_600.0),
            "m" => (2, 60.0),
            "s" => (3, 1.0),
            "ms" => (4, 0.001),
            "" => return Err(format!("'{t}' has no unit")),
            other => return Err(format!("unknown unit '{other}' in '{t}'")),
        };
        if rank <= last_rank && last_rank != usize::MAX {
            return Err(format!(
                "units in '{t}' must go from largest to smallest, each once"
            ));
        }
        last_rank = rank;
        total += number * seconds;
    }
    if !total.is_finite() || total > 10.0 * 365.0 * 86_400.0 {
        return Err(format!("'{t}' is longer than ten years"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Renders a duration the way users write them (`1h30m`, `90ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) && ms < 1000 {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    let rem_ms = ms % 1000;
    if secs > 0 || rem_ms > 0 {
        if rem_ms > 0 {
            out.push_str(&format!("{secs}.{rem_ms:03}s"));
        } else {
            out.push_str(&format!("{secs}s"));
        }
    }
    out
}

/// Parses a Kubernetes quantity into base units (bytes, or cores): `512Mi`, `1G`, `500m`,
/// `1.5`, `2e3`.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let suffixes: [(&str, f64); 16] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    for (suffix, scale) in suffixes {
        if let Some(number) = t.strip_suffix(suffix) {
            if number.is_empty() {
                continue;
            }
            let valid_number = number
                .trim_start_matches(['+'])
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'));
            if !valid_number {
                continue;
            }
            if let Ok(n) = number.parse::<f64>() {
                if !n.is_finite() || n < 0.0 {
                    return Err(format!("'{t}' must not be negative"));
                }
                return Ok(n * scale);
            }
        }
    }
    Err(format!("'{t}' is not a quantity"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("30x").is_err());
        assert!(parse_duration("30m1h").is_err());
        assert!(parse_duration("1m1m").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("h").is_err());
        assert_eq!(
            parse_duration("10 seconds"),
            Err("'10 seconds' has spaces: write '10s'".into())
        );
        assert_eq!(
            parse_duration("1hour30min"),
            Err("unknown unit 'hour' in '1hour30min': write '1h30m'".into())
        );
    }

    #[test]
    fn formats_durations_back() {
        for t in ["1h30m", "90ms", "15m", "2h", "1d2h", "1.500s"] {
            let d = parse_duration(t).expect(t);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{t}");
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("512Mi"), Ok(512.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1G"), Ok(1e9));
        assert_eq!(parse_quantity("500m"), Ok(0.5));
        assert_eq!(parse_quantity("2"), Ok(2.0));
        assert_eq!(parse_quantity("1e3"), Ok(1000.0));
        assert!(parse_quantity("lots").is_err());
        assert!(parse_quantity("5 Gb").is_err());
        assert!(parse_quantity("Gi").is_err());
        assert!(parse_quantity("-1Gi").is_err());
    }
}
