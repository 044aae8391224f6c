//! Who asks: a team and a role, as the server's tokens carry them (`spec/server.md`):
//! a `viewer` reads its team's runs, a `member` also changes them (submit, cancel, retry,
//! resume, preempt), an `admin` also manages tokens and reads the audit record. An admin of
//! team `*` does so for every team; an admin of one team for that team only, exactly as its
//! members see it (its runs, its tokens, its part of the audit record). Another team's run
//! does not exist for a principal that may not see it: the answer is "not found", as for an
//! id that was never used, so that ids of other teams' runs cannot be probed.
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

    /// A principal of every team (`*`): an admin's token of team `*`.
    pub fn every_team(role: Role) -> Self {
        Principal { team: None, role }
    }

    pub fn new(team: impl Into<String>, role: Role) -> Self {
        Principal {
            team: Some(team.into()),
            role,
        }
    }

    /// The team this principal acts for, when it is one team (every role; only an admin of
    /// every team, and the embedded CLI, have none): runs it submits are that team's, and it
    /// sees that team's only.
    pub fn bound_team(&self) -> Option<&str> {
        self.team.as_deref()
    }

    /// Whether runs of `team` exist for this principal.
    pub fn sees(&self, team: &str) -> bool {
        self.team.as_deref().is_none_or(|t| t == team)
    }

    /// `Forbidden` unless it is an admin of `team` (or of every team); `what` says what was
    /// refused.
    pub(crate) fn check_admin_of(&self, team: &str, what: &str) -> Result<(), Error> {
        if self.role != Role::Admin {
            return Err(Error::Forbidden(format!(
                "{self} cannot {what}: only an admin manages tokens"
            )));
        }
        if !self.sees(team) {
            return Err(Error::Forbidden(format!(
                "{self} cannot {what}: an admin of one team manages that team's tokens only"
            )));
        }
        Ok(())
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
        let team_admin = Principal::new("ops", Role::Admin);
        let every = Principal::every_team(Role::Admin);
        let local = Principal::local();

        assert!(viewer.sees("vision") && !viewer.may_change("vision"));
        assert!(member.sees("vision") && member.may_change("vision"));
        assert!(!member.sees("nlp") && !member.may_change("nlp"));
        assert!(!viewer.sees("nlp"));
        // An admin of one team is that team's: another's runs do not exist for it.
        assert!(team_admin.sees("ops") && team_admin.may_change("ops"));
        assert!(!team_admin.sees("nlp") && !team_admin.may_change("nlp"));
        for p in [&every, &local] {
            assert!(p.sees("nlp") && p.may_change("nlp"), "{p}");
        }
    }

    #[test]
    fn admins_manage_the_tokens_of_the_teams_they_see() {
        let team_admin = Principal::new("ops", Role::Admin);
        assert!(team_admin.check_admin_of("ops", "create tokens").is_ok());
        let e = team_admin
            .check_admin_of("nlp", "create tokens")
            .expect_err("another team's");
        assert_eq!(e.status_code(), 403);
        assert!(
            team_admin
                .check_admin_of(crate::service::tokens::EVERY_TEAM, "create tokens")
                .is_err()
        );
        assert!(
            Principal::new("ops", Role::Member)
                .check_admin_of("ops", "create tokens")
                .is_err()
        );
        assert!(Principal::local().check_admin_of("nlp", "x").is_ok());
    }

    #[test]
    fn only_principals_of_every_team_leave_runs_their_file_s_team() {
        assert_eq!(
            Principal::new("vision", Role::Member).bound_team(),
            Some("vision")
        );
        assert_eq!(Principal::new("ops", Role::Admin).bound_team(), Some("ops"));
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
