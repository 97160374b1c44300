//! The built-in agent against a replay chat endpoint (scripted replies, every request
//! recorded) and a real hub in-process with a seeded workspace and worker checkouts: both
//! calling styles, the workspace tools and their limits, organization tools over MCP with
//! notices, output cuts and compaction, endpoint errors, and the auto style switch.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::message::NewMessage;
use agensh_node::adapters::builtin::history::RECAP_HEADING;
use agensh_node::adapters::builtin::log::LOG_FILE;
use agensh_node::adapters::builtin::{BuiltinAgent, BuiltinConfig, Mode, ToolStyle};
use agensh_node::adapters::{Agent, AgentContext, TurnEvent};
use serde_json::{json, Value};
use support::replay::{Replay, Reply};
use support::{group_left_after_kill, AgentOrg, Org};

const KEY: &str = "sk-test-secret-4242";

struct Setup {
    org: Org,
    replay: Replay,
    ctx: AgentContext,
    agent: BuiltinAgent,
}

async fn setup(workers: usize, style: ToolStyle, tweak: impl FnOnce(&mut BuiltinConfig)) -> Setup {
    let org = support::start(workers).await;
    let replay = Replay::start().await;
    let ctx = org.context(&org.id(0)).await;
    let mut cfg = BuiltinConfig {
        base_url: replay.base_url.clone(),
        model: "replay-model".into(),
        api_key: Some(KEY.into()),
        style,
        command_timeout: Duration::from_secs(30),
        ..BuiltinConfig::default()
    };
    tweak(&mut cfg);
    let mut agent = BuiltinAgent::new(cfg);
    agent.start(&ctx).await.expect("the built-in agent starts");
    Setup {
        org,
        replay,
        ctx,
        agent,
    }
}

/// The last message of request `i`.
fn last_message(reqs: &[Value], i: usize) -> Value {
    reqs[i]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone()
}

/// The `tool` messages at the end of request `i`.
fn tool_messages(reqs: &[Value], i: usize) -> Vec<Value> {
    let msgs = reqs[i]["messages"].as_array().unwrap();
    let n = msgs
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .count();
    msgs[msgs.len() - n..].to_vec()
}

fn content(m: &Value) -> &str {
    m["content"].as_str().unwrap_or("")
}

fn statuses(events: &[TurnEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolCall { name, status, .. } => Some((name.clone(), status.clone())),
            _ => None,
        })
        .collect()
}

