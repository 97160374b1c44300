//! The command line as a person uses it, against a real hub process.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{agensh, new_org, run_in, stderr, stdout, HubProcess};

#[test]
fn init_writes_a_commented_config_and_a_private_state_directory() {
    let (_tmp, dir) = new_org("build a calculator");
    let toml = std::fs::read_to_string(dir.join("agensh.toml")).unwrap();
    assert!(toml.contains("goal = \"build a calculator\""));
    assert!(toml.contains("claim_lease_secs = 3600"));
    assert!(toml.contains("view_cap = 2000"));
    let mode = std::fs::metadata(dir.join(".agensh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(dir.join(".agensh/store.sqlite").exists());
}

#[test]
fn init_refuses_an_existing_organization() {
    let (_tmp, dir) = new_org("x");
    let out = agensh()
        .args(["init", dir.to_str().unwrap(), "--goal", "y"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "a local failure");
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
}

#[test]
fn hub_refuses_a_directory_that_is_not_an_organization() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_in(tmp.path(), &["hub", "."]);
    assert_eq!(out.status.code(), Some(4), "a local failure");
    assert!(stderr(&out).contains("agensh init"), "{}", stderr(&out));
}

#[test]
fn hub_json_is_private_and_removed_on_sigterm() {
    let (_tmp, dir) = new_org("x");
    let hub = HubProcess::start(&dir);
    let path = dir.join(".agensh/hub.json");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let status = hub.terminate();
    assert!(status.success(), "hub exited with {status}");
    assert!(!path.exists());
}

#[test]
fn workers_add_prints_new_ids_one_per_line() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    let out = run_in(&dir, &["workers", "add", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "w01\nw02\nw03\n");
}

#[test]
fn a_person_can_act_as_a_worker_with_its_token() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "2"]);
    let token = stdout(&run_in(&dir, &["workers", "token", "w02"]))
        .trim()
        .to_string();
    assert!(token.starts_with("agw_"));
    let out = agensh()
        .current_dir(&dir)
        .env("AGENSH_TOKEN", &token)
        .args([
            "board",
            "post",
            "FACT",
            "tests live in tests/",
            "--label",
            "layout",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let shown = stdout(&run_in(&dir, &["board", "unfold", &id]));
    assert!(shown.contains("by w02"), "{shown}");
}

#[test]
fn a_worker_token_cannot_act_as_another_worker() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "2"]);
    let token = stdout(&run_in(&dir, &["workers", "token", "w01"]))
        .trim()
        .to_string();
    let out = agensh()
        .current_dir(&dir)
        .env("AGENSH_TOKEN", &token)
        .args(["--as", "w02", "msg", "send", "#general", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("can only act as its own worker"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).ends_with("leave out the X-Agensh-As header (drop --as)\n"),
        "the command line adds its flag: {}",
        stderr(&out)
    );
}

#[test]
fn a_rejected_record_prints_the_advice_and_exits_1() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    let long = "x".repeat(143);
    let out = run_in(&dir, &["board", "post", "FACT", &long]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail (--detail)"),
        "{}",
        stderr(&out)
    );
    let grep = run_in(&dir, &["board", "grep", "kind:FACT", "--json"]);
    assert_eq!(stdout(&grep).trim(), "[]");
}

