//! The node's shared event pump and status reporter against a real hub: workers that
//! start waiting while a poll is in flight get their events promptly, each event reaches
//! a worker once, acknowledgements are durable, polls in flight stay few (cancelled ones
//! leave the hub), and a dropped wait loses nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_domain::event::Event;
use agensh_domain::message::NewMessage;
use agensh_domain::worker::{NewWorker, WorkerStatus};
use agensh_hub::RunningHub;
use agensh_node::pump::{EventPump, MAX_POLLS};
use agensh_node::status::StatusReporter;
use agensh_store::SqliteStore;

struct Hub {
    _dir: tempfile::TempDir,
    hub: RunningHub,
    workers: Vec<NewWorker>,
}

impl Hub {
    async fn start(workers: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("store.sqlite")).unwrap();
        let hub = agensh_hub::start(Arc::new(store), Config::with_goal("test"), "127.0.0.1:0")
            .await
            .unwrap();
        let workers = Client::new(&hub.url, &hub.admin_token)
            .add_workers(workers)
            .await
            .unwrap();
        Hub {
            _dir: dir,
            hub,
            workers,
        }
    }

    fn admin(&self) -> Client {
        Client::new(&self.hub.url, &self.hub.admin_token)
    }

    fn client(&self, i: usize) -> Client {
        Client::new(&self.hub.url, &self.workers[i].token)
    }

    fn pump(&self) -> EventPump {
        EventPump::start(Client::new(&self.hub.url, ""))
    }

    /// Worker `i` waits in `pump` for events above `after`, acknowledging `acks` first.
    fn wait(
        &self,
        pump: &EventPump,
        i: usize,
        after: i64,
        acks: &[i64],
    ) -> tokio::task::JoinHandle<agensh_domain::Result<Vec<Event>>> {
        let (pump, w, acks) = (pump.clone(), self.workers[i].clone(), acks.to_vec());
        tokio::spawn(async move { pump.next(&w.id, &w.token, after, &acks).await })
    }

    /// The value of the hub's metric `name`.
    async fn metric(&self, name: &str) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.hub.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("the hub serves {name}"))
    }

    async fn long_polls(&self) -> u64 {
        self.metric("agensh_long_polls_waiting").await
    }

    /// Waits until the hub's metric `name` reads `n`.
    async fn until_metric(&self, name: &str, n: u64) {
        let t = Instant::now();
        loop {
            let got = self.metric(name).await;
            if got == n {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the hub's {name} is {got}, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the hub holds `n` long-polls.
    async fn until_polls(&self, n: u64) {
        self.until_metric("agensh_long_polls_waiting", n).await;
    }

    async fn dm(&self, to: usize, text: &str) -> i64 {
        self.client(0)
            .send_message(&msg(&self.workers[to].id, text))
            .await
            .unwrap()
            .created_at
    }
}

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

async fn answer(h: tokio::task::JoinHandle<agensh_domain::Result<Vec<Event>>>) -> Vec<Event> {
    tokio::time::timeout(Duration::from_secs(5), h)
        .await
        .expect("answered within 5 s")
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_starts_waiting_while_a_poll_is_in_flight_gets_its_events() {
    let hub = Hub::start(4).await;
    let pump = hub.pump();
    let first = hub.wait(&pump, 1, 0, &[]);
    hub.until_polls(1).await;
    // An event for w03 committed before it starts waiting, while w02's poll is in flight.
    hub.dm(2, "before").await;
    let t = Instant::now();
    let got = answer(hub.wait(&pump, 2, 0, &[])).await;
    assert_eq!(got.len(), 1);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // And one committed after w04 starts waiting.
    let fourth = hub.wait(&pump, 3, 0, &[]);
    hub.until_polls(2).await;
    let t = Instant::now();
    hub.dm(3, "after").await;
    assert_eq!(answer(fourth).await.len(), 1);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // w02 got nothing of theirs, and is still waiting.
    assert!(!first.is_finished());
    hub.dm(1, "yours").await;
    let got = answer(first).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload["text"], "yours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_reaches_each_worker_once_and_its_ack_is_durable() {
    let hub = Hub::start(4).await;
    let pump = hub.pump();
    let waits: Vec<_> = (1..4).map(|i| hub.wait(&pump, i, 0, &[])).collect();
    hub.until_polls(1).await;
    hub.client(0)
        .send_message(&msg("#general", "everyone"))
        .await
        .unwrap();
    let mut seq = 0;
    for w in waits {
        let got = answer(w).await;
        assert_eq!(got.len(), 1);
        seq = got[0].seq;
    }
    // Waiting again past it, acknowledging it: what comes next is only a later post.
    let again: Vec<_> = (1..4).map(|i| hub.wait(&pump, i, seq, &[seq])).collect();
    hub.client(0)
        .send_message(&msg("#general", "later"))
        .await
        .unwrap();
    for w in again {
        let got = answer(w).await;
        assert_eq!(got.len(), 1, "no event twice: {got:?}");
        assert!(got[0].seq > seq, "no event twice: {got:?}");
    }
    for i in 1..4 {
        let state = hub.client(i).queue_state().await.unwrap();
        assert_eq!(
            state.cursor, seq,
            "{}'s ack is in the store",
            hub.workers[i].id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_in_flight_stay_few_and_a_post_still_reaches_everyone() {
    let n = MAX_POLLS + 4;
    let hub = Hub::start(n + 1).await;
    let pump = hub.pump();
    let mut waits = Vec::new();
    // Each worker starts waiting once the poll of the one before is at the hub, so each
    // gets a poll of its own; past the limit, the pump cancels one for each it starts.
    for i in 1..=n {
        waits.push(hub.wait(&pump, i, 0, &[]));
        hub.until_metric("agensh_long_polls_total", i as u64).await;
        hub.until_polls((i as u64).min(MAX_POLLS as u64)).await;
    }
    // The cancelled ones left the hub: it holds no more than the pump's limit.
    assert_eq!(hub.long_polls().await, MAX_POLLS as u64);
    hub.client(0)
        .send_message(&msg("#general", "everyone"))
        .await
        .unwrap();
    for w in waits {
        assert_eq!(answer(w).await.len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_loses_nothing() {
    let hub = Hub::start(2).await;
    let pump = hub.pump();
    // The worker gives up its wait while its poll is at the hub.
    let gave_up = hub.wait(&pump, 1, 0, &[]);
    hub.until_polls(1).await;
    assert!(!gave_up.is_finished(), "nothing came");
    gave_up.abort();
    assert!(gave_up.await.unwrap_err().is_cancelled());
    hub.dm(1, "while you were away").await;
    let got = answer(hub.wait(&pump, 1, 0, &[])).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload["text"], "while you were away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_reach_the_hub_together() {
    let hub = Hub::start(3).await;
    let reporter = StatusReporter::start(Client::new(&hub.hub.url, ""));
    for (i, s) in [WorkerStatus::Busy, WorkerStatus::Idle, WorkerStatus::Dead]
        .into_iter()
        .enumerate()
    {
        let w = &hub.workers[i];
        reporter.set(&w.id, &w.token, WorkerStatus::Starting);
        reporter.set(&w.id, &w.token, s);
    }
    reporter.flush().await;
    let statuses: Vec<WorkerStatus> = hub
        .admin()
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.status)
        .collect();
    assert_eq!(
        statuses,
        [WorkerStatus::Busy, WorkerStatus::Idle, WorkerStatus::Dead]
    );
}
