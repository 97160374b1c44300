//! The organization tools (DESIGN §5): their schemas and descriptions for a model, and
//! their calls. Each call runs the same shared function as its REST endpoint, so limits,
//! errors and events cannot drift; this file only reads arguments and writes concise text.

use agensh_domain::ids::ADMIN;
use agensh_domain::message::{NewMessage, MESSAGE_LIMIT};
use agensh_domain::pr::{NewPr, PullRequest, BODY_LIMIT, BRANCH_LIMIT, TITLE_LIMIT};
use agensh_domain::query::MAX_QUERY_CHARS;
use agensh_domain::record::{
    Appended, Record, DETAIL_LIMIT, LABEL_LIMIT, MAX_LEASE_SECS, PATCH_SUMMARY_LIMIT, PATHS_LIMIT,
    PATH_LIMIT, TEXT_LIMIT,
};
use agensh_domain::time::{age, rfc3339};
use agensh_domain::{Error, ErrorKind};
use agensh_workspace::merge::{MergeOutcome, Mergeability};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::args::Args;
use super::notices::Covers;
use crate::auth::Caller;
use crate::routes::{board, messages, prs, workers};
use crate::state::{now_ms, AppState};

/// Every tool, in the order `tools/list` gives them.
pub const TOOL_NAMES: [&str; 18] = [
    "board_read",
    "board_write",
    "board_grep",
    "board_unfold",
    "claim",
    "release",
    "renew",
    "msg_post",
    "msg_dm",
    "inbox",
    "workers",
    "pr_open",
    "pr_list",
    "pr_view",
    "pr_review",
    "pr_comment",
    "pr_merge",
    "pr_close",
];

/// Entries `board_read` shows by default (the hub's view cap may be lower).
pub const READ_CAP: usize = 200;

/// What one tool call produced, before notices are added.
pub struct Outcome {
    pub text: String,
    pub structured: Option<Value>,
    pub is_error: bool,
    /// The error's kind, when the call failed.
    pub kind: Option<ErrorKind>,
    pub covers: Covers,
}

/// A successful call: its text, its structured form, and what it showed.
struct Done {
    text: String,
    structured: Value,
    covers: Covers,
}

