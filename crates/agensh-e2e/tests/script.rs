//! The scripted agent in an organization: several `agensh agent script` processes, driven
//! by the ACP adapter, against one real hub and workspace. They find free parts through
//! claims and their overlaps, merge through pull requests (settling merge conflicts by
//! merging main), hear urgent events inside a turn, and stop when nothing is left.

mod support;

use std::time::Duration;

use agensh_domain::message::NewMessage;
use agensh_domain::record::RecordKind;
use agensh_node::adapters::acp::AcpAgent;
use agensh_node::adapters::Agent;
use agensh_testkit::scenario::{step, Scenario, Step};
use serde_json::Value;
use support::{entries, tools_called, AgentOrg, Org};

/// Each prompt: claim; then write, push, merge, summarize, release (with `one_turn`, all
/// in one turn).
fn claim_then_ship(parts: &[&str], one_turn: bool) -> String {
    let claim = if one_turn {
        vec![step::claim_free_part()]
    } else {
        vec![step::claim_free_part(), step::end_turn()]
    };
    Scenario::new()
        .parts(parts)
        .templates(
            "def {part}():\n    return '{part}'\n",
            "from parts.{part} import {part}\n",
        )
        .steps(claim)
        .step(step::write_part())
        .step(Step::WriteFile {
            path: "PARTS.md".into(),
            text: "- {part} by {worker}\n".into(),
            append: true,
        })
        .step(step::commit_push())
        .step(step::open_and_merge_pr())
        .step(step::board_write(
            "PATCH_SUMMARY",
            "files=parts/{part}.py | idea=return the name | evidence=tests passed",
        ))
        .step(step::release())
        .step(step::end_turn())
        .to_toml()
}

