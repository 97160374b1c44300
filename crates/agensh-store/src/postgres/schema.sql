-- The PostgreSQL store's schema as it is now, whole: for reading. The SQLite store's tables
-- (sqlite/schema.sql), with the grep index as token columns on `records` (postgres/search.rs)
-- instead of an FTS5 table. Databases get it from the migrations in migrations/ (migrate.rs
-- applies those a database lacks when a store opens it), and tests/pg_migrations.rs fails
-- when a new database differs from this file: a change to the schema is a new migration and
-- its mirror here.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS workers (
    id            TEXT PRIMARY KEY,
    num           BIGINT NOT NULL UNIQUE,
    token         TEXT NOT NULL UNIQUE,
    status        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_activity BIGINT,
    board_cursor  BIGINT NOT NULL DEFAULT 0,
    msg_cursor    BIGINT NOT NULL DEFAULT 0,
    event_cursor  BIGINT NOT NULL DEFAULT 0
);

-- Numbered by the store (the greatest plus one, under the write lock), so numbers follow
-- commit order and a refused write leaves no gap.
CREATE TABLE IF NOT EXISTS records (
    seq           BIGINT PRIMARY KEY,
    kind          TEXT NOT NULL,
    author        TEXT NOT NULL,
    text          TEXT NOT NULL,
    label         TEXT,
    detail        TEXT,
    paths         TEXT,
    created_at    BIGINT NOT NULL,
    -- grep (postgres/search.rs): unicode61's tokens, in order and as a set.
    text_tokens   TEXT[] NOT NULL,
    detail_tokens TEXT[] NOT NULL,
    words         TEXT[] NOT NULL,
    author_tokens TEXT[] NOT NULL,
    label_token   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_author_label ON records(author, label, seq);
CREATE INDEX IF NOT EXISTS records_words ON records USING gin (words);
CREATE INDEX IF NOT EXISTS records_by_kind ON records(kind, seq);
CREATE INDEX IF NOT EXISTS records_by_label_token ON records(label_token, seq);

-- Phrase search: whether `needle` occurs in `hay` as consecutive tokens, the last one as a
-- prefix when `prefix`.
CREATE OR REPLACE FUNCTION agensh_phrase(hay TEXT[], needle TEXT[], prefix BOOLEAN)
RETURNS BOOLEAN LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1
        FROM generate_series(1, cardinality(hay) - cardinality(needle) + 1) AS s(i)
        WHERE hay[i : i + cardinality(needle) - 2] = needle[1 : cardinality(needle) - 1]
          AND CASE WHEN prefix
                   THEN starts_with(hay[i + cardinality(needle) - 1], needle[cardinality(needle)])
                   ELSE hay[i + cardinality(needle) - 1] = needle[cardinality(needle)]
              END)
$$;

CREATE TABLE IF NOT EXISTS claims (
    seq         BIGINT PRIMARY KEY REFERENCES records(seq),
    author      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL,
    released_at BIGINT
);
CREATE INDEX IF NOT EXISTS claims_live ON claims(released_at, expires_at);