#[test]
fn an_unreachable_hub_exits_3_with_advice() {
    let (_tmp, dir) = new_org("x");
    let out = run_in(
        &dir,
        &[
            "--hub",
            "http://127.0.0.1:9",
            "--token",
            "agw_x",
            "board",
            "read",
            "--all",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("is `agensh hub` running?"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_board_stays_readable_when_no_hub_runs() {
    let (_tmp, dir) = new_org("x");
    // A hub that was killed leaves its hub.json behind: that is no running hub either.
    HubProcess::start(&dir).kill_9();
    assert!(dir.join(".agensh/hub.json").exists());
    let out = run_in(&dir, &["board", "post", "FACT", "tests live in tests/"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no hub is running for"),
        "{}",
        stderr(&out)
    );
    let out = run_in(&dir, &["board", "read", "--all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tests live in tests/"),
        "{}",
        stdout(&out)
    );
    let out = run_in(&dir, &["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn events_ack_acknowledges_what_events_showed() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "2"]);
    run_in(
        &dir,
        &["--as", "w01", "msg", "send", "w02", "please review G1"],
    );
    let shown = stdout(&run_in(&dir, &["--as", "w02", "events"]));
    assert!(
        shown.contains("msg.dm") && shown.contains("urgent"),
        "{shown}"
    );
    let acked = run_in(&dir, &["--as", "w02", "events", "ack"]);
    assert_eq!(stdout(&acked).trim(), "acknowledged 1 event(s)");
    let after = run_in(&dir, &["--as", "w02", "events", "--json"]);
    assert_eq!(stdout(&after).trim(), "[]");
}

#[test]
fn msg_status_shows_where_a_message_stands_with_its_recipient() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "3"]);
    let sent = run_in(
        &dir,
        &["--as", "w01", "msg", "send", "w02", "please review G1"],
    );
    let id = stdout(&sent).trim().to_string();
    assert_eq!(id, "M1");
    let out = run_in(&dir, &["--as", "w01", "msg", "status", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("M1 from w01 to w02 at "), "{text}");
    assert!(lines[1].starts_with("WORKER  STATE"), "{text}");
    assert_eq!(lines.len(), 3, "{text}");
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(row, ["w02", "stored", "-", "-", "-"], "{text}");

    // w02 takes it without a presentation first (as `events ack` does): acknowledged,
    // presented via prompt at the same moment.
    run_in(&dir, &["--as", "w02", "events", "ack"]);
    let out = run_in(&dir, &["--as", "w01", "msg", "status", "1", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let r = &status["receipts"][0];
    assert_eq!(
        (&r["worker"], &r["state"], &r["via"]),
        (&"w02".into(), &"acknowledged".into(), &"prompt".into())
    );
    assert_eq!(r["presented_at"], r["acknowledged_at"]);
    let text = stdout(&run_in(&dir, &["--as", "w01", "msg", "status", &id]));
    let row: Vec<&str> = text.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[4]),
        ("w02", "acknowledged", "prompt"),
        "{text}"
    );

    // A worker that neither sent nor received it may not ask.
    let token = stdout(&run_in(&dir, &["workers", "token", "w03"]))
        .trim()
        .to_string();
    let out = agensh()
        .current_dir(&dir)
        .env("AGENSH_TOKEN", &token)
        .args(["msg", "status", "M1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "only the sender of M1 (w01), its recipient (w02) and the admin may read its receipts"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn hub_stops_cleanly_on_ctrl_c() {
    let (_tmp, dir) = new_org("x");
    let hub = HubProcess::start(&dir);
    let status = hub.signal("INT");
    assert!(status.success(), "hub exited with {status}");
    assert!(!dir.join(".agensh/hub.json").exists());
}

#[test]
fn tokens_never_appear_in_the_hub_log() {
    let (tmp, dir) = new_org("x");
    let log_path = tmp.path().join("hub.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let hub = HubProcess::start_logging(&dir, log, "trace");
    run_in(&dir, &["workers", "add", "2"]);
    let token = stdout(&run_in(&dir, &["workers", "token", "w01"]))
        .trim()
        .to_string();
    let out = agensh()
        .current_dir(&dir)
        .env("AGENSH_TOKEN", &token)
        .args(["board", "post", "FACT", "logged request"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let bad = agensh()
        .current_dir(&dir)
        .env("AGENSH_TOKEN", "agw_not_a_real_token")
        .args(["board", "read"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let admin = hub.info.admin_token.clone();
    assert!(hub.terminate().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("request"),
        "the trace log records requests: {log}"
    );
    assert!(!log.contains(&admin), "admin token in the log");
    assert!(!log.contains(&token), "worker token in the log");
    assert!(
        !log.contains("agw_not_a_real_token"),
        "rejected token in the log"
    );
}

#[test]
fn pr_ship_commits_pushes_and_merges_the_checkout_it_runs_in() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "1"]);
    let out = run_in(&dir, &["workers", "checkout", "w01"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let checkout = dir.join("workers/w01");
    std::fs::write(checkout.join("feature.txt"), "done\n").unwrap();
    let ship = |extra: &[&str]| {
        agensh()
            .current_dir(&checkout)
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .args([
                "pr",
                "ship",
                "--title",
                "Add the feature",
                "--summary",
                "files=feature.txt",
            ])
            .output()
            .unwrap()
    };
    let refused = ship(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--as ID"), "{}", stderr(&refused));

    let out = ship(&["--as", "w01"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("committed 1 changed file(s)"),
        "{text}"
    );
    assert!(lines[2].starts_with("opened PR #1"), "{text}");
    assert!(lines[3].starts_with("merged PR #1 into main"), "{text}");
    let shown = stdout(&run_in(&dir, &["pr", "view", "1"]));
    assert!(shown.contains("[merged]"), "{shown}");
}

/// `agensh model replay SCENARIO` on a free port of 127.0.0.1.
fn replay(scenario: &std::path::Path) -> std::process::Command {
    let mut c = agensh();
    c.args(["model", "replay", scenario.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"]);
    c
}

#[test]
fn model_replay_serves_its_scenario_and_says_what_it_served() {
    use std::io::{BufRead, Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(
        &scenario,
        "[[step]]\ntext = \"hi\"\ntool_calls = [{ name = \"bash\", args = { command = \"ls\" } }]\n\
         usage = { input = 50, output = 5 }\n",
    )
    .unwrap();
    let mut child = replay(&scenario)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches(';');
    let addr = url.trim_start_matches("http://");
    let body = r#"{"model":"m","messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"bash"}}]}"#;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer w01\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(r#""finish_reason":"tool_calls""#),
        "{answer}"
    );
    // Ctrl-C (SIGTERM here): it stops and says what it served each key.
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        rest.contains("w01: 1 request(s) and 0 without tools; tokens in 50 (cached 0) out 5"),
        "{rest}"
    );
}

#[test]
fn model_replay_names_what_is_wrong_in_a_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(&scenario, "[[step]]\n").unwrap();
    let o = replay(&scenario).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("step 1: it has no text"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_claim_is_taken_over_with_take_over_and_a_live_ones_is_refused() {
    use agensh_domain::worker::WorkerStatus;
    let (_tmp, dir) = new_org("x");
    let hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "2"]);
    let out = run_in(
        &dir,
        &[
            "--as",
            "w01",
            "board",
            "post",
            "CLAIM",
            "the parser",
            "--label",
            "parser",
            "--paths",
            "src/parser/",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "G1\n");
    hub.admin()
        .set_status("w01", WorkerStatus::Busy)
        .await
        .unwrap();

    let take = [
        "--as",
        "w02",
        "board",
        "post",
        "CLAIM",
        "finishing the parser",
        "--take-over",
        "G1",
    ];
    let out = run_in(&dir, &take);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("G1 is w01's live claim (w01 is busy, lease "),
        "{err}"
    );
    assert!(
        err.ends_with(
            "message w01 to hand it over, or claim something else (agensh msg send ID TEXT)\n"
        ),
        "{err}"
    );
    let out = run_in(
        &dir,
        &[
            "--as",
            "w02",
            "board",
            "post",
            "FACT",
            "x",
            "--take-over",
            "G1",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).ends_with("(drop --take-over)\n"),
        "{}",
        stderr(&out)
    );

    hub.admin()
        .set_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();
    let out = run_in(&dir, &take);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "G2\n");
    assert_eq!(stderr(&out), "took over G1 from w01 (dead); w01 is told\n");

    let view = stdout(&run_in(&dir, &["board", "read", "--all"]));
    assert_eq!(
        view.lines().count(),
        1,
        "only the new claim is live: {view}"
    );
    assert!(
        view.starts_with("G2 [w02/CLAIM ")
            && view.contains(
                "finishing the parser #parser paths=src/parser/ takes over G1 (w01, dead)"
            ),
        "{view}"
    );
    let old = stdout(&run_in(&dir, &["board", "unfold", "G1"]));
    assert!(old.contains("lease: taken over by G2"), "{old}");
    let new = stdout(&run_in(&dir, &["board", "unfold", "G2"]));
    assert!(new.contains("takes over: G1 (w01, dead)"), "{new}");
}
