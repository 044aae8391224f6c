//! Requests of other sites refused: every request with an unsafe method (anything but GET,
//! HEAD, OPTIONS and TRACE) of the whole router, the UI's sign-in and changes and the API
//! alike, is refused with 403 before any handler runs when the browser says it comes from
//! another site:
//!
//! - `Sec-Fetch-Site` is present and neither `same-origin` nor `none` (a person's own
//!   navigation);
//! - or `Origin` is present and is neither this server's own origin (its host and port are
//!   the request's `Host`) nor one given by `sluice server --allowed-origin` (a proxy that
//!   rewrites `Host`). `Origin: null` (a sandboxed frame, a file, a redirect across sites)
//!   is refused.
//!
//! A request with neither header (the CLI, curl, a script) passes: it carries no ambient
//! credentials, so another site cannot make it on a browser's behalf. This closes login CSRF
//! (a page of another site signing its visitor in as the attacker's team), which neither
//! `SameSite` nor a CSRF value tied to the session can, and backs the UI's CSRF values up.
//!
//! Refusals are the UI's HTML error page, or under `/api/` the API's JSON shape.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// An origin: scheme (`http` or `https`), host in lower case, port (the scheme's default
/// when not written), compared as browsers compare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    scheme: &'static str,
    host: String,
    port: u16,
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

/// `host[:port]` (a `Host` header, an origin's authority): the host in lower case, the port
/// if written. IPv6 hosts are bracketed (`[::1]:8080`).
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &text[..end + 2];
        let after = &rest[end + 1..];
        if !rest[..end]
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        {
            return None;
        }
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let plain = |h: &str| {
        h.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
    };
    if host.is_empty() || (!host.starts_with('[') && !plain(host)) {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    Some((host.to_ascii_lowercase(), port))
}

