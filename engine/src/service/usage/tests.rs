use super::*;

#[test]
fn by_takes_known_keys_once_and_names_a_wrong_one() {
    assert_eq!(
        parse_by("pipeline, team,pipeline").expect("valid"),
        [Key::Pipeline, Key::Team]
    );
    let e = parse_by("team,pol").expect_err("a typo");
    assert_eq!(e.status_code(), 400);
    assert!(e.to_string().contains("did you mean 'pool'"), "{e}");
}

/// The store compares times as text, which sorts as time does for four-digit years only: a
/// bound past year 9999 is its last moment, so that `--until 9999-12-31` still counts
/// everything (it counted nothing: `+10000-01-01...` sorts before `2026-...`).
#[test]
fn a_bound_past_year_9999_is_its_last_moment() {
    let latest = crate::time::LATEST_MS;
    assert_eq!(
        crate::time::format(chrono::DateTime::from_timestamp_millis(latest).expect("a time")),
        "9999-12-31T23:59:59.999Z"
    );
    assert_eq!(bound("--until", "9999-12-31", true).expect("date"), latest);
    assert_eq!(
        bound("--since", "+10000-01-01", false).expect("date"),
        latest
    );
    assert!(bound("--until", "9999-12-30", true).expect("date") < latest);
}

#[test]
fn a_date_bound_covers_whole_days_in_utc() {
    let day = 1_796_083_200_000; // 2026-12-01T00:00:00Z
    assert_eq!(bound("--since", "2026-12-01", false).expect("date"), day);
    assert_eq!(
        bound("--until", "2026-12-01", true).expect("date"),
        day + 86_400_000
    );
    assert_eq!(
        bound("--until", "2026-12-01T10:00:00+01:00", true).expect("time"),
        day + 9 * 3_600_000
    );
    let e = bound("--since", "yesterday", false).expect_err("not a date");
    assert!(
        e.to_string().starts_with("--since yesterday: give a date"),
        "{e}"
    );
}
