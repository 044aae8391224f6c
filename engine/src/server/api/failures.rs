//! Failed authentications, counted per client address: past [`LIMIT`] in a [`WINDOW`], an
//! address is answered 429 before its token is even looked up, so that guessing tokens (or
//! flooding the store with lookups) from one address costs its time, not the server's. Behind
//! a proxy every client has the proxy's address: the limit is then the proxy's, which still
//! stops a guesser, and is said in the docs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed authentications an address may make in a window, unless the server says otherwise
/// (`sluice server --auth-failures N`).
pub const LIMIT: u32 = 30;

/// How long an address's failures are remembered.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Addresses remembered at most: past it, the expired ones are forgotten, and if none has
/// expired, all new addresses share one count.
const REMEMBERED: usize = 65_536;

/// The failures of each address in its current window.
#[derive(Debug)]
pub struct Failures {
    limit: u32,
    by_address: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Default for Failures {
    fn default() -> Self {
        Failures::new(LIMIT)
    }
}

/// The key of an address: an IPv6 client is counted by its /64, since it holds all of it.
fn key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            for s in &mut segments[4..] {
                *s = 0;
            }
            IpAddr::V6(std::net::Ipv6Addr::from(segments))
        }
    }
}

impl Failures {
    /// At most `limit` failures per address and window (at least 1).
    pub fn new(limit: u32) -> Self {
        Failures {
            limit: limit.max(1),
            by_address: Mutex::default(),
        }
    }

    /// None while `address` may still try; else in how many seconds it may again.
    pub fn blocked(&self, address: IpAddr, now: Instant) -> Option<u64> {
        let map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        let (since, count) = map.get(&key(address))?;
        let elapsed = now.saturating_duration_since(*since);
        if *count < self.limit || elapsed >= WINDOW {
            return None;
        }
        Some((WINDOW - elapsed).as_secs() + 1)
    }

    /// Counts a failed authentication of `address`.
    pub fn failed(&self, address: IpAddr, now: Instant) {
        let mut map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= REMEMBERED {
            map.retain(|_, (since, _)| now.saturating_duration_since(*since) < WINDOW);
        }
        let k = if map.len() >= REMEMBERED && !map.contains_key(&key(address)) {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            key(address)
        };
        let entry = map.entry(k).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_past_the_limit_until_its_window_ends() {
        let f = Failures::default();
        let a: IpAddr = "192.0.2.7".parse().expect("an address");
        let b: IpAddr = "192.0.2.8".parse().expect("an address");
        let t0 = Instant::now();
        for _ in 0..LIMIT {
            assert_eq!(f.blocked(a, t0), None);
            f.failed(a, t0);
        }
        assert_eq!(f.blocked(a, t0), Some(WINDOW.as_secs() + 1));
        assert_eq!(f.blocked(b, t0), None, "another address is not");
        assert_eq!(f.blocked(a, t0 + WINDOW), None, "the window ended");
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let f = Failures::default();
        let t0 = Instant::now();
        for i in 0..LIMIT {
            let a: IpAddr = format!("2001:db8::{i:x}").parse().expect("an address");
            f.failed(a, t0);
        }
        let other: IpAddr = "2001:db8::ffff".parse().expect("an address");
        assert!(f.blocked(other, t0).is_some());
        let elsewhere: IpAddr = "2001:db8:1::1".parse().expect("an address");
        assert_eq!(f.blocked(elsewhere, t0), None);
    }
}
