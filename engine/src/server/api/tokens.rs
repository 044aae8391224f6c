//! Tokens and the audit record: admins only (a member's or viewer's token gets 403), and
//! `whoami`, which any token may ask.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::Refusal;
use super::{ApiError, AppState, Caller};
use crate::service::{self, Role};
use crate::store::TokenRow;

/// A token's role: a viewer reads, a member also changes runs, an admin does everything for
/// every team.
#[derive(ToSchema)]
#[schema(as = Role)]
#[allow(dead_code)] // the document's words for `service::Role` (a test holds them together)
enum RoleName {
    #[schema(rename = "viewer")]
    Viewer,
    #[schema(rename = "member")]
    Member,
    #[schema(rename = "admin")]
    Admin,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WhoamiBody {
    /// The token's id.
    id: String,
    /// Its team; `*` for an admin of every team.
    team: String,
    #[schema(value_type = RoleName)]
    role: String,
}

/// The token's team and role.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "tokens",
    responses((status = 200, description = "Who the token is", body = WhoamiBody)))]
pub async fn whoami(caller: Caller) -> Json<WhoamiBody> {
    Json(WhoamiBody {
        team: caller.team().to_owned(),
        role: caller.principal.role.as_str().to_owned(),
        id: caller.id,
    })
}

/// A token as listed: never its text or hash.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenBody {
    id: String,
    name: Option<String>,
    team: String,
    #[schema(value_type = RoleName)]
    role: String,
    created_at: String,
    expires_at: Option<String>,
    revoked_at: Option<String>,
}

impl From<TokenRow> for TokenBody {
    fn from(t: TokenRow) -> Self {
        TokenBody {
            id: t.id,
            name: t.name,
            team: t.team,
            role: t.role,
            created_at: t.created_at,
            expires_at: t.expires_at,
            revoked_at: t.revoked_at,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TeamQuery {
    /// Only tokens of this team.
    team: Option<String>,
}

/// The tokens, of one team or all (admins only).
#[utoipa::path(get, path = "/api/v1/tokens", tag = "admin", operation_id = "list_tokens", params(TeamQuery),
    responses((status = 200, description = "The tokens", body = Vec<TokenBody>),
              (status = 403, description = "Not an admin's token", body = Refusal)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<TeamQuery>, QueryRejection>,
) -> Result<Json<Vec<TokenBody>>, ApiError> {
    let Query(q) = query?;
    let rows = state
        .service
        .list_tokens(&caller.principal, q.team.as_deref())
        .await?;
    Ok(Json(rows.into_iter().map(TokenBody::from).collect()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// The token's team; `*` (admins only) for every team.
    #[schema(min_length = 1)]
    team: String,
    #[schema(value_type = RoleName)]
    role: String,
    #[serde(default)]
    name: Option<String>,
    /// How long it lasts (`30d`, `12h`); for ever without.
    #[serde(default)]
    expires: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedBody {
    id: String,
    /// The token itself: shown this once, only its hash is kept.
    token: String,
}

/// Makes a token (admins only); its text is in this answer and nowhere else.
#[utoipa::path(post, path = "/api/v1/tokens", operation_id = "create_token", tag = "admin", request_body = CreateBody,
    responses((status = 201, description = "The token", body = CreatedBody),
              (status = 400, description = "The body does not parse: an unknown role, a bad expiry, no team", body = Refusal),
              (status = 403, description = "Not an admin's token", body = Refusal)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<CreateBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let role = parse_role(&body.role)?;
    let expires = body.expires.as_deref().map(parse_expiry).transpose()?;
    let created = state
        .service
        .create_token(
            &caller.principal,
            &caller.id,
            &body.team,
            role,
            body.name,
            expires,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedBody {
            id: created.row.id,
            token: created.token,
        }),
    )
        .into_response())
}

/// A role by name, or 400 naming the roles.
pub fn parse_role(name: &str) -> Result<Role, service::Error> {
    Role::parse(name).ok_or_else(|| {
        service::Error::invalid(format!(
            "--role {name}: a role is one of {}",
            Role::ALL.map(Role::as_str).join(", ")
        ))
    })
}

/// A duration as the spec writes them (`30d`, `12h`, `90m`), or 400.
pub fn parse_expiry(text: &str) -> Result<std::time::Duration, service::Error> {
    crate::spec::units::parse_duration(text).map_err(|e| {
        service::Error::invalid(format!("--expires {text}: {e} (for example 30d, 12h, 90m)"))
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TokenPath {
    /// The token's id (as listed), not its text.
    id: String,
}

/// Revokes a token (admins only): the next request with it gets 401.
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", operation_id = "revoke_token", tag = "admin", params(TokenPath),
    responses((status = 200, description = "The token, revoked", body = TokenBody),
              (status = 403, description = "Not an admin's token", body = Refusal),
              (status = 404, description = "No such token", body = Refusal)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<TokenPath>, PathRejection>,
) -> Result<Json<TokenBody>, ApiError> {
    let Path(p) = path?;
    let row = state
        .service
        .revoke_token(&caller.principal, &caller.id, &p.id)
        .await?;
    Ok(Json(row.into()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditBody {
    at: String,
    who: String,
    team: String,
    action: String,
    target: String,
    result: String,
}

/// Every change, oldest first: who (a token's id), what, when and the result (admins only).
#[utoipa::path(get, path = "/api/v1/audit", tag = "admin",
    responses((status = 200, description = "The audit record", body = Vec<AuditBody>),
              (status = 403, description = "Not an admin's token", body = Refusal)))]
pub async fn audit(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<AuditBody>>, ApiError> {
    let rows = state.service.audit_record(&caller.principal).await?;
    Ok(Json(
        rows.into_iter()
            .map(|a| AuditBody {
                at: a.at,
                who: a.who,
                team: a.team,
                action: a.action,
                target: a.target,
                result: a.result,
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    /// The document's roles are the service's.
    #[test]
    fn the_documented_roles_are_the_roles() {
        let schema = serde_json::to_value(<super::RoleName as utoipa::PartialSchema>::schema())
            .expect("the schema serializes");
        let documented: Vec<&str> = schema["enum"]
            .as_array()
            .expect("an enum")
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect();
        assert_eq!(documented, super::Role::ALL.map(super::Role::as_str));
    }
}
