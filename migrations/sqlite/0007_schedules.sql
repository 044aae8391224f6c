-- Documents applied with `sluice apply`: each team's Pipelines, Sweeps and Schedules by name,
-- every version kept. A document's text is its own (one document of the file it came from);
-- a new version is made only when that text changes.
CREATE TABLE applied (
    team            TEXT NOT NULL,
    kind            TEXT NOT NULL,          -- Pipeline | Sweep | Schedule
    name            TEXT NOT NULL,
    version         BIGINT NOT NULL,        -- 1, 2, ...
    source          TEXT NOT NULL,
    path            TEXT NOT NULL,          -- the file it came from, as the client named it
    workdir         TEXT NOT NULL,
    applied_at      TEXT NOT NULL,
    applied_by      TEXT NOT NULL,
    pruned_at       TEXT,                   -- set on the newest version when --prune removed it
    PRIMARY KEY (team, kind, name, version)
);

-- Every tick of every schedule that was decided: run (with its run), skipped, replaced or
-- missed, with why. The key makes a tick impossible to decide twice: the row and the run it
-- starts are written in one transaction.
CREATE TABLE fires (
    team            TEXT NOT NULL,
    schedule        TEXT NOT NULL,
    tick            TEXT NOT NULL,          -- the scheduled instant, RFC 3339 UTC
    outcome         TEXT NOT NULL,          -- started | skipped | missed
    run_id          TEXT,
    reason          TEXT,
    version         BIGINT NOT NULL,        -- the schedule's version that decided it
    recorded_at     TEXT NOT NULL,
    PRIMARY KEY (team, schedule, tick)
);

-- The applied document a run ran (its version), and the schedule that started it.
ALTER TABLE runs ADD COLUMN applied_version BIGINT;
ALTER TABLE runs ADD COLUMN schedule TEXT;
