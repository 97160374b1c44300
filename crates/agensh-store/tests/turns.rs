//! Workers' turns as their nodes report them: stored durably, one per (worker, turn), a
//! report sent again replacing the first, read newest first in pages.

mod common;

use agensh_protocol::dashboard::{ToolCallSummary, TurnReport};
use common::TestStore;

stores!(turns_are_kept_per_worker_newest_first_and_a_resent_report_replaces_the_first);

fn report(turn: u64, prompt: &str) -> TurnReport {
    TurnReport {
        turn,
        started_at: 1_700_000_000_000 + turn as i64 * 1_000,
        ended_at: 1_700_000_000_500 + turn as i64 * 1_000,
        prompt: prompt.into(),
        events: vec![turn as i64, turn as i64 + 10],
        tool_calls: vec![ToolCallSummary {
            name: "claim".into(),
            title: "claim".into(),
            status: "completed".into(),
        }],
        tool_calls_dropped: 0,
        input_tokens: 1_000 * turn,
        output_tokens: 10 * turn,
        stop_reason: "end_turn".into(),
        last_action: "claim".into(),
        restarts: 0,
        memory_kills: 0,
    }
}

async fn turns_are_kept_per_worker_newest_first_and_a_resent_report_replaces_the_first(
    t: TestStore,
) {
    {
        let store = &t;
        for t in 1..=5 {
            store
                .record_turn("w01", &report(t, &format!("prompt {t}")))
                .await
                .unwrap();
        }
        store.record_turn("w02", &report(1, "other")).await.unwrap();
        // Turn 3 again (a node that retried): the second report wins, no second row.
        let mut again = report(3, "prompt 3, sent again");
        again.restarts = 2;
        again.tool_calls_dropped = 7;
        store.record_turn("w01", &again).await.unwrap();
    }
    // Acknowledged means stored: a new process finds every turn.
    let store = t.reopen().await;
    let all = store.turns("w01", None, 50).await.unwrap();
    let numbers: Vec<u64> = all.iter().map(|t| t.turn).collect();
    assert_eq!(numbers, [5, 4, 3, 2, 1], "newest first, one row per turn");
    assert_eq!(all[2].prompt, "prompt 3, sent again");
    assert_eq!((all[2].restarts, all[2].tool_calls_dropped), (2, 7));
    assert_eq!(all[0], report(5, "prompt 5"), "the report reads back whole");

    // Pages: `limit` newest below `before`.
    let page = store.turns("w01", Some(4), 2).await.unwrap();
    assert_eq!(page.iter().map(|t| t.turn).collect::<Vec<_>>(), [3, 2]);
    assert!(store.turns("w01", Some(1), 50).await.unwrap().is_empty());
    assert_eq!(
        store.turns("w01", Some(u64::MAX), 1).await.unwrap()[0].turn,
        5
    );

    // Another worker's turns are its own.
    let other = store.turns("w02", None, 50).await.unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].prompt, "other");
    assert!(store.turns("w03", None, 50).await.unwrap().is_empty());
}
