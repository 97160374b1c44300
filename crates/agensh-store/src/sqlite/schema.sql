-- The SQLite store's schema as it is now, whole: for reading. Stores get it from the
-- migrations in migrations/ (migrate.rs applies those a store lacks when it opens), and
-- tests/migrations.rs fails when a store they make differs from this file: a change to
-- the schema is a new migration and its mirror here.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS workers (
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

CREATE TABLE IF NOT EXISTS records (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    label      TEXT,
    detail     TEXT,
    paths      TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_author_label ON records(author, label, seq);

-- Full-text index over all history; rows are never deleted (the board is append-only).
-- Prefix indexes make 2- and 3-character prefix searches (`pa*`, `par*`) as fast as words.
CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5(
    text, detail, kind, author, label, content='', prefix='2 3'
);

CREATE TABLE IF NOT EXISTS claims (
    seq         INTEGER PRIMARY KEY REFERENCES records(seq),
    author      TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,
    released_at INTEGER
);
CREATE INDEX IF NOT EXISTS claims_live ON claims(released_at, expires_at);

-- A CLAIM that took over another: the new claim, the old one, the old claim's author and
-- why it could be taken (`released`, `dead`, `stopped`, `expired`). A claim is taken over
-- at most once (`old` is unique).
CREATE TABLE IF NOT EXISTS takeovers (
    seq        INTEGER PRIMARY KEY REFERENCES records(seq),
    old        INTEGER NOT NULL UNIQUE REFERENCES records(seq),
    old_author TEXT NOT NULL,
    why        TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS messages (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    sender     TEXT NOT NULL,
    target     TEXT NOT NULL,
    text       TEXT NOT NULL,
    thread     INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_target ON messages(target, seq);
CREATE INDEX IF NOT EXISTS messages_by_sender ON messages(sender, seq);

-- One row per event. A broadcast has target NULL and is stored once for every worker;
-- each worker reads through its own cursor (workers.event_cursor) plus the acks above it.
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    priority   TEXT NOT NULL,
    payload    TEXT NOT NULL,
    dedup_key  TEXT,
    source     TEXT,
    target     TEXT,
    except_worker TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_target ON events(target, seq);
CREATE UNIQUE INDEX IF NOT EXISTS events_dedup ON events(ifnull(target, '*'), dedup_key)
    WHERE dedup_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS event_acks (
    worker TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (worker, seq)
) WITHOUT ROWID;

-- Delivery receipts: one row per recipient of a message or urgent event
-- (`receipt::has_receipts`) once it was shown to that worker: when, how (`via`:
-- tool_result, prompt or interruption), and when the tool call or turn that carried it
-- completed. A recipient without a row was not shown it yet (`stored`).
CREATE TABLE IF NOT EXISTS receipts (
    seq             INTEGER NOT NULL,
    worker          TEXT NOT NULL,
    presented_at    INTEGER NOT NULL,
    via             TEXT NOT NULL,
    acknowledged_at INTEGER,
    PRIMARY KEY (seq, worker)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receipts_by_presented ON receipts(presented_at);
-- Urgent events for one worker by age: the hub's look for those waiting too long.
CREATE INDEX IF NOT EXISTS events_urgent_by_time ON events(created_at)
    WHERE target IS NOT NULL AND priority = 'urgent';

-- Pull requests. `number` is assigned 1, 2, 3, … by the store and never reused.
CREATE TABLE IF NOT EXISTS prs (
    number       INTEGER PRIMARY KEY,
    author       TEXT NOT NULL,
    branch       TEXT NOT NULL,
    base         TEXT NOT NULL,
    title        TEXT NOT NULL,
    body         TEXT,
    state        TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    closed_by    TEXT,
    merge_commit TEXT
);
CREATE INDEX IF NOT EXISTS prs_by_branch_state ON prs(branch, state);
CREATE INDEX IF NOT EXISTS prs_by_author ON prs(author, number);
-- At most one open PR per branch (the store also checks, to give a clear message).
CREATE UNIQUE INDEX IF NOT EXISTS prs_one_open_per_branch ON prs(branch) WHERE state = 'open';

CREATE TABLE IF NOT EXISTS pr_reviews (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pr         INTEGER NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    verdict    TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    -- The branch's commit that was reviewed (added by migration 7: older reviews have none).
    commit_id  TEXT
);
CREATE INDEX IF NOT EXISTS pr_reviews_by_pr ON pr_reviews(pr, id);

CREATE TABLE IF NOT EXISTS pr_comments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pr         INTEGER NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pr_comments_by_pr ON pr_comments(pr, id);

-- Every model request through the model gateway: who, which model, what it used.
CREATE TABLE IF NOT EXISTS model_requests (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    worker              TEXT NOT NULL,
    turn                INTEGER,
    upstream            TEXT NOT NULL,
    model               TEXT NOT NULL,
    status              INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    latency_ms          INTEGER NOT NULL,
    at                  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS model_requests_by_worker ON model_requests(worker, model);

-- Budgets set while the organization runs (`agensh budget set`): scope `*` (every
-- worker's default), `organization`, or one worker's id. 0: no limit.
CREATE TABLE IF NOT EXISTS budgets (
    scope    TEXT PRIMARY KEY,
    tokens   INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    requests INTEGER NOT NULL,
    hours    REAL NOT NULL
);

-- Each worker's finished turns as its node reported them (`POST /workers/{id}/turns`):
-- the report whole as JSON, its times beside it. A report sent twice replaces the first.
CREATE TABLE IF NOT EXISTS turns (
    worker     TEXT NOT NULL,
    turn       INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER NOT NULL,
    report     TEXT NOT NULL,
    PRIMARY KEY (worker, turn)
) WITHOUT ROWID;

-- Issues: work to do, beside pull requests. `number` is assigned 1, 2, 3, … and never
-- reused. `closed_by` is a worker id, `admin`, or `pr#N` (closed by a merged PR).
CREATE TABLE IF NOT EXISTS issues (
    number     INTEGER PRIMARY KEY,
    title      TEXT NOT NULL,
    body       TEXT,
    author     TEXT NOT NULL,
    state      TEXT NOT NULL,
    assignee   TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    closed_at  INTEGER,
    closed_by  TEXT
);
CREATE INDEX IF NOT EXISTS issues_by_state ON issues(state, number);
CREATE INDEX IF NOT EXISTS issues_by_assignee ON issues(assignee, number);

-- An issue's labels, each once.
CREATE TABLE IF NOT EXISTS issue_labels (
    issue INTEGER NOT NULL REFERENCES issues(number),
    label TEXT NOT NULL,
    PRIMARY KEY (issue, label)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS issue_labels_by_label ON issue_labels(label, issue);

CREATE TABLE IF NOT EXISTS issue_comments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    issue      INTEGER NOT NULL REFERENCES issues(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS issue_comments_by_issue ON issue_comments(issue, id);

-- Nodes on other hosts: a node's token may only register it and receive its workers.
-- `workers` is how many it may run.
CREATE TABLE IF NOT EXISTS nodes (
    name          TEXT PRIMARY KEY,
    token         TEXT NOT NULL UNIQUE,
    workers       INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    registered_at INTEGER
);

-- Which node runs which worker: a worker belongs to at most one node, and keeps it
-- across the node's registrations until the node is revoked.
CREATE TABLE IF NOT EXISTS node_workers (
    worker TEXT PRIMARY KEY REFERENCES workers(id),
    node   TEXT NOT NULL REFERENCES nodes(name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS node_workers_by_node ON node_workers(node, worker);
