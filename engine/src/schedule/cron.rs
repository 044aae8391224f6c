//! Five-field cron expressions (`minute hour day-of-month month day-of-week`, or `@hourly`,
//! `@daily`, `@weekly`, `@monthly`, `@yearly`) read in an IANA time zone, with the semantics
//! `spec/cluster.md` pins: a time that does not exist (spring forward) fires at the first
//! instant after the gap; a time that happens twice (fall back) fires once, at its first
//! occurrence, while `*` and step hours fire in both passes; when day of month and day of
//! week are both restricted a day matching either fires; Sunday is 0 or 7.
//!
//! croner computes the fires (it implements exactly these rules, measured in
//! `../shared/notes/deps.md`); this module checks each field first, so that a mistake is
//! reported at its column with what the field allows (croner says only "Number out of
//! bounds."), and names time zones with a suggestion.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A parsed expression.
#[derive(Clone, Debug)]
pub struct Expr {
    text: String,
    cron: croner::Cron,
}

/// What is wrong with an expression: the message, the byte offset in the text where the
/// problem is, and a suggestion.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadExpr {
    pub message: String,
    pub offset: usize,
    pub help: Option<String>,
}

const NICKNAMES: [&str; 6] = [
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
];

/// Each field: its name, its range, and the names it takes (`JAN`, `MON`).
const FIELDS: [(&str, u32, u32, &[&str]); 5] = [
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day of month", 1, 31, &[]),
    (
        "month",
        1,
        12,
        &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    ),
    (
        "day of week",
        0,
        7,
        &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    ),
];

const EXAMPLE: &str = "five fields: minute hour day-of-month month day-of-week, e.g. \"0 2 * * *\" (02:00 every day), or @hourly, @daily, @weekly, @monthly";

fn bad(message: impl Into<String>, offset: usize, help: Option<String>) -> BadExpr {
    BadExpr {
        message: message.into(),
        offset,
        help,
    }
}

/// Parses `text`, checking each field.
pub fn parse(text: &str) -> Result<Expr, BadExpr> {
    let trimmed = text.trim();
    let lead = text.len() - text.trim_start().len();
    if trimmed.is_empty() {
        return Err(bad("the cron expression is empty", 0, Some(EXAMPLE.into())));
    }
    if let Some(nick) = trimmed.strip_prefix('@') {
        if !NICKNAMES.iter().any(|n| n[1..].eq_ignore_ascii_case(nick)) {
            let hint = crate::spec::diagnostic::nearest(
                &format!("@{}", nick.to_ascii_lowercase()),
                NICKNAMES.iter().copied(),
            )
            .map(|n| format!("did you mean '{n}'?"))
            .unwrap_or_else(|| EXAMPLE.to_owned());
            return Err(bad(
                format!("unknown cron form '{trimmed}'"),
                lead,
                Some(hint),
            ));
        }
    } else {
        check_fields(text)?;
    }
    let cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|e| {
            bad(
                format!("'{trimmed}' is not a cron expression: {e}"),
                lead,
                Some(EXAMPLE.into()),
            )
        })?;
    Ok(Expr {
        text: trimmed.to_owned(),
        cron,
    })
}

