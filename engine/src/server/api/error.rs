//! How the API answers a refusal: the service error's HTTP status
//! ([`crate::service::Error::status_code`]) and one JSON body,
//! `{"error": {"status", "kind", "message", "diagnostics", "in_the_way"}}`, where
//! `diagnostics` are lint's (path, line, column, message, help) and `rendered` their pinned
//! text form, so that the CLI prints exactly what embedded mode prints. Bad requests that
//! never reach the service (malformed JSON, unknown fields, a body over the limit, a query
//! that does not parse) are 400 in the same shape; nothing the client sends is a 500.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::service::Error;

#[derive(Debug)]
pub enum ApiError {
    Service(Error),
    /// The request could not be read (400).
    BadRequest(String),
    /// The token made too many requests: try again in this many seconds (429).
    RateLimited(u64),
    /// The request's body is larger than the server reads (413).
    TooLarge(String),
    /// The client's address failed to authenticate too often: try again in this many
    /// seconds (429).
    TooManyFailures(u64),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Service(e)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return too_large();
        }
        ApiError::BadRequest(format!("the request body is not valid: {}", r.body_text()))
    }
}

/// A body past [`super::BODY_LIMIT`], said as it was declared or as it was read.
pub fn too_large() -> ApiError {
    ApiError::TooLarge(format!(
        "the request body is larger than the {} MiB the server reads",
        super::BODY_LIMIT / (1024 * 1024)
    ))
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::BadRequest(format!("the query string is not valid: {}", r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::BadRequest(format!("the path is not valid: {}", r.body_text()))
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    status: u16,
    kind: &'static str,
    message: String,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    diagnostics: &'a [crate::spec::Diagnostic],
    /// The diagnostics as `sluice lint` prints them, one per item.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rendered: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_the_way: Option<InTheWay<'a>>,
}

#[derive(Serialize)]
struct InTheWay<'a> {
    run: &'a str,
    state: &'a str,
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::Service(e) => e.status_code(),
            ApiError::BadRequest(_) => 400,
            ApiError::RateLimited(_) | ApiError::TooManyFailures(_) => 429,
            ApiError::TooLarge(_) => 413,
        }
    }

    /// How the audit record says this refusal: `404: no run 'x'`.
    pub fn audit_result(&self) -> String {
        format!("{}: {}", self.status(), self.message())
    }

    fn message(&self) -> String {
        match self {
            ApiError::Service(e) => e.to_string(),
            ApiError::BadRequest(m) | ApiError::TooLarge(m) => m.clone(),
            ApiError::RateLimited(s) => {
                format!("too many requests with this token: try again in {s} s")
            }
            ApiError::TooManyFailures(s) => {
                format!("too many failed authentications from this address: try again in {s} s")
            }
        }
    }
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::NotFound(_) => "not_found",
        Error::Conflict { .. } => "conflict",
        Error::Invalid { .. } => "invalid",
        Error::Forbidden(_) => "forbidden",
        Error::Unauthenticated(_) => "unauthenticated",
        Error::Unavailable(_) => "unavailable",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let none: &[crate::spec::Diagnostic] = &[];
        let (kind, diagnostics, in_the_way) = match &self {
            ApiError::Service(e) => {
                let diagnostics = match e {
                    Error::Invalid { diagnostics, .. } => diagnostics.as_slice(),
                    _ => none,
                };
                let in_the_way = match e {
                    Error::Conflict {
                        in_the_way: Some(w),
                        ..
                    } => Some(InTheWay {
                        run: &w.run,
                        state: &w.state,
                    }),
                    _ => None,
                };
                (kind(e), diagnostics, in_the_way)
            }
            ApiError::BadRequest(_) => ("invalid", none, None),
            ApiError::RateLimited(_) | ApiError::TooManyFailures(_) => ("rate_limited", none, None),
            ApiError::TooLarge(_) => ("too_large", none, None),
        };
        if status >= 500 {
            tracing::warn!("answering {status}: {}", self.message());
        }
        let body = Body {
            error: Detail {
                status,
                kind,
                message: self.message(),
                diagnostics,
                rendered: diagnostics.iter().map(ToString::to_string).collect(),
                in_the_way,
            },
        };
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(body)).into_response();
        if let ApiError::RateLimited(seconds) | ApiError::TooManyFailures(seconds) = self
            && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if status == 401
            && let Ok(v) = HeaderValue::from_str("Bearer")
        {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        response
    }
}

/// Any path that is no route: 404 in the API's shape.
pub async fn not_a_route(uri: axum::http::Uri) -> ApiError {
    ApiError::Service(Error::NotFound(format!(
        "no such route: {} (the API is described at /api/v1/openapi.json)",
        uri.path()
    )))
}