fn log_lines(ctx: &AgentContext) -> Vec<Value> {
    std::fs::read_to_string(ctx.state_dir.join(LOG_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn branch_names(req: &Value) -> Vec<String> {
    req["response_format"]["json_schema"]["schema"]["anyOf"]
        .as_array()
        .expect("an anyOf schema")
        .iter()
        .map(|b| {
            b["properties"]["tool"]["const"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_style_writes_reads_and_answers_each_call_by_id() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    t.replay.push([
        Reply::tool(
            "write_file",
            json!({ "path": "notes/hello.txt", "content": "hi there\n" }),
        )
        .usage(100, 10),
        Reply::tool("read_file", json!({ "path": "notes/hello.txt" })).usage(150, 8),
        Reply::text("Done: wrote and read notes/hello.txt.").usage(200, 12),
    ]);
    let out = t
        .agent
        .turn("Write notes/hello.txt.")
        .await
        .expect("a turn");
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("notes/hello.txt")).unwrap(),
        "hi there\n"
    );
    assert_eq!((out.usage.input_tokens, out.usage.output_tokens), (450, 30));
    assert_eq!(out.usage.cost_usd, 0.0);
    assert_eq!(
        out.events,
        vec![
            TurnEvent::ToolCall {
                name: "write_file".into(),
                status: "ok".into(),
                kind: String::new(),
            },
            TurnEvent::ToolCall {
                name: "read_file".into(),
                status: "ok".into(),
                kind: String::new(),
            },
            TurnEvent::Message {
                text: "Done: wrote and read notes/hello.txt.".into()
            },
            TurnEvent::Message {
                text: "agensh: committed the checkout's changes at the end of the turn".into()
            },
        ]
    );

    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(t.replay.empty_answers(), 0);
    let ids = t.replay.call_ids();
    // The first request: tools offered, no JSON schema.
    assert_eq!(reqs[0]["model"], "replay-model");
    assert_eq!(reqs[0]["stream"], false);
    assert_eq!(reqs[0]["max_tokens"], 1024);
    assert_eq!(reqs[0]["tool_choice"], "auto");
    assert!(reqs[0].get("response_format").is_none());
    let offered: Vec<&str> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in [
        "list_files",
        "read_file",
        "write_file",
        "edit_file",
        "run",
        "board_write",
        "msg_dm",
        "pr_open",
    ] {
        assert!(offered.contains(&name), "{name} not offered: {offered:?}");
    }
    // Each result answers its call by id.
    let r1 = last_message(&reqs, 1);
    assert_eq!(r1["role"], "tool");
    assert_eq!(r1["tool_call_id"], ids[0][0].as_str());
    assert!(content(&r1).contains("wrote 9 bytes"), "{r1}");
    let call = &reqs[1]["messages"].as_array().unwrap()[2];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["tool_calls"][0]["id"], ids[0][0].as_str());
    let r2 = last_message(&reqs, 2);
    assert_eq!(r2["role"], "tool");
    assert_eq!(r2["tool_call_id"], ids[1][0].as_str());
    assert!(content(&r2).contains("hi there"), "{r2}");

    // The key is sent, never logged.
    assert!(t
        .replay
        .auth_headers()
        .iter()
        .all(|h| h.as_deref() == Some(&format!("Bearer {KEY}") as &str)));
    let log = std::fs::read_to_string(t.ctx.state_dir.join(LOG_FILE)).unwrap();
    assert!(!log.contains(KEY));
    assert!(log.contains("\"turn_end\""));
    t.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_style_sends_an_action_schema_and_runs_one_action_per_reply() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    t.replay.push([
        Reply::action(
            "edit_file",
            json!({ "path": "README.md", "old": "hello", "new": "goodbye" }),
        ),
        Reply::action("end_turn", json!({ "summary": "README says goodbye now" })),
    ]);
    let out = t.agent.turn("Make README say goodbye.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("README.md")).unwrap(),
        "goodbye\n"
    );
    assert_eq!(
        out.events,
        vec![
            TurnEvent::ToolCall {
                name: "edit_file".into(),
                status: "ok".into(),
                kind: String::new(),
            },
            TurnEvent::Message {
                text: "README says goodbye now".into()
            },
            TurnEvent::Message {
                text: "agensh: committed the checkout's changes at the end of the turn".into()
            },
        ]
    );
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(t.replay.empty_answers(), 0);
    assert!(reqs[0].get("tools").is_none());
    assert_eq!(reqs[0]["response_format"]["type"], "json_schema");
    assert_eq!(reqs[0]["response_format"]["json_schema"]["name"], "action");
    let names = branch_names(&reqs[0]);
    for n in [
        "edit_file",
        "run",
        "board_write",
        "msg_dm",
        "pr_merge",
        "end_turn",
    ] {
        assert!(names.contains(&n.to_string()), "no {n} branch: {names:?}");
    }
    // The branches say tool before args (a grammar makes the model write them in this order).
    let raw = &t.replay.raw_requests()[0];
    let at = raw.find("\"const\":\"edit_file\"").unwrap();
    let branch_start = raw[..at].rfind("\"properties\":{\"tool\"");
    assert!(branch_start.is_some(), "tool is not the first property");
    // The system prompt lists the tools one per line.
    let system = content(&reqs[0]["messages"][0]);
    assert!(
        system.contains("\n- edit_file(path, old, new): "),
        "{system}"
    );
    assert!(system.contains("\n- board_write(kind, text, "), "{system}");
    let r = last_message(&reqs, 1);
    assert_eq!(r["role"], "user");
    assert!(
        content(&r).starts_with("result of edit_file:\nedited README.md"),
        "{r}"
    );
}

/// Paths named like one of `names` under `dir` (recursively when `deep`).
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_left_uncommitted_are_committed_at_the_end_of_the_turn_and_only_then() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    let before = git(&t.ctx.checkout, &["rev-parse", "HEAD"]);
    t.replay.push([
        Reply::action(
            "write_file",
            json!({ "path": "src/new.py", "content": "x = 1\n" }),
        ),
        Reply::action("end_turn", json!({ "summary": "wrote src/new.py" })),
    ]);
    t.agent.turn("Write src/new.py.").await.unwrap();
    // One new commit on the worker's branch, by the worker, with the file; nothing left over.
    assert_eq!(
        git(
            &t.ctx.checkout,
            &["rev-list", "--count", &format!("{before}..HEAD")]
        ),
        "1"
    );
    assert_eq!(
        git(&t.ctx.checkout, &["log", "-1", "--format=%an"]),
        t.ctx.worker
    );
    assert_eq!(git(&t.ctx.checkout, &["show", "HEAD:src/new.py"]), "x = 1");
    assert_eq!(git(&t.ctx.checkout, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&t.ctx.checkout, &["branch", "--show-current"]),
        format!("{}/work", t.ctx.worker)
    );
    // A turn that changes nothing commits nothing.
    let after = git(&t.ctx.checkout, &["rev-parse", "HEAD"]);
    t.replay.push([Reply::action(
        "end_turn",
        json!({ "summary": "nothing to do" }),
    )]);
    let out = t.agent.turn("Anything else?").await.unwrap();
    assert_eq!(git(&t.ctx.checkout, &["rev-parse", "HEAD"]), after);
    assert!(
        !format!("{:?}", out.events).contains("committed"),
        "{:?}",
        out.events
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_off_by_stop_keeps_its_work_in_a_commit() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    let before = git(&t.ctx.checkout, &["rev-parse", "HEAD"]);
    let never = Arc::new(tokio::sync::Notify::new());
    t.replay.push([
        Reply::action(
            "write_file",
            json!({ "path": "src/half.py", "content": "y = 2\n" }),
        ),
        // The model never answers again: the run ends in the middle of the turn.
        Reply::action("end_turn", json!({ "summary": "done" })).held(never.clone()),
    ]);
    let turn = tokio::time::timeout(Duration::from_secs(3), t.agent.turn("Write it.")).await;
    assert!(
        turn.is_err(),
        "the turn should still be waiting for the model"
    );
    assert_eq!(git(&t.ctx.checkout, &["rev-parse", "HEAD"]), before);
    t.agent.stop().await;
    assert_eq!(
        git(
            &t.ctx.checkout,
            &["rev-list", "--count", &format!("{before}..HEAD")]
        ),
        "1"
    );
    assert_eq!(git(&t.ctx.checkout, &["show", "HEAD:src/half.py"]), "y = 2");
    assert_eq!(
        git(&t.ctx.checkout, &["log", "-1", "--format=%an"]),
        t.ctx.worker
    );
    assert_eq!(git(&t.ctx.checkout, &["status", "--porcelain"]), "");
    never.notify_waiters();
}

fn find_named(dir: &Path, names: &[&str], deep: bool, found: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if names.contains(&name.as_str()) {
            found.push(e.path().display().to_string());
        }
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if deep && is_dir {
            find_named(&e.path(), names, deep, found);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_checkout_and_git_writes_are_refused() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    let outside = t.org.tmp.path().to_path_buf();
    std::os::unix::fs::symlink(&outside, t.ctx.checkout.join("link")).unwrap();
    let git_config = std::fs::read_to_string(t.ctx.checkout.join(".git/config")).unwrap();
    let abs = outside.join("abs-escape.txt");
    t.replay.push([
        Reply::tools(&[
            (
                "write_file",
                json!({ "path": "../escape-up.txt", "content": "x" }),
            ),
            (
                "write_file",
                json!({ "path": abs.display().to_string(), "content": "x" }),
            ),
            (
                "write_file",
                json!({ "path": "link/escape-link.txt", "content": "x" }),
            ),
            (
                "write_file",
                json!({ "path": ".git/config", "content": "[core]\n" }),
            ),
            (
                "edit_file",
                json!({ "path": "sub/../../escape-up.txt", "old": "a", "new": "b" }),
            ),
            ("read_file", json!({ "path": "link/org/.agensh/hub.json" })),
        ]),
        Reply::text("I could not write there."),
    ]);
    let out = t.agent.turn("Try.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert!(statuses(&out.events).iter().all(|(_, s)| s == "error"));

    let results = tool_messages(&t.replay.requests(), 1);
    assert_eq!(results.len(), 6);
    let texts: Vec<&str> = results.iter().map(content).collect();
    for (i, text) in texts.iter().enumerate() {
        assert!(text.starts_with("error: path "), "{i}: {text}");
    }
    assert_eq!(
        texts[0],
        "error: path \"../escape-up.txt\" leaves your checkout; use a path relative to your checkout, e.g. \"escape-up.txt\""
    );
    assert!(texts[1].contains("leaves your checkout"), "{}", texts[1]);
    assert!(
        texts[2].contains("leaves your checkout (through a symlink)"),
        "{}",
        texts[2]
    );
    assert!(texts[3].contains("inside .git"), "{}", texts[3]);
    assert!(texts[4].contains("leaves your checkout"), "{}", texts[4]);
    assert!(texts[5].contains("through a symlink"), "{}", texts[5]);

    let names = ["escape-up.txt", "abs-escape.txt", "escape-link.txt"];
    let mut found = Vec::new();
    find_named(&outside, &names, true, &mut found);
    find_named(outside.parent().unwrap(), &names, false, &mut found);
    assert!(found.is_empty(), "written outside the checkout: {found:?}");
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join(".git/config")).unwrap(),
        git_config
    );
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s[s.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_times_out_is_killed_with_its_whole_process_group() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    let command = "echo $$ > pids.txt; (sleep 300; echo late) & echo $! >> pids.txt; \
                   sleep 300 & echo $! >> pids.txt; echo started; sleep 300";
    t.replay.push([
        Reply::tool("run", json!({ "command": command, "timeout_secs": 1 })),
        Reply::text("It hung."),
    ]);
    let started = Instant::now();
    let out = t.agent.turn("Run it.").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        statuses(&out.events),
        [("run".to_string(), "error".to_string())]
    );
    let result = last_message(&t.replay.requests(), 1);
    let text = content(&result);
    assert!(text.starts_with("timed out after 1 s"), "{text}");
    assert!(text.contains("started"), "{text}");

    let pids: Vec<u32> = std::fs::read_to_string(t.ctx.checkout.join("pids.txt"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3);
    assert_eq!(group_left_after_kill(pids[0]).await, vec![]);
    for p in &pids {
        assert!(!alive(*p), "process {p} outlived the timeout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_turn_and_stop_kill_the_commands_processes() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    t.replay.push([
        // A background process that outlives its command: killed at stop.
        Reply::tool(
            "run",
            json!({ "command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.txt" }),
        ),
        // A command still running when the turn is abandoned.
        Reply::tool("run", json!({ "command": "echo $$ > fg.txt; sleep 300" })),
    ]);
    let turn = tokio::time::timeout(Duration::from_secs(3), t.agent.turn("Go.")).await;
    assert!(turn.is_err(), "the turn should still be running");
    let fg: u32 = std::fs::read_to_string(t.ctx.checkout.join("fg.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(group_left_after_kill(fg).await, vec![]);
    let bg: u32 = std::fs::read_to_string(t.ctx.checkout.join("bg.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(bg), "the background process runs until stop");
    t.agent.stop().await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(bg) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(bg), "stop killed the background process");
    let e = t.agent.turn("again").await.unwrap_err();
    assert_eq!(e.code, "agent_not_started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_failures_go_back_to_the_model_as_text() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    t.replay.push([
        Reply::tools(&[
            ("frobnicate", json!({})),
            ("write_file", json!({ "path": "x.txt" })),
            ("read_file", json!("{broken")),
            (
                "edit_file",
                json!({ "path": "README.md", "old": "no such text", "new": "x" }),
            ),
            ("read_file", json!({ "path": "missing.txt" })),
        ]),
        Reply::text("Some tools failed."),
    ]);
    let out = t.agent.turn("Try things.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert!(statuses(&out.events).iter().all(|(_, s)| s == "error"));
    let results = tool_messages(&t.replay.requests(), 1);
    let texts: Vec<&str> = results.iter().map(content).collect();
    assert_eq!(texts.len(), 5);
    assert!(
        texts[0].starts_with("error: unknown tool \"frobnicate\"; the tools are: write_file, run,"),
        "{}",
        texts[0]
    );
    assert_eq!(
        texts[1],
        "error: bad arguments for write_file: \"content\" is missing; expected write_file(path, content)"
    );
    assert!(texts[2].contains("must be a JSON object"), "{}", texts[2]);
    assert!(
        texts[3].contains("not found in \"README.md\""),
        "{}",
        texts[3]
    );
    assert!(texts[4].contains("no file \"missing.txt\""), "{}", texts[4]);
    assert!(!t.ctx.checkout.join("x.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_replies_that_do_not_parse_get_an_error_and_the_turn_goes_on() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    t.replay.push([
        Reply::text("I think I should write a file first."),
        Reply::action("fly", json!({})),
        Reply::action("end_turn", json!({ "summary": "gave up" })),
    ]);
    let out = t.agent.turn("Go.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 3);
    let e1 = last_message(&reqs, 1);
    assert_eq!(e1["role"], "user");
    assert!(
        content(&e1).starts_with("error: your reply is not a JSON action"),
        "{e1}"
    );
    assert!(content(&last_message(&reqs, 2)).contains("unknown tool \"fly\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn organization_tools_go_through_the_hub_and_bring_notices() {
    let mut t = setup(2, ToolStyle::Tools, |_| {}).await;
    let (me, peer) = (t.org.id(0), t.org.id(1));
    let gate = Arc::new(tokio::sync::Notify::new());
    t.replay.push([
        Reply::tool(
            "board_write",
            json!({ "kind": "FACT", "text": "the parser handles unary minus", "label": "parser" }),
        ),
        Reply::tool("workers", json!({})).held(gate.clone()),
        Reply::text("Posted."),
    ]);
    let peer_client = t.org.client(&peer);
    let (out, ()) = tokio::join!(t.agent.turn("Share a fact."), async {
        // The board_write result is on its way: the record is at the hub.
        t.replay.wait_requests(2).await;
        let recent = peer_client.recent(None).await.unwrap();
        assert!(
            recent
                .iter()
                .any(|e| e.record.text == "the parser handles unary minus" && e.record.author == me),
            "{recent:?}"
        );
        peer_client
            .send_message(&NewMessage {
                to: me.clone(),
                text: "ping from your peer".into(),
                thread: None,
            })
            .await
            .unwrap();
        gate.notify_one();
    });
    let out = out.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(
        statuses(&out.events),
        [
            ("board_write".to_string(), "ok".to_string()),
            ("workers".to_string(), "ok".to_string())
        ]
    );
    let reqs = t.replay.requests();
    let posted = content(&last_message(&reqs, 1)).to_string();
    assert!(posted.contains("G1"), "{posted}");
    assert!(!posted.contains("ping from your peer"));
    let listed = content(&last_message(&reqs, 2)).to_string();
    assert!(listed.contains(&peer), "{listed}");
    assert!(listed.contains("notices:"), "{listed}");
    assert!(listed.contains("ping from your peer"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_output_is_cut_with_a_note() {
    let mut t = setup(1, ToolStyle::Tools, |c| c.output_cap = 600).await;
    t.replay.push([
        Reply::tool("run", json!({ "command": "seq 1 20000" })),
        Reply::text("Counted."),
    ]);
    t.agent.turn("Count.").await.unwrap();
    let r = last_message(&t.replay.requests(), 1);
    let text = content(&r);
    assert!(text.starts_with("exit code: 0\n1\n2\n3\n"), "{text}");
    assert!(text.ends_with("\n19999\n20000"), "{text}");
    assert!(
        text.contains("characters cut; read a smaller range or narrow the command"),
        "{text}"
    );
    assert!(text.chars().count() < 800, "{} chars", text.chars().count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_is_compacted_to_fit_the_window() {
    let window = 3000u32;
    let mut t = setup(1, ToolStyle::Json, |c| {
        c.context_tokens = window;
        c.max_reply_tokens = 256;
        c.max_steps_per_turn = 60;
    })
    .await;
    let body: String = (0..25)
        .map(|i| format!("line {i} of some file text\n"))
        .collect();
    let mut replies = Vec::new();
    for i in 0..25 {
        let path = format!("f{i}.txt");
        replies.push(Reply::action(
            "write_file",
            json!({ "path": path, "content": body }),
        ));
        replies.push(Reply::action("read_file", json!({ "path": path })));
    }
    replies.push(Reply::action(
        "end_turn",
        json!({ "summary": "wrote 25 files" }),
    ));
    t.replay.push(replies);
    let out = t
        .agent
        .turn("Write twenty-five files and read each back.")
        .await
        .unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(t.replay.empty_answers(), 0);
    assert_eq!(t.replay.left(), 0);
    assert!(t.ctx.checkout.join("f24.txt").exists());

    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 51);
    let chars = |r: &Value| -> usize {
        r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| content(m).chars().count())
            .sum()
    };
    let biggest = reqs.iter().map(chars).max().unwrap();
    assert!(
        (biggest as f64) / 3.5 < window as f64 * 0.85,
        "a request of {biggest} characters for a window of {window} tokens"
    );
    let last = reqs.last().unwrap();
    let prompt = content(&last["messages"][1]);
    assert!(
        prompt.starts_with("Write twenty-five files and read each back."),
        "{prompt}"
    );
    assert!(prompt.contains(RECAP_HEADING), "{prompt}");
    // The recap keeps a line per action, the oldest dropped first when it grows too long.
    assert!(prompt.contains("older steps omitted)"), "{prompt}");
    let recap = &prompt[prompt.find(RECAP_HEADING).unwrap()..];
    let recapped: Vec<&str> = recap
        .lines()
        .filter_map(|l| l.strip_prefix("- You read "))
        .collect();
    assert!(recapped.len() >= 2, "{prompt}");
    // What the recap covers is no longer in the conversation itself.
    let newest = recapped.last().unwrap().split(' ').next().unwrap();
    let rest: String = last["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| content(m).to_string())
        .collect();
    assert!(
        !rest.contains(&format!("\"{newest}\"")),
        "{newest} in {rest}"
    );
    let first = reqs
        .iter()
        .map(|r| content(&r["messages"][1]).to_string())
        .find(|p| p.contains(RECAP_HEADING))
        .unwrap();
    // In prose: no size placeholder, no read_file header a model could paste into a file.
    assert!(first.contains("- You wrote f0.txt (25 lines)."), "{first}");
    assert!(
        first.contains("- You read f0.txt (lines 1-25 of 25)."),
        "{first}"
    );
    assert!(
        !first.contains(" chars>") && !first.contains("f0.txt: lines"),
        "{first}"
    );
    assert!(log_lines(&t.ctx).iter().any(|l| l["event"] == "compact"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_errors_are_retried_compacted_or_reported() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    t.replay.push([
        Reply::status(503, "loading model"),
        Reply::status(
            400,
            r#"{"error":{"message":"the request exceeds the available context size"}}"#,
        ),
        Reply::action("end_turn", json!({ "summary": "ok" })),
    ]);
    let out = t.agent.turn("Go.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(t.replay.requests().len(), 3);
    let log = log_lines(&t.ctx);
    assert!(log
        .iter()
        .any(|l| l["event"] == "compact" && l["hard"] == true));

    t.replay.push([Reply::status(401, "invalid api key")]);
    let e = t.agent.turn("Again.").await.unwrap_err();
    assert!(e.message.contains(&t.replay.base_url), "{}", e.message);
    assert!(
        e.message.contains("401") && e.message.contains("invalid api key"),
        "{}",
        e.message
    );
    assert!(!e.message.contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_style_switches_to_json_when_the_first_reply_is_prose() {
    let mut t = setup(1, ToolStyle::Auto, |_| {}).await;
    t.replay.push([
        Reply::text("Sure! I will write the file a.txt now."),
        Reply::action("write_file", json!({ "path": "a.txt", "content": "x\n" })),
        Reply::action("end_turn", json!({ "summary": "wrote a.txt" })),
    ]);
    let out = t.agent.turn("Write a.txt.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert!(t.ctx.checkout.join("a.txt").exists());
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].get("tools").is_some() && reqs[0].get("response_format").is_none());
    assert!(reqs[1].get("tools").is_none());
    assert_eq!(reqs[1]["response_format"]["type"], "json_schema");
    // The prose reply is not kept; the system prompt is the JSON one.
    let msgs = reqs[1]["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert!(content(&msgs[0]).contains("Each answer is one JSON action"));
    assert!(log_lines(&t.ctx)
        .iter()
        .any(|l| l["event"] == "style_switch"));

    // The session stays in JSON style.
    t.replay
        .push([Reply::action("end_turn", json!({ "summary": "nothing" }))]);
    t.agent.turn("Anything else?").await.unwrap();
    assert!(t.replay.requests()[3].get("response_format").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_style_keeps_tool_calls_when_the_model_makes_them() {
    let mut t = setup(1, ToolStyle::Auto, |_| {}).await;
    t.replay.push([
        Reply::tool("list_files", json!({})),
        Reply::text("There is a README."),
    ]);
    t.agent.turn("Look around.").await.unwrap();
    t.replay.push([Reply::text("Nothing to do.")]);
    let out = t.agent.turn("Anything else?").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs
        .iter()
        .all(|r| r.get("tools").is_some() && r.get("response_format").is_none()));
    assert!(content(&last_message(&reqs, 1)).contains("README.md"));
}

/// Against a real local model (not run by default): `AGENSH_BUILTIN_MODEL_URL` (default
/// `http://127.0.0.1:18080/v1`, a llama.cpp server), `AGENSH_BUILTIN_MODEL_CTX` (its
/// per-slot context, default 4096), `AGENSH_BUILTIN_STYLE` (default json). Prints the
/// agent's log; run with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a local model server"]
async fn real_model_writes_and_runs_hello_py() {
    let url = std::env::var("AGENSH_BUILTIN_MODEL_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:18080/v1".into());
    let window: u32 = std::env::var("AGENSH_BUILTIN_MODEL_CTX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let style: ToolStyle = std::env::var("AGENSH_BUILTIN_STYLE")
        .unwrap_or_else(|_| "json".into())
        .parse()
        .unwrap();
    let goal = std::env::var("AGENSH_BUILTIN_GOAL").unwrap_or_else(|_| {
        "Write hello.py that prints hello, run it with python3, then end the turn.".into()
    });
    let org = support::start(1).await;
    let ctx = org.context(&org.id(0)).await;
    let mut agent = BuiltinAgent::new(BuiltinConfig {
        base_url: url,
        model: "local".into(),
        style,
        context_tokens: window,
        max_reply_tokens: 512,
        max_steps_per_turn: 12,
        ..BuiltinConfig::default()
    });
    agent.start(&ctx).await.unwrap();
    let started = Instant::now();
    let out = agent.turn(&goal).await;
    let took = started.elapsed();
    for l in log_lines(&ctx) {
        eprintln!("{l}");
    }
    let out = out.unwrap();
    eprintln!("outcome after {took:?}: {out:?}");
    let hello = std::fs::read_to_string(ctx.checkout.join("hello.py")).unwrap_or_default();
    eprintln!("hello.py: {hello:?}");
    agent.stop().await;
    assert!(hello.contains("print"), "no hello.py written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_endpoints_are_spoken_to_over_tls() {
    // The replay server speaks plain HTTP: a TLS client fails at the handshake, which shows
    // that https URLs are supported (a client without TLS refuses the scheme itself).
    let replay = Replay::start().await;
    let https = replay.base_url.replacen("http://", "https://", 1);
    let mut t = setup(1, ToolStyle::Json, |c| c.base_url = https.clone()).await;
    let e = t.agent.turn("Say hello.").await.unwrap_err();
    assert!(e.message.contains(&https), "{}", e.message);
    // rustls's words for a peer that answered the handshake with something else.
    assert!(e.message.contains("corrupt message"), "{}", e.message);
    assert!(replay.requests().is_empty(), "a TLS client sent plain HTTP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_repeats_itself_is_told_and_then_its_turn_ends() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    let same = || Reply::action("read_file", json!({ "path": "no/such/file.py" }));
    t.replay
        .push([same(), same(), same(), same(), same(), same(), same()]);
    let out = t.agent.turn("Read the file.").await.unwrap();
    assert_eq!(out.stop_reason, "repeating");
    let reqs = t.replay.requests();
    // Five identical actions ran; the sixth and seventh replies were never asked for.
    assert_eq!(reqs.len(), 5);
    // Requests 2 and 3 carry the results of the 1st and 2nd try: no note yet; request 4
    // carries the 3rd, which says it is a repeat.
    assert!(!content(&last_message(&reqs, 2)).contains("note:"));
    let third = content(&last_message(&reqs, 3)).to_string();
    assert!(third.contains("3rd time in a row"), "{third}");
    // A different action resets the count.
    t.replay.push([
        same(),
        same(),
        Reply::action("list_files", json!({})),
        same(),
        Reply::action("end_turn", json!({ "summary": "gave up" })),
    ]);
    let out = t.agent.turn("Try again.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    let reqs = t.replay.requests();
    assert!(!content(&last_message(&reqs, reqs.len() - 1)).contains("note:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_times_out_is_asked_once_more_then_fails_the_turn() {
    let never = Arc::new(tokio::sync::Notify::new());
    let mut t = setup(1, ToolStyle::Json, |c| {
        c.request_timeout = Duration::from_secs(1)
    })
    .await;
    t.replay.push([
        Reply::action("end_turn", json!({ "summary": "late" })).held(never.clone()),
        Reply::action("end_turn", json!({ "summary": "on time" })),
    ]);
    let out = t.agent.turn("Go.").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(t.replay.requests().len(), 2, "one retry after the timeout");
    t.replay.push([
        Reply::action("end_turn", json!({ "summary": "late" })).held(never.clone()),
        Reply::action("end_turn", json!({ "summary": "late again" })).held(never.clone()),
        Reply::action("end_turn", json!({ "summary": "never asked" })),
    ]);
    let e = t.agent.turn("Go again.").await.unwrap_err();
    assert!(e.message.contains("twice"), "{}", e.message);
    assert_eq!(t.replay.left(), 1, "no third try");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_changes_nothing_is_refused_as_such() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    t.replay.push([
        Reply::action(
            "edit_file",
            json!({ "path": "README.md", "old": "hello", "new": "hello" }),
        ),
        Reply::action("end_turn", json!({ "summary": "done" })),
    ]);
    let out = t.agent.turn("Fix README.").await.unwrap();
    assert_eq!(
        statuses(&out.events),
        [("edit_file".to_string(), "error".to_string())]
    );
    let r = content(&last_message(&t.replay.requests(), 1)).to_string();
    assert!(r.contains("this edit changes nothing"), "{r}");
    assert!(!r.contains("replaced 1 occurrence"), "{r}");
    assert!(r.contains("give a new text that differs from old"), "{r}");
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("README.md")).unwrap(),
        "hello\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_is_refused_as_file_content_and_as_a_command() {
    let mut t = setup(1, ToolStyle::Tools, |_| {}).await;
    t.replay.push([
        Reply::tools(&[
            (
                "write_file",
                json!({ "path": "caesar.py", "content": "<250 chars>" }),
            ),
            (
                "edit_file",
                json!({ "path": "README.md", "old": "hello", "new": "<12 chars>" }),
            ),
            (
                "run",
                json!({ "command": "python3 -c '<40 chars>' > ran.txt" }),
            ),
        ]),
        Reply::text("Stopped."),
    ]);
    let out = t.agent.turn("Write caesar.py.").await.unwrap();
    assert!(statuses(&out.events).iter().all(|(_, s)| s == "error"));
    let texts: Vec<String> = tool_messages(&t.replay.requests(), 1)
        .iter()
        .map(|m| content(m).to_string())
        .collect();
    assert!(
        texts[0].contains("contains the placeholder <250 chars>, not the file's text; nothing was written. Write the complete text"),
        "{}",
        texts[0]
    );
    assert!(texts[1].contains("not real text"), "{}", texts[1]);
    assert!(texts[2].contains("it was not run"), "{}", texts[2]);
    assert!(!t.ctx.checkout.join("caesar.py").exists());
    assert!(!t.ctx.checkout.join("ran.txt").exists());
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("README.md")).unwrap(),
        "hello\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_read_header_and_code_fence_are_left_out_of_the_file() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    t.replay.push([
        Reply::action(
            "write_file",
            json!({ "path": "caesar.py", "content": "result of read_file:\ncaesar.py: lines 1-2 of 2\n```python\ndef shift(s):\n    return s\n```\n" }),
        ),
        Reply::action("end_turn", json!({ "summary": "wrote caesar.py" })),
    ]);
    t.agent.turn("Write caesar.py.").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("caesar.py")).unwrap(),
        "def shift(s):\n    return s\n"
    );
    let r = content(&last_message(&t.replay.requests(), 1)).to_string();
    assert!(r.contains("wrote 27 bytes (2 lines) to caesar.py (left out the \"result of\" line and the read_file header line and the ``` fence lines: they are not part of the file"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_actions_is_pointed_out_and_then_ends_the_turn() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    // Each edit adds a "!" and answers the same; each run fails the same: a cycle that
    // the check for exact repeats never sees.
    let edit = || {
        Reply::action(
            "edit_file",
            json!({ "path": "README.md", "old": "hello", "new": "hello!" }),
        )
    };
    let run = || Reply::action("run", json!({ "command": "false" }));
    t.replay
        .push([edit(), run(), edit(), run(), edit(), run(), edit(), run()]);
    let out = t.agent.turn("Make the check pass.").await.unwrap();
    assert_eq!(out.stop_reason, "repeating");
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 6, "the turn ends after the third round");
    assert_eq!(t.replay.left(), 2);
    assert!(!content(&last_message(&reqs, 3)).contains("note:"));
    let fourth = content(&last_message(&reqs, 4)).to_string();
    assert!(
        fourth.contains("the same 2 actions (edit_file, then run) done 2 times over"),
        "{fourth}"
    );
    assert!(fourth.contains("make a different change"), "{fourth}");
    assert!(log_lines(&t.ctx).iter().any(|l| l["event"] == "repeating"));
}

/// The launch prompt a worker of a four-worker organization gets.
fn launch_prompt(worker: &str) -> String {
    agensh_domain::prompt::WorkerPrompt {
        worker_id: worker,
        worker_count: 4,
        goal: "Make every test pass. Six independent parts, one module each; the tests of each are in tests/. Never edit the tests.",
        checkout: &format!("/org/workers/{worker}"),
        branch: &format!("{worker}/work"),
        deadline: "The run ends at 2030-01-01T00:20:00Z (UTC).",
        pack: &[],
    }
    .render()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_mode_shortens_the_prompts_names_the_claimed_files_and_keeps_chatter_off_the_board() {
    let mut t = setup(2, ToolStyle::Json, |c| c.mode = Mode::Small).await;
    t.replay.push([
        Reply::action(
            "claim",
            json!({ "text": "the readme", "label": "readme", "paths": ["README.md", "NEW.md"] }),
        ),
        Reply::action(
            "board_write",
            json!({ "kind": "OBSERVED", "text": "starting on the readme now" }),
        ),
        Reply::action(
            "board_write",
            json!({ "kind": "FAIL", "text": "sed -i on README breaks the line ending", "label": "readme" }),
        ),
        Reply::action("end_turn", json!({ "summary": "claimed" })),
    ]);
    let me = t.org.id(0);
    t.agent.turn(&launch_prompt(&me)).await.unwrap();
    let reqs = t.replay.requests();
    // The few tools a part needs.
    let names = branch_names(&reqs[0]);
    for n in [
        "write_file",
        "run",
        "read_file",
        "claim",
        "board_write",
        "end_turn",
    ] {
        assert!(names.contains(&n.to_string()), "no {n}: {names:?}");
    }
    for n in [
        "list_files",
        "edit_file",
        "release",
        "board_read",
        "msg_dm",
        "pr_review",
        "workers",
    ] {
        assert!(!names.contains(&n.to_string()), "{n} offered: {names:?}");
    }
    assert!(
        names.contains(&"ship".to_string())
            || (names.contains(&"pr_open".to_string()) && names.contains(&"pr_merge".to_string())),
        "no way to merge: {names:?}"
    );
    // A short system prompt and worker prompt.
    let system = content(&reqs[0]["messages"][0]);
    assert!(system.len() < 1600, "{} characters: {system}", system.len());
    let prompt = content(&reqs[0]["messages"][1]);
    assert!(prompt.contains("Never edit the tests."), "{prompt}");
    assert!(prompt.contains("# Steps"), "{prompt}");
    assert!(
        prompt.contains("The run ends at 2030-01-01T00:20:00Z"),
        "{prompt}"
    );
    assert!(!prompt.contains("Board records"), "{prompt}");
    // The claimed files are named with the claim, and the next step.
    let claimed = content(&last_message(&reqs, 1)).to_string();
    assert!(
        claimed.contains(
            "Your part's files: README.md (1 line).\nNot there yet: NEW.md.\nNext: write_file with path README.md;"
        ),
        "{claimed}"
    );
    // Chatter is refused with what to do; a FAIL is posted.
    let refused = content(&last_message(&reqs, 2)).to_string();
    assert!(
        refused.contains("in small mode the board takes only FAIL"),
        "{refused}"
    );
    assert!(refused.contains("go on with your part"), "{refused}");
    let records: Vec<String> = t
        .org
        .client(&t.org.id(1))
        .recent(None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.record.text.clone())
        .collect();
    assert!(
        records.iter().any(|r| r.contains("breaks the line ending")),
        "{records:?}"
    );
    assert!(
        !records.iter().any(|r| r.contains("starting on")),
        "{records:?}"
    );
    let start = log_lines(&t.ctx)
        .into_iter()
        .find(|l| l["event"] == "start")
        .unwrap();
    assert_eq!(start["mode"], "small");
}

/// The prompt of one request in tokens, estimated as the agent does (about 3.5 characters
/// a token and 4 per message): its messages, and the tool definitions when it sends them.
/// (A JSON schema becomes the server's grammar, not prompt text.)
fn prompt_tokens(req: &Value) -> u64 {
    let msgs = req["messages"].as_array().unwrap();
    let chars: usize = msgs
        .iter()
        .map(|m| {
            content(m).chars().count()
                + m.get("tool_calls")
                    .map_or(0, |c| c.to_string().chars().count())
        })
        .sum::<usize>()
        + req
            .get("tools")
            .map_or(0, |t| t.to_string().chars().count());
    (chars as f64 / 3.5).ceil() as u64 + 4 * msgs.len() as u64
}

/// The same part, done by the same scripted replies, in full and small mode on JSON style
/// (what the local model runs): prompt tokens per request. Prints the figures quoted in
/// docs/PERFORMANCE.md: `cargo test -p agensh-e2e --test builtin prompt_tokens -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_tokens_per_request_in_full_and_small_mode() {
    let mut figures = Vec::new();
    for mode in [Mode::Full, Mode::Small] {
        let mut t = setup(1, ToolStyle::Json, |c| c.mode = mode).await;
        t.replay.push([
            Reply::action(
                "claim",
                json!({ "text": "the readme", "label": "readme", "paths": ["README.md"] }),
            ),
            Reply::action("read_file", json!({ "path": "README.md" })),
        ]);
        // Full mode writes the file inside its action; small mode names the file and sends
        // its text in a code block, a request of its own.
        if mode == Mode::Full {
            t.replay.push([Reply::action(
                "write_file",
                json!({ "path": "README.md", "content": "goodbye\n" }),
            )]);
        } else {
            t.replay.push([
                Reply::action("write_file", json!({ "path": "README.md" })),
                Reply::text("```markdown\ngoodbye\n```"),
            ]);
        }
        t.replay.push([
            Reply::action("run", json!({ "command": "grep -c goodbye README.md" })),
            Reply::action("end_turn", json!({ "summary": "README says goodbye" })),
        ]);
        let me = t.org.id(0);
        t.agent.turn(&launch_prompt(&me)).await.unwrap();
        assert_eq!(t.org.on_main("README.md").await.as_deref(), Some("hello"));
        let written = std::fs::read_to_string(t.ctx.checkout.join("README.md")).unwrap();
        assert_eq!(written, "goodbye\n", "{mode} mode");
        let tokens: Vec<u64> = t.replay.requests().iter().map(prompt_tokens).collect();
        assert_eq!(tokens.len(), if mode == Mode::Full { 5 } else { 6 });
        let mean = tokens.iter().sum::<u64>() / tokens.len() as u64;
        eprintln!("{mode} mode: prompt tokens per request {tokens:?}, mean {mean}");
        figures.push(mean);
    }
    let (full, small) = (figures[0], figures[1]);
    eprintln!(
        "small mode sends {}% of full mode's prompt tokens per request",
        small * 100 / full
    );
    assert!(small * 2 < full, "small {small} vs full {full}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_request_and_tool_call_is_reported_as_the_turns_step() {
    let mut t = setup(1, ToolStyle::Json, |_| {}).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    t.replay.push([
        Reply::action("run", json!({ "command": "true" })).usage(1_000, 40),
        Reply::action("end_turn", json!({ "summary": "done" })).held(gate.clone()),
    ]);
    let steps = t.ctx.heartbeat.watch();
    let (out, ()) = tokio::join!(t.agent.turn("Run true."), async {
        // The second request waits: by then the first reply's tokens and the command
        // were reported, and the step is the second request.
        t.replay.wait_requests(2).await;
        let now = steps.borrow().clone().expect("a step was reported");
        assert!(now.step.starts_with("model request 2 ("), "{now:?}");
        assert!(now.step.ends_with(" tokens in)"), "{now:?}");
        assert_eq!(now.tokens, 1_040);
        assert!(now.tokens_per_sec > 0.0, "{now:?}");
        gate.notify_one();
    });
    assert_eq!(out.unwrap().stop_reason, "end_turn");
    assert!(t.ctx.heartbeat.silent_for() < Duration::from_secs(60));
}

/// Writes a part's stub and its test into the worker's checkout.
fn leap_part(ctx: &AgentContext) {
    std::fs::create_dir_all(ctx.checkout.join("kit")).unwrap();
    std::fs::create_dir_all(ctx.checkout.join("tests")).unwrap();
    std::fs::write(ctx.checkout.join("kit/leap.py"), "def leap(y):\n    pass\n").unwrap();
    std::fs::write(
        ctx.checkout.join("tests/test_leap.py"),
        "import unittest\nfrom kit.leap import leap\n\n\nclass TestLeap(unittest.TestCase):\n    def test_2000(self):\n        self.assertTrue(leap(2000))\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_mode_takes_a_files_text_from_a_code_block_asked_for_on_its_own() {
    let mut t = setup(1, ToolStyle::Json, |c| c.mode = Mode::Small).await;
    leap_part(&t.ctx);
    let first = "def leap(y):\n    return False\n";
    let fixed = "def leap(y):\n    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)\n";
    t.replay.push([
        Reply::action("write_file", json!({ "path": "kit/leap.py" })),
        Reply::text(&format!("Here it is:\n```python\n{first}```\nSimple.")).usage(600, 30),
        Reply::action("write_file", json!({ "path": "kit/leap.py" })),
        Reply::text(&format!("```python\nimport unittest\nclass TestLeap(unittest.TestCase): pass\n```\n```python\n{fixed}```")).usage(700, 40),
        Reply::action("run", json!({ "command": "python3 -m unittest tests/test_leap" })),
        Reply::action("write_file", json!({ "path": "kit/leap.py" })),
        Reply::text("The file is fine as it is."),
        Reply::action("end_turn", json!({ "summary": "leap done" })),
    ]);
    let out = t.agent.turn("Implement kit/leap.py.").await.unwrap();
    let reqs = t.replay.requests();
    assert_eq!(reqs.len(), 8);
    // The code request: no tools and no schema, the tests first, then the file.
    let code = &reqs[1];
    assert!(code.get("response_format").is_none() && code.get("tools").is_none());
    let msgs = code["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert!(content(&msgs[0]).contains("Answer with the whole file in one code block"));
    let asked = content(&msgs[1]);
    assert!(
        asked.starts_with("The tests, tests/test_leap.py:\n```python\nimport unittest\nfrom kit.leap import leap\n"),
        "{asked}"
    );
    assert!(
        asked.ends_with(
            "```\n\nThe file to complete, kit/leap.py:\n```python\ndef leap(y):\n    pass\n```"
        ),
        "{asked}"
    );
    assert!(!asked.contains("failed"), "{asked}");
    // What the block held was written and its tests were run at once: they fail.
    let written = content(&last_message(&reqs, 2)).to_string();
    assert!(written.contains("it holds the code block you sent. Its tests ran (python3 -m unittest tests.test_leap):\nexit code: 1"), "{written}");
    assert!(
        written.contains("They fail: call write_file again"),
        "{written}"
    );
    // The fix request shows the file as it is and that failure; the block of tests in
    // the answer is passed over for the file's own, and its tests pass.
    let again = content(&reqs[3]["messages"][1]);
    assert!(again.contains(&format!("```python\n{first}```")), "{again}");
    assert!(
        again.contains(
            "The last check failed like this; fix the file so it passes:\n```\nexit code: 1"
        ),
        "{again}"
    );
    assert!(
        again.contains("AssertionError: False is not true"),
        "{again}"
    );
    let passed = content(&last_message(&reqs, 4)).to_string();
    assert!(
        passed.contains("exit code: 0") && passed.contains("They pass: call ship now."),
        "{passed}"
    );
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("kit/leap.py")).unwrap(),
        fixed
    );
    // A test module written as a path is run by its dotted name; passing tests point to ship.
    let ran = content(&last_message(&reqs, 5)).to_string();
    assert!(ran.starts_with("result of run:\nexit code: 0"), "{ran}");
    assert!(
        ran.contains("(ran as: python3 -m unittest tests.test_leap"),
        "{ran}"
    );
    assert!(ran.contains("call ship now"), "{ran}");
    // An answer with no code block writes nothing and says so.
    let none = content(&last_message(&reqs, 7)).to_string();
    assert!(
        none.contains("no code block, so nothing was written to kit/leap.py"),
        "{none}"
    );
    // The code requests' tokens count in the turn's.
    assert!(out.usage.input_tokens >= 1_300, "{:?}", out.usage);
    assert!(out.usage.output_tokens >= 70, "{:?}", out.usage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_mode_lets_a_claim_that_collides_go_and_says_to_take_another_part() {
    let mut t = setup(2, ToolStyle::Json, |c| c.mode = Mode::Small).await;
    let other = t.org.id(1);
    let held = t
        .org
        .client(&other)
        .post_record(&agensh_domain::record::NewRecord {
            label: Some("leap".into()),
            paths: vec!["kit/leap.py".into()],
            ..agensh_domain::record::NewRecord::new(
                agensh_domain::record::RecordKind::Claim,
                "leap years",
            )
        })
        .await
        .unwrap();
    t.replay.push([
        Reply::action(
            "claim",
            json!({ "text": "leap", "label": "leap", "paths": ["kit/leap.py"] }),
        ),
        Reply::action(
            "claim",
            json!({ "text": "digits", "label": "digits", "paths": ["kit/digits.py"] }),
        ),
        Reply::action("end_turn", json!({ "summary": "claimed digits" })),
    ]);
    let out = t.agent.turn("Take a part.").await.unwrap();
    assert_eq!(
        statuses(&out.events)[..2],
        [
            ("claim".to_string(), "error".to_string()),
            ("claim".to_string(), "ok".to_string())
        ]
    );
    let reqs = t.replay.requests();
    let yielded = content(&last_message(&reqs, 1)).to_string();
    assert!(
        yielded.contains("another worker already holds this part, so your claim"),
        "{yielded}"
    );
    assert!(
        yielded.contains(&format!("{} held by {other}", held.record.id)),
        "{yielded}"
    );
    assert!(yielded.contains("Claim a different part"), "{yielded}");
    assert!(
        !yielded.contains("- board:"),
        "only the colliding claims are listed: {yielded}"
    );
    // Only the other worker's claim on leap is live, and ours on digits (newest first).
    let me = t.org.id(0);
    let live = live_claims(&t, &me).await;
    assert_eq!(
        live,
        [
            (me.clone(), Some("digits".to_string())),
            (other.clone(), Some("leap".to_string()))
        ],
        "{live:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_mode_posts_a_long_fail_cut_to_its_limit_with_the_whole_text_in_detail() {
    let mut t = setup(1, ToolStyle::Json, |c| c.mode = Mode::Small).await;
    let long = "ImportError: Failed to import test module: tests/test_primes Traceback (most recent call last): File loader.py, line 162, in loadTestsFromName";
    t.replay.push([
        Reply::action(
            "board_write",
            json!({ "kind": "FAIL", "text": long, "label": "primes" }),
        ),
        Reply::action("end_turn", json!({ "summary": "noted" })),
    ]);
    let out = t.agent.turn("Note what failed.").await.unwrap();
    assert_eq!(
        statuses(&out.events),
        [("board_write".to_string(), "ok".to_string())]
    );
    let me = t.org.id(0);
    let fail = t
        .org
        .client(&me)
        .recent(None)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.record.kind == agensh_domain::record::RecordKind::Fail)
        .expect("the FAIL was posted");
    assert!(
        fail.record
            .text
            .starts_with("ImportError: Failed to import"),
        "{:?}",
        fail.record
    );
    assert!(fail.record.text.chars().count() <= 100);
    let unfolded = t.org.client(&me).unfold(&fail.record.id).await.unwrap();
    assert_eq!(unfolded.record.detail.as_deref(), Some(long));
}

/// Moves main through a merged pull request of worker `who`: README.md says `text`.
async fn main_says(t: &Setup, who: &str, text: &str) {
    let ctx = t.org.context(who).await;
    std::fs::write(ctx.checkout.join("README.md"), text).unwrap();
    git(&ctx.checkout, &["commit", "-qam", "readme from main"]);
    let out = std::process::Command::new("git")
        .current_dir(&ctx.checkout)
        .env("AGENSH_PUSHER", who)
        .args([
            "push",
            "-q",
            "origin",
            &format!("HEAD:refs/heads/{who}/work"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = t.org.client(who);
    let pr = client
        .open_pr(&agensh_domain::pr::NewPr {
            branch: format!("{who}/work"),
            title: "readme".into(),
            body: None,
        })
        .await
        .unwrap();
    client.merge_pr(pr.number).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_mode_takes_one_part_at_a_time_from_mains_latest_code_and_skips_shipped_parts() {
    let mut t = setup(2, ToolStyle::Json, |c| c.mode = Mode::Small).await;
    let (me, other) = (t.org.id(0), t.org.id(1));
    // Our branch changed README.md one way (a part abandoned); main another way.
    std::fs::write(t.ctx.checkout.join("README.md"), "mine\n").unwrap();
    git(&t.ctx.checkout, &["commit", "-qam", "an abandoned try"]);
    main_says(&t, &other, "from main\n").await;
    // A part already shipped.
    t.org
        .client(&other)
        .post_record(&agensh_domain::record::NewRecord {
            label: Some("digits".into()),
            ..agensh_domain::record::NewRecord::new(
                agensh_domain::record::RecordKind::PatchSummary,
                "digits: implemented, tests pass",
            )
        })
        .await
        .unwrap();
    t.replay.push([
        Reply::action(
            "claim",
            json!({ "text": "digits", "label": "digits", "paths": ["kit/digits.py"] }),
        ),
        Reply::action(
            "claim",
            json!({ "text": "readme", "label": "readme", "paths": ["README.md"] }),
        ),
        Reply::action(
            "claim",
            json!({ "text": "parts", "label": "parts", "paths": ["PARTS.md"] }),
        ),
        Reply::action("end_turn", json!({ "summary": "took parts" })),
    ]);
    let out = t.agent.turn("Take a part.").await.unwrap();
    assert_eq!(
        statuses(&out.events),
        [
            ("claim".to_string(), "error".to_string()),
            ("claim".to_string(), "ok".to_string()),
            ("claim".to_string(), "ok".to_string()),
        ]
    );
    let reqs = t.replay.requests();
    let shipped = content(&last_message(&reqs, 1)).to_string();
    assert!(
        shipped.contains(
            "the part digits was shipped already; nothing was claimed. Shipped so far: digits."
        ),
        "{shipped}"
    );
    assert!(
        shipped.contains("if every part is shipped, end your turn"),
        "{shipped}"
    );
    let taken = content(&last_message(&reqs, 2)).to_string();
    assert!(
        taken.contains("Your checkout has main's latest code."),
        "{taken}"
    );
    // Main won where they conflicted, and the branch holds main: a ship merges cleanly.
    assert_eq!(
        std::fs::read_to_string(t.ctx.checkout.join("README.md")).unwrap(),
        "from main\n"
    );
    git(
        &t.ctx.checkout,
        &["merge-base", "--is-ancestor", "origin/main", "HEAD"],
    );
    // The next claim let the readme claim go: only parts is ours now.
    let live = live_claims(&t, &me).await;
    assert_eq!(live, [(me.clone(), Some("parts".to_string()))]);
}

/// The live claims on the board's recent view, as `who` reads it: author and label, newest
/// first.
async fn live_claims(t: &Setup, who: &str) -> Vec<(String, Option<String>)> {
    t.org
        .client(who)
        .recent(None)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.record.kind == agensh_domain::record::RecordKind::Claim)
        .map(|e| (e.record.author.clone(), e.record.label.clone()))
        .collect()
}
