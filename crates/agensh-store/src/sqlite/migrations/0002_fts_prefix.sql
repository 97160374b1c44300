-- Prefix indexes make 2- and 3-character prefix searches (`pa*`, `par*`) as fast as words.
-- FTS5 cannot add them to a table, so the index is made again from the records, with the
-- tokens `fts.rs` stores: the kind's name in lowercase without `_`, the author in
-- lowercase, the label as `x` and the lowercase hex of its UTF-8 bytes.

DROP TABLE records_fts;

CREATE VIRTUAL TABLE records_fts USING fts5(
    text, detail, kind, author, label, content='', prefix='2 3'
);

INSERT INTO records_fts(rowid, text, detail, kind, author, label)
SELECT seq, text, ifnull(detail, ''), lower(replace(kind, '_', '')), lower(author),
       CASE WHEN label IS NULL OR label = '' THEN '' ELSE 'x' || lower(hex(label)) END
FROM records ORDER BY seq;
