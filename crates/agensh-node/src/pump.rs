//! The node's event pump: the workers waiting at a turn boundary share long-polls at the
//! hub (`POST /events/poll`, many workers per request) instead of each holding its own,
//! so one post wakes one request rather than one per worker.
//!
//! Only idle workers are polled for: a worker is in the pump only while it waits in
//! [`EventPump::next`]. Urgent events for a busy worker reach it through its MCP tool
//! calls, which acknowledge them; they are not in its queue by its next boundary.
//!
//! Workers that start waiting within [`JOIN`] of each other join one new poll; a poll in
//! flight is left alone (restarting it would re-read every member's queue), so several
//! may be in flight, each for its own workers. Past [`MAX_POLLS`], the smallest poll in
//! flight is cancelled and its workers fold into the new one. A worker leaves its poll
//! with the events it gets; the others of that poll, whose wait ran out with nothing, join
//! the next one. Events are not marked by polling: a worker's `after` skips those it has,
//! and its acknowledgements go with the poll that takes it (resent until a poll that
//! carried them is answered), so a cancelled poll loses nothing.

use std::collections::HashMap;
use std::time::Duration;

use agensh_client::Client;
use agensh_domain::event::{Event, PollEntry, PollMany, PolledMany};
use agensh_domain::worker::BATCH_LIMIT;
use agensh_domain::Result;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Longest single long-poll at the hub.
pub const POLL_SECS: u64 = 30;
/// How long workers that start waiting are gathered into one new poll.
pub const JOIN: Duration = Duration::from_millis(20);
/// Most polls in flight at once.
pub const MAX_POLLS: usize = 4;

/// A handle to the node's event pump; clones share it. The pump stops (and cancels its
/// polls) when the last handle is dropped.
#[derive(Clone)]
pub struct EventPump {
    tx: mpsc::UnboundedSender<Wait>,
}

/// A worker starting to wait.
struct Wait {
    id: String,
    token: String,
    after: i64,
    acks: Vec<i64>,
    reply: oneshot::Sender<Result<Vec<Event>>>,
}

impl EventPump {
    /// Starts the pump for the hub of `hub` (its token is not used: each poll is made
    /// with the token of its first worker, and carries every worker's own).
    pub fn start(hub: Client) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(Pump::new(hub).run(rx));
        EventPump { tx }
    }

    /// Waits for events of worker `id` (token `token`) above `after`, acknowledging
    /// `acks` first. Answers with at least one event, or the error of the poll. Dropping
    /// the future stops the wait; `acks` may or may not have been applied then (sending
    /// them again is harmless).
    pub async fn next(
        &self,
        id: &str,
        token: &str,
        after: i64,
        acks: &[i64],
    ) -> Result<Vec<Event>> {
        let (reply, answer) = oneshot::channel();
        let wait = Wait {
            id: id.to_string(),
            token: token.to_string(),
            after,
            acks: acks.to_vec(),
            reply,
        };
        if self.tx.send(wait).is_err() {
            return Err(agensh_domain::Error::internal(
                "the node's event pump has stopped",
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(agensh_domain::Error::internal(
                "the node's event pump has stopped",
            ))
        })
    }
}

/// A worker waiting in the pump.
struct Waiter {
    token: String,
    after: i64,
    acks: Vec<i64>,
    reply: oneshot::Sender<Result<Vec<Event>>>,
    /// The poll it is in, or none while it joins the next.
    poll: Option<u64>,
}

/// A poll in flight and the workers it is for.
struct InFlight {
    members: Vec<String>,
    task: JoinHandle<()>,
}

struct Pump {
    hub: Client,
    waiters: HashMap<String, Waiter>,
    joining: Vec<String>,
    join_at: Option<Instant>,
    polls: HashMap<u64, InFlight>,
    next_poll: u64,
    done_tx: mpsc::UnboundedSender<(u64, Result<PolledMany>)>,
    done_rx: mpsc::UnboundedReceiver<(u64, Result<PolledMany>)>,
}

