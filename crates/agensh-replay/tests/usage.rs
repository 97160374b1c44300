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
