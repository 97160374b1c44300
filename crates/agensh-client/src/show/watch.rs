//! `agensh status --watch`: the dashboard's counts and newest changes, kept from the
//! frames of the hub's live stream ([`crate::FrameStream`]), followed across breaks.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use agensh_domain::event::Event;
use agensh_protocol::dashboard::{Frame, Health};
use agensh_protocol::rest::Stats;

use crate::Client;

/// How many recent changes the watch keeps.
pub const RECENT: usize = 12;

/// What the watch shows, kept from the frames.
#[derive(Default)]
pub struct Watched {
    states: BTreeMap<String, u64>,
    stats: Stats,
    health: Health,
    recent: VecDeque<String>,
    cursor: Option<i64>,
}

impl Watched {
    /// Where the stream is to resume: the last frame's cursor.
    pub fn cursor(&self) -> Option<i64> {
        self.cursor
    }

    /// Takes in a frame; returns its changes, one line each.
    pub fn apply(&mut self, f: &Frame) -> Vec<String> {
        if let Some(s) = &f.states {
            self.states = s.clone();
        }
        if let Some(s) = &f.stats {
            self.stats = s.clone();
        }
        if let Some(h) = &f.health {
            self.health = h.clone();
        }
        self.cursor = Some(f.cursor);
        let changes: Vec<String> = f.events.iter().map(describe).collect();
        for c in &changes {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(c.clone());
        }
        changes
    }

    /// The view: counts per state, merges, health, the newest changes, the link; stored
    /// text escaped to one line, each line at most `cols` (at least 20) characters.
    pub fn render(&self, dashboard: &str, cols: usize) -> Vec<String> {
        let states: Vec<String> = self
            .states
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let h = &self.health;
        let mut lines = vec![
            format!("workers: {}", states.join(" · ")),
            format!(
                "merged {} · PRs open {} · records {} · messages {}",
                self.stats.prs_merged, self.stats.prs_open, self.stats.records, self.stats.messages
            ),
            format!(
                "event to node p50 {} ms p99 {} ms · claims {} ({} overlapped) · idle {:.0}%",
                h.delivery_p50_ms,
                h.delivery_p99_ms,
                h.claims,
                h.claim_overlaps,
                h.idle_share * 100.0
            ),
            format!("dashboard {dashboard} (log in: agensh dashboard)"),
            "recent changes:".to_string(),
        ];
        lines.extend(self.recent.iter().rev().map(|c| format!("  {c}")));
        lines
            .into_iter()
            .map(|l| agensh_domain::text::escape(&l, agensh_domain::text::Lines::One).into_owned())
            .map(|l| l.chars().take(cols.max(20)).collect())
            .collect()
    }
}

/// Follows the hub's live stream, keeping a [`Watched`] up to date: `on` gets each frame
/// with the watch as it now stands and the frame's changes. After a break it connects again
/// from the last cursor, so nothing is missed or shown twice (a hub that cannot be reached:
/// every 2 s, said through `note`, as is a broken stream). It ends only on another error;
/// the caller stops it by dropping it.
pub async fn follow(
    client: &Client,
    mut on: impl FnMut(&Watched, &Frame, Vec<String>),
    mut note: impl FnMut(String),
) -> crate::Result<()> {
    let mut seen = Watched::default();
    loop {
        let mut stream = match client.stream(seen.cursor()).await {
            Ok(s) => s,
            Err(e) if e.code == "unreachable" => {
                note(format!("{e}; trying again in 2 s"));
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        loop {
            match stream.next().await {
                Ok(Some(frame)) => {
                    let changes = seen.apply(&frame);
                    on(&seen, &frame, changes);
                }
                Ok(None) => break,
                Err(e) => {
                    note(e.to_string());
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One line for an event, as the dashboard's feed says it.
pub fn describe(e: &Event) -> String {
    let p = &e.payload;
    let s = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let n = p.get("number").and_then(|v| v.as_i64()).unwrap_or(0);
    match e.kind.as_str() {
        "board.record" => format!(
            "{} posted {} {}: {}",
            s("author"),
            s("kind"),
            s("id"),
            s("text")
        ),
        "msg.channel" => format!("{} in {}: {}", s("from"), s("to"), s("text")),
        "msg.dm" => format!("{} → {}: {}", s("from"), s("to"), s("text")),
        "notice" => format!("notice: {}", s("text")),
        "pr.opened" => format!("PR #{n} opened: {}", s("title")),
        "pr.merged" => format!("PR #{n} merged: {}", s("title")),
        "pr.closed" => format!("PR #{n} closed"),
        "pr.merge_failed" => format!("PR #{n} could not merge"),
        "main.updated" => format!(
            "main moved to {}",
            s("commit").chars().take(10).collect::<String>()
        ),
        k if k.starts_with("issue.") => format!("issue #{n} {}: {}", &k[6..], s("title")),
        k => k.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::event::Priority;

    fn event(seq: i64, kind: &str, payload: serde_json::Value) -> Event {
        Event {
            seq,
            kind: kind.into(),
            priority: Priority::Normal,
            payload,
            dedup_key: None,
            source: None,
            target: None,
            except: None,
            created_at: 0,
        }
    }

    #[test]
    fn the_watch_keeps_counts_and_the_newest_changes() {
        let mut w = Watched::default();
        let mut states = BTreeMap::new();
        states.insert("busy".to_string(), 3);
        states.insert("dead".to_string(), 1);
        let frame = Frame {
            cursor: 20,
            events: (1..=15)
                .map(|i| event(i, "board.record", serde_json::json!({"author": "w01", "kind": "FACT", "id": format!("G{i}"), "text": "t"})))
                .collect(),
            states: Some(states),
            ..Frame::default()
        };
        assert_eq!(w.apply(&frame).len(), 15);
        assert_eq!(w.cursor(), Some(20));
        let view = w.render("http://127.0.0.1:1/", 200);
        assert_eq!(view[0], "workers: busy 3 · dead 1");
        assert!(view[3].contains("http://127.0.0.1:1/"));
        assert_eq!(view.len(), 5 + RECENT, "only the newest changes");
        assert!(view[5].contains("G15"), "newest first: {view:?}");
    }

    #[test]
    fn stored_text_cannot_move_the_terminal() {
        let mut w = Watched::default();
        w.apply(&Frame {
            cursor: 1,
            events: vec![event(
                1,
                "msg.channel",
                serde_json::json!({"from": "w01", "to": "#general", "text": "a\u{1b}[2Jb"}),
            )],
            ..Frame::default()
        });
        let view = w.render("x", 200);
        assert!(view.iter().all(|l| !l.contains('\u{1b}')), "{view:?}");
    }
}
