//! What only the PostgreSQL store has: the commit broadcast across processes (two stores
//! on one database each see every event, in commit order, once), durability through a
//! crash of the server (`pg_ctl stop -m immediate`), and the errors of a bad URL or a
//! server that does not answer.

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
async fn an_acknowledged_write_survives_a_crash_of_the_server() {
    let server = PgServer::start(true).unwrap_or_else(|e| panic!("no PostgreSQL server: {e}"));
    let url = server.database().await;
    let seqs: HashSet<i64> = {
        let s = PostgresStore::connect(&url).await.unwrap();
        s.add_workers(2, NOW).await.unwrap();
        let mut seqs = HashSet::new();
        for i in 0..20 {
            seqs.insert(
                s.post_message("w01", post(&format!("m{i}")), NOW)
                    .await
                    .unwrap()
                    .seq,
            );
        }
        let r = NewRecord::new(RecordKind::Fact, "kept through the crash");
        s.append_record("w02", r, NOW, 3600).await.unwrap();
        // No checkpoint, no shutdown: as if the power went.
        server.stop("immediate");
        seqs
    };
    server.restart();
    let s = PostgresStore::connect(&url).await.unwrap();
    let read = s
        .read_messages(
            "admin",
            agensh_store::MessageQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let got: HashSet<i64> = read.iter().map(|m| m.seq).collect();
    assert_eq!(got, seqs, "every acknowledged message is there");
    let q = agensh_domain::query::parse("crash").unwrap();
    assert_eq!(s.grep(&q, None, 10).await.unwrap().len(), 1);
    assert_eq!(s.stats().await.unwrap().workers, 2);
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
