//! The replay server over real HTTP on 127.0.0.1, as an agent CLI's client meets it.

use agensh_replay::{ReplayServer, Scenario};
use serde_json::{json, Value};

const SCENARIO: &str = r#"
side_text = "a title"
final_text = "All done."

[[step]]
text = "Looking."
tool_calls = [
  { any = [ { name = "Bash", args = { command = "ls" } },
            { name = "run_shell_command", args = { command = "ls" } },
            { name = "shell", args = { command = ["ls"] } } ] },
]
usage = { input = 1000, output = 20, cached = 600 }

[[step]]
tool_calls = [ { name = "board_write", args = { kind = "FACT", text = "seen" } } ]
usage = { input = 1100, output = 30 }
"#;

async fn server(scenario: &str) -> ReplayServer {
    ReplayServer::start(Scenario::parse(scenario).unwrap(), "127.0.0.1:0", None)
        .await
        .unwrap()
}

async fn post(url: &str, key: (&str, &str), body: Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(url)
        .header(key.0, key.1)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn data(events: &str) -> Vec<Value> {
    events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn anthropic_request(stream: bool) -> Value {
    json!({
        "model": "claude-test", "max_tokens": 100, "stream": stream,
        "messages": [{ "role": "user", "content": "go" }],
        "tools": [{ "name": "Bash", "input_schema": { "type": "object" } },
                  { "name": "mcp__agensh__board_write", "input_schema": { "type": "object" } }],
    })
}

#[tokio::test]
async fn each_key_follows_the_scenario_on_its_own_and_usage_is_counted_per_key() {
    let s = server(SCENARIO).await;
    let url = format!("{}/v1/messages", s.url());
    let (status, first) = post(&url, ("x-api-key", "w01"), anthropic_request(false)).await;
    assert_eq!(status, 200, "{first}");
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["content"][0]["text"], "Looking.");
    assert_eq!(first["content"][1]["name"], "Bash");
    assert_eq!(first["content"][1]["input"]["command"], "ls");
    assert_eq!(first["usage"]["input_tokens"], 400);
    assert_eq!(first["usage"]["cache_read_input_tokens"], 600);

    // Another key starts at the first step too.
    let (_, other) = post(&url, ("x-api-key", "w02"), anthropic_request(false)).await;
    let other: Value = serde_json::from_str(&other).unwrap();
    assert_eq!(other["content"][1]["name"], "Bash");

    // A request without tools (a title) takes no step.
    let (_, side) = post(
        &url,
        ("x-api-key", "w01"),
        json!({ "model": "m", "max_tokens": 10, "messages": [{ "role": "user", "content": "title?" }] }),
    )
    .await;
    let side: Value = serde_json::from_str(&side).unwrap();
    assert_eq!(side["content"][0]["text"], "a title");

    // w01's second step: board_write, found under its MCP prefix.
    let (_, second) = post(&url, ("x-api-key", "w01"), anthropic_request(false)).await;
    let second: Value = serde_json::from_str(&second).unwrap();
    assert_eq!(second["content"][0]["name"], "mcp__agensh__board_write");
    assert_eq!(second["stop_reason"], "tool_use");
    // Then the final text, which ends the turn.
    let (_, last) = post(&url, ("x-api-key", "w01"), anthropic_request(false)).await;
    let last: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["content"][0]["text"], "All done.");
    assert_eq!(last["stop_reason"], "end_turn");

    let served = s.served();
    assert_eq!(served["w01"].requests, 3);
    assert_eq!(served["w01"].side_requests, 1);
    assert_eq!(served["w02"].requests, 1);
    assert_eq!(served["w02"].input_tokens, 1000);
    assert_eq!(served["w02"].cached_input_tokens, 600);
    let steps: Vec<Option<usize>> = s
        .requests()
        .iter()
        .filter(|r| r.key == "w01")
        .map(|r| r.step)
        .collect();
    assert_eq!(steps, [Some(1), None, Some(2), None]);
    s.stop().await;
}

