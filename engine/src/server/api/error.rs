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
use utoipa::ToSchema;

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

/// A refusal, as every route answers one.
#[derive(Serialize, ToSchema)]
pub struct Refusal<'a> {
    error: RefusalDetail<'a>,
}

/// What was refused, and why.
#[derive(Serialize, ToSchema)]
struct RefusalDetail<'a> {
    /// The answer's HTTP status.
    status: u16,
    kind: Kind,
    message: String,
    /// Lint's diagnostics of an invalid file.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    #[schema(value_type = Vec<DiagnosticDoc>)]
    diagnostics: &'a [crate::spec::Diagnostic],
    /// The diagnostics as `sluice lint` prints them, one per item.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rendered: Vec<String>,
    /// A conflict's run, and the state it is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    in_the_way: Option<InTheWay<'a>>,
}

/// The kind of a refusal: the service error's, `invalid` for a request that could not be
/// read, `rate_limited` for a token over its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    NotFound,
    Conflict,
    Invalid,
    Forbidden,
    Unauthenticated,
    Unavailable,
    RateLimited,
    TooLarge,
}

#[derive(Serialize, ToSchema)]
struct InTheWay<'a> {
    run: &'a str,
    state: &'a str,
}

// The document's description of `spec::Diagnostic` as it serializes (its position flattened
// into `line` and `column`, which utoipa cannot describe from the type itself); a test below
// holds the two together.
/// A problem in a file, as `sluice lint --output json` reports it: `line` and `column` are
/// absent for input without lines, such as a parameter given on the command line.
#[derive(ToSchema)]
#[schema(as = Diagnostic)]
#[allow(dead_code)]
struct DiagnosticDoc {
    /// The file, or what stood in for one (`--param lr=x`).
    path: String,
    #[schema(required = false, minimum = 1)]
    line: u32,
    #[schema(required = false, minimum = 1)]
    column: u32,
    severity: SeverityDoc,
    message: String,
    /// Suggestions; absent when there are none.
    #[schema(required = false)]
    help: Vec<String>,
}

