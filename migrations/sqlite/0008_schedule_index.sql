-- The schedule loop asks, at each fire, which of a schedule's runs still run, and once a
-- minute how many have ended (keepRuns): with many scheduled runs, by index.
CREATE INDEX runs_by_schedule ON runs (team, schedule, state);
