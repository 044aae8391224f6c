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
