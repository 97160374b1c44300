//! Parking: a worker whose turns change nothing stops spending.
//!
//! A turn *changed something* when the worker's checkout is not as the last turn left it
//! (`HEAD`, or any file: an edit, a commit) or the agent made a successful call of an
//! organization tool that changes the organization (a record, a message, a PR, an issue,
//! `ship`) — claims, renewals and releases do not count: a worker that only claims taken or
//! shipped parts is not working. A turn cut off at its step limit was doing work, and so is
//! every turn of a worker that holds a claim (it took one and has not released or shipped
//! it): it has work in progress, however its turns go.
//!
//! After [`PARK_AFTER`] turns in a row that changed nothing the worker is *parked*: its next
//! continue prompt waits [`FIRST_BACKOFF`], doubling with each further such turn up to
//! [`MAX_BACKOFF`] (never less than `run.idle_timeout_secs`), and while it waits any event
//! but a peer's board record wakes it at once ([`wakes_a_parked_worker`]: a message, `main`
//! moving, an issue, a PR…); board records wait for its next prompt's digest. The first
//! turn that changes something unparks it. A worker that is doing work is never parked: its
//! turns change its checkout or the organization.

use std::time::Duration;

use agensh_domain::event::{kinds, Event};
use agensh_workspace::Git;

use crate::adapters::TurnEvent;

/// Turns in a row that changed nothing before a worker is parked: one such turn (a launch
/// turn that only looked around, a claim that found its part taken) is normal work.
pub const PARK_AFTER: u32 = 2;
/// The continue prompt's wait once a worker is parked.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);
/// The longest wait between continue prompts of a parked worker.
pub const MAX_BACKOFF: Duration = Duration::from_secs(16 * 60);

/// Organization tools whose successful call changes the organization. An ACP agent names a
/// call by its title, which may carry a prefix (`mcp__agensh__ship`): matched by suffix.
const CHANGING_TOOLS: &[&str] = &[
    "board_write",
    "msg_post",
    "msg_dm",
    "pr_open",
    "pr_merge",
    "pr_review",
    "pr_comment",
    "pr_close",
    "ship",
    "issue_open",
    "issue_comment",
    "issue_close",
    "issue_claim",
];

/// What a worker's checkout looks like: `HEAD` and the state of every file, as
/// `git status --porcelain=v2 --branch` says them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footprint {
    status: String,
}

impl Footprint {
    /// The checkout at `dir` now (empty when git cannot read it: then two readings compare
    /// equal and the tools alone decide). One git process, at nice 19: every turn's end
    /// reads one, and with 1,024 workers whose turns end together (a post to all) two
    /// processes at the node's priority took 460 ms of CPU per post and put 20–30 ms on
    /// the p99 of the others' prompts (`agensh-bench node`).
    pub async fn of(dir: &std::path::Path) -> Footprint {
        let out = Git::worktree(dir)
            .background()
            .output([
                "status",
                "--porcelain=v2",
                "--branch",
                "-z",
                "--untracked-files=all",
            ])
            .await;
        match out {
            Ok(out) if out.success() => Footprint { status: out.stdout },
            _ => Footprint::default(),
        }
    }
}

/// Whether a turn's tool calls changed the organization.
pub fn changed_the_organization(events: &[TurnEvent]) -> bool {
    events.iter().any(|e| match e {
        TurnEvent::ToolCall { name, status, .. } => {
            status == "completed" && CHANGING_TOOLS.iter().any(|t| name.trim().ends_with(t))
        }
        TurnEvent::Message { .. } => false,
    })
}

/// Whether `event` wakes a parked worker at once: every event but a peer's board record,
/// which waits for its next prompt's digest (records are the organization's chatter; the
/// news that may give it work — `main` moving, a PR merged, an issue, a message — wakes it).
pub fn wakes_a_parked_worker(event: &Event) -> bool {
    event.kind != kinds::BOARD_RECORD
}

/// One worker's parking: how many turns in a row changed nothing, and whether it holds a
/// claim (work in progress: a worker that holds one is never parked).
#[derive(Debug, Clone, Default)]
pub struct Parking {
    idle_turns: u32,
    checkout: Footprint,
    holds_claim: bool,
}

/// Whether the worker holds a claim after `events`, given whether it held one before: a
/// claim taken holds one, a release or a `ship` (which releases it) lets it go.
fn holds_claim_after(mut holds: bool, events: &[TurnEvent]) -> bool {
    for e in events {
        if let TurnEvent::ToolCall { name, status, .. } = e {
            if status != "completed" {
                continue;
            }
            let name = name.trim();
            if name.ends_with("claim") {
                holds = true;
            } else if name.ends_with("release") || name.ends_with("ship") {
                holds = false;
            }
        }
    }
    holds
}

impl Parking {
    /// Parking that starts from the checkout as it is before the first turn.
    pub fn new(checkout: Footprint) -> Parking {
        Parking {
            idle_turns: 0,
            checkout,
            holds_claim: false,
        }
    }

    /// Notes a turn's end: the checkout after it, its tool calls, and whether it was cut
    /// off at its step limit.
    pub fn turn_ended(&mut self, checkout: Footprint, events: &[TurnEvent], cut_off: bool) {
        self.holds_claim = holds_claim_after(self.holds_claim, events);
        let changed = cut_off
            || self.holds_claim
            || checkout != self.checkout
            || changed_the_organization(events);
        self.checkout = checkout;
        self.idle_turns = if changed {
            0
        } else {
            self.idle_turns.saturating_add(1)
        };
    }

    /// Why the worker is parked, when it is.
    pub fn reason(&self) -> Option<String> {
        self.parked()
            .then(|| format!("its last {} turns changed nothing", self.idle_turns))
    }