/// The five fields, each checked: its characters, numbers and names in range, steps > 0.
fn check_fields(text: &str) -> Result<(), BadExpr> {
    let mut fields: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                fields.push((s, &text[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        fields.push((s, &text[s..]));
    }
    if fields.len() != 5 {
        let offset = fields.get(5).map_or(0, |f| f.0);
        return Err(bad(
            format!(
                "a cron expression has 5 fields, this one has {}",
                fields.len()
            ),
            offset,
            Some(if fields.len() == 6 {
                "sluice's cron has no seconds field: drop the first one (or the year)".into()
            } else {
                EXAMPLE.into()
            }),
        ));
    }
    for ((offset, field), (name, lo, hi, names)) in fields.into_iter().zip(FIELDS) {
        check_field(field, offset, name, lo, hi, names)?;
    }
    Ok(())
}

fn check_field(
    field: &str,
    offset: usize,
    name: &str,
    lo: u32,
    hi: u32,
    names: &[&str],
) -> Result<(), BadExpr> {
    let allowed = if names.is_empty() {
        format!("{lo} to {hi}")
    } else {
        format!("{lo} to {hi} or {}-{}", names[0], names[names.len() - 1])
    };
    let help = || {
        Some(format!(
            "a {name} is *, a number {allowed}, a range (1-5), a list (1,3) or a step (*/15)"
        ))
    };
    let mut at = offset;
    for item in field.split(',') {
        if item.is_empty() {
            return Err(bad(
                format!("the {name} field '{field}' has an empty item"),
                at,
                help(),
            ));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        if let Some(step) = step {
            match step.parse::<u32>() {
                Ok(0) => {
                    return Err(bad(
                        format!("the {name} step '/0' never advances"),
                        at,
                        help(),
                    ));
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(bad(
                        format!("the {name} step '/{step}' is not a number"),
                        at,
                        help(),
                    ));
                }
            }
        }
        if range != "*" && range != "?" {
            let bounds: Vec<&str> = range.split('-').collect();
            if bounds.len() > 2 || bounds.iter().any(|b| b.is_empty()) {
                return Err(bad(
                    format!("the {name} field has a bad range '{range}'"),
                    at,
                    help(),
                ));
            }
            let mut values = Vec::new();
            for b in &bounds {
                let v = match b.parse::<u32>() {
                    Ok(v) => v,
                    Err(_) => match names.iter().position(|n| n.eq_ignore_ascii_case(b)) {
                        // JAN is month 1; SUN is day 0.
                        Some(i) => u32::try_from(i).unwrap_or(0) + u32::from(name == "month"),
                        None => {
                            return Err(bad(
                                format!("'{b}' is not a {name}: a {name} is {allowed}"),
                                at,
                                help(),
                            ));
                        }
                    },
                };
                if v < lo || v > hi {
                    return Err(bad(
                        format!("{name} {v} is out of range: a {name} is {allowed}"),
                        at,
                        help(),
                    ));
                }
                values.push(v);
            }
            if let [a, b] = values[..]
                && a > b
            {
                return Err(bad(
                    format!("the {name} range '{range}' runs backwards"),
                    at,
                    Some(format!("write it {b}-{a}, or as a list")),
                ));
            }
        }
        at += item.len() + 1;
    }
    Ok(())
}

impl Expr {
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The first fire strictly after `after`, the fields read in `tz`; None if it never
    /// fires again (a day that never comes, as `0 0 30 2 *`).
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The fires in `(after, upto]`, in order, at most `limit` of them.
    pub fn fires_between(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        upto: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut at = after;
        while out.len() < limit {
            match self.next_after(tz, at) {
                Some(t) if t <= upto => {
                    out.push(t);
                    at = t;
                }
                _ => break,
            }
        }
        out
    }
}

/// The IANA time zone `name` (`Europe/Berlin`, `UTC`), or why not, with the nearest name.
pub fn zone(name: &str) -> Result<Tz, (String, Option<String>)> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    let lower = name.to_ascii_lowercase();
    if let Some(tz) = chrono_tz::TZ_VARIANTS
        .iter()
        .find(|t| t.name().to_ascii_lowercase() == lower)
    {
        return Err((
            format!("unknown time zone '{name}'"),
            Some(format!(
                "time zone names are case-sensitive: '{}'",
                tz.name()
            )),
        ));
    }
    let hint =
        crate::spec::diagnostic::nearest(name, chrono_tz::TZ_VARIANTS.iter().map(|t| t.name()))
            .map(|n| format!("did you mean '{n}'?"))
            .or_else(|| {
                Some("give an IANA name such as Europe/Berlin, America/New_York or UTC".into())
            });
    Err((format!("unknown time zone '{name}'"), hint))
}

#[cfg(test)]
mod tests;
