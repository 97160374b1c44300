//! `agensh mcp`, the stdio bridge to the hub's MCP endpoint: the real binary against a
//! real hub process, driven by a real MCP client (rmcp's child-process transport) and by
//! JSON-RPC lines written by hand.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{agensh, new_org, HubProcess};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_works_through_the_stdio_bridge() {
    let (tmp, dir) = new_org("bridge test");
    let hub = HubProcess::start(&dir);
    let workers = hub.admin().add_workers(2).await.unwrap();

    let mut cmd = tokio::process::Command::from(agensh());
    cmd.current_dir(tmp.path())
        .args(["mcp", "--hub", &hub.info.url, "--token", &workers[0].token]);
    let transport = TokioChildProcess::new(cmd).expect("agensh mcp starts");
    let c = ClientConfig::default()
        .serve(transport)
        .await
        .expect("initialize through the bridge");
    let info = c.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "agensh");

    let tools = c.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"board_write") && names.contains(&"pr_merge"),
        "{names:?}"
    );
    assert_eq!(names, agensh_hub::mcp::tools::names());

    let args = json!({"kind": "FACT", "text": "the bridge carries tool calls"});
    let r = c
        .call_tool(
            CallToolRequestParams::new("board_write")
                .with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .expect("tools/call");
    assert_eq!(r.is_error, Some(false));
    let text = &r.content[0].as_text().unwrap().text;
    assert!(text.starts_with("posted G1 [w01/FACT"), "{text}");
    assert_eq!(hub.admin().unfold("G1").await.unwrap().record.author, "w01");
    c.cancel().await.unwrap();
}

