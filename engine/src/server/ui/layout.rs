//! The page shell (header, navigation, the signed-in team), the stylesheet and the script,
//! both compiled into the binary and served as files (`/ui/app.css`, `/ui/app.js`: the
//! Content-Security-Policy allows no inline script or style), and the small formatting
//! helpers every page uses.

use std::sync::LazyLock;

use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::session::Session;

const STYLE: &str = include_str!("app.css");
const SCRIPT: &str = include_str!("app.js");

/// A file's version: the start of its SHA-256, in the address pages give it
/// (`/ui/app.css?v=VERSION`), so that it may be cached for a year and a new binary's is
/// fetched anew.
fn version_of(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

static STYLE_VERSION: LazyLock<String> = LazyLock::new(|| version_of(STYLE));
static SCRIPT_VERSION: LazyLock<String> = LazyLock::new(|| version_of(SCRIPT));

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
            link rel="stylesheet" href={ "/ui/app.css?v=" (*STYLE_VERSION) };
            @if script { script src={ "/ui/app.js?v=" (*SCRIPT_VERSION) } defer {} }
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

/// `?v=VERSION` of a file's address.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Version {
    v: Option<String>,
}

type Asked = Result<Query<Version>, axum::extract::rejection::QueryRejection>;

/// A file compiled in: cached for a year when asked for at its current version (the address
/// pages give), else for five minutes (an address of an older binary's, or none).
fn file(kind: &'static str, text: &'static str, current: &str, asked: Asked) -> Response {
    let cache = match asked.ok().and_then(|Query(q)| q.v) {
        Some(v) if v == current => "public, max-age=31536000, immutable",
        _ => "public, max-age=300",
    };
    (
        [(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, cache)],
        text,
    )
        .into_response()
}

pub async fn stylesheet(asked: Asked) -> Response {
    file("text/css; charset=utf-8", STYLE, &STYLE_VERSION, asked)
}

pub async fn script(asked: Asked) -> Response {
    file(
        "text/javascript; charset=utf-8",
        SCRIPT,
        &SCRIPT_VERSION,
        asked,
    )
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
