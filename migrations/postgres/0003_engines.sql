-- sluice state, version 3 (PostgreSQL; as migrations/sqlite/0003_engines.sql): an engine's death is seen by every `sluice` on the home.

-- When the engine holding the lease started (its process's start time in clock ticks since
-- boot, from /proc/PID/stat): with `lease_owner` (PID@HOST) it tells the engine apart from a
-- later process that got the same PID, so that a dead engine is seen at once on its host.
ALTER TABLE runs ADD COLUMN lease_started BIGINT;
