-- The branch's commit a review saw: approvals count only for the branch's current commit.
-- Reviews made before have none (they approve no commit).

ALTER TABLE pr_reviews ADD COLUMN commit_id TEXT;
