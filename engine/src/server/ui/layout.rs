//! The page shell (header, navigation, the signed-in team), the stylesheet and the script,
//! both compiled into the binary, and the small formatting helpers every page uses.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::session::Session;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("live.js");

/// The pages of the navigation, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    Runs,
    Queue,
    Schedules,
    Usage,
}

impl Nav {
    const ALL: [(Nav, &'static str, &'static str); 4] = [
        (Nav::Runs, "/runs", "Runs"),
        (Nav::Queue, "/queue", "Queue"),
        (Nav::Schedules, "/schedules", "Schedules"),
        (Nav::Usage, "/usage", "Usage"),
    ];
}

/// Every page's `<head>`; with the script for pages that refresh.
fn head(title: &str, script: bool) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · sluice" }
            link rel="stylesheet" href="/ui/style.css";
            @if script { script src="/ui/live.js" defer {} }
        }
    }
}

/// A page without navigation (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, false))
            body { (body) }
        }
    }
}

/// A page of a signed-in session: navigation, the team and role, sign-out.
pub fn page(session: &Session, title: &str, active: Nav, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, true))
            body {
                header.top {
                    a.brand href="/runs" { "sluice" }
                    nav {
                        @for (nav, href, label) in Nav::ALL {
                            a href=(href) class=[(nav == active).then_some("active")] { (label) }
                        }
                    }
                    span.who {
                        "team " strong #team { (session.team()) } " · " (session.role().as_str())
                    }
                    form.inline method="post" action="/logout" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button.link type="submit" { "Sign out" }
                    }
                }
                main { (body) }
            }
        }
    }
}

pub fn html_response(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        markup.into_string(),
    )
        .into_response()
}

pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        STYLE,
    )
        .into_response()
}

pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        SCRIPT,
    )
        .into_response()
}

/// A state as a coloured badge (its class is the state in lower case).
pub fn badge(state: &str) -> Markup {
    html! { span class={ "badge " (state.to_ascii_lowercase()) } { (state) } }
}

fn parse(at: &str) -> Option<DateTime<Utc>> {
    crate::time::parse(at).ok()
}

/// How long from `start` to `end` (to `now` while it has not ended), in its two largest
/// units: `3s`, `4m 5s`, `2h 3m`, `3d 4h`.
pub fn duration(start: &str, end: Option<&str>, now: DateTime<Utc>) -> String {
    let Some(s) = parse(start) else {
        return String::new();
    };
    let e = end.and_then(parse).unwrap_or(now);
    crate::time::human((e - s).num_seconds().max(0) as u64)
}

/// A time as `2026-12-04 08:00:03` (UTC), the full RFC 3339 in its tooltip.
pub fn time(at: &str) -> Markup {
    let short = parse(at).map_or_else(
        || at.to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
    );
    html! { time datetime=(at) title=(at) { (short) } }
}

/// A number with at most 4 significant decimals, as tables show metrics.
pub fn number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e12 {
        format!("{v:.0}")
    } else if v.abs() >= 1000.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Text escaped as maud escapes it, for the SVG that `dag` and `charts` write by hand.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let _ = std::fmt::Write::write_str(&mut maud::Escaper::new(&mut out), text);
    out
}

/// Inline SVG written by this module (coordinates and escaped text only).
pub fn svg(markup: String) -> Markup {
    PreEscaped(markup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let now = Utc::now();
        assert_eq!(
            duration("2026-12-04T08:00:00Z", Some("2026-12-04T08:01:05Z"), now),
            "1m 5s"
        );
        assert_eq!(duration("not a time", None, now), "");
    }

    #[test]
    fn numbers_keep_what_matters() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(1234.5678), "1234.6");
        assert_eq!(number(0.5), "0.5");
    }
}
