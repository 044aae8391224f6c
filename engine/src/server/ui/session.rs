//! Who looks at a page: the token kept in the `sluice_token` cookie (set by `/login`,
//! `HttpOnly` and `SameSite=Strict`, never in a URL), checked against the store on every
//! request as the API checks its bearer token, so that a revoked token is signed out at its
//! next click. Changes carry a CSRF value derived from the token ([`csrf_of`]).

use axum::Form;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::layout;
use crate::server::api::{ApiError, AppState, Caller};
use crate::service::{Principal, Role};

/// The cookie holding the token.
pub const COOKIE: &str = "sluice_token";

/// The CSRF value of the forms of a session: a hash of its token, so that the server keeps
/// no session table, and a page of another site (which cannot read ours) cannot know it.
pub fn csrf_of(token: &str) -> String {
    let digest = Sha256::digest(format!("sluice web ui csrf\0{token}").as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A signed-in viewer of a page.
#[derive(Clone, Debug)]
pub struct Session {
    pub caller: Caller,
    /// The value every form of this session carries.
    pub csrf: String,
}

impl Session {
    pub fn principal(&self) -> &Principal {
        &self.caller.principal
    }

    /// The token's team, as pages name it (`*` for an admin of every team).
    pub fn team(&self) -> &str {
        self.caller.team()
    }

    /// Whether this session may change runs of `team` (a member of it, an admin).
    pub fn may_change(&self, team: &str) -> bool {
        self.principal().may_change(team)
    }

    pub fn role(&self) -> Role {
        self.principal().role
    }

    /// Refuses a change whose form does not carry this session's CSRF value (403).
    pub fn check_csrf(&self, sent: &str) -> Result<(), super::PageError> {
        if !sent.is_empty() && sent == self.csrf {
            return Ok(());
        }
        Err(super::PageError::new(
            StatusCode::FORBIDDEN,
            "this change did not come from a sluice page (its form's CSRF value is missing or wrong): reload the page and try again",
        ))
    }
}

/// The token in the request's cookies, if any.
fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Where a page that needs a session sends a visitor without one: the sign-in page, which
/// comes back to the page asked for.
fn to_login(parts: &Parts, why: Option<&str>) -> Response {
    let back = parts
        .uri
        .path_and_query()
        .map_or("/runs", |p| p.as_str())
        .to_owned();
    let mut url = format!("/login?next={}", crate::client::segment(&back));
    if let Some(why) = why {
        url.push_str("&why=");
        url.push_str(&crate::client::segment(why));
    }
    let mut response = Redirect::to(&url).into_response();
    if why.is_some() {
        // A token that no longer works is forgotten.
        if let Ok(v) = clear_cookie().parse() {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    response
}

fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(token) = token_of(&parts.headers) else {
            return Err(to_login(parts, None));
        };
        let from = crate::server::api::client_address(parts);
        let who = match crate::server::api::authenticate(state, &token, from).await {
            Ok(who) => who,
            Err(ApiError::Service(crate::service::Error::Unauthenticated(why))) => {
                return Err(to_login(parts, Some(&why)));
            }
            Err(e) => return Err(page_of(e).into_response()),
        };
        if let Some(secs) = crate::server::api::over_rate(state, &who.id) {
            return Err(super::PageError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many requests with this token: try again in {secs} s"),
            )
            .into_response());
        }
        Ok(Session {
            csrf: csrf_of(&token),
            caller: Caller {
                principal: who.principal,
                id: who.id,
            },
        })
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    why: Option<String>,
}

/// The longest `next` gone back to; a longer one is not a page of this site.
const MAX_NEXT: usize = 2048;

/// Where signing in goes: `next` when it is a path of this site, else the runs. A path of
/// this site, as every browser reads it: one `/`, then neither `/` nor `\` (`//host` and
/// `/\host` name another host), and nothing but printable ASCII (no space, no control
/// character: browsers strip TAB, CR and LF from a URL, which turns `/\t/host` into
/// `//host`, and CR or LF cannot be sent in a header). What comes out is always a valid
/// `Location`.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if is_local_path(n) => n.to_owned(),
        _ => "/runs".to_owned(),
    }
}

fn is_local_path(n: &str) -> bool {
    let b = n.as_bytes();
    b.len() <= MAX_NEXT
        && b.first() == Some(&b'/')
        && !matches!(b.get(1), Some(b'/' | b'\\'))
        && b.iter().all(|c| c.is_ascii_graphic() && *c != b'\\')
}

/// Whether `token` can be a cookie's value as it is (RFC 6265's cookie-octets: no space,
/// quote, comma, semicolon or backslash): a token that cannot is no sluice token.
fn cookie_safe(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|c| c.is_ascii_graphic() && !matches!(c, b'"' | b',' | b';' | b'\\'))
}

/// The answer to a sign-in that worked: the cookie and the way back, both or neither.
fn signed_in(token: &str, next: &str) -> Option<Response> {
    if !cookie_safe(token) {
        return None;
    }
    let location = HeaderValue::from_str(next).ok()?;
    let cookie = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    ))
    .ok()?;
    Some(
        (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, location), (header::SET_COOKIE, cookie)],
        )
            .into_response(),
    )
}