impl Pump {
    fn new(hub: Client) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Pump {
            hub,
            waiters: HashMap::new(),
            joining: Vec::new(),
            join_at: None,
            polls: HashMap::new(),
            next_poll: 1,
            done_tx,
            done_rx,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Wait>) {
        loop {
            let join_at = self.join_at;
            tokio::select! {
                wait = rx.recv() => match wait {
                    Some(w) => self.add(w),
                    None => break,
                },
                Some((poll, result)) = self.done_rx.recv() => self.answered(poll, result),
                _ = sleep_until(join_at), if join_at.is_some() => self.launch(),
            }
        }
        for (_, p) in self.polls.drain() {
            p.task.abort();
        }
    }

    fn add(&mut self, w: Wait) {
        if let Some(old) = self.waiters.get_mut(&w.id) {
            // Waiting again as before, nothing new to acknowledge: stay in its poll.
            if old.poll.is_some() && w.acks.is_empty() && old.after == w.after {
                old.reply = w.reply;
                return;
            }
        }
        let was_joining = self.waiters.get(&w.id).is_some_and(|o| o.poll.is_none());
        self.waiters.insert(
            w.id.clone(),
            Waiter {
                token: w.token,
                after: w.after,
                acks: w.acks,
                reply: w.reply,
                poll: None,
            },
        );
        if !was_joining {
            self.join(w.id);
        }
    }

    fn join(&mut self, id: String) {
        self.joining.push(id);
        self.join_at.get_or_insert_with(|| Instant::now() + JOIN);
    }

    /// Starts a poll for the workers that joined (with the smallest poll in flight folded
    /// in when there are too many).
    fn launch(&mut self) {
        self.join_at = None;
        let mut members: Vec<String> = std::mem::take(&mut self.joining);
        while self.polls.len() >= MAX_POLLS {
            let smallest = *self
                .polls
                .iter()
                .min_by_key(|(_, p)| p.members.len())
                .map(|(id, _)| id)
                .expect("polls in flight");
            let folded = self.polls.remove(&smallest).expect("poll in flight");
            folded.task.abort();
            for m in folded.members {
                if let Some(w) = self.waiters.get_mut(&m) {
                    if w.poll == Some(smallest) {
                        w.poll = None;
                        members.push(m);
                    }
                }
            }
        }
        // Workers that stopped waiting (their wait timed out, or they stopped) leave.
        members.retain(|m| {
            let gone = self.waiters.get(m).is_none_or(|w| w.reply.is_closed());
            if gone {
                self.waiters.remove(m);
            }
            !gone
        });
        for chunk in members.chunks(BATCH_LIMIT) {
            self.start_poll(chunk.to_vec());
        }
    }

    fn start_poll(&mut self, members: Vec<String>) {
        let id = self.next_poll;
        self.next_poll += 1;
        let workers: Vec<PollEntry> = members
            .iter()
            .map(|m| {
                let w = self.waiters.get_mut(m).expect("a waiting worker");
                w.poll = Some(id);
                PollEntry {
                    id: m.clone(),
                    token: Some(w.token.clone()),
                    after: w.after,
                    ack: w.acks.clone(),
                }
            })
            .collect();
        let hub = self
            .hub
            .with_token(workers[0].token.as_deref().unwrap_or_default());
        let done = self.done_tx.clone();
        let task = tokio::spawn(async move {
            let poll = PollMany {
                wait: POLL_SECS,
                limit: None,
                workers,
            };
            let _ = done.send((id, hub.poll_many(&poll).await));
        });
        self.polls.insert(id, InFlight { members, task });
    }

    fn answered(&mut self, poll: u64, result: Result<PolledMany>) {
        // A poll cancelled after it answered has had its workers moved on already.
        let Some(p) = self.polls.remove(&poll) else {
            return;
        };
        for m in p.members {
            if self.waiters.get(&m).is_none_or(|w| w.poll != Some(poll)) {
                continue;
            }
            let mut w = self.waiters.remove(&m).expect("a waiting worker");
            let answer = match &result {
                Err(e) => Err(e.clone()),
                Ok(a) => match a.errors.get(&m) {
                    Some(e) => Err(e.clone()),
                    None => Ok(a.events_of(&m)),
                },
            };
            match answer {
                Ok(events) if events.is_empty() => {
                    // Nothing came within the poll's wait: its acks are in, poll again.
                    if !w.reply.is_closed() {
                        w.acks.clear();
                        w.poll = None;
                        self.waiters.insert(m.clone(), w);
                        self.join(m);
                    }
                }
                answer => {
                    let _ = w.reply.send(answer);
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