impl Origin {
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]`, as a browser's `Origin` header names
    /// it (a trailing `/` is taken too: that is how people write an address). A path, a
    /// query, user info or another scheme is refused, saying why.
    pub fn parse(text: &str) -> Result<Origin, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{text:?} is not an origin: write it as https://HOST[:PORT]"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => "http",
            "https" => "https",
            _ => {
                return Err(format!(
                    "{text:?}: an origin's scheme is http or https, not {scheme:?}"
                ));
            }
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@', '\\']) {
            return Err(format!(
                "{text:?} is not an origin: only https://HOST[:PORT], without a path, a query or user info"
            ));
        }
        let (host, port) = authority(rest)
            .ok_or_else(|| format!("{text:?}: not a host with an optional port (1 to 65535)"))?;
        let port = port.unwrap_or_else(|| default_port(scheme));
        if port == 0 {
            return Err(format!("{text:?}: port 0 is no port"));
        }
        Ok(Origin { scheme, host, port })
    }

    /// Whether this origin names the server a request's `Host` reached. The server cannot
    /// know whether a proxy in front of it speaks TLS, so the scheme is not compared; a
    /// `Host` without a port matches the origin's scheme's default port.
    fn is_host(&self, host: &str) -> bool {
        match authority(host) {
            Some((h, port)) => {
                h == self.host && port.unwrap_or_else(|| default_port(self.scheme)) == self.port
            }
            None => false,
        }
    }
}

impl std::str::FromStr for Origin {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Origin::parse(s)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        if self.port != default_port(self.scheme) {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Methods that change nothing (RFC 9110's safe methods): never refused.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// The one value of a header, if it is there: two of it, or one that is not text, is an
/// error (no browser sends them).
fn one(headers: &HeaderMap, name: header::HeaderName) -> Result<Option<&str>, String> {
    let mut values = headers.get_all(&name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!(
            "this request has more than one {name} header, which no browser sends: it is \
             refused as another site's"
        ));
    }
    first.to_str().map(|v| Some(v.trim())).map_err(|_| {
        format!("this request's {name} header is not text: it is refused as another site's")
    })
}

const SEC_FETCH_SITE: header::HeaderName = header::HeaderName::from_static("sec-fetch-site");

/// Why a request is refused as another site's, or nothing. `host` is the request's `Host`
/// (or its URI's authority, over HTTP/2).
fn judge(
    method: &Method,
    headers: &HeaderMap,
    host: Option<&str>,
    allowed: &[Origin],
) -> Result<(), String> {
    if is_safe(method) {
        return Ok(());
    }
    if let Some(site) = one(headers, SEC_FETCH_SITE)?
        && !site.eq_ignore_ascii_case("same-origin")
        && !site.eq_ignore_ascii_case("none")
    {
        return Err(format!(
            "this request came from another site (Sec-Fetch-Site: {site}), and is refused: \
             changes are made from sluice's own pages"
        ));
    }
    let Some(sent) = one(headers, header::ORIGIN)? else {
        return Ok(());
    };
    if sent.eq_ignore_ascii_case("null") {
        return Err(
            "this request came from another site or a page without an origin (Origin: null), \
             and is refused: changes are made from sluice's own pages"
                .to_owned(),
        );
    }
    let origin = Origin::parse(sent).map_err(|e| {
        format!("this request came from another site (its Origin is not one: {e}), and is refused")
    })?;
    if allowed.contains(&origin) || host.is_some_and(|h| origin.is_host(h)) {
        return Ok(());
    }
    Err(format!(
        "this request came from another site (Origin: {sent}, not this server's {}), and is \
         refused: changes are made from sluice's own pages. A proxy that rewrites Host needs \
         the address browsers use given to `sluice server --allowed-origin`",
        host.unwrap_or("(no Host)")
    ))
}

/// The layer: refuses another site's unsafe requests (403) before they are routed on.
pub async fn check(State(allowed): State<Arc<[Origin]>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    match judge(
        request.method(),
        request.headers(),
        host.as_deref(),
        &allowed,
    ) {
        Ok(()) => next.run(request).await,
        Err(why) => {
            let path = request.uri().path();
            if path == "/api" || path.starts_with("/api/") {
                super::api::ApiError::Service(crate::service::Error::Forbidden(why)).into_response()
            } else {
                super::ui::PageError::new(StatusCode::FORBIDDEN, why).into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().expect("a header value"));
        }
        h
    }

    fn verdict(method: Method, pairs: &[(&'static str, &str)], allowed: &[Origin]) -> bool {
        judge(&method, &headers(pairs), Some("sluice.lab:8080"), allowed).is_ok()
    }

    #[test]
    fn origins_are_parsed_as_browsers_write_them() {
        let o = Origin::parse("HTTPS://Sluice.Example.com/").expect("an origin");
        assert_eq!(o.to_string(), "https://sluice.example.com");
        assert_eq!(
            o,
            Origin::parse("https://sluice.example.com:443").expect("one")
        );
        assert_ne!(o, Origin::parse("http://sluice.example.com").expect("one"));
        assert_eq!(
            Origin::parse("http://[::1]:8080").expect("v6").to_string(),
            "http://[::1]:8080"
        );
        for bad in [
            "sluice.example.com",
            "null",
            "ftp://x",
            "https://",
            "https://x/ui",
            "https://x?a",
            "https://u@x",
            "https://x:",
            "https://x:0",
            "https://x:65536",
            "https://x:8a",
            "https://x y",
            "https://[::1",
            "https://[zz]",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn another_sites_unsafe_requests_are_refused() {
        let none: &[Origin] = &[];
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!verdict(
                method.clone(),
                &[("origin", "http://evil.example")],
                none
            ));
            assert!(!verdict(
                method.clone(),
                &[("sec-fetch-site", "cross-site")],
                none
            ));
            assert!(verdict(method, &[], none));
        }
        for refused in [
            vec![("origin", "null")],
            vec![("origin", "http://sluice.lab")],
            vec![("origin", "http://sluice.lab:8081")],
            vec![("origin", "http://sluice.lab.evil:8080")],
            vec![("origin", "not an origin")],
            vec![("sec-fetch-site", "same-site")],
            vec![("sec-fetch-site", "whatever")],
            vec![
                ("origin", "http://sluice.lab:8080"),
                ("sec-fetch-site", "cross-site"),
            ],
            vec![
                ("origin", "http://sluice.lab:8080"),
                ("origin", "http://sluice.lab:8080"),
            ],
        ] {
            assert!(!verdict(Method::POST, &refused, none), "{refused:?}");
        }
        for passed in [
            vec![("origin", "http://sluice.lab:8080")],
            vec![("origin", "https://SLUICE.lab:8080")],
            vec![
                ("origin", "http://sluice.lab:8080"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("sec-fetch-site", "none")],
        ] {
            assert!(verdict(Method::POST, &passed, none), "{passed:?}");
        }
        // Reading is never refused.
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(verdict(
                method,
                &[
                    ("origin", "http://evil.example"),
                    ("sec-fetch-site", "cross-site")
                ],
                none
            ));
        }
        // A method no one registered is unsafe.
        let odd = Method::from_bytes(b"PROPPATCH").expect("a method");
        assert!(!verdict(odd, &[("origin", "http://evil.example")], none));
    }

    #[test]
    fn a_host_without_a_port_is_the_schemes_default() {
        let o = Origin::parse("https://sluice.example.com").expect("an origin");
        assert!(o.is_host("sluice.example.com"));
        assert!(o.is_host("sluice.example.com:443"));
        assert!(!o.is_host("sluice.example.com:80"));
        assert!(!o.is_host("sluice.example.com.evil"));
        assert!(!o.is_host(""));
    }

    #[test]
    fn allowed_origins_pass_behind_a_proxy() {
        let allowed = [Origin::parse("https://sluice.example.com").expect("an origin")];
        let pairs = [("origin", "https://sluice.example.com")];
        assert!(verdict(Method::POST, &pairs, &allowed));
        assert!(!verdict(Method::POST, &pairs, &[]));
        assert!(!verdict(
            Method::POST,
            &[("origin", "http://sluice.example.com")],
            &allowed
        ));
        // The browser's own word that it is another site wins.
        assert!(!verdict(
            Method::POST,
            &[
                ("origin", "https://sluice.example.com"),
                ("sec-fetch-site", "cross-site")
            ],
            &allowed
        ));
    }
}