fn login_form(next: &str, error: Option<&str>) -> maud::Markup {
    layout::bare(
        "Sign in",
        html! {
            main.narrow {
                h1 { "sluice" }
                p { "Paste a token of your team (" code { "sluice token create --team TEAM --role viewer" } "). It is kept in a cookie this site only can read, and sent with every page." }
                @if let Some(e) = error { p.error role="alert" { (e) } }
                form method="post" action="/login" {
                    input type="hidden" name="next" value=(next);
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button type="submit" { "Sign in" }
                }
            }
        },
    )
}

pub async fn login_page(
    query: Result<Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = query.ok().map(|Query(q)| q).unwrap_or_default();
    let next = safe_next(q.next.as_deref());
    layout::html_response(StatusCode::OK, login_form(&next, q.why.as_deref()))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// Checks the token and keeps it in the cookie; a token that does not work is said on the
/// form again (401), with the store's reason (unknown, expired, revoked).
pub async fn login(
    State(state): State<AppState>,
    crate::server::api::ClientAddress(from): crate::server::api::ClientAddress,
    Form(form): Form<LoginForm>,
) -> Response {
    let token = form.token.trim();
    let next = safe_next(form.next.as_deref());
    match crate::server::api::authenticate(&state, token, from).await {
        // Only the success redirect sets the cookie.
        Ok(_) => signed_in(token, &next).unwrap_or_else(|| {
            layout::html_response(
                StatusCode::UNAUTHORIZED,
                login_form(&next, Some("that is not a sluice token")),
            )
        }),
        Err(ApiError::Service(crate::service::Error::Unauthenticated(why))) => {
            layout::html_response(StatusCode::UNAUTHORIZED, login_form(&next, Some(&why)))
        }
        Err(e) => page_of(e).into_response(),
    }
}

/// An authentication's refusal as a page: the store's error, or too many failures (429).
fn page_of(e: ApiError) -> super::PageError {
    match e {
        ApiError::Service(e) => super::PageError::from(e),
        ApiError::TooManyFailures(secs) => super::PageError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many failed sign-ins from this address: try again in {secs} s"),
        ),
        other => super::PageError::new(
            StatusCode::from_u16(other.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "this request cannot be answered",
        ),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// A change's form; one that cannot be read (no body, another content type: what a forged
/// request may send) has no CSRF value, and is refused as such.
pub type ChangeForm = Result<Form<CsrfForm>, axum::extract::rejection::FormRejection>;

pub fn csrf_field(form: ChangeForm) -> CsrfForm {
    form.map(|Form(f)| f).unwrap_or_default()
}

/// Forgets the token.
pub async fn logout(session: Session, form: ChangeForm) -> Response {
    if let Err(e) = session.check_csrf(&csrf_field(form).csrf) {
        return e.into_response();
    }
    let mut response = Redirect::to("/login").into_response();
    if let Ok(v) = clear_cookie().parse() {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; sluice_token=abc; b=2".parse().expect("a header"),
        );
        assert_eq!(token_of(&h).as_deref(), Some("abc"));
        h.insert(header::COOKIE, "sluice_token=".parse().expect("a header"));
        assert_eq!(token_of(&h), None);
    }

    #[test]
    fn only_this_sites_paths_are_gone_back_to() {
        assert_eq!(safe_next(Some("/runs/abc")), "/runs/abc");
        assert_eq!(safe_next(Some("//evil.example/x")), "/runs");
        assert_eq!(safe_next(Some("https://evil.example")), "/runs");
        assert_eq!(safe_next(None), "/runs");
        for bad in [
            "/\t/evil.example",
            "/\r/x",
            "/\n/x",
            "/\\evil.example",
            "/\\/evil.example",
            "/x\\y",
            "/ x",
            "/\u{7f}",
            "/caf\u{e9}",
            "",
            "runs",
        ] {
            assert_eq!(safe_next(Some(bad)), "/runs", "{bad:?}");
        }
        assert_eq!(
            safe_next(Some(&format!("/{}", "a".repeat(MAX_NEXT)))),
            "/runs"
        );
        assert_eq!(
            safe_next(Some("/runs?state=Failed&x=%2F")),
            "/runs?state=Failed&x=%2F"
        );
    }

    /// Whatever `next` and the token are, a sign-in that worked answers the redirect with
    /// the cookie, or neither: never a 500, never a panic.
    #[test]
    fn a_sign_in_answers_a_redirect_with_its_cookie_or_nothing() {
        for next in ["/\r/x", "/\n/x", "/\u{0}", "/ok"] {
            let r = signed_in("abc", &safe_next(Some(next))).expect("a redirect");
            assert_eq!(r.status(), StatusCode::SEE_OTHER);
            assert!(r.headers().contains_key(header::SET_COOKIE));
        }
        for token in ["a b", "a;Domain=x", "a\r\nX: y", "caf\u{e9}", ""] {
            assert!(signed_in(token, "/runs").is_none(), "{token:?}");
        }
    }

    #[test]
    fn csrf_values_differ_per_token() {
        assert_ne!(csrf_of("a"), csrf_of("b"));
        assert_eq!(csrf_of("a"), csrf_of("a"));
        assert_eq!(csrf_of("a").len(), 32);
    }
}
