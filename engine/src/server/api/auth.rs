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

/// The token of an `Authorization` value: the scheme `Bearer` in any case (RFC 9110 makes
/// schemes case-insensitive), then the token.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The address a request came from, as the accept loop recorded it.
pub fn client_address(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The address a request came from, as an extractor (None when the accept loop recorded
/// none, as in tests that call the router directly).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddress(client_address(parts)))
    }
}

/// Who `token` is, counting a failure against the address it came from; an address past its
/// failures is refused (429) before the store is asked.
pub async fn authenticate(
    state: &AppState,
    token: &str,
    from: Option<std::net::IpAddr>,
) -> Result<crate::service::tokens::Authenticated, ApiError> {
    let now = std::time::Instant::now();
    if let Some(address) = from
        && let Some(secs) = state.failures.blocked(address, now)
    {
        return Err(ApiError::TooManyFailures(secs));
    }
    match state.service.authenticate(token).await {
        Err(e @ Error::Unauthenticated(_)) => {
            if let Some(address) = from {
                state.failures.failed(address, now);
            }
            Err(e.into())
        }
        other => Ok(other?),
    }
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
        let token = value.to_str().ok().and_then(bearer).ok_or_else(|| {
            Error::Unauthenticated("the Authorization header is not `Bearer TOKEN`".into())
        })?;
        let who = authenticate(state, token, client_address(parts)).await?;
        if let Some(secs) = over_rate(state, &who.id) {
            return Err(ApiError::RateLimited(secs));
        }
        Ok(Caller {
            principal: who.principal,
            id: who.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn the_scheme_is_read_in_any_case() {
        for v in ["Bearer abc", "bearer abc", "BEARER  abc ", "Bearer\tabc"] {
            assert_eq!(bearer(v), Some("abc"), "{v:?}");
        }
        for v in ["Basic abc", "Bearer", "Bearer   ", "abc", "Bearerabc"] {
            assert_eq!(bearer(v), None, "{v:?}");
        }
    }
}
