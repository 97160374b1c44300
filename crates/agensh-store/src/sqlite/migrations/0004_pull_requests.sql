-- Pull requests. `number` is assigned 1, 2, 3, … by the store and never reused.
CREATE TABLE prs (
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
CREATE INDEX prs_by_branch_state ON prs(branch, state);
CREATE INDEX prs_by_author ON prs(author, number);
-- At most one open PR per branch (the store also checks, to give a clear message).
CREATE UNIQUE INDEX prs_one_open_per_branch ON prs(branch) WHERE state = 'open';

CREATE TABLE pr_reviews (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pr         INTEGER NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    verdict    TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX pr_reviews_by_pr ON pr_reviews(pr, id);

CREATE TABLE pr_comments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pr         INTEGER NOT NULL REFERENCES prs(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX pr_comments_by_pr ON pr_comments(pr, id);