#[tokio::test]
async fn every_api_streams_the_step_in_its_own_events() {
    let s = server(SCENARIO).await;
    let base = s.url();

    // Anthropic Messages, streamed.
    let (_, ev) = post(
        &format!("{base}/v1/messages?beta=true"),
        ("x-api-key", "a"),
        anthropic_request(true),
    )
    .await;
    let ev = data(&ev);
    assert_eq!(ev[0]["type"], "message_start");
    assert!(ev.iter().any(|e| e["content_block"]["name"] == "Bash"));
    assert_eq!(ev.last().unwrap()["type"], "message_stop");

    // Chat Completions, streamed with the usage chunk asked for.
    let (_, ev) = post(
        &format!("{base}/v1/chat/completions"),
        ("authorization", "Bearer c"),
        json!({
            "model": "gpt-test", "stream": true, "stream_options": { "include_usage": true },
            "messages": [{ "role": "user", "content": "go" }],
            "tools": [{ "type": "function", "function": { "name": "bash", "parameters": {} } },
                      { "type": "function", "function": { "name": "run_shell_command", "parameters": {} } }],
        }),
    )
    .await;
    let ev = data(&ev);
    let call = ev
        .iter()
        .find_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]
                .as_object()
                .cloned()
        })
        .expect("a tool call chunk");
    assert_eq!(call["function"]["name"], "run_shell_command");
    assert_eq!(ev.last().unwrap()["usage"]["completion_tokens"], 20);

    // Responses, streamed, with MCP tools in a namespace.
    let (_, ev) = post(
        &format!("{base}/v1/responses"),
        ("authorization", "Bearer r"),
        json!({
            "model": "codex-test", "stream": true, "input": "go",
            "tools": [{ "type": "function", "name": "shell" },
                      { "type": "namespace", "name": "mcp__agensh", "tools": [{ "name": "board_write" }] }],
        }),
    )
    .await;
    let done = data(&ev).pop().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["output"][1]["name"], "shell");
    assert_eq!(
        done["response"]["output"][1]["arguments"],
        json!({ "command": ["ls"] }).to_string()
    );

    // Gemini, streamed, key in the query.
    let (_, ev) = post(
        &format!("{base}/v1beta/models/gemini-test:streamGenerateContent?alt=sse&key=g"),
        ("x-client", "t"),
        json!({
            "contents": [{ "role": "user", "parts": [{ "text": "go" }] }],
            "tools": [{ "functionDeclarations": [{ "name": "run_shell_command" }] }],
        }),
    )
    .await;
    let chunk = &data(&ev)[0];
    assert_eq!(
        chunk["candidates"][0]["content"]["parts"][1]["functionCall"]["name"],
        "run_shell_command"
    );
    assert_eq!(chunk["usageMetadata"]["promptTokenCount"], 1000);
    assert_eq!(chunk["modelVersion"], "gemini-test");

    let keys: Vec<String> = s.served().into_keys().collect();
    assert_eq!(keys, ["a", "c", "g", "r"]);
    s.stop().await;
}

#[tokio::test]
async fn an_error_step_and_a_refused_key_answer_in_the_apis_shape() {
    let s =
        server("keys = [\"good\"]\n[[step]]\nerror = { status = 529, message = \"overloaded\" }\n")
            .await;
    let url = format!("{}/v1/messages", s.url());
    let (status, body) = post(&url, ("x-api-key", "bad"), anthropic_request(false)).await;
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not one this replay server accepts"));

    let (status, body) = post(&url, ("x-api-key", "good"), anthropic_request(false)).await;
    assert_eq!(status, 529, "{body}");
    assert!(body.contains("overloaded_error"), "{body}");
    // Nothing was served: errors count no usage.
    assert!(s.served().is_empty(), "{:?}", s.served());

    // A body that is not JSON, and a path it does not serve, are named.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = reqwest::Client::new()
        .post(format!("{}/v2/other", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert!(r.text().await.unwrap().contains("/v1/messages"));
    s.stop().await;
}

#[tokio::test]
async fn every_request_is_recorded_to_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("requests.jsonl");
    let s = ReplayServer::start(
        Scenario::parse(SCENARIO).unwrap(),
        "127.0.0.1:0",
        Some(path.clone()),
    )
    .await
    .unwrap();
    let url = format!("{}/v1beta/models/g:generateContent", s.url());
    let req = json!({
        "contents": [{ "role": "user", "parts": [{ "text": "go" }] }],
        "tools": [{ "functionDeclarations": [{ "name": "run_shell_command" }] }],
    });
    for _ in 0..2 {
        let (status, _) = post(&url, ("x-goog-api-key", "k"), req.clone()).await;
        assert_eq!(status, 200);
    }
    s.stop().await;
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["api"], "gemini");
    assert_eq!(lines[0]["tools"], json!(["run_shell_command"]));
    assert_eq!(lines[1]["step"], 2);
    assert_eq!(lines[1]["body"], req);
}