impl Done {
    fn new(text: impl Into<String>, structured: Value) -> Self {
        Done {
            text: text.into(),
            structured,
            covers: Covers::default(),
        }
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Runs tool `name` (one of [`TOOL_NAMES`]) as `caller`.
pub async fn call(s: &AppState, caller: &Caller, name: &str, args: &Map<String, Value>) -> Outcome {
    let r = match name {
        "board_read" => board_read(s, caller, Args::new("board_read", args)).await,
        "board_write" => board_write(s, caller, Args::new("board_write", args)).await,
        "board_grep" => board_grep(s, Args::new("board_grep", args)).await,
        "board_unfold" => board_unfold(s, Args::new("board_unfold", args)).await,
        "claim" => claim(s, caller, Args::new("claim", args)).await,
        "release" => release(s, caller, Args::new("release", args)).await,
        "renew" => renew(s, caller, Args::new("renew", args)).await,
        "msg_post" => msg_post(s, caller, Args::new("msg_post", args)).await,
        "msg_dm" => msg_dm(s, caller, Args::new("msg_dm", args)).await,
        "inbox" => inbox(s, caller, Args::new("inbox", args)).await,
        "workers" => workers_list(s, caller).await,
        "pr_open" => pr_open(s, caller, Args::new("pr_open", args)).await,
        "pr_list" => pr_list(s, Args::new("pr_list", args)).await,
        "pr_view" => pr_view(s, Args::new("pr_view", args)).await,
        "pr_review" => pr_review(s, caller, Args::new("pr_review", args)).await,
        "pr_comment" => pr_comment(s, caller, Args::new("pr_comment", args)).await,
        "pr_merge" => pr_merge(s, caller, Args::new("pr_merge", args)).await,
        "pr_close" => pr_close(s, caller, Args::new("pr_close", args)).await,
        other => Err(Error::invalid(
            "unknown_tool",
            format!("there is no tool {other} — tools/list names the tools"),
        )),
    };
    match r {
        Ok(d) => Outcome {
            text: d.text,
            structured: Some(d.structured),
            is_error: false,
            kind: None,
            covers: d.covers,
        },
        Err(e) => Outcome {
            text: format!("refused ({}): {}", e.code, e.message),
            structured: Some(json!({ "error": { "code": e.code, "message": e.message } })),
            is_error: true,
            kind: Some(e.kind),
            covers: Covers::default(),
        },
    }
}

type R = Result<Done, Error>;

// ---------------------------------------------------------------------------- board

async fn board_read(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let cap = a
        .opt_usize("cap", "how many records at most, an integer")?
        .unwrap_or_else(|| READ_CAP.min(s.config.board.view_cap));
    let entries = board::unread_entries(s, caller, Some(cap))
        .await
        .map_err(|e| e.0)?;
    let now = now_ms();
    let text = if entries.is_empty() {
        "nothing new on the board since your last board_read".to_string()
    } else {
        let mut lines = vec![format!(
            "{} new record(s) on the board, newest first:",
            entries.len()
        )];
        for e in &entries {
            let mut line = e.record.line(now);
            if e.invalidated {
                line.push_str(" [invalidated]");
            }
            lines.push(line);
        }
        if entries.len() == cap {
            lines.push(format!(
                "(only the newest {cap} are shown; older unread records were skipped — board_grep finds them)"
            ));
        }
        lines.join("\n")
    };
    let mut done = Done::new(text, json!({ "records": entries }));
    done.covers.records_upto = entries.iter().map(|e| e.record.seq).max();
    Ok(done)
}

async fn board_write(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let kind = a.string("kind", "FACT, OBSERVED, FAIL or PATCH_SUMMARY")?;
    let mut body = json!({
        "kind": kind,
        "text": a.string("text", "one line, at most 100 characters (PATCH_SUMMARY 300)")?,
    });
    if let Some(l) = a.opt_string("label", "the work item, e.g. parser-errors")? {
        body["label"] = Value::String(l);
    }
    if let Some(d) = a.opt_string("detail", "a longer body, up to 8000 characters")? {
        body["detail"] = Value::String(d);
    }
    let appended = board::append_record(s, caller, body)
        .await
        .map_err(|e| e.0)?;
    if !appended.overlaps.is_empty() || appended.record.lease.is_some() {
        return Ok(claimed(appended));
    }
    Ok(Done::new(
        format!("posted {}", appended.record.line(now_ms())),
        to_value(&appended),
    ))
}

async fn board_grep(s: &AppState, a: Args<'_>) -> R {
    let q = a.string("query", "the search, e.g. parser kind:FAIL")?;
    let limit = a.opt_usize("limit", "1 to 500")?;
    let before = a.opt_string("before", "a record id like G120, for the next page")?;
    let found = board::grep_records(s, &q, limit, before.as_deref())
        .await
        .map_err(|e| e.0)?;
    let now = now_ms();
    let text = if found.is_empty() {
        format!(
            "no records match {q}{}",
            before.map_or(String::new(), |b| format!(" before {b}"))
        )
    } else {
        let mut lines = vec![format!("{} record(s) match, newest first:", found.len())];
        lines.extend(found.iter().map(|r| r.line(now)));
        if found.len() == limit.unwrap_or(50) {
            let last = &found[found.len() - 1].id;
            lines.push(format!(
                "(there may be more — call board_grep again with before=\"{last}\")"
            ));
        }
        lines.join("\n")
    };
    Ok(Done::new(text, json!({ "records": found })))
}

async fn board_unfold(s: &AppState, a: Args<'_>) -> R {
    let id = a.ident("id", "a record id like G12")?;
    let u = board::unfold_record(s, &id).await.map_err(|e| e.0)?;
    let now = now_ms();
    let r = &u.record;
    let mut lines = vec![format!(
        "{} {} by {} at {} ({} ago)",
        r.id,
        r.kind,
        r.author,
        rfc3339(r.created_at),
        age(r.created_at, now).trim_start_matches('+')
    )];
    lines.push(format!("text: {}", r.text));
    if let Some(l) = &r.label {
        lines.push(format!("label: {l}"));
    }
    if !r.paths.is_empty() {
        lines.push(format!("paths: {}", r.paths.join(", ")));
    }
    if let Some(l) = &r.lease {
        lines.push(format!("lease: {}", lease_state(l, now)));
    }
    if let Some(d) = &r.detail {
        lines.push(format!("detail:\n{d}"));
    }
    if let Some(x) = &u.superseded_by {
        lines.push(format!("superseded by: {}", x.line(now)));
    }
    if let Some(x) = &u.invalidated_by {
        lines.push(format!("invalidated by: {}", x.line(now)));
    }
    Ok(Done::new(lines.join("\n"), to_value(&u)))
}

fn lease_state(l: &agensh_domain::record::Lease, now: i64) -> String {
    if let Some(at) = l.released_at {
        format!("released at {}", rfc3339(at))
    } else if l.is_live(now) {
        format!(
            "live until {} (in {})",
            rfc3339(l.expires_at),
            in_time(l.expires_at, now)
        )
    } else {
        format!("expired at {}", rfc3339(l.expires_at))
    }
}

/// `42m` for a time ahead of `now`.
fn in_time(at: i64, now: i64) -> String {
    age(now, at).trim_start_matches('+').to_string()
}

// ---------------------------------------------------------------------------- claims

async fn claim(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let mut body = json!({
        "kind": "CLAIM",
        "text": a.string("text", "what you take on, one line, at most 100 characters")?,
    });
    if let Some(l) = a.opt_string("label", "the work item, e.g. parser-errors")? {
        body["label"] = Value::String(l);
    }
    let paths = a.opt_strings(
        "paths",
        "a list of files or directories, like [\"src/parser/\"]",
    )?;
    if !paths.is_empty() {
        body["paths"] = json!(paths);
    }
    if let Some(d) = a.opt_string("detail", "a longer body, up to 8000 characters")? {
        body["detail"] = Value::String(d);
    }
    if let Some(l) = a.opt_u64("lease_secs", "seconds, 1 to 86400")? {
        body["lease_secs"] = json!(l);
    }
    let appended = board::append_record(s, caller, body)
        .await
        .map_err(|e| e.0)?;
    Ok(claimed(appended))
}

/// The answer to a new claim: the claim, its lease, and the overlaps with who holds them.
fn claimed(appended: Appended) -> Done {
    let now = now_ms();
    let r = &appended.record;
    let mut lines = vec![format!("claimed {}", r.line(now))];
    if let Some(l) = &r.lease {
        lines.push(format!(
            "lease: {} — renew id=\"{}\" to keep it, release id=\"{}\" when done",
            lease_state(l, now),
            r.id,
            r.id
        ));
    }
    if appended.overlaps.is_empty() {
        lines.push("no other worker's live claim overlaps it".to_string());
    } else {
        lines.push(format!(
            "OVERLAP: {} live claim(s) by other workers collide with {}:",
            appended.overlaps.len(),
            r.id
        ));
        for o in &appended.overlaps {
            let why = if o.same_label {
                format!("same label #{}", o.label.as_deref().unwrap_or(""))
            } else {
                format!("paths {}", o.paths.join(", "))
            };
            lines.push(format!(
                "- {} held by {} ({why}; expires in {}): {}",
                o.id,
                o.author,
                in_time(o.expires_at, now),
                o.text
            ));
        }
        let holders: Vec<&str> = appended
            .overlaps
            .iter()
            .map(|o| o.author.as_str())
            .collect();
        lines.push(format!(
            "Settle it now: msg_dm the holder ({}) to split or hand over the work, or release {} and pick other work.",
            holders.join(", "),
            r.id
        ));
    }
    Done::new(lines.join("\n"), to_value(&appended))
}

async fn release(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let id = a.ident("id", "the claim's record id, like G14")?;
    let r = board::release_claim(s, caller, &id)
        .await
        .map_err(|e| e.0)?;
    Ok(Done::new(
        format!("released {}: {}", r.id, r.text),
        json!({ "record": r }),
    ))
}

async fn renew(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let id = a.ident("id", "the claim's record id, like G14")?;
    let lease = a.opt_u64("lease_secs", "seconds from now, 1 to 86400")?;
    let r = board::renew_claim(s, caller, &id, lease)
        .await
        .map_err(|e| e.0)?;
    let state = r
        .lease
        .as_ref()
        .map_or(String::new(), |l| lease_state(l, now_ms()));
    Ok(Done::new(
        format!("renewed {}: {state}", r.id),
        json!({ "record": r }),
    ))
}

// ---------------------------------------------------------------------------- messages

async fn msg_post(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let mut channel = a.string("channel", "a channel like #general")?;
    if !channel.starts_with('#') {
        channel.insert(0, '#');
    }
    let m = NewMessage {
        to: channel,
        text: a.string("text", "the message, up to 4000 characters")?,
        thread: thread(&a)?,
    };
    let msg = messages::send_message(s, caller, m)
        .await
        .map_err(|e| e.0)?;
    Ok(Done::new(
        format!("posted M{} to {}", msg.seq, msg.to),
        to_value(&msg),
    ))
}

async fn msg_dm(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let to = a.string("to", "a worker id like w02")?;
    if to.starts_with('#') {
        return Err(Error::invalid(
            "bad_target",
            format!("msg_dm sends to one worker (like w02), not to {to} — post to a channel with msg_post"),
        ));
    }
    let m = NewMessage {
        to,
        text: a.string("text", "the message, up to 4000 characters")?,
        thread: thread(&a)?,
    };
    let msg = messages::send_message(s, caller, m)
        .await
        .map_err(|e| e.0)?;
    Ok(Done::new(
        format!("sent M{} to {}", msg.seq, msg.to),
        to_value(&msg),
    ))
}

fn thread(a: &Args<'_>) -> Result<Option<i64>, Error> {
    Ok(a.opt_u64(
        "thread",
        "the number of the message you answer, like 7 for M7",
    )?
    .map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
}

async fn inbox(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let limit = a.opt_usize("limit", "1 to 1000")?;
    let msgs = messages::unread_messages(s, caller, limit)
        .await
        .map_err(|e| e.0)?;
    let now = now_ms();
    let text = if msgs.is_empty() {
        "no unread messages".to_string()
    } else {
        let mut lines = vec![format!("{} unread message(s), oldest first:", msgs.len())];
        for m in &msgs {
            let place = if m.is_direct() {
                "DM".to_string()
            } else {
                m.to.clone()
            };
            let reply = m
                .thread
                .map_or(String::new(), |t| format!(" (reply to M{t})"));
            lines.push(format!(
                "M{} {place} from {} {}{reply}: {}",
                m.seq,
                m.from,
                age(m.created_at, now),
                m.text.trim_end().replace('\n', "\n    ")
            ));
        }
        if msgs.len() == limit.unwrap_or(100) {
            lines.push("(more may be unread — call inbox again)".to_string());
        }
        lines.join("\n")
    };
    let mut done = Done::new(text, json!({ "messages": msgs }));
    done.covers.messages = msgs.iter().map(|m| m.seq).collect();
    Ok(done)
}

// ---------------------------------------------------------------------------- workers

async fn workers_list(s: &AppState, caller: &Caller) -> R {
    let list = workers::list_workers(s).await.map_err(|e| e.0)?;
    let now = now_ms();
    let mut lines = vec![format!("{} worker(s):", list.len())];
    for w in &list {
        let me = if w.id == caller.id { " (you)" } else { "" };
        let active = w.last_activity.map_or("never active".to_string(), |t| {
            format!("last active {} ago", age(t, now).trim_start_matches('+'))
        });
        let mut line = format!("{}{me} {} — {active}", w.id, w.status.as_str());
        if w.claims.is_empty() {
            line.push_str(" — no live claims");
        } else {
            let claims: Vec<String> = w.claims.iter().map(|c| claim_brief(c, now)).collect();
            line.push_str(&format!(" — claims: {}", claims.join("; ")));
        }
        lines.push(line);
    }
    Ok(Done::new(lines.join("\n"), json!({ "workers": list })))
}

fn claim_brief(c: &Record, now: i64) -> String {
    let mut s = format!("{} \"{}\"", c.id, c.text);
    if let Some(l) = &c.label {
        s.push_str(&format!(" #{l}"));
    }
    if !c.paths.is_empty() {
        s.push_str(&format!(" paths={}", c.paths.join(",")));
    }
    if let Some(l) = &c.lease {
        s.push_str(&format!(" (expires in {})", in_time(l.expires_at, now)));
    }
    s
}

// ---------------------------------------------------------------------------- pull requests

fn pr_line(pr: &PullRequest, now: i64) -> String {
    format!(
        "#{} [{}] {} {} \"{}\" (updated {} ago)",
        pr.number,
        pr.state.as_str(),
        pr.author,
        pr.branch,
        pr.title,
        age(pr.updated_at, now).trim_start_matches('+')
    )
}

fn approvals_note(s: &AppState) -> String {
    match s.config.merge.required_approvals {
        0 => String::new(),
        n => format!(" once it has {n} approving review(s)"),
    }
}

async fn pr_open(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let pr = NewPr {
        branch: a.string("branch", "one of your pushed branches, like w01/parser")?,
        title: a.string("title", "one line, at most 200 characters")?,
        body: a.opt_string("body", "what and why, up to 10000 characters")?,
    };
    let opened = prs::open_pr(s, caller, pr).await.map_err(|e| e.0)?;
    Ok(Done::new(
        format!(
            "opened #{} \"{}\" ({} -> {}); peers are told. Merge it with pr_merge number={}{}.",
            opened.number,
            opened.title,
            opened.branch,
            opened.base,
            opened.number,
            approvals_note(s)
        ),
        to_value(&opened),
    ))
}

async fn pr_list(s: &AppState, a: Args<'_>) -> R {
    let state = a.opt_string("state", "open, merged or closed")?;
    let author = a.opt_string("author", "a worker id like w01")?;
    let limit = a.opt_usize("limit", "1 to 500")?;
    let list = prs::list_prs(s, state.as_deref(), author, limit)
        .await
        .map_err(|e| e.0)?;
    let now = now_ms();
    let text = if list.is_empty() {
        "no pull requests match".to_string()
    } else {
        let mut lines = vec![format!("{} pull request(s), newest first:", list.len())];
        lines.extend(list.iter().map(|p| pr_line(p, now)));
        lines.join("\n")
    };
    Ok(Done::new(text, json!({ "prs": list })))
}

async fn pr_view(s: &AppState, a: Args<'_>) -> R {
    let n = a.ident("number", "the PR number, like 3")?;
    let v = prs::view_pr(s, &n).await.map_err(|e| e.0)?;
    let now = now_ms();
    let pr = &v.pr;
    let mut lines = vec![
        format!("#{} \"{}\" [{}]", pr.number, pr.title, pr.state.as_str()),
        format!(
            "{} wants to merge {} into {}",
            pr.author, pr.branch, pr.base
        ),
    ];
    if let Some(b) = &pr.body {
        lines.push(format!("body:\n{}", b.trim_end()));
    }
    if let Some(c) = &pr.merge_commit {
        lines.push(format!(
            "merge commit: {c} (by {})",
            pr.closed_by.as_deref().unwrap_or("?")
        ));
    } else if let Some(by) = &pr.closed_by {
        lines.push(format!("closed by {by}"));
    }
    if let Some(b) = &v.branch_summary {
        lines.push(match &b.mergeability {
            Mergeability::Mergeable => "mergeable: yes (cleanly into main now)".to_string(),
            Mergeability::Conflict { files } => format!(
                "mergeable: no — conflicts with main in {}; merge main into {} (git pull origin main), resolve, push",
                files.join(", "),
                pr.branch
            ),
            Mergeability::UpToDate => "mergeable: main already has every commit".to_string(),
        });
        lines.push(format!("commits ({}):", b.commits.len()));
        for c in &b.commits {
            lines.push(format!(
                "  {} {} ({})",
                &c.sha[..c.sha.len().min(10)],
                c.subject,
                c.author
            ));
        }
        lines.push(format!("files ({}):", b.files.len()));
        for f in &b.files {
            let n = |x: Option<u64>| x.map_or("-".to_string(), |n| n.to_string());
            lines.push(format!("  +{} -{} {}", n(f.added), n(f.removed), f.path));
        }
    }
    lines.push(format!(
        "approvals: {} (needed to merge: {})",
        v.approvals, s.config.merge.required_approvals
    ));
    for r in &pr.reviews {
        lines.push(format!(
            "  review by {} {}: {} — {}",
            r.author,
            age(r.created_at, now),
            r.verdict.as_str(),
            r.text.trim_end().replace('\n', "\n    ")
        ));
    }
    for c in &pr.comments {
        lines.push(format!(
            "  comment by {} {}: {}",
            c.author,
            age(c.created_at, now),
            c.text.trim_end().replace('\n', "\n    ")
        ));
    }
    Ok(Done::new(lines.join("\n"), to_value(&v)))
}

async fn pr_review(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let n = a.ident("number", "the PR number, like 3")?;
    let verdict = a.string("verdict", "approve or request_changes")?;
    let text = a.string("text", "why, up to 10000 characters")?;
    let r = prs::review_pr(s, caller, &n, &verdict, &text)
        .await
        .map_err(|e| e.0)?;
    Ok(Done::new(
        format!(
            "reviewed #{}: {}; its author is told",
            n.trim_start_matches('#'),
            r.verdict.as_str()
        ),
        to_value(&r),
    ))
}

async fn pr_comment(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let n = a.ident("number", "the PR number, like 3")?;
    let text = a.string("text", "the comment, up to 10000 characters")?;
    let c = prs::comment_pr(s, caller, &n, &text)
        .await
        .map_err(|e| e.0)?;
    Ok(Done::new(
        format!("commented on #{}", n.trim_start_matches('#')),
        to_value(&c),
    ))
}

async fn pr_merge(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let n = a.ident("number", "the PR number, like 3")?;
    let merged = prs::merge_pr(s, caller, &n).await.map_err(|e| e.0)?;
    let pr = &merged.pr;
    let text = match &merged.outcome {
        MergeOutcome::Merged {
            commit, attempts, ..
        } => format!(
            "merged #{} \"{}\" into main at {} ({} attempt(s)); peers are told. Now post a PATCH_SUMMARY (board_write) and release your claim.",
            pr.number,
            pr.title,
            &commit[..commit.len().min(12)],
            attempts
        ),
        MergeOutcome::UpToDate { .. } => format!(
            "#{} was already on main (main at {}); marked merged",
            pr.number,
            pr.merge_commit
                .as_deref()
                .map_or("?", |c| &c[..c.len().min(12)])
        ),
        // A refused merge is an error, never an answer.
        other => format!("#{}: {other:?}", pr.number),
    };
    Ok(Done::new(text, to_value(&merged)))
}

async fn pr_close(s: &AppState, caller: &Caller, a: Args<'_>) -> R {
    let n = a.ident("number", "the PR number, like 3")?;
    let pr = prs::close_pr(s, caller, &n).await.map_err(|e| e.0)?;
    Ok(Done::new(
        format!(
            "closed #{} without merging (branch {} stays)",
            pr.number, pr.branch
        ),
        to_value(&pr),
    ))
}

// ---------------------------------------------------------------------------- catalogue

fn string(description: &str, max: usize) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": max, "description": description })
}

fn integer(description: &str, min: u64, max: u64) -> Value {
    json!({ "type": "integer", "minimum": min, "maximum": max, "description": description })
}

fn positive(description: &str) -> Value {
    json!({ "type": "integer", "minimum": 1, "description": description })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn tool(name: &str, title: &str, read_only: bool, description: String, schema: Value) -> Value {
    json!({
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": schema,
        "annotations": {
            "title": title,
            "readOnlyHint": read_only,
            "destructiveHint": false,
            "openWorldHint": false,
        },
    })
}

const RECORD_ID: &str = "a record id like G12 (12 and g12 work too)";
const PR_NUMBER: &str = "the pull request's number, like 3";

/// The `tools/list` answer for `caller`: every tool with its input schema and a
/// description written for a model (what it is for, when to use it, its limits).
pub fn catalogue(s: &AppState, caller: &Caller) -> Vec<Value> {
    let cfg = &s.config;
    let lease = cfg.board.claim_lease_secs;
    let view_cap = cfg.board.view_cap;
    let read_cap = READ_CAP.min(view_cap);
    let me = if caller.id == ADMIN {
        "<your id>".to_string()
    } else {
        caller.id.clone()
    };
    let approvals = match cfg.merge.required_approvals {
        0 => "No approving review is required to merge here.".to_string(),
        n => format!("This organization needs {n} approving review(s) before a merge."),
    };
    let gate = if cfg.merge.gate.trim().is_empty() {
        String::new()
    } else {
        format!(
            " Before main moves, the gate `{}` runs on the merged tree (up to {} s); if it fails the merge is refused with its output.",
            cfg.merge.gate, cfg.merge.gate_timeout_secs
        )
    };
    let label = format!(
        "the work item it belongs to, e.g. parser-errors: 1–{LABEL_LIMIT} letters, digits and - _ . / : # (no spaces); use the same label for everything about one item"
    );
    let kinds = json!({
        "type": "string",
        "enum": ["FACT", "OBSERVED", "FAIL", "PATCH_SUMMARY"],
        "description": "FACT: something verified. OBSERVED: something seen, not yet explained. FAIL: an approach that did not work. PATCH_SUMMARY: a change you merged. (To claim work use the claim tool.)"
    });
    vec![
        tool(
            "board_read",
            "Read new board records",
            false,
            format!(
                "Read the shared board: the records peers posted since your last board_read, newest first, one compact line each, \
                 e.g. `G12 [w03/FACT +2m] text #label` (id, author/kind, age, text, label; `(+detail)` means board_unfold shows more; \
                 `[invalidated]` marks a PATCH_SUMMARY its author's later FAIL undid). It is the recent view: a newer PATCH_SUMMARY of the same author \
                 and label hides the older one, and live CLAIMs show however old. Your own records are left out. It marks them read, \
                 so a second call shows only what is new. Use it at the start of every loop and before you claim work. \
                 cap: at most this many records (default {read_cap}, at most {view_cap}); older unread ones are skipped — board_grep finds them."
            ),
            object(json!({ "cap": integer("at most this many records", 1, view_cap as u64) }), &[]),
        ),
        tool(
            "board_write",
            "Post a board record",
            false,
            format!(
                "Append a record to the shared board, which every worker reads (append-only: records are never edited). \
                 Share useful findings early: FACT for something verified, OBSERVED for something seen, FAIL for an approach that did not work \
                 (it saves peers repeating it), PATCH_SUMMARY after a merge (e.g. `files=... | idea=... | evidence=<what passed> | risk=...`). \
                 text: one line, at most {TEXT_LIMIT} characters (PATCH_SUMMARY {PATCH_SUMMARY_LIMIT}); put longer content in detail \
                 (at most {DETAIL_LIMIT} characters, shown by board_unfold). A newer PATCH_SUMMARY of yours with the same label replaces your older one; \
                 a FAIL of yours with that label marks it invalidated. No chatter (\"starting now\"): record what a peer can use. \
                 To take on work use claim instead."
            ),
            object(
                json!({
                    "kind": kinds,
                    "text": string(&format!("one line, no line breaks: at most {TEXT_LIMIT} characters ({PATCH_SUMMARY_LIMIT} for PATCH_SUMMARY)"), PATCH_SUMMARY_LIMIT),
                    "label": string(&label, LABEL_LIMIT),
                    "detail": string(&format!("optional longer body, may span lines, at most {DETAIL_LIMIT} characters"), DETAIL_LIMIT),
                }),
                &["kind", "text"],
            ),
        ),
        tool(
            "board_grep",
            "Search the board",
            true,
            format!(
                "Search the whole board history, newest first — superseded records and ended claims included. Use it before you start \
                 anything: a peer may have found it, claimed it or failed at it (look for FAIL). Query language: words match a record's text \
                 and detail, ignoring case and accents; `pars*` is a prefix; \"a phrase\" in double quotes; terms side by side mean AND; \
                 OR and NOT in uppercase; parentheses group; `-x` means NOT x; filters kind:FAIL, author:w01, label:parser-v2 (exact label). \
                 Examples: `(lexer OR parser) kind:FAIL`, `label:parser \"unary minus\"`, `pars* -kind:CLAIM`. At most {MAX_QUERY_CHARS} characters. \
                 limit: 1–{} records (default 50); before: a record id — only older records, to page on from the last id you got.",
                board::GREP_LIMIT
            ),
            object(
                json!({
                    "query": string("the search, e.g. parser kind:FAIL", MAX_QUERY_CHARS),
                    "limit": integer("at most this many records (default 50)", 1, board::GREP_LIMIT as u64),
                    "before": string("only records older than this id, like G120 (paging)", 24),
                }),
                &["query"],
            ),
        ),
        tool(
            "board_unfold",
            "Show a record in full",
            true,
            "One board record in full: its detail, label, paths, lease, and what superseded or invalidated it. \
             Use it when a line shows (+detail) or before you build on a PATCH_SUMMARY."
                .to_string(),
            object(json!({ "id": string(RECORD_ID, 24) }), &["id"]),
        ),
        tool(
            "claim",
            "Claim a sub-task",
            false,
            format!(
                "Claim one sub-task in public before you work on it: posts a CLAIM record with a lease (default {lease} s, at most {MAX_LEASE_SECS}). \
                 text: what you take on, one line, at most {TEXT_LIMIT} characters. label: the work item; paths: the files or directories you expect \
                 to touch (relative to the repository root, at most {PATHS_LIMIT}). The answer lists other workers' live claims that overlap yours \
                 (same label, or overlapping paths) and who holds them: then do not duplicate the work — msg_dm the holder to split or hand it over, \
                 or release your claim and pick other work. Renew before the lease ends; release when merged or abandoned."
            ),
            object(
                json!({
                    "text": string(&format!("what you take on, one line, at most {TEXT_LIMIT} characters"), TEXT_LIMIT),
                    "label": string(&label, LABEL_LIMIT),
                    "paths": {
                        "type": "array",
                        "maxItems": PATHS_LIMIT,
                        "items": string("a file or directory relative to the repository root, like src/parser/ (no leading /, no ..)", PATH_LIMIT),
                        "description": "files or directories you expect to touch"
                    },
                    "lease_secs": integer(&format!("lease in seconds (default {lease})"), 1, MAX_LEASE_SECS),
                    "detail": string(&format!("optional longer body: plan, acceptance criteria (at most {DETAIL_LIMIT} characters)"), DETAIL_LIMIT),
                }),
                &["text"],
            ),
        ),
        tool(
            "release",
            "Release a claim",
            false,
            "End one of your live claims when its work is merged or abandoned, so peers may take it. \
             Only the claim's author can release it."
                .to_string(),
            object(json!({ "id": string("the claim's record id, like G14", 24) }), &["id"]),
        ),
        tool(
            "renew",
            "Renew a claim",
            false,
            format!(
                "Extend one of your live claims: its lease becomes lease_secs from now (default {lease} s, 1–{MAX_LEASE_SECS}). \
                 Renew long work before the lease runs out — an expired claim no longer tells peers the work is taken."
            ),
            object(
                json!({
                    "id": string("the claim's record id, like G14", 24),
                    "lease_secs": integer(&format!("seconds from now (default {lease})"), 1, MAX_LEASE_SECS),
                }),
                &["id"],
            ),
        ),
        tool(
            "msg_post",
            "Post to a channel",
            false,
            format!(
                "Post a message to a channel that every worker sees at its next turn boundary (not urgently). For questions to everyone \
                 and coordination; for one worker use msg_dm, for durable findings use board_write. channel: # and 1–32 lowercase letters, \
                 digits, - or _ (usually #general). text: at most {MESSAGE_LIMIT} characters, may span lines. thread: the number of the message you answer."
            ),
            object(
                json!({
                    "channel": { "type": "string", "pattern": "^#?[a-z0-9_-]{1,32}$", "description": "the channel, like #general" },
                    "text": string(&format!("the message, at most {MESSAGE_LIMIT} characters"), MESSAGE_LIMIT),
                    "thread": positive("optional: the number of the message you answer (7 for M7)"),
                }),
                &["channel", "text"],
            ),
        ),
        tool(
            "msg_dm",
            "Message a worker",
            false,
            format!(
                "Send a direct message to one worker; it reaches them urgently, inside their current turn. Use it to settle a claim overlap, \
                 ask the author of a record or PR, ask for a review, or hand over work. to: a worker id like w02 (workers lists them; not yourself). \
                 text: at most {MESSAGE_LIMIT} characters, may span lines. thread: the number of the message you answer."
            ),
            object(
                json!({
                    "to": { "type": "string", "pattern": "^w[0-9]{1,11}$", "description": "a worker id, like w02" },
                    "text": string(&format!("the message, at most {MESSAGE_LIMIT} characters"), MESSAGE_LIMIT),
                    "thread": positive("optional: the number of the message you answer (7 for M7)"),
                }),
                &["to", "text"],
            ),
        ),
        tool(
            "inbox",
            "Read unread messages",
            false,
            format!(
                "Your unread messages — channel posts and direct messages to you — oldest first, and marks them read. \
                 limit: 1–{} (default 100).",
                messages::READ_LIMIT
            ),
            object(
                json!({ "limit": integer("at most this many messages (default 100)", 1, messages::READ_LIMIT as u64) }),
                &[],
            ),
        ),
        tool(
            "workers",
            "Who is who",
            true,
            "Every worker of the organization: its status (starting, busy, idle, stalled, stopped, dead), its live claims, and when it \
             was last active. Use it to see who works on what before you claim, and whom to message."
                .to_string(),
            object(json!({}), &[]),
        ),
        tool(
            "pr_open",
            "Open a pull request",
            false,
            format!(
                "Open a pull request to merge one of your branches into main (main moves only through pull requests). Commit and push first: \
                 git push origin HEAD:refs/heads/{me}/<name>. branch: in your namespace, {me}/<name>, at most {BRANCH_LIMIT} characters of \
                 letters, digits and - _ . /. title: one line, at most {TITLE_LIMIT} characters. body: what and why, at most {BODY_LIMIT} characters. \
                 A branch has at most one open PR; commits pushed later join it. Peers are told. Then merge it with pr_merge. {approvals}"
            ),
            object(
                json!({
                    "branch": string(&format!("your pushed branch, like {me}/parser"), BRANCH_LIMIT),
                    "title": string(&format!("one line, at most {TITLE_LIMIT} characters"), TITLE_LIMIT),
                    "body": string(&format!("what and why, at most {BODY_LIMIT} characters"), BODY_LIMIT),
                }),
                &["branch", "title"],
            ),
        ),
        tool(
            "pr_list",
            "List pull requests",
            true,
            format!(
                "Pull requests, newest first, one line each: number, state, author, branch, title. state: open, merged or closed (default all); \
                 author: a worker id; limit: 1–{} (default 100).",
                prs::LIST_LIMIT
            ),
            object(
                json!({
                    "state": { "type": "string", "enum": ["open", "merged", "closed"], "description": "only PRs in this state" },
                    "author": { "type": "string", "maxLength": 64, "description": "only this worker's PRs, like w01" },
                    "limit": integer("at most this many (default 100)", 1, prs::LIST_LIMIT as u64),
                }),
                &[],
            ),
        ),
        tool(
            "pr_view",
            "Show a pull request",
            true,
            "One pull request in full: body, reviews, comments and approvals, and while it is open its commits, changed files and whether \
             it merges cleanly into main now. Read it before you review or merge."
                .to_string(),
            object(json!({ "number": positive(PR_NUMBER) }), &["number"]),
        ),
        tool(
            "pr_review",
            "Review a pull request",
            false,
            format!(
                "Review a peer's open pull request (not your own) after reading it with pr_view: verdict approve or request_changes, and a \
                 text with concrete reasons (at most {BODY_LIMIT} characters). Its author gets it urgently. A later review of yours replaces \
                 your earlier verdict. {approvals}"
            ),
            object(
                json!({
                    "number": positive(PR_NUMBER),
                    "verdict": { "type": "string", "enum": ["approve", "request_changes"], "description": "approve, or request_changes" },
                    "text": string(&format!("your reasons, at most {BODY_LIMIT} characters"), BODY_LIMIT),
                }),
                &["number", "verdict", "text"],
            ),
        ),
        tool(
            "pr_comment",
            "Comment on a pull request",
            false,
            format!(
                "Comment on a pull request in any state, yours included; peers hear of it at their next turn boundary. \
                 text: at most {BODY_LIMIT} characters. For a verdict use pr_review."
            ),
            object(
                json!({
                    "number": positive(PR_NUMBER),
                    "text": string(&format!("the comment, at most {BODY_LIMIT} characters"), BODY_LIMIT),
                }),
                &["number", "text"],
            ),
        ),
        tool(
            "pr_merge",
            "Merge a pull request",
            false,
            format!(
                "Merge an open pull request into main. The hub merges it in its own repository (three-way, no checkout needed); anyone may \
                 merge, the author included. {approvals} If it conflicts, the answer names the files: merge main into the branch \
                 (git pull origin main), resolve, push, and pr_merge again.{gate} Keep main green: merge only what you verified. \
                 After merging, post a PATCH_SUMMARY with board_write and release your claim."
            ),
            object(json!({ "number": positive(PR_NUMBER) }), &["number"]),
        ),
        tool(
            "pr_close",
            "Close a pull request",
            false,
            "Close one of your open pull requests without merging it (its branch stays). Open a new PR for further changes.".to_string(),
            object(json!({ "number": positive(PR_NUMBER) }), &["number"]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_time_reads_ahead() {
        assert_eq!(in_time(120_000, 0), "2m");
    }
}
