//! The headers every answer of the server carries, the UI's pages, their redirects and error
//! pages, the stylesheet and the script, and the API's answers alike (a handler's own value
//! wins):
//!
//! - `Content-Security-Policy` ([`POLICY`]): scripts, styles, fetches and forms of this site
//!   only, nothing inline (the UI's script and stylesheet are files, its SVG uses classes and
//!   presentation attributes, never `style=`), no `<base>`, no framing;
//! - `X-Frame-Options: DENY` (what browsers without `frame-ancestors` read);
//! - `X-Content-Type-Options: nosniff`: an answer is only ever read as its own type (a log or
//!   a JSON body is never run as a script or shown as a page);
//! - `Referrer-Policy: same-origin`: no run id or step name leaves in a `Referer`.

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// What the UI's pages may load, and who may frame them: nobody.
///
/// - `default-src 'none'`: nothing not named below;
/// - `script-src 'self'`: `/ui/app.js` (no inline script, no handler attribute, no `eval`);
/// - `style-src 'self'`: `/ui/app.css` (no `<style>`, no `style=` attribute);
/// - `img-src 'self'`: no image comes from elsewhere (the charts are inline SVG);
/// - `connect-src 'self'`: the live log's and the live run's `fetch`es;
/// - `form-action 'self'`: forms post here only (sign-in, the changes);
/// - `frame-ancestors 'none'`: no page of any site, this one included, may frame a page
///   (clickjacking of the buttons and the sign-in form);
/// - `base-uri 'none'`: no `<base>` to move relative links elsewhere.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The layer (`axum::middleware::map_response`): adds the headers an answer lacks.
pub async fn add(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    #[tokio::test]
    async fn a_handlers_own_value_wins() {
        let mut r = "x".into_response();
        r.headers_mut().insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        let r = add(r).await;
        assert_eq!(r.headers()[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(r.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(r.headers()[header::CONTENT_SECURITY_POLICY], POLICY);
    }
}
