-- sluice state, version 13: one lease per engine process, not one per run.

-- A process that drives runs renews its own row every few seconds; a run it holds
-- (runs.lease_owner and lease_started naming it) is alive while this row's `until` (or the
-- run's own lease_until, as engines before this version renewed it) has not passed. One
-- statement per process, whatever the number of runs it drives.
CREATE TABLE engines (
    owner TEXT PRIMARY KEY,
    started BIGINT,
    until BIGINT NOT NULL
);

-- The runs one engine holds, counted without reading their rows.
DROP INDEX runs_by_state_owner;
CREATE INDEX runs_by_state_holder ON runs (state, lease_owner, lease_started);
