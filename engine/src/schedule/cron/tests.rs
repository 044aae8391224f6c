//! The rules of `spec/cluster.md` ("Time zones"), checked in New York, Berlin and Adelaide
//! (a half-hour offset), and a property test against a brute-force walk over minutes.

use chrono::{Datelike, NaiveDate, TimeZone, Timelike, Utc};
use proptest::prelude::*;

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    crate::time::parse(s).expect("a time")
}

fn fires(expr: &str, zone_name: &str, after: &str, n: usize) -> Vec<String> {
    let e = parse(expr).expect("valid");
    let tz = zone(zone_name).expect("a zone");
    let mut at = utc(after);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(t) = e.next_after(tz, at) else { break };
        out.push(crate::time::format(t));
        at = t;
    }
    out
}

#[test]
fn a_time_in_the_spring_forward_gap_fires_at_the_end_of_the_gap() {
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT; 02:30 does not exist that day.
    assert_eq!(
        fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3),
        [
            "2026-03-08T07:00:00.000Z", // 03:00 EDT
            "2026-03-09T06:30:00.000Z", // 02:30 EDT
            "2026-03-10T06:30:00.000Z",
        ]
    );
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST.
    assert_eq!(
        fires("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"]
    );
    // Adelaide, 2026-10-04: 02:00 ACST (+9:30) becomes 03:00 ACDT (+10:30).
    assert_eq!(
        fires(
            "30 2 * * *",
            "Australia/Adelaide",
            "2026-10-03T00:00:00Z",
            2
        ),
        ["2026-10-03T16:30:00.000Z", "2026-10-04T16:00:00.000Z"]
    );
}

#[test]
fn a_repeated_time_fires_once_but_wildcard_hours_fire_in_both_passes() {
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    assert_eq!(
        fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
    );
    assert_eq!(
        fires("30 * * * *", "America/New_York", "2026-11-01T04:00:00Z", 3),
        [
            "2026-11-01T04:30:00.000Z", // 00:30 EDT
            "2026-11-01T05:30:00.000Z", // 01:30 EDT
            "2026-11-01T06:30:00.000Z", // 01:30 EST
        ]
    );
    assert_eq!(
        fires("0 */1 * * *", "America/New_York", "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:00:00.000Z", // 01:00 EDT
            "2026-11-01T06:00:00.000Z", // 01:00 EST
            "2026-11-01T07:00:00.000Z", // 02:00 EST
        ]
    );
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:15 happens twice.
    assert_eq!(
        fires("15 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:15:00.000Z", "2026-10-26T01:15:00.000Z"]
    );
    // Adelaide, 2027-04-04: 03:00 ACDT becomes 02:00 ACST; 02:30 happens twice.
    assert_eq!(
        fires(
            "30 2 * * *",
            "Australia/Adelaide",
            "2027-04-03T00:00:00Z",
            2
        ),
        ["2027-04-03T16:00:00.000Z", "2027-04-04T17:00:00.000Z"]
    );
}

#[test]
fn day_of_month_or_day_of_week_and_sunday_as_0_or_7() {
    // Every Friday and every 13th, from Monday 2026-02-09.
    assert_eq!(
        fires("0 0 13 * 5", "UTC", "2026-02-09T00:00:00Z", 4),
        [
            "2026-02-13T00:00:00.000Z", // a Friday the 13th, once
            "2026-02-20T00:00:00.000Z",
            "2026-02-27T00:00:00.000Z",
            "2026-03-06T00:00:00.000Z",
        ]
    );
    assert_eq!(
        fires("0 0 13 * 1", "UTC", "2026-03-10T00:00:00Z", 3),
        [
            "2026-03-13T00:00:00.000Z", // the 13th, a Friday
            "2026-03-16T00:00:00.000Z", // a Monday
            "2026-03-23T00:00:00.000Z",
        ]
    );
    let sunday = fires("0 9 * * 0", "UTC", "2026-01-01T00:00:00Z", 3);
    assert_eq!(sunday, fires("0 9 * * 7", "UTC", "2026-01-01T00:00:00Z", 3));
    assert_eq!(
        sunday,
        fires("0 9 * * SUN", "UTC", "2026-01-01T00:00:00Z", 3)
    );
    assert_eq!(sunday[0], "2026-01-04T09:00:00.000Z");
}

