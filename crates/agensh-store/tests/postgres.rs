//! What only the PostgreSQL store has: the commit broadcast across processes (two stores
//! on one database each see every event, in commit order, once), durability through a
//! crash of the server (`pg_ctl stop -m immediate`), the writer's group commit (numbers in
//! commit order, a failing write refused alone, a cut connection failing its group clearly,
//! batched appends that keep every column, number and event and fall back to one by one),
//! and the errors of a bad URL or a server that does not answer.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use agensh_domain::event::Event;
use agensh_domain::message::NewMessage;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_store::{open_store, PostgresStore, Store};
use common::pg::{self, PgServer};
use tokio::sync::broadcast;

const NOW: i64 = 1_700_000_000_000;

fn post(text: &str) -> NewMessage {
    NewMessage {
        to: "#general".into(),
        text: text.into(),
        thread: None,
    }
}

/// Reads `n` events from `rx` (failing after 20 s without one).
async fn take(rx: &mut broadcast::Receiver<Arc<Event>>, n: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
            Ok(Ok(e)) => out.push(e.seq),
            Ok(Err(e)) => panic!("the broadcast failed after {} events: {e}", out.len()),
            Err(_) => panic!("only {} of {n} events arrived: {out:?}", out.len()),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_database_each_see_every_commit_in_order_once() {
    let url = pg::database().await;
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    a.add_workers(4, NOW).await.unwrap();
    // A third that only listens, as a hub that serves reads would.
    let c = PostgresStore::connect(&url).await.unwrap();
    let (mut ra, mut rb, mut rc) = (a.subscribe(), b.subscribe(), c.subscribe());

    // Writers on both stores at once: posts, board records and events with dedup keys
    // used twice (the second is not an event).
    const EACH: usize = 30;
    let mut tasks = Vec::new();
    for (i, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        tasks.push(tokio::spawn(async move {
            let author = format!("w0{}", i + 1);
            for k in 0..EACH {
                match k % 3 {
                    0 => {
                        store
                            .post_message(&author, post(&format!("{author} {k}")), NOW)
                            .await
                            .unwrap();
                    }
                    1 => {
                        let r = NewRecord::new(RecordKind::Fact, format!("fact {k} of {author}"));
                        store.append_record(&author, r, NOW, 3600).await.unwrap();
                    }
                    _ => {
                        let e = agensh_domain::event::NewEvent {
                            kind: "operator.notice".into(),
                            priority: agensh_domain::event::Priority::Normal,
                            payload: serde_json::json!({ "k": k }),
                            dedup_key: Some(format!("notice:{}", k / 6)),
                            source: None,
                            target: Some(author.clone()),
                            except: None,
                        };
                        store.enqueue(e, NOW).await.unwrap();
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all: Vec<i64> = a
        .events_after(0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert!(all.len() > 2 * EACH, "{} events", all.len());
    assert_eq!(
        all,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "numbers without gaps"
    );
    for (name, rx) in [("a", &mut ra), ("b", &mut rb), ("c", &mut rc)] {
        let got = take(rx, all.len()).await;
        assert_eq!(got, all, "store {name} saw every event in commit order");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(rx.try_recv().is_err(), "store {name}: no event twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_whose_connection_is_cut_reconnects_and_misses_nothing() {
    let url = pg::database().await;
    let a = PostgresStore::connect(&url).await.unwrap();
    let b = PostgresStore::connect(&url).await.unwrap();
    a.add_workers(1, NOW).await.unwrap();
    let mut rx = b.subscribe();
    a.post_message("w01", post("before"), NOW).await.unwrap();
    let first = take(&mut rx, 1).await;
    // Every other connection to the database is cut, b's listener among them.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let cut = client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(cut >= 2, "cut {cut} connections");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Written while b's listener is away (a's pool opens new connections).
    for i in 0..10 {
        loop {
            match a
                .post_message("w01", post(&format!("after {i}")), NOW)
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    assert!(e.message.contains("store"), "{}", e.message);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    let events = a.events_after(first[0], 100).await.unwrap();
    assert_eq!(events.len(), 10);
    let got = take(&mut rx, 10).await;
    assert_eq!(got, events.iter().map(|e| e.seq).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "nothing twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_has_its_own_events_published_when_it_returns_and_never_a_refused_ones() {
    let url = pg::database().await;
    let s = PostgresStore::connect(&url).await.unwrap();
    s.add_workers(2, NOW).await.unwrap();
    let mut rx = s.subscribe();
    let m = s.post_message("w01", post("hello"), NOW).await.unwrap();
    let e = rx
        .try_recv()
        .expect("published before post_message returned");
    assert_eq!(e.payload["seq"], m.seq);
    // Refused: a reply to a message that does not exist. Nothing is published.
    let mut bad = post("reply");
    bad.thread = Some(999);
    s.post_message("w01", bad, NOW).await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err());
    // And nothing was numbered: the next message is the second.
    assert_eq!(
        s.post_message("w02", post("next"), NOW).await.unwrap().seq,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_a_crash_of_the_server_in_the_middle_of_writing() {
    let server = PgServer::start(true).unwrap_or_else(|e| panic!("no PostgreSQL server: {e}"));
    let url = server.database().await;
    let s = Arc::new(PostgresStore::connect(&url).await.unwrap());
    s.add_workers(2, NOW).await.unwrap();
    let r = NewRecord::new(RecordKind::Fact, "kept through the crash");
    s.append_record("w02", r, NOW, 3600).await.unwrap();
    // 32 writers post until the server goes away under them; each keeps what was
    // acknowledged (committed in groups) and counts what was refused.
    let mut tasks = Vec::new();
    for i in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for k in 0.. {
                let text = format!("writer {i} post {k}");
                match s.post_message("w01", post(&text), NOW).await {
                    Ok(m) => acked.push((m.seq, text)),
                    Err(_) => return acked,
                }
            }
            unreachable!()
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // No checkpoint, no shutdown: as if the power went, with writes in flight.
    tokio::task::block_in_place(|| server.stop("immediate"));
    let mut acked: Vec<(i64, String)> = Vec::new();
    for t in tasks {
        acked.extend(
            tokio::time::timeout(Duration::from_secs(90), t)
                .await
                .expect("every writer hears of the crash")
                .unwrap(),
        );
    }
    let groups = s.write_stats().unwrap();
    drop(s);
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );
    assert!(
        groups.groups < groups.jobs,
        "writes were committed in groups: {groups:?}"
    );
    server.restart();
    let s = PostgresStore::connect(&url).await.unwrap();
    let read = s
        .read_messages(
            "admin",
            agensh_store::MessageQuery {
                limit: 100_000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let stored: HashSet<(i64, String)> = read.iter().map(|m| (m.seq, m.text.clone())).collect();
    let missing: Vec<_> = acked.iter().filter(|a| !stored.contains(a)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let q = agensh_domain::query::parse("crash").unwrap();
    assert_eq!(s.grep(&q, None, 10).await.unwrap().len(), 1);
    assert_eq!(s.stats().await.unwrap().workers, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_writers_get_numbers_without_gaps_in_commit_order_and_share_commits() {
    let url = pg::database().await;
    let a = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let b = Arc::new(PostgresStore::connect(&url).await.unwrap());
    a.add_workers(64, NOW).await.unwrap();
    let listener = PostgresStore::connect(&url).await.unwrap();
    let mut rx = listener.subscribe();
    // 64 writers, half on each of two stores (two hubs on one database), each answer
    // checked against what the listener sees.
    const EACH: usize = 20;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let author = format!("w{:02}", i + 1);
            let mut mine = Vec::new();
            for k in 0..EACH {
                if k % 2 == 0 {
                    let m = store
                        .post_message(&author, post(&format!("{author} {k}")), NOW)
                        .await
                        .unwrap();
                    mine.push(m.seq);
                } else {
                    let r = NewRecord::new(RecordKind::Fact, format!("fact {k} of {author}"));
                    store.append_record(&author, r, NOW, 3600).await.unwrap();
                }
            }
            mine
        }));
    }
    let mut messages = Vec::new();
    for t in tasks {
        messages.extend(t.await.unwrap());
    }
    messages.sort_unstable();
    assert_eq!(
        messages,
        (1..=(64 * EACH / 2) as i64).collect::<Vec<_>>(),
        "message numbers without gaps"
    );
    let stats = a.stats().await.unwrap();
    assert_eq!(stats.records, (64 * EACH / 2) as u64);
    let all: Vec<i64> = a
        .events_after(0, 100_000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(all.len(), 64 * EACH);
    assert_eq!(
        all,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "event numbers without gaps"
    );
    assert_eq!(
        take(&mut rx, all.len()).await,
        all,
        "the listener saw every event in number order"
    );
    for (name, s) in [("a", &a), ("b", &b)] {
        let w = s.write_stats().expect("the writer counts its groups");
        assert_eq!(
            w.jobs,
            (64 * EACH / 2) as u64 + if name == "a" { 1 } else { 0 }
        );
        assert!(
            w.groups * 2 <= w.jobs,
            "store {name}: {} groups for {} writes",
            w.groups,
            w.jobs
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_in_a_group_is_refused_alone_and_the_others_commit() {
    let url = pg::database().await;
    let s = Arc::new(PostgresStore::connect(&url).await.unwrap());
    s.add_workers(1, NOW).await.unwrap();
    // A constraint the store does not know of: the server refuses these rows itself,
    // aborting the statement inside the group's transaction.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("ALTER TABLE messages ADD CONSTRAINT no_boom CHECK (text NOT LIKE '%boom%')")
        .await
        .unwrap();
    let mut rx = s.subscribe();
    // Three kinds of failure among good writes: the server's constraint, a refusal after
    // the write read the database (a reply to no message), and one before (empty text).
    let mut tasks = Vec::new();
    for i in 0..200 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let m = match i % 4 {
                1 => post(&format!("boom {i}")),
                2 => NewMessage {
                    thread: Some(100_000),
                    ..post(&format!("reply {i}"))
                },
                3 if i % 8 == 3 => post("   "),
                _ => post(&format!("good {i}")),
            };
            (m.text.clone(), s.post_message("w01", m, NOW).await)
        }));
    }
    let mut good = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let (text, r) = t.await.unwrap();
        match r {
            Ok(m) => {
                assert!(text.starts_with("good"), "{text} was stored");
                good.push((m.seq, text));
            }
            Err(e) => {
                refused += 1;
                if text.starts_with("boom") {
                    assert!(e.message.contains("no_boom"), "{}", e.message);
                } else if text.starts_with("reply") {
                    assert_eq!(e.code, "unknown_thread", "{}", e.message);
                } else {
                    assert_eq!(e.code, "empty_text", "{text:?}: {}", e.message);
                }
            }
        }
    }
    assert_eq!(
        good.len(),
        200 - 50 - 50 - 25,
        "every good write was stored"
    );
    assert_eq!(refused, 125);
    let w = s.write_stats().unwrap();
    assert!(
        w.groups * 2 <= w.jobs,
        "{} groups for {} writes: failures shared groups with good writes",
        w.groups,
        w.jobs
    );
    good.sort();
    let read = s
        .read_messages(
            "admin",
            agensh_store::MessageQuery {
                limit: 1_000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        read.iter()
            .map(|m| (m.seq, m.text.clone()))
            .collect::<Vec<_>>(),
        good,
        "the good ones, numbered without gaps"
    );
    assert_eq!(
        good.iter().map(|g| g.0).collect::<Vec<_>>(),
        (1..=good.len() as i64).collect::<Vec<_>>()
    );
    // Events only for the good ones.
    assert_eq!(
        take(&mut rx, good.len()).await,
        (1..=good.len() as i64).collect::<Vec<_>>()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "no event of a refused write");
}

/// Greps `q` on `s`: the ids found.
async fn grep_ids(s: &PostgresStore, q: &str) -> Vec<String> {
    let q = agensh_domain::query::parse(q).unwrap();
    s.grep(&q, None, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

/// 200 appends at once, so that groups hold runs of plain appends (stored by one
/// statement per table) broken by claims (each alone), among them appends refused before
/// the write (empty text) and by the server itself inside a batch (a constraint the store
/// does not know of): the refused fail alone, the others are stored with every column and
/// grep token in place, numbered without gaps in commit order, one event each in the same
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_appends_keep_numbers_events_and_tokens_and_a_refused_one_fails_alone() {
    let url = pg::database().await;
    let s = Arc::new(PostgresStore::connect(&url).await.unwrap());
    s.add_workers(8, NOW).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("ALTER TABLE records ADD CONSTRAINT no_boom CHECK (text NOT LIKE '%boom%')")
        .await
        .unwrap();
    let mut rx = s.subscribe();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let author = format!("w0{}", i % 8 + 1);
            let mut r = if i % 25 == 1 {
                NewRecord::new(RecordKind::Fact, format!("boom t{i}x"))
            } else if i % 16 == 3 {
                NewRecord::new(RecordKind::Fact, "   ")
            } else if i % 8 == 6 {
                NewRecord::new(RecordKind::Claim, format!("good claim t{i}x"))
            } else {
                NewRecord::new(RecordKind::Fact, format!("good fact t{i}x"))
            };
            r.label = Some(format!("item-{i}"));
            if i % 3 == 0 {
                r.detail = Some(format!("more d{i}y here"));
            }
            let text = r.text.clone();
            (
                i,
                author.clone(),
                text,
                s.append_record(&author, r, NOW, 600).await,
            )
        }));
    }
    let mut good = Vec::new();
    for t in tasks {
        let (i, author, text, r) = t.await.unwrap();
        match r {
            Ok(a) => {
                assert!(text.starts_with("good"), "{text} was stored");
                assert_eq!(a.record.text, text);
                assert_eq!(a.record.author, author);
                assert_eq!(
                    a.record.label.as_deref(),
                    Some(format!("item-{i}").as_str())
                );
                assert_eq!(a.record.lease.is_some(), text.contains("claim"));
                good.push((a.record.seq, i));
            }
            Err(e) if text.starts_with("boom") => {
                assert!(e.message.contains("no_boom"), "{}", e.message)
            }
            Err(e) => assert_eq!(e.code, "empty_text", "{text:?}: {}", e.message),
        }
    }
    let refused = (0..200).filter(|i| i % 25 == 1 || i % 16 == 3).count();
    assert_eq!(good.len(), 200 - refused, "every good append was stored");
    good.sort();
    assert_eq!(
        good.iter().map(|g| g.0).collect::<Vec<_>>(),
        (1..=good.len() as i64).collect::<Vec<_>>(),
        "numbers without gaps"
    );
    let w = s.write_stats().unwrap();
    assert!(
        w.batched * 4 >= w.jobs,
        "only {} of {} writes were stored in batches",
        w.batched,
        w.jobs
    );
    // One event per stored record, in the records' order, published in number order.
    let events = s.events_after(0, 1_000).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=good.len() as i64).collect::<Vec<_>>()
    );
    for (e, (seq, i)) in events.iter().zip(&good) {
        assert_eq!(e.kind, "board.record");
        assert_eq!(e.payload["id"], format!("G{seq}"));
        assert_eq!(e.payload["label"], format!("item-{i}"));
        assert_eq!(
            e.source.as_deref(),
            Some(format!("w0{}", i % 8 + 1).as_str())
        );
        assert_eq!(
            e.dedup_key.as_deref(),
            Some(format!("board:G{seq}").as_str())
        );
    }
    // Published in number order, each as stored (the stored payload is the one sent).
    for stored in &events {
        let sent = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("an event within 20 s")
            .unwrap();
        assert_eq!(
            serde_json::to_value(&*sent).unwrap(),
            serde_json::to_value(stored).unwrap()
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "no event of a refused append");
    // Every column and grep token where it belongs: each record found by its own text
    // word, detail word, prefix (the vocabulary), label and author.
    for (seq, i) in &good {
        let id = format!("G{seq}");
        let r = s.unfold(*seq).await.unwrap().record;
        assert_eq!(r.label.as_deref(), Some(format!("item-{i}").as_str()));
        assert_eq!(r.author, format!("w0{}", i % 8 + 1));
        assert_eq!(r.detail.is_some(), i % 3 == 0);
        assert_eq!(grep_ids(&s, &format!("t{i}x")).await, vec![id.clone()]);
        assert_eq!(grep_ids(&s, &format!("t{i}x*")).await, vec![id.clone()]);
        assert_eq!(
            grep_ids(&s, &format!("label:item-{i} author:w0{}", i % 8 + 1)).await,
            vec![id.clone()]
        );
        let by_detail = grep_ids(&s, &format!("d{i}y")).await;
        if i % 3 == 0 {
            assert_eq!(by_detail, vec![id]);
        } else {
            assert!(by_detail.is_empty(), "{i}: {by_detail:?}");
        }
    }
}

/// A batch whose event's dedup key is already taken would leave a gap in the event
/// numbers: it is undone and each append runs alone, as before batching — every record
/// stored, the one whose key was taken without an event, the others' events without gaps,
/// seen in order by another store on the database (the commit broadcast); then appends
/// where no key is taken are batched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_event_key_is_taken_is_appended_one_by_one() {
    let url = pg::database().await;
    let s = Arc::new(PostgresStore::connect(&url).await.unwrap());
    s.add_workers(4, NOW).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // An event that already has the key record G5's event will want.
    client
        .batch_execute(
            "INSERT INTO events(seq, kind, priority, payload, dedup_key, created_at) \
             VALUES (1, 'operator.notice', 'normal', '{}', 'board:G5', 0)",
        )
        .await
        .unwrap();
    let other = PostgresStore::connect(&url).await.unwrap();
    let mut rx = other.subscribe();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let r = NewRecord::new(RecordKind::Fact, format!("fact {i}"));
            s.append_record(&format!("w0{}", i % 4 + 1), r, NOW, 600)
                .await
                .unwrap()
                .record
                .seq
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=64).collect::<Vec<_>>());
    let events = s.events_after(1, 1_000).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (2..=64).collect::<Vec<_>>(),
        "events without gaps"
    );
    let ids: Vec<String> = events
        .iter()
        .map(|e| e.payload["id"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = (1..=64)
        .filter(|&n| n != 5)
        .map(|n| format!("G{n}"))
        .collect();
    assert_eq!(ids, want, "every record's event but G5's, in order");
    // Then 64 more, where no key is taken: batched, and broadcast to the other store.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let r = NewRecord::new(RecordKind::Fact, format!("more {i}"));
            s.append_record(&format!("w0{}", i % 4 + 1), r, NOW, 600)
                .await
                .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let w = s.write_stats().unwrap();
    assert!(w.batched > 0, "{} of {} writes batched", w.batched, w.jobs);
    assert_eq!(take(&mut rx, 127).await, (2..=128).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "nothing twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_in_the_middle_of_a_group_fails_its_writes_clearly_and_the_writer_reconnects(
) {
    let url = pg::database().await;
    let s = Arc::new(PostgresStore::connect(&url).await.unwrap());
    s.add_workers(1, NOW).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // Another session holds the write lock: the writer's next group waits for it.
    client
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&agensh_store::postgres::WRITE_LOCK],
        )
        .await
        .unwrap();
    // Cuts the connection of the writer waiting for the lock (once it waits).
    let cut_the_waiting_writer = || async {
        for _ in 0..200 {
            let cut = client
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .unwrap();
            if cut > 0 {
                return cut;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no writer waited for the lock");
    };
    let one = {
        let s = s.clone();
        tokio::spawn(async move { s.post_message("w01", post("alone"), NOW).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Nine more queue behind the first group, and make the next one together.
    let mut tasks = Vec::new();
    for i in 0..9 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.post_message("w01", post(&format!("cut {i}")), NOW).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cut_the_waiting_writer().await, 1);
    assert_eq!(
        cut_the_waiting_writer().await,
        1,
        "the writer connected again for the next group"
    );
    for t in std::iter::once(one).chain(tasks) {
        let e = tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("answered, not left hanging")
            .unwrap()
            .expect_err("not stored");
        assert_eq!(e.code, "store_connection_lost", "{}", e.message);
        assert!(
            e.message.contains("nothing of it was stored"),
            "{}",
            e.message
        );
    }
    let w = s.write_stats().unwrap();
    assert_eq!(
        (w.groups, w.jobs),
        (1, 1),
        "only add_workers committed: {w:?}"
    );
    client
        .execute(
            "SELECT pg_advisory_unlock($1)",
            &[&agensh_store::postgres::WRITE_LOCK],
        )
        .await
        .unwrap();
    let m = s
        .post_message("w01", post("after"), NOW)
        .await
        .expect("the writer connected again");
    assert_eq!(m.seq, 1, "nothing of the cut group was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_while_the_server_is_down_fails_and_the_store_recovers() {
    let server = PgServer::start(false).unwrap_or_else(|e| panic!("no PostgreSQL server: {e}"));
    let url = server.database().await;
    let s = PostgresStore::connect(&url).await.unwrap();
    s.add_workers(1, NOW).await.unwrap();
    server.stop("immediate");
    let e = s.post_message("w01", post("lost"), NOW).await.unwrap_err();
    assert!(e.message.contains("store"), "{}", e.message);
    server.restart();
    // The pool drops broken connections and opens new ones.
    let mut ok = false;
    for _ in 0..20 {
        if s.post_message("w01", post("after"), NOW).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ok, "writes work again once the server is back");
    let all = s
        .read_messages(
            "admin",
            agensh_store::MessageQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
        ["after"]
    );
}

#[tokio::test]
async fn a_bad_url_or_an_unreachable_server_says_what_to_do() {
    let e = open_store("postgres://u@127.0.0.1:notaport/db")
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code, "bad_store_url", "{}", e.message);
    assert!(
        e.message
            .contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"),
        "{}",
        e.message
    );
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = open_store(&format!(
        "postgres://someone:secret@127.0.0.1:{port}/agensh"
    ))
    .await
    .err()
    .expect("refused");
    assert_eq!(e.code, "store_unreachable", "{}", e.message);
    assert!(e.message.contains("check the server runs"), "{}", e.message);
    assert!(
        e.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        e.message
    );
    assert!(
        !e.message.contains("secret"),
        "no password in messages: {}",
        e.message
    );
    // A database that does not exist.
    let (port, _) = pg::shared();
    let e = open_store(&format!("postgres://agensh@127.0.0.1:{port}/no_such_db"))
        .await
        .err()
        .expect("refused");
    assert!(
        e.message.contains("does not exist") && e.message.contains("createdb"),
        "{}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_before_the_prefix_vocabulary_gets_it_filled_on_open() {
    let url = pg::database().await;
    let s = PostgresStore::connect(&url).await.unwrap();
    s.add_workers(1, NOW).await.unwrap();
    for text in ["parser rewrite", "partial merge", "unrelated"] {
        let r = NewRecord::new(RecordKind::Fact, text);
        s.append_record("w01", r, NOW, 3600).await.unwrap();
    }
    drop(s);
    // The schema as it was before (schema 1): no vocabulary, no trigger keeping it, nor
    // what later steps made (receipts, schema 4).
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(
            "DROP TRIGGER records_words_kept ON records; DROP TABLE record_words; \
             DROP TABLE receipts; DROP INDEX events_urgent_by_time; \
             DELETE FROM schema_migrations WHERE version >= 2",
        )
        .await
        .unwrap();
    let s = PostgresStore::connect(&url).await.unwrap();
    let r = NewRecord::new(RecordKind::Fact, "parsed after the upgrade");
    s.append_record("w01", r, NOW, 3600).await.unwrap();
    let q = agensh_domain::query::parse("par*").unwrap();
    let found: Vec<String> = s
        .grep(&q, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect();
    assert_eq!(
        found,
        [
            "parsed after the upgrade",
            "partial merge",
            "parser rewrite"
        ]
    );
    let words: i64 = client
        .query_one("SELECT count(*) FROM record_words", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(words, 9, "every distinct word, once");
}

/// Status reports and activity of many workers, from different requests at once, update
/// the same rows in opposite orders: without one order of locking, PostgreSQL finds a
/// deadlock (40P01) and refuses one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_and_activity_of_many_workers_at_once_never_deadlock() {
    use agensh_domain::worker::WorkerStatus;
    let url = pg::database().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let ids: Vec<String> = store
        .add_workers(64, NOW)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        let mut mine = ids.clone();
        if t % 2 == 1 {
            mine.reverse();
        }
        tasks.push(tokio::spawn(async move {
            for round in 0..30 {
                if t % 4 < 2 {
                    let status = if round % 2 == 0 {
                        WorkerStatus::Busy
                    } else {
                        WorkerStatus::Idle
                    };
                    let reports = mine.iter().map(|id| (id.clone(), status)).collect();
                    store.set_worker_statuses(reports).await?;
                } else {
                    let activity = mine.iter().map(|id| (id.clone(), NOW + round)).collect();
                    store.touch_workers(activity).await?;
                }
            }
            Ok::<_, agensh_domain::Error>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().expect("no report refused");
    }
}
