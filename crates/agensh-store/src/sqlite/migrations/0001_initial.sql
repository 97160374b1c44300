-- The schema of the first stores (agensh as of 2026-11-30): workers, the board, claims,
-- messages and event queues.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE workers (
    id            TEXT PRIMARY KEY,
    num           INTEGER NOT NULL UNIQUE,
    token         TEXT NOT NULL UNIQUE,
    status        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_activity INTEGER,
    board_cursor  INTEGER NOT NULL DEFAULT 0,
    msg_cursor    INTEGER NOT NULL DEFAULT 0,
    event_cursor  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE records (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    label      TEXT,
    detail     TEXT,
    paths      TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX records_by_author_label ON records(author, label, seq);

-- Full-text index over all history; rows are never deleted (the board is append-only).
CREATE VIRTUAL TABLE records_fts USING fts5(
    text, detail, kind, author, label, content=''
);

CREATE TABLE claims (
    seq         INTEGER PRIMARY KEY REFERENCES records(seq),
    author      TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,
    released_at INTEGER
);
CREATE INDEX claims_live ON claims(released_at, expires_at);

CREATE TABLE messages (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    sender     TEXT NOT NULL,
    target     TEXT NOT NULL,
    text       TEXT NOT NULL,
    thread     INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX messages_by_target ON messages(target, seq);
CREATE INDEX messages_by_sender ON messages(sender, seq);

-- One row per event. A broadcast has target NULL and is stored once for every worker;
-- each worker reads through its own cursor (workers.event_cursor) plus the acks above it.
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    priority   TEXT NOT NULL,
    payload    TEXT NOT NULL,
    dedup_key  TEXT,
    source     TEXT,
    target     TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX events_by_target ON events(target, seq);
CREATE UNIQUE INDEX events_dedup ON events(ifnull(target, '*'), dedup_key)
    WHERE dedup_key IS NOT NULL;

CREATE TABLE event_acks (
    worker TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (worker, seq)
) WITHOUT ROWID;
