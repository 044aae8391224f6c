//! Reading applied schedules (`sluice schedules`, `sluice status SCHEDULE`) and running an
//! applied pipeline by name (`sluice submit NAME`).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Error, Principal, Service};
use crate::schedule::cron;
use crate::store::{AppliedRow, FireRow};

/// One fire, as `status SCHEDULE` lists them.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct FireView {
    pub tick: String,
    pub outcome: String,
    pub run: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The schedule's version that decided it.
    pub version: i64,
}

impl From<FireRow> for FireView {
    fn from(f: FireRow) -> Self {
        FireView {
            tick: f.tick,
            outcome: f.outcome,
            run: f.run_id,
            reason: f.reason,
            version: f.version,
        }
    }
}

/// A schedule with its last and next fire.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    pub name: String,
    pub team: String,
    pub pipeline: String,
    pub cron: String,
    pub timezone: String,
    pub suspend: bool,
    pub version: i64,
    pub last: Option<FireView>,
    /// The next tick (RFC 3339 UTC), none while suspended.
    pub next: Option<String>,
    /// Every fire, oldest first (`status SCHEDULE` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fires: Option<Vec<FireView>>,
}

/// The next `count` fires of `expr` in `tz` strictly after `from`.
pub fn next_fires(
    expr: &str,
    timezone: &str,
    from: DateTime<Utc>,
    count: usize,
) -> Result<Vec<DateTime<Utc>>, Error> {
    let e = cron::parse(expr).map_err(|e| Error::invalid(format!("cron: {e}")))?;
    let tz = cron::zone(timezone).map_err(|(m, _)| Error::invalid(format!("timezone: {m}")))?;
    let mut out = Vec::with_capacity(count);
    let mut at = from;
    while out.len() < count {
        match e.next_after(tz, at) {
            Some(t) => {
                out.push(t);
                at = t;
            }
            None => break,
        }
    }
    Ok(out)
}

impl Service {
    /// The applied schedules of the principal's team (an admin's: every team's).
    pub async fn schedules(&self, who: &Principal) -> Result<Vec<ScheduleView>, Error> {
        let rows = self.store.applied(who.bound_team()).await?;
        let mut out = Vec::new();
        for row in rows.iter().filter(|r| r.kind == "Schedule") {
            out.push(self.schedule_view(row, false).await?);
        }
        Ok(out)
    }

    /// One schedule with every fire; another team's does not exist for the principal.
    pub async fn schedule(&self, who: &Principal, name: &str) -> Result<ScheduleView, Error> {
        let rows = self.store.applied(who.bound_team()).await?;
        let mut found = rows
            .iter()
            .filter(|r| r.kind == "Schedule" && r.name == name);
        match (found.next(), found.next()) {
            (Some(row), None) => self.schedule_view(row, true).await,
            (Some(_), Some(_)) => Err(Error::invalid(format!(
                "several teams have a schedule named '{name}': use a token of the team"
            ))),
            (None, _) => Err(Error::NotFound(format!("unknown schedule '{name}'"))),
        }
    }

    async fn schedule_view(&self, row: &AppliedRow, all: bool) -> Result<ScheduleView, Error> {
        let s = schedule_of(row).ok_or_else(|| {
            Error::invalid(format!(
                "schedule {}: its applied text no longer reads as a Schedule",
                row.name
            ))
        })?;
        let fires = self.store.fires(&row.team, &row.name).await?;
        let last = fires.last().cloned().map(FireView::from);
        let now = self.clock.now();
        let next = if s.suspend {
            None
        } else {
            next_fires(&s.cron, &s.timezone, now, 1)?
                .first()
                .map(|t| crate::time::format(*t))
        };
        Ok(ScheduleView {
            name: row.name.clone(),
            team: row.team.clone(),
            pipeline: s.pipeline,
            cron: s.cron,
            timezone: s.timezone,
            suspend: s.suspend,
            version: row.version,
            last,
            next,
            fires: all.then(|| fires.into_iter().map(FireView::from).collect()),
        })
    }

    /// The request that runs the applied pipeline or sweep `name` of the principal's team
    /// (`sluice submit NAME`), with `params`.
    pub async fn applied_request(
        &self,
        who: &Principal,
        name: &str,
        params: Vec<String>,
    ) -> Result<super::Request, Error> {
        let team = who.bound_team().unwrap_or("default");
        let row = self
            .store
            .applied_named(team, &["Pipeline", "Sweep"], name)
            .await?
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no pipeline or sweep named '{name}' is applied for team {team} (sluice apply -f FILE)"
                ))
            })?;
        Ok(super::Request {
            shown: row.path.clone(),
            text: row.source,
            workdir: std::path::PathBuf::from(&row.workdir),
            params,
            name: None,
            cluster: None,
            objects: None,
            applied_version: Some(row.version),
            schedule: None,
        })
    }
}

/// The Schedule an applied row holds.
pub fn schedule_of(row: &AppliedRow) -> Option<crate::spec::model::Schedule> {
    let loaded = crate::spec::load(&row.path, row.source.clone());
    loaded.documents.into_iter().find_map(|d| match d {
        crate::spec::model::Document::Schedule(s) => Some(*s),
        _ => None,
    })
}
