//! Who calls: the bearer token of every request, checked against the store on each request
//! (so a revocation holds from the next request on), and a per-token request rate limit.

use std::num::NonZeroU32;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::{ApiError, AppState};
use crate::service::{Error, Principal};

pub type Limiter = DefaultKeyedRateLimiter<String>;

/// A limiter allowing `per_second` requests a second per token, in bursts of as many.
pub fn limiter(per_second: u32) -> Limiter {
    let rate = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
    governor::RateLimiter::keyed(Quota::per_second(rate))
}

/// Counts a request of token `id`: None while within its rate, else in how many seconds to
/// try again. The API and the web UI count against the same limit.
pub fn over_rate(state: &AppState, id: &str) -> Option<u64> {
    let not_until = state.limiter.check_key(&id.to_owned()).err()?;
    Some(
        not_until
            .wait_time_from(DefaultClock::default().now())
            .as_secs()
            + 1,
    )
}

/// The caller of a request, from its token.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    /// The token's id: the audit record's `who`.
    pub id: String,
}

impl Caller {
    /// The team an audit record of this caller's change names: the run's, else the caller's.
    pub fn team(&self) -> &str {
        self.principal
            .team
            .as_deref()
            .unwrap_or(crate::service::tokens::EVERY_TEAM)
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(Error::Unauthenticated(
                "no token: send `Authorization: Bearer TOKEN` (the CLI sends $SLUICE_TOKEN)".into(),
            )
            .into());
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Error::Unauthenticated("the Authorization header is not `Bearer TOKEN`".into())
            })?;
        let who = state.service.authenticate(token).await?;
        if let Some(secs) = over_rate(state, &who.id) {
            return Err(ApiError::RateLimited(secs));
        }
        Ok(Caller {
            principal: who.principal,
            id: who.id,
        })
    }
}
