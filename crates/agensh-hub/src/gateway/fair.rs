//! A concurrency limit with a queue that is fair across workers: when the limit is reached,
//! waiting requests are let in one worker at a time, round robin, so a worker with many
//! requests waiting never keeps another worker's one request behind all of them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The limit and the waiting requests of one upstream.
pub struct FairQueue {
    /// Most requests in flight; 0: no limit.
    limit: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    /// Workers with requests waiting, in the order they are served.
    ring: VecDeque<String>,
    /// Each waiting worker's requests, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<()>>>,
}

/// A place in flight; the next waiting request gets it when this is dropped.
pub struct Permit {
    queue: Option<Arc<FairQueue>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.release();
        }
    }
}

/// A request waiting for its place. Dropped after its place was handed to it but before it
/// took it, it hands the place on.
struct Waiting {
    rx: oneshot::Receiver<()>,
    queue: Arc<FairQueue>,
    taken: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.taken && self.rx.try_recv().is_ok() {
            self.queue.release();
        }
    }
}

impl FairQueue {
    pub fn new(limit: usize) -> Arc<FairQueue> {
        Arc::new(FairQueue {
            limit,
            state: Mutex::default(),
        })
    }

    /// Waits for a place in flight for one of `worker`'s requests.
    pub async fn acquire(self: &Arc<Self>, worker: &str) -> Permit {
        if self.limit == 0 {
            return Permit { queue: None };
        }
        let rx = {
            let mut s = self.state.lock().expect("queue lock");
            if s.running < self.limit && s.ring.is_empty() {
                s.running += 1;
                return Permit {
                    queue: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            let mine = s.waiting.entry(worker.to_string()).or_default();
            mine.push_back(tx);
            if mine.len() == 1 {
                s.ring.push_back(worker.to_string());
            }
            rx
        };
        let mut w = Waiting {
            rx,
            queue: self.clone(),
            taken: false,
        };
        // The sender is only dropped unsent when the queue itself goes away, which the
        // `Arc` held here prevents.
        let _ = (&mut w.rx).await;
        w.taken = true;
        Permit {
            queue: Some(self.clone()),
        }
    }

    /// Hands a place to the next worker in the ring, or frees it.
    fn release(&self) {
        let mut s = self.state.lock().expect("queue lock");
        while let Some(worker) = s.ring.pop_front() {
            let Some(mine) = s.waiting.get_mut(&worker) else {
                continue;
            };
            let next = mine.pop_front();
            if mine.is_empty() {
                s.waiting.remove(&worker);
            } else {
                s.ring.push_back(worker);
            }
            if let Some(tx) = next {
                if tx.send(()).is_ok() {
                    return; // the place goes on to it: `running` stays
                }
            }
        }
        s.running -= 1;
    }

    /// Requests in flight and requests waiting.
    pub fn load(&self) -> (usize, usize) {
        let s = self.state.lock().expect("queue lock");
        (s.running, s.waiting.values().map(VecDeque::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_limit_holds_and_places_go_round_robin_across_workers() {
        let q = FairQueue::new(1);
        let first = q.acquire("a").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Worker a queues three requests before b and c queue one each.
        for (i, w) in ["a", "a", "a", "b", "c"].into_iter().enumerate() {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let p = q.acquire(w).await;
                order.lock().unwrap().push(format!("{w}{i}"));
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(q.load(), (1, 5));
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a0", "b3", "c4", "a1", "a2"]);
        assert_eq!(q.load(), (0, 0));
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_does_not_keep_its_place() {
        let q = FairQueue::new(1);
        let first = q.acquire("a").await;
        let gone = {
            let q = q.clone();
            tokio::spawn(async move { q.acquire("b").await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        gone.abort();
        let _ = gone.await;
        drop(first);
        // The place is free again: a new request gets it at once.
        let again = tokio::time::timeout(Duration::from_secs(1), q.acquire("c")).await;
        assert!(again.is_ok());
        assert_eq!(q.load(), (1, 0));
    }

    #[tokio::test]
    async fn no_limit_never_waits() {
        let q = FairQueue::new(0);
        let held: Vec<Permit> = futures_collect(&q, 100).await;
        assert_eq!(held.len(), 100);
        assert_eq!(q.load(), (0, 0));
    }

    async fn futures_collect(q: &Arc<FairQueue>, n: usize) -> Vec<Permit> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(q.acquire("a").await);
        }
        v
    }
}
