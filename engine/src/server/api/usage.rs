//! Usage and cost: GPU-hours, CPU-hours, cost and wasted GPU-hours per group, as `sluice
//! usage` shows them. Members and viewers see their own team's; admins any.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;

use super::error::Refusal;
use super::runs::{Format, json_response, text_response};
use super::{ApiError, AppState, Caller};
use crate::service::{self, usage};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Only this team's usage (a team-bound token sees its own only).
    team: Option<String>,
    /// From this date (2026-12-01, UTC) or RFC 3339 time.
    since: Option<String>,
    /// Up to this date (the day included) or RFC 3339 time (excluded).
    until: Option<String>,
    /// Group by these keys, comma-separated: team, pool, pipeline (default team).
    by: Option<String>,
    #[param(inline)]
    format: Option<Format>,
}

/// Usage per group with a total: `{"rows": [...], "total": {...}}`, or the CLI's table.
#[utoipa::path(get, path = "/api/v1/usage", operation_id = "usage", tag = "usage", params(UsageQuery),
    responses((status = 200, description = "Usage as `sluice usage --output json` prints it; with `format=text`, its table",
                  content((crate::service::usage::Usage = "application/json"), (String = "text/plain"))),
              (status = 400, description = "A bad date or grouping key, or an unknown parameter", body = Refusal)))]
pub async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let by = usage::parse_by(q.by.as_deref().unwrap_or("team"))?;
    let found = state
        .service
        .usage(
            &caller.principal,
            &usage::UsageQuery {
                team: q.team,
                since: q.since,
                until: q.until,
                by: by.clone(),
            },
        )
        .await?;
    Ok(match q.format.unwrap_or_default() {
        Format::Json => json_response(StatusCode::OK, &found),
        Format::Text => {
            let mut out = Vec::new();
            crate::cli::usage::write_table(&mut out, &by, &found)
                .map_err(|e| service::Error::io("cannot write the answer", e))?;
            text_response(out)
        }
    })
}