/// How bad a diagnostic is: only errors refuse a file.
#[derive(ToSchema)]
#[schema(as = Severity)]
#[allow(dead_code)]
enum SeverityDoc {
    #[schema(rename = "error")]
    Error,
    #[schema(rename = "warning")]
    Warning,
    #[schema(rename = "note")]
    Note,
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

fn kind(e: &Error) -> Kind {
    match e {
        Error::NotFound(_) => Kind::NotFound,
        Error::Conflict { .. } => Kind::Conflict,
        Error::Invalid { .. } => Kind::Invalid,
        Error::Forbidden(_) => Kind::Forbidden,
        Error::Unauthenticated(_) => Kind::Unauthenticated,
        Error::Unavailable(_) => Kind::Unavailable,
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
            ApiError::BadRequest(_) => (Kind::Invalid, none, None),
            ApiError::RateLimited(_) | ApiError::TooManyFailures(_) => {
                (Kind::RateLimited, none, None)
            }
            ApiError::TooLarge(_) => (Kind::TooLarge, none, None),
        };
        if status >= 500 {
            tracing::warn!("answering {status}: {}", self.message());
        }
        let body = Refusal {
            error: RefusalDetail {
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

/// Documents the refusals any route may answer, whatever it does, on each operation of `doc`
/// (so that no route's attribute can forget one): 401 without a valid token, 408 when no
/// answer started within the request timeout, 429 over the token's rate, 503 when the state
/// store cannot be reached, and 400 on an operation with parameters or a body, for one that
/// does not parse. A status an operation documents itself keeps its own description.
pub fn document_refusals(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{
        ContentBuilder, HeaderBuilder, Ref, RefOr, ResponseBuilder, Type, schema::ObjectBuilder,
    };
    let components = doc.components.get_or_insert_with(Default::default);
    let mut schemas = vec![(
        <Refusal as utoipa::ToSchema>::name().into_owned(),
        <Refusal as utoipa::PartialSchema>::schema(),
    )];
    <Refusal as utoipa::ToSchema>::schemas(&mut schemas);
    for (name, schema) in schemas {
        components.schemas.entry(name).or_insert(schema);
    }
    let json = || {
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Refusal")))
            .build()
    };
    let refusal = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", json())
    };
    let common = [
        (
            "400",
            "BadRequest",
            refusal(
                "The request could not be read: a parameter, the path or the body does not parse",
            )
            .build(),
        ),
        (
            "401",
            "Unauthenticated",
            refusal("No token, or one that is unknown, expired or revoked")
                .header(
                    "WWW-Authenticate",
                    HeaderBuilder::new()
                        .schema(ObjectBuilder::new().schema_type(Type::String))
                        .description(Some("`Bearer`"))
                        .build(),
                )
                .build(),
        ),
        (
            "408",
            "TimedOut",
            ResponseBuilder::new()
                .description("No answer started within the request timeout (30 s); no body")
                .build(),
        ),
        (
            "429",
            "RateLimited",
            refusal("The token made more requests than its rate allows, or the client's address failed to authenticate too often")
                .header(
                    "Retry-After",
                    HeaderBuilder::new()
                        .schema(
                            ObjectBuilder::new()
                                .schema_type(Type::Integer)
                                .minimum(Some(1)),
                        )
                        .description(Some("Seconds to wait before the next request"))
                        .build(),
                )
                .build(),
        ),
        (
            "503",
            "Unavailable",
            refusal("The state store cannot be reached").build(),
        ),
        (
            "413",
            "TooLarge",
            refusal("The request body is larger than the 4 MiB the server reads").build(),
        ),
        (
            "403",
            "CrossSite",
            refusal("A change sent by a page of another site (its Origin or Sec-Fetch-Site)")
                .build(),
        ),
    ];
    for (_, name, response) in &common {
        components
            .responses
            .entry((*name).to_owned())
            .or_insert_with(|| RefOr::T(response.clone()));
    }
    for item in doc.paths.paths.values_mut() {
        for (op, changes) in [
            (&mut item.get, false),
            (&mut item.put, true),
            (&mut item.post, true),
            (&mut item.delete, true),
            (&mut item.patch, true),
        ] {
            let Some(op) = op else { continue };
            let reads_input =
                op.parameters.as_ref().is_some_and(|p| !p.is_empty()) || op.request_body.is_some();
            for (status, name, _) in &common {
                let applies = match *status {
                    "400" => reads_input,
                    "413" => op.request_body.is_some(),
                    "403" => changes,
                    _ => true,
                };
                if !applies {
                    continue;
                }
                op.responses
                    .responses
                    .entry((*status).to_owned())
                    .or_insert_with(|| {
                        RefOr::Ref(Ref::new(format!("#/components/responses/{name}")))
                    });
            }
        }
    }
}

/// Any path that is no route: 404 in the API's shape.
pub async fn not_a_route(uri: axum::http::Uri) -> ApiError {
    ApiError::Service(Error::NotFound(format!(
        "no such route: {} (the API is described at /api/v1/openapi.json)",
        uri.path()
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::spec::{Diagnostic, Pos, Severity};

    fn schema_of<T: utoipa::PartialSchema>() -> Value {
        serde_json::to_value(T::schema()).expect("the schema serializes")
    }

    /// The documented Diagnostic has the keys a serialized one has, with and without a
    /// position and help, and lists the required ones; its severities are the real ones.
    #[test]
    fn the_documented_diagnostic_is_the_serialized_one() {
        let schema = schema_of::<super::DiagnosticDoc>();
        let properties = schema["properties"].as_object().expect("properties");
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let full = Diagnostic::error("p.yaml", Some(Pos::new(3, 7)), "bad").with_help("try x");
        let bare = Diagnostic::error("--param lr", None, "bad");
        for d in [full, bare] {
            let v = serde_json::to_value(&d).expect("serializes");
            let keys = v.as_object().expect("an object");
            for k in keys.keys() {
                assert!(properties.contains_key(k), "{k} is not documented: {v}");
            }
            for r in &required {
                assert!(keys.contains_key(*r), "{r} is documented as required: {v}");
            }
        }
        let severities = schema_of::<super::SeverityDoc>();
        for s in [Severity::Error, Severity::Warning, Severity::Note] {
            let v = serde_json::to_value(s).expect("serializes");
            assert!(
                severities["enum"]
                    .as_array()
                    .is_some_and(|e| e.contains(&v)),
                "{v} is not a documented severity"
            );
        }
    }

    /// Every operation documents the refusals any route may answer, each with the error
    /// shape (408 has no body).
    #[test]
    fn every_operation_documents_the_common_refusals() {
        let (_, doc) = crate::server::api::routes();
        let doc = serde_json::to_value(&doc).expect("the document serializes");
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("operations") {
                for status in ["401", "408", "429", "503"] {
                    assert!(
                        !op["responses"][status].is_null(),
                        "{method} {path} does not document {status}"
                    );
                }
                for (status, response) in op["responses"].as_object().expect("responses") {
                    let refusal = status.starts_with('4') || status.starts_with('5');
                    if refusal && status != "408" && response["$ref"].is_null() {
                        assert_eq!(
                            response["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/Refusal",
                            "{method} {path} {status}: the error shape"
                        );
                    }
                }
            }
        }
    }
}