CREATE TABLE IF NOT EXISTS takeovers (
    seq        BIGINT PRIMARY KEY REFERENCES records(seq),
    old        BIGINT NOT NULL UNIQUE REFERENCES records(seq),
    old_author TEXT NOT NULL,
    why        TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS messages (
    seq        BIGINT PRIMARY KEY,
    sender     TEXT NOT NULL,
    target     TEXT NOT NULL,
    text       TEXT NOT NULL,
    thread     BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_target ON messages(target, seq);
CREATE INDEX IF NOT EXISTS messages_by_sender ON messages(sender, seq);

-- One row per event, numbered under the write lock so that numbers are in commit order
-- (the commit broadcast and every cursor rely on it). A broadcast has target NULL.
CREATE TABLE IF NOT EXISTS events (
    seq           BIGINT PRIMARY KEY,
    kind          TEXT NOT NULL,
    priority      TEXT NOT NULL,
    payload       TEXT NOT NULL,
    dedup_key     TEXT,
    source        TEXT,
    target        TEXT,
    except_worker TEXT,
    created_at    BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_target ON events(target, seq);
CREATE UNIQUE INDEX IF NOT EXISTS events_dedup ON events((coalesce(target, '*')), dedup_key)
    WHERE dedup_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS event_acks (
    worker TEXT NOT NULL,
    seq    BIGINT NOT NULL,
    PRIMARY KEY (worker, seq)
);

-- Delivery receipts: one row per recipient of a message or urgent event
-- (`receipt::has_receipts`) once it was shown to that worker: when, how (`via`:
-- tool_result, prompt or interruption), and when the tool call or turn that carried it
-- completed. A recipient without a row was not shown it yet (`stored`).
-- (Migration 4: migrations/0004_receipts.sql.)
CREATE TABLE IF NOT EXISTS receipts (
    seq             BIGINT NOT NULL,
    worker          TEXT NOT NULL,
    presented_at    BIGINT NOT NULL,
    via             TEXT NOT NULL,
    acknowledged_at BIGINT,
    PRIMARY KEY (seq, worker)
);
CREATE INDEX IF NOT EXISTS receipts_by_presented ON receipts(presented_at);
-- Urgent events for one worker by age: the hub's look for those waiting too long.
CREATE INDEX IF NOT EXISTS events_urgent_by_time ON events(created_at)
    WHERE target IS NOT NULL AND priority = 'urgent';

CREATE TABLE IF NOT EXISTS prs (
    number       BIGINT PRIMARY KEY,
    author       TEXT NOT NULL,
    branch       TEXT NOT NULL,
    base         TEXT NOT NULL,
    title        TEXT NOT NULL,
    body         TEXT,
    state        TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    closed_by    TEXT,
    merge_commit TEXT
);
CREATE INDEX IF NOT EXISTS prs_by_branch_state ON prs(branch, state);
CREATE INDEX IF NOT EXISTS prs_by_author ON prs(author, number);
CREATE UNIQUE INDEX IF NOT EXISTS prs_one_open_per_branch ON prs(branch) WHERE state = 'open';

CREATE TABLE IF NOT EXISTS pr_reviews (
    id         BIGINT PRIMARY KEY,
    pr         BIGINT NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    verdict    TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    commit_id  TEXT
);
CREATE INDEX IF NOT EXISTS pr_reviews_by_pr ON pr_reviews(pr, id);

CREATE TABLE IF NOT EXISTS pr_comments (
    id         BIGINT PRIMARY KEY,
    pr         BIGINT NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS pr_comments_by_pr ON pr_comments(pr, id);

CREATE TABLE IF NOT EXISTS model_requests (
    id                  BIGSERIAL PRIMARY KEY,
    worker              TEXT NOT NULL,
    turn                BIGINT,
    upstream            TEXT NOT NULL,
    model               TEXT NOT NULL,
    status              BIGINT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cost_usd            DOUBLE PRECISION NOT NULL,
    latency_ms          BIGINT NOT NULL,
    at                  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS model_requests_by_worker ON model_requests(worker, model);

CREATE TABLE IF NOT EXISTS budgets (
    scope    TEXT PRIMARY KEY,
    tokens   BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    requests BIGINT NOT NULL,
    hours    DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS turns (
    worker     TEXT NOT NULL,
    turn       BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at   BIGINT NOT NULL,
    report     TEXT NOT NULL,
    PRIMARY KEY (worker, turn)
);

CREATE TABLE IF NOT EXISTS issues (
    number     BIGINT PRIMARY KEY,
    title      TEXT NOT NULL,
    body       TEXT,
    author     TEXT NOT NULL,
    state      TEXT NOT NULL,
    assignee   TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    closed_at  BIGINT,
    closed_by  TEXT
);
CREATE INDEX IF NOT EXISTS issues_by_state ON issues(state, number);
CREATE INDEX IF NOT EXISTS issues_by_assignee ON issues(assignee, number);

CREATE TABLE IF NOT EXISTS issue_labels (
    issue BIGINT NOT NULL REFERENCES issues(number),
    label TEXT NOT NULL,
    PRIMARY KEY (issue, label)
);
CREATE INDEX IF NOT EXISTS issue_labels_by_label ON issue_labels(label, issue);

CREATE TABLE IF NOT EXISTS issue_comments (
    id         BIGINT PRIMARY KEY,
    issue      BIGINT NOT NULL REFERENCES issues(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS issue_comments_by_issue ON issue_comments(issue, id);

-- Nodes on other hosts: a node's token may only register it and receive its workers.
-- `workers` is how many it may run.
CREATE TABLE IF NOT EXISTS nodes (
    name          TEXT PRIMARY KEY,
    token         TEXT NOT NULL UNIQUE,
    workers       BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    registered_at BIGINT
);

-- Which node runs which worker: at most one each, kept until the node is revoked.
CREATE TABLE IF NOT EXISTS node_workers (
    worker TEXT PRIMARY KEY REFERENCES workers(id),
    node   TEXT NOT NULL REFERENCES nodes(name)
);
CREATE INDEX IF NOT EXISTS node_workers_by_node ON node_workers(node, worker);

-- ============================================================================================
-- Prefix grep (`pars*`, postgres/search.rs): every distinct word of every record, under a
-- byte-order btree (COLLATE "C", its primary key), so the words starting with a prefix are
-- one range scan; the records holding any of them are then found through `records_words`
-- (GIN, `&&`). Kept by a trigger on `records`, whoever inserts them, once per statement
-- (every word of the records it inserted, from its transition table: the writer stores a
-- group's board records with one statement); words are never removed (a word no record
-- holds matches nothing). When the table is new, the trigger is made first — its lock on
-- `records` waits for writes in flight and holds off new ones — and then every stored
-- record's words are copied, all in this block's transaction.
-- (Migration 2: migrations/0002_record_words.sql, a trigger for each row; migration 3:
-- migrations/0003_record_words_per_statement.sql, the trigger for each statement.)
CREATE OR REPLACE FUNCTION agensh_record_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO record_words(word) SELECT DISTINCT unnest(words) FROM new_records
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
DO $$
BEGIN
    IF to_regclass('record_words') IS NULL THEN
        CREATE TABLE record_words (word TEXT COLLATE "C" PRIMARY KEY);
        CREATE TRIGGER records_words_kept AFTER INSERT ON records
            REFERENCING NEW TABLE AS new_records
            FOR EACH STATEMENT EXECUTE FUNCTION agensh_record_words();
        INSERT INTO record_words(word) SELECT DISTINCT unnest(words) FROM records;
    END IF;
END
$$;
-- ============================================================================================