    pub fn parked(&self) -> bool {
        self.idle_turns >= PARK_AFTER
    }

    /// How long to wait for events before the next continue prompt.
    pub fn idle_wait(&self, idle_timeout: Duration) -> Duration {
        if !self.parked() {
            return idle_timeout;
        }
        let doublings = (self.idle_turns - PARK_AFTER).min(8);
        let wait = FIRST_BACKOFF.saturating_mul(1 << doublings);
        wait.min(MAX_BACKOFF).max(idle_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, status: &str) -> TurnEvent {
        TurnEvent::ToolCall {
            name: name.into(),
            status: status.into(),
            kind: String::new(),
        }
    }

    fn at(head: &str) -> Footprint {
        Footprint {
            status: format!("# branch.oid {head}"),
        }
    }

    #[test]
    fn turns_that_change_nothing_back_off_from_one_minute_doubling_to_the_cap() {
        let mut p = Parking::new(at("a"));
        let idle = Duration::from_secs(10);
        assert_eq!(p.idle_wait(idle), idle);
        let mut waits = Vec::new();
        for _ in 0..8 {
            p.turn_ended(at("a"), &[call("claim", "failed")], false);
            waits.push(p.idle_wait(idle).as_secs());
        }
        assert_eq!(waits, [10, 60, 120, 240, 480, 960, 960, 960]);
        assert_eq!(p.reason().unwrap(), "its last 8 turns changed nothing");
    }

    #[test]
    fn a_turn_that_changes_the_checkout_or_the_organization_unparks() {
        let idle = Duration::from_secs(10);
        let mut p = Parking::new(at("a"));
        p.turn_ended(at("a"), &[], false);
        assert!(!p.parked(), "one turn that changed nothing is normal");
        p.turn_ended(at("a"), &[], false);
        assert!(p.parked());
        p.turn_ended(at("b"), &[], false);
        assert!(!p.parked(), "a commit is work");
        assert_eq!(p.idle_wait(idle), idle);
        let idle_twice = |p: &mut Parking| {
            p.turn_ended(at("b"), &[], false);
            p.turn_ended(at("b"), &[], false);
            assert!(p.parked());
        };
        idle_twice(&mut p);
        p.turn_ended(
            at("b"),
            &[call("mcp__agensh__board_write", "completed")],
            false,
        );
        assert!(!p.parked(), "a record is work");
        idle_twice(&mut p);
        p.turn_ended(at("b"), &[], true);
        assert!(!p.parked(), "a turn cut off at its step limit was working");
    }

    #[test]
    fn a_worker_that_holds_a_claim_is_never_parked() {
        let mut p = Parking::new(at("a"));
        p.turn_ended(at("a"), &[call("claim", "completed")], false);
        for _ in 0..3 {
            p.turn_ended(at("a"), &[call("board_read", "completed")], false);
            assert!(!p.parked(), "it holds a claim: it is working");
        }
        p.turn_ended(at("a"), &[call("release", "completed")], false);
        p.turn_ended(at("a"), &[], false);
        assert!(p.parked(), "released, and nothing changed twice in a row");
        // A claim taken and released in the same turn (a taken part) holds nothing.
        let mut q = Parking::new(at("a"));
        for _ in 0..2 {
            q.turn_ended(
                at("a"),
                &[call("claim", "completed"), call("release", "completed")],
                false,
            );
        }
        assert!(q.parked());
    }

    #[test]
    fn claims_and_failed_calls_are_not_work() {
        for events in [
            vec![call("claim", "completed"), call("release", "completed")],
            vec![call("ship", "failed")],
            vec![call("board_read", "completed"), call("renew", "completed")],
        ] {
            assert!(!changed_the_organization(&events), "{events:?}");
        }
        assert!(changed_the_organization(&[call("ship", "completed")]));
    }

    #[test]
    fn news_wakes_a_parked_worker_and_board_records_wait() {
        let event = |kind: &str| Event {
            seq: 1,
            kind: kind.into(),
            priority: agensh_domain::event::Priority::Normal,
            payload: serde_json::Value::Null,
            dedup_key: None,
            source: None,
            target: None,
            except: None,
            created_at: 0,
        };
        for kind in [
            kinds::DIRECT_MESSAGE,
            kinds::ISSUE_OPENED,
            kinds::MAIN_UPDATED,
            kinds::NOTICE,
            kinds::PR_REVIEW,
            kinds::WORKER_STOP,
            kinds::CHANNEL_POST,
            kinds::PR_MERGED,
        ] {
            assert!(wakes_a_parked_worker(&event(kind)), "{kind}");
        }
        assert!(!wakes_a_parked_worker(&event(kinds::BOARD_RECORD)));
    }

    #[tokio::test]
    async fn the_footprint_moves_with_an_edit_a_new_file_and_a_commit_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(d)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(d.join("a.txt"), "one").unwrap();
        git(&["add", "a.txt"]);
        git(&["commit", "-q", "-m", "one"]);
        let start = Footprint::of(d).await;
        assert_ne!(start, Footprint::default(), "git read the checkout");
        assert_eq!(Footprint::of(d).await, start, "nothing changed");

        std::fs::write(d.join("a.txt"), "two").unwrap();
        let edited = Footprint::of(d).await;
        assert_ne!(edited, start, "an edit");

        std::fs::create_dir(d.join("new")).unwrap();
        std::fs::write(d.join("new/b.txt"), "b").unwrap();
        let added = Footprint::of(d).await;
        assert_ne!(added, edited, "a new file in a new directory");

        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "two"]);
        let committed = Footprint::of(d).await;
        assert_ne!(committed, start, "a commit moves HEAD");
        assert!(
            committed.status.starts_with("# branch.oid "),
            "{committed:?}"
        );
    }
}
