//! Who asks: a team and a role, as the server's tokens carry them (`spec/server.md`):
//! a `viewer` reads its team's runs, a `member` also changes them (submit, cancel, retry,
//! resume, preempt), an `admin` does everything for every team. Another team's run does not
//! exist for a principal that may not see it: the answer is "not found", as for an id that
//! was never used, so that ids of other teams' runs cannot be probed.
//!
//! The embedded CLI acts as [`Principal::local`]: whoever can open the home owns it.

use std::fmt;

use super::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Member,
    Admin,
}

impl Role {
    /// Every role, least first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Member, Role::Admin];

    /// The role named `name` (`viewer`, `member`, `admin`).
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
        }
    }
}

/// A caller of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The team it acts for; `None` for every team (`*`, an admin's).
    pub team: Option<String>,
    pub role: Role,
}

impl Principal {
    /// The embedded CLI: an admin of every team (the home is the user's own).
    pub fn local() -> Self {
        Principal {
            team: None,
            role: Role::Admin,
        }
    }

    pub fn new(team: impl Into<String>, role: Role) -> Self {
        Principal {
            team: Some(team.into()),
            role,
        }
    }

    /// The team a run submitted by this principal belongs to, when that is the principal's
    /// and not the file's: every principal but an admin, and one bound to a team.
    pub fn bound_team(&self) -> Option<&str> {
        match self.role {
            Role::Admin => None,
            Role::Viewer | Role::Member => self.team.as_deref(),
        }
    }

    /// Whether runs of `team` exist for this principal.
    pub fn sees(&self, team: &str) -> bool {
        self.role == Role::Admin || self.team.as_deref().is_none_or(|t| t == team)
    }

    /// Whether it may change runs of `team` (submit, cancel, retry, resume, preempt).
    pub fn may_change(&self, team: &str) -> bool {
        self.sees(team) && self.role >= Role::Member
    }

    /// `Forbidden` unless its role may change runs; `what` says what was refused. Whether it
    /// sees the run's team is checked where the run is looked up (another team's run is not
    /// found).
    pub(crate) fn check_role(&self, what: &str) -> Result<(), Error> {
        if self.role >= Role::Member {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "{self} cannot {what}: a {} only reads runs",
            self.role.as_str()
        )))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.team {
            Some(team) => write!(f, "a {} of team {team}", self.role.as_str()),
            None => write!(f, "a {} of every team", self.role.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_read_and_change_as_the_server_contract_says() {
        let viewer = Principal::new("vision", Role::Viewer);
        let member = Principal::new("vision", Role::Member);
        let admin = Principal::new("ops", Role::Admin);
        let local = Principal::local();

        assert!(viewer.sees("vision") && !viewer.may_change("vision"));
        assert!(member.sees("vision") && member.may_change("vision"));
        assert!(!member.sees("nlp") && !member.may_change("nlp"));
        assert!(!viewer.sees("nlp"));
        for p in [&admin, &local] {
            assert!(p.sees("nlp") && p.may_change("nlp"), "{p}");
        }
    }

    #[test]
    fn only_team_bound_principals_give_runs_their_team() {
        assert_eq!(
            Principal::new("vision", Role::Member).bound_team(),
            Some("vision")
        );
        assert_eq!(Principal::new("ops", Role::Admin).bound_team(), None);
        assert_eq!(Principal::local().bound_team(), None);
    }

    #[test]
    fn a_refusal_names_the_principal_and_its_role() {
        let e = Principal::new("vision", Role::Viewer)
            .check_role("cancel runs")
            .expect_err("a viewer only reads");
        assert_eq!(e.status_code(), 403);
        assert_eq!(
            e.to_string(),
            "a viewer of team vision cannot cancel runs: a viewer only reads runs"
        );
    }
}
