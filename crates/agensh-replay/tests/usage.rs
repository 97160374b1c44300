//! The gateway's usage reader (`agensh_protocol::model_usage`) against what this replay
//! server writes for each API, streamed and not: the counts a scenario gives come back
//! exactly.

use agensh_protocol::model_usage::{usage_of_body, Flavour, StreamUsage, TokenUsage};
use agensh_replay::api::{self, Answer, Call};
use agensh_replay::{Api, UsageSpec};
use serde_json::json;

fn answer() -> Answer {
    Answer {
        id: "r1".into(),
        model: "replay-model".into(),
        text: Some("Running a command.".into()),
        calls: vec![Call {
            id: "call_1".into(),
            name: "run".into(),
            namespace: None,
            args: json!({ "command": "ls" }),
        }],
        usage: UsageSpec {
            input: 1200,
            output: 40,
            cached: 1000,
        },
    }
}

#[test]
fn usage_read_from_every_api_equals_what_was_served() {
    let want = TokenUsage {
        input: 1200,
        cached_input: 1000,
        output: 40,
    };
    for (api, flavour) in [
        (Api::Chat, Flavour::OpenAiChat),
        (Api::Responses, Flavour::OpenAiResponses),
        (Api::Anthropic, Flavour::Anthropic),
        (Api::Gemini, Flavour::Gemini),
    ] {
        let body = api::body(api, &answer());
        assert_eq!(
            usage_of_body(flavour, &body),
            Some(want),
            "{api:?} body: {body}"
        );
        let stream = api::events(api, &answer(), true);
        for cut in [1, 5, 64, stream.len()] {
            let mut s = StreamUsage::new(flavour);
            for chunk in stream.as_bytes().chunks(cut) {
                s.feed(chunk);
            }
            assert_eq!(
                s.usage(),
                Some(want),
                "{api:?} streamed in {cut}-byte chunks"
            );
        }
    }
}

#[tokio::test]
async fn a_padded_slow_stream_keeps_its_usage_and_arrives_event_by_event() {
    let scenario = agensh_replay::Scenario::parse(
        "pad_events = 20\npad_bytes = 10\nevent_delay_ms = 5\n[[step]]\ntext = \"hi\"\nusage = { input = 7, output = 3 }\ntool_calls = [{ name = \"run\" }]\n",
    )
    .unwrap();
    let server = agensh_replay::ReplayServer::start(scenario, "127.0.0.1:0", None)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&json!({ "model": "m", "stream": true, "stream_options": { "include_usage": true },
                       "messages": [], "tools": [{ "type": "function", "function": { "name": "run" } }] }))
        .send()
        .await
        .unwrap();
    let mut usage = StreamUsage::new(Flavour::OpenAiChat);
    let (mut chunks, mut text) = (0, String::new());
    while let Some(c) = resp.chunk().await.unwrap() {
        chunks += 1;
        usage.feed(&c);
        text.push_str(&String::from_utf8_lossy(&c));
    }
    assert_eq!(text.matches("xxxxxxxxxx").count(), 20);
    assert!(chunks > 20, "{chunks} chunks");
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(
        usage.usage(),
        Some(TokenUsage {
            input: 7,
            cached_input: 0,
            output: 3
        })
    );
}
