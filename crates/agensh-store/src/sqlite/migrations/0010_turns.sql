-- Each worker's finished turns as its node reported them (`POST /workers/{id}/turns`):
-- the report whole as JSON, its times beside it. A report sent twice replaces the first.
CREATE TABLE turns (
    worker     TEXT NOT NULL,
    turn       INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER NOT NULL,
    report     TEXT NOT NULL,
    PRIMARY KEY (worker, turn)
) WITHOUT ROWID;