async fn started(org: &Org, id: &str, scenario: &std::path::Path) -> AcpAgent {
    let ctx = org.context(id).await;
    let mut agent = org.script_agent(scenario);
    agent.start(&ctx).await.expect("the scripted agent starts");
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_second_agent_sees_the_overlap_takes_another_part_and_both_merge() {
    let org = support::start(3).await;
    let (a, b, c) = (org.id(0), org.id(1), org.id(2));
    let scenario = org.scenario("two", &claim_then_ship(&["p1", "p2", "p3"], false));
    let mut agent_a = started(&org, &a, &scenario).await;
    let mut agent_b = started(&org, &b, &scenario).await;

    // A claims first and takes p1; B's claim on p1 overlaps A's live claim, so B lets it
    // go and takes p2.
    assert_eq!(agent_a.turn("go").await.unwrap().stop_reason, "end_turn");
    assert_eq!(agent_b.turn("go").await.unwrap().stop_reason, "end_turn");
    let log = org.log_entries();
    assert_eq!(tools_called(&log, &a), ["claim"]);
    assert_eq!(tools_called(&log, &b), ["claim", "release", "claim"]);
    let b_calls = entries(&log, "tool", &b);
    assert_eq!(b_calls[0]["args"]["label"], "part-p1");
    assert!(
        b_calls[0]["text"].as_str().unwrap().contains("OVERLAP"),
        "{}",
        b_calls[0]
    );
    assert_eq!(
        b_calls[0]["structured"]["overlaps"][0]["author"],
        a.as_str()
    );
    assert_eq!(b_calls[2]["args"]["label"], "part-p2");
    let live: Vec<(String, Option<String>)> = org
        .client(&a)
        .workers()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|w| w.claims.into_iter().map(move |c| (w.id.clone(), c.label)))
        .collect();
    assert_eq!(
        live,
        [
            (a.clone(), Some("part-p1".to_string())),
            (b.clone(), Some("part-p2".to_string()))
        ]
    );

    // Both do their part, in parallel. Both branches started from the first main and
    // append to PARTS.md, so the second merge conflicts; that agent merges main into its
    // branch (keeping both lines), pushes, and merges again.
    let (ra, rb) = tokio::join!(agent_a.turn("continue"), agent_b.turn("continue"));
    assert_eq!(ra.unwrap().stop_reason, "end_turn");
    assert_eq!(rb.unwrap().stop_reason, "end_turn");
    let files = org.files_on_main().await;
    for f in [
        "parts/p1.py",
        "parts/p2.py",
        "tests/test_p1.py",
        "tests/test_p2.py",
    ] {
        assert!(files.contains(f), "{f} is on main: {files:?}");
    }
    let parts_md = org.on_main("PARTS.md").await.expect("PARTS.md is on main");
    assert!(parts_md.contains(&format!("- p1 by {a}")), "{parts_md}");
    assert!(parts_md.contains(&format!("- p2 by {b}")), "{parts_md}");
    let prs = org
        .client(&a)
        .list_prs(Some("merged"), None, None)
        .await
        .unwrap();
    assert_eq!(prs.len(), 2, "{prs:?}");
    let log = org.log_entries();
    let merges = entries(&log, "tool", &a)
        .into_iter()
        .chain(entries(&log, "tool", &b))
        .filter(|e| e["tool"] == "pr_merge")
        .count();
    assert_eq!(merges, 3, "one merge conflicted and was retried: {log:?}");
    let summaries = org
        .client(&a)
        .grep("kind:PATCH_SUMMARY", None, None)
        .await
        .unwrap();
    assert_eq!(summaries.len(), 2);
    assert!(summaries.iter().all(|r| r.kind == RecordKind::PatchSummary));
    assert!(org
        .client(&a)
        .workers()
        .await
        .unwrap()
        .iter()
        .all(|w| w.claims.is_empty()));

    // A third agent finds p1 and p2 done and takes p3; later prompts only get answers.
    let mut agent_c = started(&org, &c, &scenario).await;
    agent_c.turn("go").await.unwrap();
    let log = org.log_entries();
    assert_eq!(tools_called(&log, &c), ["claim"]);
    assert_eq!(entries(&log, "tool", &c)[0]["args"]["label"], "part-p3");

    let calls_before = (tools_called(&log, &a).len(), tools_called(&log, &b).len());
    for agent in [&mut agent_a, &mut agent_b] {
        let out = agent.turn("continue").await.unwrap();
        assert_eq!(out.stop_reason, "end_turn");
    }
    let log = org.log_entries();
    assert_eq!(
        (tools_called(&log, &a).len(), tools_called(&log, &b).len()),
        calls_before,
        "with its part done, an agent only answers"
    );
    for mut agent in [agent_a, agent_b, agent_c] {
        agent.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_every_part_is_taken_an_agent_posts_nothing_and_idles() {
    let org = support::start(2).await;
    let (a, b) = (org.id(0), org.id(1));
    let scenario = org.scenario(
        "one",
        &Scenario::new()
            .parts(&["only"])
            .step(step::claim_free_part())
            .step(step::board_write("FACT", "working on {part}"))
            .step(step::end_turn())
            .to_toml(),
    );
    let mut agent_a = started(&org, &a, &scenario).await;
    let mut agent_b = started(&org, &b, &scenario).await;
    agent_a.turn("go").await.unwrap();
    let out = agent_b.turn("go").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    let log = org.log_entries();
    assert_eq!(tools_called(&log, &a), ["claim", "board_write"]);
    // B claimed, saw the overlap, released, and found nothing else: no record of its own
    // is left live and it wrote nothing.
    assert_eq!(tools_called(&log, &b), ["claim", "release"]);
    let out = agent_b.turn("continue").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert_eq!(tools_called(&org.log_entries(), &b), ["claim", "release"]);
    let by_b = org
        .client(&a)
        .grep(&format!("author:{b} -kind:CLAIM"), None, None)
        .await
        .unwrap();
    assert!(by_b.is_empty(), "{by_b:?}");
    for mut agent in [agent_a, agent_b] {
        agent.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_agents_at_once_take_four_different_parts_and_all_merge() {
    let org = support::start(4).await;
    let one_turn = claim_then_ship(&["p1", "p2", "p3", "p4"], true);
    assert_eq!(one_turn.matches("end_turn").count(), 1, "{one_turn}");
    assert!(one_turn.contains("p4"));
    let scenario = org.scenario("all", &one_turn);
    let mut agents = Vec::new();
    for i in 0..4 {
        agents.push(started(&org, &org.id(i), &scenario).await);
    }
    let outcomes = futures_join_all(agents.iter_mut().map(|a| a.turn("go"))).await;
    for o in outcomes {
        assert_eq!(o.expect("a turn").stop_reason, "end_turn");
    }
    let files = org.files_on_main().await;
    for p in ["p1", "p2", "p3", "p4"] {
        assert!(files.contains(&format!("parts/{p}.py")), "{p}: {files:?}");
    }
    let parts_md = org.on_main("PARTS.md").await.expect("PARTS.md is on main");
    assert_eq!(parts_md.lines().count(), 5, "{parts_md}");
    let prs = org
        .client(&org.id(0))
        .list_prs(Some("merged"), None, None)
        .await
        .unwrap();
    assert_eq!(prs.len(), 4);
    for mut a in agents {
        a.stop().await;
    }
}

/// Runs the futures concurrently (each turn borrows its own agent).
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let futs: Vec<_> = futs.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    let mut futs: Vec<_> = futs.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, slot) in futs.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        outputs[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("done")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_direct_message_reaches_a_polling_agent_inside_its_turn() {
    let org = support::start(2).await;
    let (a, b) = (org.id(0), org.id(1));
    let scenario = org.scenario(
        "poll",
        &Scenario::new()
            .step(Step::Poll {
                tool: "workers".into(),
                args: Value::Null,
                every_ms: 100,
                for_ms: 20000,
                until_notice: true,
            })
            .step(Step::MsgDm {
                to: "w02".into(),
                text: "got it".into(),
            })
            .step(step::end_turn())
            .to_toml(),
    );
    assert_eq!(b, "w02");
    let mut agent = started(&org, &a, &scenario).await;
    let sender = org.client(&b);
    let a2 = a.clone();
    let dm = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        sender
            .send_message(&NewMessage {
                to: a2,
                text: "please look at PARTS.md".into(),
                thread: None,
            })
            .await
            .unwrap();
    });
    let out = agent.turn("go").await.unwrap();
    dm.await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    let log = org.log_entries();
    let calls = entries(&log, "tool", &a);
    let polls: Vec<_> = calls.iter().filter(|e| e["tool"] == "workers").collect();
    assert!(polls.len() >= 2, "it polled until the notice: {calls:?}");
    let with_notice: Vec<_> = polls.iter().filter(|e| !e["notices"].is_null()).collect();
    assert_eq!(with_notice.len(), 1, "{calls:?}");
    let notice = with_notice[0]["notices"].as_str().unwrap();
    assert!(notice.starts_with("notices:"), "{notice}");
    assert!(notice.contains("please look at PARTS.md"), "{notice}");
    assert_eq!(
        with_notice[0]["t_ms"],
        polls[polls.len() - 1]["t_ms"],
        "polling stopped at the notice"
    );
    assert_eq!(calls.last().unwrap()["tool"], "msg_dm");
    // The notice was also said to the client, so it is in the turn's events.
    assert!(out.events.iter().any(|e| matches!(
        e,
        agensh_node::adapters::TurnEvent::Message { text } if text.contains("please look at PARTS.md")
    )));
    agent.stop().await;
}
