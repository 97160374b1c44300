-- Issues: work to do, beside pull requests. `number` is assigned 1, 2, 3, … and never
-- reused. `closed_by` is a worker id, `admin`, or `pr#N` (closed by a merged PR).
CREATE TABLE issues (
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
CREATE INDEX issues_by_state ON issues(state, number);
CREATE INDEX issues_by_assignee ON issues(assignee, number);

-- An issue's labels, each once.
CREATE TABLE issue_labels (
    issue INTEGER NOT NULL REFERENCES issues(number),
    label TEXT NOT NULL,
    PRIMARY KEY (issue, label)
) WITHOUT ROWID;
CREATE INDEX issue_labels_by_label ON issue_labels(label, issue);

CREATE TABLE issue_comments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    issue      INTEGER NOT NULL REFERENCES issues(number),
    author     TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX issue_comments_by_issue ON issue_comments(issue, id);
