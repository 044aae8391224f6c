-- sluice state, version 9: what the web UI reads on every page load.

-- A team's runs, newest first (the runs page, a page of 50 at a time, however many runs).
CREATE INDEX runs_by_team_created ON runs (team, created_at);

-- Who submitted a run: its `submit` entry in the audit record.
CREATE INDEX audit_by_target ON audit (target);
