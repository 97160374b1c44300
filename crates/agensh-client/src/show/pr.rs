//! Pull requests: `agensh pr open|list|merge|view`.

use agensh_domain::pr::{PullRequest, QueuePlace};
use agensh_domain::time::age;
use serde_json::Value;

/// `#4 Parser errors (w01/work -> main)`, for a PR just opened.
pub fn opened(pr: &PullRequest) -> String {
    format!("#{} {} ({} -> {})", pr.number, pr.title, pr.branch, pr.base)
}

/// One PR of `pr list`: number, state, author, branch, title, age and a waiting merge's
/// place.
pub fn line(p: &PullRequest, now: i64) -> String {
    format!(
        "#{:<4} {:<7} {:<6} {:<24} {} ({}){}",
        p.number,
        p.state.as_str(),
        p.author,
        p.branch,
        p.title,
        age(p.updated_at, now),
        p.queue.as_ref().map_or(String::new(), queue_note)
    )
}

/// A waiting merge's place, batch and gate run, as `pr list` shows it.
pub fn queue_note(q: &QueuePlace) -> String {
    let mut note = format!(" — merging: place {}", q.place);
    if let Some(b) = q.batch {
        note.push_str(&format!(", batch {b}"));
    }
    if let Some(r) = q.gate_run {
        note.push_str(&format!(", waits for gate run {r}"));
    }
    note
}

/// What a merge of PR `number` did, from the hub's answer `m`.
pub fn merged(number: i64, m: &Value) -> String {
    let commit = m["pr"]["merge_commit"].as_str().unwrap_or("");
    let short = &commit[..commit.len().min(12)];
    if m["outcome"] == "up_to_date" {
        format!("#{number} is merged: main ({short}) already had every commit of it")
    } else {
        format!("merged #{number} into main at {short}")
    }
}

/// `pr view`: the PR, its branch (mergeability, commits, files), approvals, reviews and
/// comments, from the hub's answer `v`.
pub fn view(v: &Value, now: i64) -> Vec<String> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = vec![
        format!("#{} {} [{}]", v["number"], s(&v["title"]), s(&v["state"])),
        format!(
            "{} wants to merge {} into {}",
            s(&v["author"]),
            s(&v["branch"]),
            s(&v["base"])
        ),
    ];
    if let Some(body) = v["body"].as_str() {
        out.push(format!("\n{body}\n"));
    }
    if let Some(commit) = v["merge_commit"].as_str() {
        out.push(format!(
            "merge commit: {commit} (by {})",
            s(&v["closed_by"])
        ));
    }
    let b = &v["branch_summary"];
    if b.is_object() {
        out.push(match b["mergeability"]["state"].as_str() {
            Some("conflict") => {
                let files: Vec<String> = b["mergeability"]["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                format!("mergeable: no — conflicts in {}", files.join(", "))
            }
            Some("up_to_date") => "mergeable: main already has every commit".to_string(),
            _ => "mergeable: yes".to_string(),
        });
        out.push("commits:".to_string());
        for c in b["commits"].as_array().into_iter().flatten() {
            let sha = s(&c["sha"]);
            out.push(format!(
                "  {} {} ({})",
                &sha[..sha.len().min(10)],
                s(&c["subject"]),
                s(&c["author"])
            ));
        }
        out.push("files:".to_string());
        for f in b["files"].as_array().into_iter().flatten() {
            let n = |x: &Value| x.as_u64().map_or("-".to_string(), |n| n.to_string());
            out.push(format!(
                "  +{:<5} -{:<5} {}",
                n(&f["added"]),
                n(&f["removed"]),
                s(&f["path"])
            ));
        }
    }
    out.push(format!(
        "approvals (of the branch's current commit): {}",
        v["approvals"]
    ));
    for r in v["reviews"].as_array().into_iter().flatten() {
        let at = r["created_at"].as_i64().unwrap_or(now);
        let of = r["commit"]
            .as_str()
            .map(|c| format!(" of {}", &c[..c.len().min(10)]))
            .unwrap_or_default();
        out.push(format!(
            "  review by {} {}{of}: {} ({})",
            s(&r["author"]),
            age(at, now),
            s(&r["text"]),
            s(&r["verdict"])
        ));
    }
    for c in v["comments"].as_array().into_iter().flatten() {
        let at = c["created_at"].as_i64().unwrap_or(now);
        out.push(format!(
            "  comment by {} {}: {}",
            s(&c["author"]),
            age(at, now),
            s(&c["text"])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_view_shows_the_branch_reviews_and_comments() {
        let now = 1_796_040_000_000;
        let v = json!({
            "number": 4, "title": "Parser", "state": "open", "author": "w01",
            "branch": "w01/work", "base": "main", "body": "fixes it", "approvals": 1,
            "branch_summary": {
                "mergeability": {"state": "conflict", "files": ["a.py", "b.py"]},
                "commits": [{"sha": "0123456789abcdef", "subject": "parse", "author": "w01"}],
                "files": [{"path": "a.py", "added": 3, "removed": null}],
            },
            "reviews": [{"author": "w02", "created_at": now - 5_000, "commit": "fedcba9876543210",
                         "text": "ok", "verdict": "approve"}],
            "comments": [{"author": "w03", "created_at": now - 60_000, "text": "nice"}],
        });
        assert_eq!(
            view(&v, now),
            [
                "#4 Parser [open]",
                "w01 wants to merge w01/work into main",
                "\nfixes it\n",
                "mergeable: no — conflicts in a.py, b.py",
                "commits:",
                "  0123456789 parse (w01)",
                "files:",
                "  +3     --     a.py",
                "approvals (of the branch's current commit): 1",
                "  review by w02 +5s of fedcba9876: ok (approve)",
                "  comment by w03 +1m: nice",
            ]
        );
    }

    #[test]
    fn a_merge_says_whether_main_had_it_already() {
        let m = json!({"outcome": "merged", "pr": {"merge_commit": "0123456789abcdef"}});
        assert_eq!(merged(4, &m), "merged #4 into main at 0123456789ab");
        let m = json!({"outcome": "up_to_date", "pr": {"merge_commit": "abc"}});
        assert_eq!(
            merged(4, &m),
            "#4 is merged: main (abc) already had every commit of it"
        );
    }

    #[test]
    fn a_waiting_merge_shows_its_place() {
        let q = QueuePlace {
            place: 2,
            batch: Some(7),
            gate_run: None,
        };
        assert_eq!(queue_note(&q), " — merging: place 2, batch 7");
    }
}
