//! kill -9 of the hub in the middle of a stream of writes and reads, then a restart:
//! nothing acknowledged is lost, unacknowledged events come again, acknowledged ones never.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_client::{Client, MessageFilter};
use agensh_domain::message::NewMessage;
use agensh_domain::pr::NewPr;
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

/// Writes branch `<id>/merge` for each of `ids` straight into the bare repository `bare`
/// (one `git fast-import`), each one commit on `main` adding `merges/<id>.txt`, and
/// `fails/<id>` for the ids in `failing`.
fn write_branches(bare: &std::path::Path, ids: &[String], failing: &[String]) {
    use std::io::Write;
    let main = common::git(
        bare,
        &["--git-dir", bare.to_str().unwrap(), "rev-parse", "main"],
    );
    let main = main.trim();
    let mut stream = String::new();
    for id in ids {
        let msg = format!("{id}: add merges/{id}.txt\n");
        stream.push_str(&format!(
            "commit refs/heads/{id}/merge\ncommitter {id} <{id}@agensh.invalid> 1700000000 +0000\ndata {}\n{msg}from {main}\nM 100644 inline merges/{id}.txt\ndata {}\n{id}\n",
            msg.len(),
            id.len() + 1
        ));
        if failing.contains(id) {
            stream.push_str(&format!("M 100644 inline fails/{id}\ndata 5\nfail\n"));
        }
        stream.push('\n');
    }
    let mut child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(["fast-import", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "git fast-import failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_gated_merges_leaves_main_gated_and_each_pr_merged_once_or_waiting() {
    let org = common::OrgDir::builder("merge crash")
        .setting_in(
            "merge",
            "gate",
            "\"sleep 1.5; if [ -d fails ]; then echo refused; exit 1; fi\"",
        )
        .setting_in("merge", "gate_jobs", "2")
        .init();
    let hub = HubProcess::start(&org.dir);
    let workers = hub.admin().add_workers(10).await.unwrap();
    let ids: Vec<String> = workers.iter().map(|w| w.id.to_string()).collect();
    // The 4th and the 8th branch carry a failing file.
    let failing = vec![ids[3].clone(), ids[7].clone()];
    write_branches(&org.bare(), &ids, &failing);
    let before = org.main_commit();
    let mut prs = Vec::new();
    for w in &workers {
        let c = Client::new(&hub.info.url, &w.token);
        let pr = c
            .open_pr(&NewPr {
                branch: format!("{}/merge", w.id),
                title: format!("merge of {}", w.id),
                body: None,
            })
            .await
            .unwrap();
        prs.push((c, pr.number));
    }
    let merges: Vec<_> = prs
        .iter()
        .map(|(c, n)| {
            let (c, n) = (c.clone(), *n);
            tokio::spawn(async move { c.merge_pr(n).await })
        })
        .collect();
    // Once the first merges landed, while later rounds of gate runs go on (each 1.5 s).
    let admin = hub.admin();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while admin
        .list_prs(Some("merged"), None, Some(100))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing merged in 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hub.kill_9();
    for m in merges {
        let _ = tokio::time::timeout(Duration::from_secs(30), m)
            .await
            .expect("merges end when the hub dies");
    }
    // Every position main took passes the gate: no `fails/` in any of them.
    let positions = org.bare_git(&["rev-list", "--first-parent", &format!("{before}..main")]);
    for commit in positions.lines() {
        let failing_files = org.bare_git(&["ls-tree", "--name-only", commit, "fails/"]);
        assert!(
            failing_files.trim().is_empty(),
            "main was at {commit}, which fails the gate"
        );
    }

    // After a restart, merging each PR that is not merged yet lands it (once) or refuses it.
    let hub = HubProcess::start(&org.dir);
    let merged_before = hub
        .admin()
        .list_prs(Some("merged"), None, Some(100))
        .await
        .unwrap()
        .len();
    assert!(
        (1..8).contains(&merged_before),
        "the kill should fall between merges: {merged_before} merged before it"
    );
    for (i, w) in workers.iter().enumerate() {
        let c = Client::new(&hub.info.url, &w.token);
        let n = prs[i].1;
        let pr = c.view_pr(n).await.unwrap();
        if pr["state"] == "merged" {
            continue;
        }
        let answer = c.merge_pr(n).await;
        match answer {
            Ok(a) => assert!(!failing.contains(&ids[i]), "a failing PR merged: {a}"),
            Err(e) => {
                assert!(failing.contains(&ids[i]), "PR #{n} was refused: {e:?}");
                assert_eq!(e.code, "gate_failed", "{e:?}");
            }
        }
    }
    let merged = hub
        .admin()
        .list_prs(Some("merged"), None, Some(100))
        .await
        .unwrap();
    assert_eq!(
        merged.len(),
        8,
        "every passing PR merged ({merged_before} before the restart)"
    );
    // Each branch is the second parent of exactly one merge on main's first-parent line
    // (none merged twice), and no failing one is.
    let seconds = org.bare_git(&[
        "log",
        "--first-parent",
        "--merges",
        "--format=%P",
        &format!("{before}..main"),
    ]);
    for id in &ids {
        let head = org.bare_git(&["rev-parse", &format!("{id}/merge")]);
        let times = seconds
            .lines()
            .filter(|p| p.split(' ').nth(1) == Some(head.trim()))
            .count();
        let want = usize::from(!failing.contains(id));
        assert_eq!(times, want, "{id}'s branch merged {times} times");
    }
    org.assert_fsck_clean();
}
