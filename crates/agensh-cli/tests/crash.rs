//! kill -9 of the hub in the middle of a stream of writes and reads, then a restart:
//! nothing acknowledged is lost, unacknowledged events come again, acknowledged ones never.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_client::{Client, MessageFilter};
use agensh_domain::message::NewMessage;
use agensh_domain::record::{NewRecord, RecordKind};
use common::{new_org, HubProcess};

#[derive(Default)]
struct Ledger {
    /// Record ids whose append was acknowledged.
    records: BTreeSet<String>,
    /// Message seqs whose post was acknowledged.
    messages: BTreeSet<i64>,
    /// Event seqs the reader received and whose ack was acknowledged.
    acked: BTreeSet<i64>,
    /// Event seqs the reader received and deliberately never acknowledged.
    unacked: BTreeSet<i64>,
}

async fn writer(c: Client, n: usize, ledger: Arc<Mutex<Ledger>>) {
    for i in 0.. {
        if i % 3 == 0 {
            let m = NewMessage {
                to: "#general".into(),
                text: format!("w{n} post {i}"),
                thread: None,
            };
            match c.send_message(&m).await {
                Ok(m) => ledger.lock().unwrap().messages.insert(m.seq),
                Err(_) => return,
            };
        } else {
            let r = NewRecord::new(RecordKind::Fact, format!("writer {n} fact {i}"));
            match c.post_record(&r).await {
                Ok(a) => ledger.lock().unwrap().records.insert(a.record.id),
                Err(_) => return,
            };
        }
    }
}

/// Reads w04's queue; acknowledges even sequence numbers, keeps odd ones unacknowledged.
async fn reader(c: Client, ledger: Arc<Mutex<Ledger>>) {
    let mut after = 0;
    loop {
        let Ok(events) = c.events(after, 1).await else {
            return;
        };
        let (even, odd): (Vec<i64>, Vec<i64>) =
            events.iter().map(|e| e.seq).partition(|s| s % 2 == 0);
        if let Some(last) = events.last() {
            after = last.seq;
        }
        ledger.lock().unwrap().unacked.extend(odd);
        if even.is_empty() {
            continue;
        }
        match c.ack(&even).await {
            Ok(_) => ledger.lock().unwrap().acked.extend(even),
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_write_and_redelivers_only_unacked_events() {
    let (_tmp, dir) = new_org("crash test");
    let hub = HubProcess::start(&dir);
    let admin = hub.admin();
    let workers = admin.add_workers(4).await.unwrap();
    let as_worker = |i: usize| Client::new(&hub.info.url, &workers[i].token);

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(tokio::spawn(writer(as_worker(i), i, ledger.clone())));
    }
    tasks.push(tokio::spawn(reader(as_worker(3), ledger.clone())));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    hub.kill_9();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("clients stop")
            .unwrap();
    }
    let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
    assert!(
        ledger.records.len() > 20,
        "too few writes before the crash: {}",
        ledger.records.len()
    );
    assert!(!ledger.acked.is_empty() && !ledger.unacked.is_empty());

    let hub = HubProcess::start(&dir);
    let admin = hub.admin();
    let mut stored = BTreeSet::new();
    let mut before: Option<String> = None;
    loop {
        let page = admin
            .grep("kind:FACT", Some(500), before.as_deref())
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.id.clone());
        stored.extend(page.into_iter().map(|r| r.id));
    }
    let missing: Vec<&String> = ledger.records.difference(&stored).collect();
    assert!(missing.is_empty(), "acknowledged records lost: {missing:?}");

    let mut stored = BTreeSet::new();
    let mut before = None;
    loop {
        let f = MessageFilter {
            with: Some("#general".into()),
            limit: Some(1000),
            before,
        };
        let page = admin.message_history(&f).await.unwrap();
        let Some(first) = page.first() else { break };
        before = Some(first.seq);
        stored.extend(page.into_iter().map(|m| m.seq));
    }
    let missing: Vec<&i64> = ledger.messages.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "acknowledged messages lost: {missing:?}"
    );

    let reader = Client::new(&hub.info.url, &workers[3].token);
    let mut again = BTreeSet::new();
    let mut after = 0;
    loop {
        let page = reader.events(after, 0).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        again.extend(page.iter().map(|e| e.seq));
    }
    let twice: Vec<&i64> = ledger.acked.intersection(&again).collect();
    assert!(
        twice.is_empty(),
        "acknowledged events delivered again: {twice:?}"
    );
    let lost: Vec<&i64> = ledger.unacked.difference(&again).collect();
    assert!(
        lost.is_empty(),
        "unacknowledged events not delivered again: {lost:?}"
    );
}
