//! The `Idempotency-Key` of a submission (the IETF draft's header, as Stripe and others use
//! it): a client that sends one and does not get the answer (a dropped connection, a server
//! killed after its commit) sends the same request with the same key again, and is answered
//! with the run the first one recorded, never a second run. The key is the team's; the
//! request's hash goes with it, so that the key reused for another request is refused (409).

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::{ApiError, Caller};
use crate::store::IdempotencyKey;

/// The request header.
pub const HEADER: &str = "idempotency-key";

/// The answer's header on a replay (`true`), as Stripe names it.
pub const REPLAYED: &str = "idempotent-replayed";

/// The longest key accepted.
const LONGEST: usize = 255;

/// The key of a request, with `request` (what it asks, as JSON) hashed: None without the
/// header; a key that is empty, too long or not visible ASCII is 400.
pub fn key_of(
    headers: &HeaderMap,
    caller: &Caller,
    request: &serde_json::Value,
) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || {
        ApiError::BadRequest(format!(
            "the Idempotency-Key header must be one value of 1 to {LONGEST} visible ASCII characters (a UUID, say)"
        ))
    };
    if values.next().is_some() {
        return Err(bad());
    }
    let key = value.to_str().map_err(|_| bad())?.trim();
    if key.is_empty() || key.len() > LONGEST || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    let hash = Sha256::digest(request.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Some(IdempotencyKey {
        team: caller.team().to_owned(),
        key: key.to_owned(),
        hash,
    }))
}