/// Runs `agensh mcp ARGS` in `cwd`, feeds it `input` and closes its stdin; returns the
/// exit success and the JSON lines it wrote on stdout.
fn bridge(cwd: &std::path::Path, args: &[&str], input: &[&str]) -> (bool, Vec<Value>) {
    let mut child = agensh()
        .current_dir(cwd)
        .arg("mcp")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh mcp starts");
    let mut stdin = child.stdin.take().unwrap();
    for line in input {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is JSON ({e}): {l}"))
        })
        .collect();
    (out.status.success(), lines)
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"by-hand","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_lines_in_one_answer_line_each_and_a_clean_exit_on_eof() {
    let (tmp, dir) = new_org("bridge lines");
    let hub = HubProcess::start(&dir);
    let workers = hub.admin().add_workers(2).await.unwrap();
    let url = hub.info.url.clone();
    let token = workers[0].token.clone();

    let (ok, lines) = tokio::task::spawn_blocking({
        let cwd = tmp.path().to_path_buf();
        move || {
            bridge(
                &cwd,
                &["--hub", &url, "--token", &token],
                &[
                    INIT,
                    INITIALIZED,
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
                    "",
                    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"board_write","arguments":{"kind":"OBSERVED","text":"typed by hand"}}}"#,
                    "not json",
                ],
            )
        }
    })
    .await
    .unwrap();
    assert!(ok, "the bridge exits 0 on EOF");
    assert_eq!(
        lines.len(),
        4,
        "one line per request, none for the notification: {lines:?}"
    );
    let by_id = |id: Value| {
        lines
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("an answer to {id}: {lines:?}"))
    };
    assert_eq!(by_id(json!(1))["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        by_id(json!(2))["result"]["tools"].as_array().unwrap().len(),
        agensh_hub::mcp::tools::names().len()
    );
    let r = &by_id(json!(3))["result"];
    assert_eq!(r["isError"], false);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("posted G1 [w01/OBSERVED"));
    assert_eq!(by_id(Value::Null)["error"]["code"], -32700);

    // From the organization directory, with the admin token of hub.json acting as w02.
    let (ok, lines) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            bridge(
                &dir,
                &["--as", "w02"],
                &[
                    INIT,
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"board_write","arguments":{"kind":"FACT","text":"via hub.json"}}}"#,
                ],
            )
        }
    })
    .await
    .unwrap();
    assert!(ok);
    let text = lines[1]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("posted G2 [w02/FACT"), "{text}");

    // A wrong token: every request gets a JSON-RPC error that says why.
    let url = hub.info.url.clone();
    let (ok, lines) = tokio::task::spawn_blocking({
        let cwd = tmp.path().to_path_buf();
        move || {
            bridge(
                &cwd,
                &[
                    "--hub",
                    &url,
                    "--token",
                    "agw_0000000000000000000000000000000000000000",
                ],
                &[INIT, INITIALIZED],
            )
        }
    })
    .await
    .unwrap();
    assert!(ok);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["id"], 1);
    let msg = lines[0]["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("the hub refused (unauthorized)"), "{msg}");

    // No hub: the requests are answered with the advice, and the bridge still ends cleanly.
    drop(hub);
    let url = "http://127.0.0.1:9".to_string();
    let (ok, lines) = tokio::task::spawn_blocking({
        let cwd = tmp.path().to_path_buf();
        move || {
            bridge(
                &cwd,
                &["--hub", &url, "--token", "x", "--hub-wait", "1"],
                &[INIT],
            )
        }
    })
    .await
    .unwrap();
    assert!(ok);
    let msg = lines[0]["error"]["message"].as_str().unwrap();
    assert!(msg.contains("has not answered for 1 s"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ship_through_the_bridge_commits_and_pushes_its_working_directory_first() {
    let (_tmp, dir) = new_org("bridge ship");
    let hub = HubProcess::start(&dir);
    let workers = hub.admin().add_workers(1).await.unwrap();
    let ws = agensh_workspace::Workspace::open(&dir.join(".agensh/workspace.git")).unwrap();
    let checkout = agensh_workspace::checkout::checkout_dir(&dir, "w01");
    agensh_workspace::checkout::create(&ws, "w01", &checkout)
        .await
        .unwrap();
    std::fs::write(checkout.join("feature.txt"), "done\n").unwrap();
    let (url, token) = (hub.info.url.clone(), workers[0].token.clone());

    let (ok, lines) = tokio::task::spawn_blocking(move || {
        bridge(
            &checkout,
            &["--hub", &url, "--token", &token],
            &[
                INIT,
                INITIALIZED,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ship","arguments":{"title":"Add the feature","summary":"files=feature.txt"}}}"#,
            ],
        )
    })
    .await
    .unwrap();
    assert!(ok);
    let result = &lines.iter().find(|l| l["id"] == 2).expect("ship answered")["result"];
    assert_eq!(result["isError"], false, "{result}");
    let first = result["content"][0]["text"].as_str().unwrap();
    assert!(
        first.starts_with("in your checkout: committed 1 changed file(s)"),
        "{first}"
    );
    let second = result["content"][1]["text"].as_str().unwrap();
    assert!(second.starts_with("shipped PR #1 into main"), "{second}");
    let on_main = ws.git().run(["show", "main:feature.txt"]).await.unwrap();
    assert_eq!(on_main, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_made_while_the_hub_is_down_goes_through_once_it_is_back() {
    use std::io::BufRead;
    let (tmp, dir) = new_org("bridge restart");
    let hub = HubProcess::start(&dir);
    let listen = hub.listen();
    let token = hub.admin().add_workers(1).await.unwrap().remove(0).token;
    let mut child = agensh()
        .current_dir(tmp.path())
        .args(["mcp", "--hub", &hub.info.url, "--token", &token])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("agensh mcp starts");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(serde_json::from_str(&line).unwrap());
        }
    });
    writeln!(stdin, "{INIT}").unwrap();
    let init = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");

    hub.kill_9();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "board_write", "arguments": {"kind": "FACT", "text": "written across a restart by a pangolin"}}});
    writeln!(stdin, "{call}").unwrap();
    // Down for two seconds: the call waits, then reaches the restarted hub.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(rx.try_recv().is_err(), "no answer while the hub is down");
    let hub = HubProcess::start_on(&dir, &listen);
    let answer = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the call is answered once the hub is back");
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let found = hub.admin().grep("pangolin", None, None).await.unwrap();
    assert_eq!(found.len(), 1, "stored once: {found:?}");
    drop(stdin);
    let _ = child.wait();
}
