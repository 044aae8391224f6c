-- sluice state, version 4: the server's tokens and its audit record (spec/server.md).

-- A token belongs to one team (`*` for an admin of every team) and has one role. Only the
-- SHA-256 of the token is kept: the token itself is shown once, when it is created.
CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    name TEXT,
    team TEXT NOT NULL,
    role TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
);

-- Every change: who (a token's id, or `local` on the server's host), what, to what, when,
-- and how it ended.
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    who TEXT NOT NULL,
    team TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    result TEXT NOT NULL
);