#[test]
fn the_31st_skips_shorter_months_and_nicknames_mean_their_five_fields() {
    assert_eq!(
        fires("0 0 31 * *", "UTC", "2026-01-31T00:00:00Z", 3),
        [
            "2026-03-31T00:00:00.000Z",
            "2026-05-31T00:00:00.000Z",
            "2026-07-31T00:00:00.000Z",
        ]
    );
    assert_eq!(
        fires("@monthly", "Europe/Berlin", "2026-01-15T00:00:00Z", 2),
        ["2026-01-31T23:00:00.000Z", "2026-02-28T23:00:00.000Z"]
    );
    assert_eq!(
        fires("@weekly", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-04T00:00:00.000Z", "2026-01-11T00:00:00.000Z"]
    );
    assert_eq!(
        fires("@daily", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2026-01-02T00:00:00.000Z"]
    );
    assert_eq!(
        fires("@hourly", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2026-01-01T01:00:00.000Z"]
    );
    assert!(fires("0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z", 1).is_empty());
}

#[test]
fn bad_fields_are_named_at_their_column() {
    let e = parse("61 * * * *").expect_err("minute 61");
    assert_eq!(e.offset, 0);
    assert!(e.message.contains("minute 61 is out of range"), "{e}");
    let e = parse("0 2 * * 8").expect_err("day 8");
    assert_eq!(e.offset, 8);
    assert!(e.message.contains("day of week 8"), "{e}");
    let e = parse("0 2 * FOO *").expect_err("FOO");
    assert_eq!(e.offset, 6);
    let e = parse("*/0 * * * *").expect_err("step 0");
    assert!(e.message.contains("never advances"), "{e}");
    let e = parse("0 0 2 * * *").expect_err("six fields");
    assert!(
        e.help.as_deref().is_some_and(|h| h.contains("no seconds")),
        "{e:?}"
    );
    let e = parse("0 5-2 * * *").expect_err("backwards");
    assert!(e.message.contains("backwards"), "{e}");
    let e = parse("@dayly").expect_err("nickname");
    assert_eq!(e.help.as_deref(), Some("did you mean '@daily'?"));
    assert!(parse("0 9 * JAN-MAR MON-FRI").is_ok());
    assert!(parse("0,15,30,45 */2 1-15 * *").is_ok());
}

#[test]
fn time_zones_are_iana_names_with_a_suggestion() {
    assert!(zone("Europe/Berlin").is_ok());
    assert!(zone("UTC").is_ok());
    let (message, help) = zone("Mars/Olympus").expect_err("no such zone");
    assert_eq!(message, "unknown time zone 'Mars/Olympus'");
    assert!(help.is_some());
    let (_, help) = zone("Europe/Berln").expect_err("a typo");
    assert_eq!(help.as_deref(), Some("did you mean 'Europe/Berlin'?"));
    let (_, help) = zone("europe/berlin").expect_err("case");
    assert!(help.is_some_and(|h| h.contains("'Europe/Berlin'")));
}

/// One field of a random expression: `*`, a value, a range, a list, or a step.
fn field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        (lo..=hi).prop_map(|v| v.to_string()),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{a},{b}")),
        (1u32..=(hi - lo).max(1)).prop_map(|s| format!("*/{s}")),
    ]
}

/// The values a field names (for the brute force).
fn values(field: &str, lo: u32, hi: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse().unwrap_or(1)),
            None => (item, 1),
        };
        let (a, b) = match range {
            "*" => (lo, hi),
            r => match r.split_once('-') {
                Some((a, b)) => (a.parse().unwrap_or(lo), b.parse().unwrap_or(hi)),
                None => {
                    let v = r.parse().unwrap_or(lo);
                    (v, v)
                }
            },
        };
        out.extend((a..=b).step_by(step as usize));
    }
    out
}

/// Whether local time `t` matches the five fields, as cron reads them.
fn matches(f: &[String; 5], t: &chrono::NaiveDateTime) -> bool {
    let minute = values(&f[0], 0, 59).contains(&t.minute());
    let hour = values(&f[1], 0, 23).contains(&t.hour());
    let month = values(&f[3], 1, 12).contains(&t.month());
    let dom = values(&f[2], 1, 31).contains(&t.day());
    let dows: Vec<u32> = values(&f[4], 0, 7).into_iter().map(|d| d % 7).collect();
    let dow = dows.contains(&t.weekday().num_days_from_sunday());
    let day = match (f[2] == "*", f[4] == "*") {
        (true, true) => true,
        (false, true) => dom,
        (true, false) => dow,
        (false, false) => dom || dow,
    };
    minute && hour && month && day
}

const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Adelaide",
    "Asia/Kathmandu",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn next_fires_match_a_walk_over_every_minute(
        f in (field(0, 59), field(0, 23), field(1, 28), field(1, 12), field(0, 7)),
        zone_index in 0usize..ZONES.len(),
        day in 0u32..20,
    ) {
        let f = [f.0, f.1, f.2, f.3, f.4];
        let text = f.join(" ");
        let e = parse(&text).expect("generated expressions are valid");
        let tz = zone(ZONES[zone_index]).expect("a zone");
        // Windows in January and February: no zone here changes its offset then.
        let start = Utc.from_utc_datetime(
            &NaiveDate::from_ymd_opt(2027, 1, 1 + day)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .expect("a date"),
        );
        let end = start + chrono::Duration::days(30);
        prop_assume!(
            start.with_timezone(&tz).offset().to_string()
                == end.with_timezone(&tz).offset().to_string()
        );
        let mut expected = Vec::new();
        let mut t = start + chrono::Duration::minutes(1);
        while t <= end && expected.len() < 4 {
            if matches(&f, &t.with_timezone(&tz).naive_local()) {
                expected.push(t);
            }
            t += chrono::Duration::minutes(1);
        }
        let got = e.fires_between(tz, start, end, 4);
        prop_assert_eq!(got, expected, "{} in {}", text, ZONES[zone_index]);
    }
}
