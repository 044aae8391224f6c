//! Tokens (`spec/server.md`, "Teams, tokens and roles"): created by an admin for one team and
//! one role, shown once, stored as their SHA-256 only, refused once expired or revoked, and
//! every creation and revocation written to the audit record.
//!
//! A token is `sluice_` and 64 hex digits: 256 bits from the operating system's random
//! source, so a hash without salt is enough (nothing to guess by dictionary), and looking a
//! token up is one indexed read.

use std::io::Read;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Error, Principal, Role, Service};
use crate::store::{AuditRow, TokenRow};

/// What every token starts with, so that one pasted where it should not be is recognised.
pub const PREFIX: &str = "sluice_";

/// The team of an admin of every team.
pub const EVERY_TEAM: &str = "*";

/// A token just made: the only time its text is known.
#[derive(Clone, Debug)]
pub struct Created {
    pub row: TokenRow,
    pub token: String,
}

/// Who a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub principal: Principal,
    /// The token's id, as the audit record names the caller.
    pub id: String,
}

/// `n` bytes from the operating system's random source, as hex.
fn random_hex(n: usize) -> Result<String, Error> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::io("cannot read random bytes from /dev/urandom", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The stored form of `token`.
pub fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What is wrong with `team` as a token's team: the naming rule of teams everywhere, or `*`.
pub fn team_problem(team: &str) -> Option<String> {
    if team == EVERY_TEAM {
        return None;
    }
    crate::spec::name_problem(team).map(|problem| {
        format!(
            "'{team}' is not a team name: {problem} (team names use lowercase letters, digits and '-', start with a letter and have at most 63 characters; '*' is every team)"
        )
    })
}

impl Service {
    /// Only an admin manages tokens: of every team, or of its own.
    fn check_admin(who: &Principal, what: &str) -> Result<(), Error> {
        match &who.team {
            None => who.check_admin_of(EVERY_TEAM, what),
            Some(own) => who.check_admin_of(own, what),
        }
    }

    async fn record(&self, who: &str, team: &str, action: &str, target: &str) -> Result<(), Error> {
        self.record_change(who, team, action, target, "ok").await
    }

    /// Adds a change to the audit record: `who` (a token's id, `local`) did `action`
    /// (`submit`, `cancel`, `token create`) to `target` (`run 1a2b…`) of `team`, with `result`
    /// (`ok`, or the refusal's HTTP status and message).
    pub async fn record_change(
        &self,
        who: &str,
        team: &str,
        action: &str,
        target: &str,
        result: &str,
    ) -> Result<(), Error> {
        self.store
            .audit(&AuditRow {
                at: self.clock.now_rfc3339(),
                who: who.to_owned(),
                team: team.to_owned(),
                action: action.to_owned(),
                target: target.to_owned(),
                result: result.to_owned(),
            })
            .await?;
        Ok(())
    }

    /// The audit record, oldest first: admins only, an admin of one team its team's part.
    pub async fn audit_record(&self, who: &Principal) -> Result<Vec<AuditRow>, Error> {
        Self::check_admin(who, "read the audit record")?;
        let mut rows = self.store.audit_record().await?;
        if let Some(own) = who.bound_team() {
            rows.retain(|r| r.team == own);
        }
        Ok(rows)
    }

    /// A new token for `team` (`*`: every team, for an admin) with `role`, lasting `expires`
    /// (for ever without). `by` names the creator in the audit record.
    pub async fn create_token(
        &self,
        who: &Principal,
        by: &str,
        team: &str,
        role: Role,
        name: Option<String>,
        expires: Option<Duration>,
    ) -> Result<Created, Error> {
        if let Some(problem) = team_problem(team) {
            return Err(Error::invalid(problem));
        }
        who.check_admin_of(team, "create tokens")?;
        if team == EVERY_TEAM && role != Role::Admin {
            return Err(Error::invalid(format!(
                "a {} token belongs to one team, not '*' (only an admin acts for every team)",
                role.as_str()
            )));
        }
        if team.is_empty() {
            return Err(Error::invalid("a token needs a team (--team TEAM)"));
        }
        let now = self.clock.now();
        let expires_at = match expires {
            None => None,
            Some(d) => {
                let d = chrono::Duration::from_std(d)
                    .ok()
                    .and_then(|d| now.checked_add_signed(d))
                    .ok_or_else(|| Error::invalid("the expiry is too far away"))?;
                Some(crate::time::format(d))
            }
        };
        let token = format!("{PREFIX}{}", random_hex(32)?);
        let row = TokenRow {
            id: random_hex(6)?,
            name,
            team: team.to_owned(),
            role: role.as_str().to_owned(),
            hash: hash(&token),
            created_at: crate::time::format(now),
            expires_at,
            revoked_at: None,
        };
        self.store.insert_token(&row).await?;
        self.record(by, team, "token create", &format!("token {}", row.id))
            .await?;
        Ok(Created { row, token })
    }

    /// The tokens (without their text), of `team` or of every team.
    pub async fn list_tokens(
        &self,
        who: &Principal,
        team: Option<&str>,
    ) -> Result<Vec<TokenRow>, Error> {
        Self::check_admin(who, "list tokens")?;
        let team = match (who.bound_team(), team) {
            (Some(own), Some(asked)) if asked != own => {
                return Err(Error::Forbidden(format!(
                    "{who} cannot list team {asked}'s tokens: an admin of one team manages that team's tokens only"
                )));
            }
            (Some(own), _) => Some(own),
            (None, asked) => asked,
        };
        Ok(self.store.tokens(team).await?)
    }

    /// Revokes token `id`: the next request with it is refused.
    pub async fn revoke_token(
        &self,
        who: &Principal,
        by: &str,
        id: &str,
    ) -> Result<TokenRow, Error> {
        Self::check_admin(who, "revoke tokens")?;
        // Another team's token does not exist for an admin of one team, as an unused id.
        if let Some(own) = who.bound_team()
            && !self
                .store
                .tokens(Some(own))
                .await?
                .iter()
                .any(|t| t.id == id)
        {
            return Err(Error::NotFound(format!("no token '{id}'")));
        }
        let now = self.clock.now_rfc3339();
        let Some(mut row) = self.store.revoke_token(id, &now).await? else {
            return Err(Error::NotFound(format!("no token '{id}'")));
        };
        if row.revoked_at.is_none() {
            row.revoked_at = Some(now);
            self.record(by, &row.team, "token revoke", &format!("token {id}"))
                .await?;
        }
        Ok(row)
    }

    /// Who `token` is, or why it is refused: unknown, expired or revoked.
    pub async fn authenticate(&self, token: &str) -> Result<Authenticated, Error> {
        let Some(row) = self.store.token_by_hash(&hash(token)).await? else {
            return Err(Error::Unauthenticated(
                "the token is unknown (make one with `sluice token create`)".into(),
            ));
        };
        if let Some(at) = &row.revoked_at {
            return Err(Error::Unauthenticated(format!(
                "the token {} was revoked at {at}",
                row.id
            )));
        }
        if let Some(at) = &row.expires_at {
            let until = crate::time::parse(at).map_err(|e| {
                Error::Unavailable(Box::new(crate::store::Error::Corrupt(format!(
                    "token {}, column expires_at: {e}",
                    row.id
                ))))
            })?;
            if until <= self.clock.now() {
                return Err(Error::Unauthenticated(format!(
                    "the token {} expired at {at}",
                    row.id
                )));
            }
        }
        let Some(role) = Role::parse(&row.role) else {
            return Err(Error::Unavailable(Box::new(crate::store::Error::Corrupt(
                format!("token {}, column role: '{}' is no role", row.id, row.role),
            ))));
        };
        // A token made before teams' names were checked may name no team: it reaches
        // nothing (its team would end up in paths, labels and pages).
        if team_problem(&row.team).is_some() {
            return Err(Error::Unauthenticated(format!(
                "the token {} belongs to '{}', which is not a team name: make a new token",
                row.id, row.team
            )));
        }
        let team = (row.team != EVERY_TEAM).then(|| row.team.clone());
        Ok(Authenticated {
            principal: Principal { team, role },
            id: row.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;

    async fn service(tag: &str) -> (Service, Arc<ManualClock>, std::path::PathBuf) {
        let home = std::env::temp_dir().join(format!(
            "sluice-tokens-{tag}-{}-{}",
            std::process::id(),
            crate::time::now_ms()
        ));
        let store = Store::open(&home).await.expect("store");
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        (Service::new(store, clock.clone()), clock, home)
    }

    #[tokio::test]
    async fn a_token_is_shown_once_stored_hashed_and_refused_once_expired_or_revoked() {
        let (service, clock, home) = service("life").await;
        let admin = Principal::local();
        let made = service
            .create_token(
                &admin,
                "local",
                "vision",
                Role::Member,
                None,
                Some(Duration::from_secs(3600)),
            )
            .await
            .expect("created");
        assert!(made.token.starts_with(PREFIX) && made.token.len() == PREFIX.len() + 64);
        // Only the hash is stored.
        let listed = service.list_tokens(&admin, None).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_ne!(listed[0].hash, made.token);
        assert!(!format!("{listed:?}").contains(&made.token));

        let who = service.authenticate(&made.token).await.expect("valid");
        assert_eq!(who.principal, Principal::new("vision", Role::Member));
        assert_eq!(who.id, made.row.id);

        let wrong = service
            .authenticate("sluice_0000")
            .await
            .expect_err("unknown");
        assert_eq!(wrong.status_code(), 401);
        assert!(wrong.to_string().contains("unknown"), "{wrong}");

        clock.advance(Duration::from_secs(3601));
        let late = service
            .authenticate(&made.token)
            .await
            .expect_err("expired");
        assert!(late.to_string().contains("expired"), "{late}");

        let forever = service
            .create_token(&admin, "local", "*", Role::Admin, Some("ops".into()), None)
            .await
            .expect("created");
        let who = service.authenticate(&forever.token).await.expect("valid");
        assert_eq!(who.principal.team, None);
        service
            .revoke_token(&admin, "local", &forever.row.id)
            .await
            .expect("revoked");
        let gone = service
            .authenticate(&forever.token)
            .await
            .expect_err("revoked");
        assert!(gone.to_string().contains("revoked"), "{gone}");

        let record = service.store().audit_record().await.expect("audit");
        let actions: Vec<&str> = record.iter().map(|a| a.action.as_str()).collect();
        assert_eq!(actions, ["token create", "token create", "token revoke"]);
        let _ = std::fs::remove_dir_all(home);
    }

    #[tokio::test]
    async fn only_an_admin_manages_tokens_and_only_an_admin_acts_for_every_team() {
        let (service, _, home) = service("roles").await;
        let member = Principal::new("vision", Role::Member);
        let refused = service
            .create_token(&member, "t1", "vision", Role::Viewer, None, None)
            .await
            .expect_err("a member cannot");
        assert_eq!(refused.status_code(), 403);
        assert_eq!(
            service
                .list_tokens(&member, None)
                .await
                .expect_err("no")
                .status_code(),
            403
        );
        let bad = service
            .create_token(&Principal::local(), "local", "*", Role::Member, None, None)
            .await
            .expect_err("a member of every team");
        assert_eq!(bad.status_code(), 400);
        let missing = service
            .revoke_token(&Principal::local(), "local", "nope")
            .await
            .expect_err("no such token");
        assert_eq!(missing.status_code(), 404);
        assert!(
            service
                .store()
                .audit_record()
                .await
                .expect("audit")
                .is_empty()
        );
        let _ = std::fs::remove_dir_all(home);
    }
}
