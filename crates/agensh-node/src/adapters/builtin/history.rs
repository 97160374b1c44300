//! The conversation, its size and its compaction.
//!
//! Small local models have small windows, so the conversation is kept bounded: long tool
//! outputs are cut to head and tail before they enter it ([`cut_text`]), the prompt size is
//! estimated before each request (the endpoint's last `prompt_tokens` plus about one token
//! per 3.5 characters of what was added since), and when it nears the window the middle
//! of the conversation is replaced by a recap: one sentence per action and how it ended
//! ([`recap_line`]), never a format a model could copy into a file. The
//! system prompt, the session's first prompt (the goal), the current turn's prompt and the
//! last few exchanges stay.
//!
//! The recap goes into the same user message as the turn's prompt, so roles still
//! alternate (user, assistant, …) for chat templates that insist on it.

use serde_json::{json, Value};

/// Characters per token when estimating from text.
const CHARS_PER_TOKEN: f64 = 3.5;
/// Overhead of one message (role, separators) in tokens.
const MESSAGE_TOKENS: usize = 4;
/// Longest line of a recap.
const RECAP_LINE: usize = 160;
/// The heading of the recap in the turn's prompt message.
pub const RECAP_HEADING: &str =
    "Recap of earlier steps (older messages were removed to save space):";

/// `text` cut to about `cap` characters: its first third and its end, with a note saying
/// how much was cut.
pub fn cut_text(text: &str, cap: usize) -> String {
    let n = text.chars().count();
    if n <= cap {
        return text.to_string();
    }
    let keep_head = cap / 3;
    let keep_tail = cap - keep_head;
    let head: String = text.chars().take(keep_head).collect();
    let tail: String = text.chars().skip(n - keep_tail).collect();
    join_cut(&head, n - keep_head - keep_tail, &tail)
}

/// `head`, the note that `cut` characters were cut, and `tail`.
pub fn join_cut(head: &str, cut: usize, tail: &str) -> String {
    format!(
        "{head}\n[… {cut} characters cut; read a smaller range or narrow the command …]\n{tail}"
    )
}

/// One line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut s: String = flat.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Longest command quoted in a recap line; a longer one is named by its first word.
const RECAP_COMMAND: usize = 80;
/// Longest argument quoted in a recap line; a longer one is named by its size, in words.
const RECAP_ARG: usize = 40;

/// The recap line of one tool call, in prose: what was done and how it ended. It quotes
/// nothing a model could paste back as content — no file text, no size placeholder like
/// `<250 chars>`, no `read_file` header.
pub fn recap_line(tool: &str, args: &Value, ok: bool, result: &str) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").trim();
    let lines = |t: &str| match t.lines().count() {
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    let first = first_line(result);
    let failed = |what: String| {
        format!(
            "You tried to {what}; it failed: {}",
            one_line(first.trim_start_matches("error: "), 100)
        )
    };
    match (tool, ok) {
        ("write_file", true) if s("content").is_empty() => format!("You wrote {}.", s("path")),
        ("write_file", true) => format!("You wrote {} ({}).", s("path"), lines(s("content"))),
        ("write_file", false) => failed(format!("write {}", s("path"))),
        ("edit_file", true) => format!(
            "You edited {}, replacing {} with {}.",
            s("path"),
            lines(s("old")),
            lines(s("new"))
        ),
        ("edit_file", false) => failed(format!("edit {}", s("path"))),
        ("read_file", true) => match first.split_once(": ") {
            Some((_, range)) => format!("You read {} ({range}).", s("path")),
            None => format!("You read {}.", s("path")),
        },
        ("read_file", false) => failed(format!("read {}", s("path"))),
        ("list_files", _) => {
            let dir = match s("path") {
                "" | "." => "your checkout".to_string(),
                d => d.to_string(),
            };
            format!("You listed the files in {dir}.")
        }
        ("run", _) => {
            let command = s("command");
            let command = if command.chars().count() <= RECAP_COMMAND && !command.contains('\n') {
                format!("the command {command}")
            } else {
                let word = command.split_whitespace().next().unwrap_or("sh");
                format!("a long command starting with {word}")
            };
            let last = result
                .lines()
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("[…"))
                .last();
            match last {
                Some(l) => format!(
                    "You ran {command}: {first}; its last line: {}",
                    one_line(l, 100)
                ),
                None => format!("You ran {command}: {first}."),
            }
        }
        (_, ok) => {
            let mut parts = Vec::new();
            if let Some(o) = args.as_object() {
                for (k, v) in o {
                    let text = match v {
                        Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    if text.chars().count() <= RECAP_ARG && !text.contains('\n') {
                        parts.push(format!("{k} {text}"));
                    } else {
                        parts.push(format!("a {k} of {} characters", text.chars().count()));
                    }
                }
            }
            let with = if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            };
            if ok {
                format!("You called {tool}{with}: {}", one_line(first, 100))
            } else {
                failed(format!("call {tool}{with}"))
            }
        }
    }
}

/// The first non-empty line of `text`, trimmed.
fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// What a message is, for compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    System,
    /// A prompt the agent was given (one per turn).
    Prompt,
    /// A reply of the model.
    Assistant,
    /// A tool result (a `tool` message, or a `user` message in JSON style).
    Result,
}

#[derive(Debug, Clone)]
pub struct Msg {
    pub value: Value,
    pub kind: Kind,
    /// Characters of its content (and tool calls).
    pub chars: usize,
    /// Its line in a recap, if it gets one.
    pub line: Option<String>,
}

impl Msg {
    fn new(value: Value, kind: Kind, line: Option<String>) -> Msg {
        let chars = value
            .get("content")
            .and_then(Value::as_str)
            .map_or(0, |s| s.chars().count())
            + value
                .get("tool_calls")
                .map_or(0, |c| c.to_string().chars().count());
        Msg {
            value,
            kind,
            chars,
            line,
        }
    }
}

/// The conversation of one session.
pub struct History {
    msgs: Vec<Msg>,
    /// The session's first prompt (its goal), kept through compactions.
    launch: Option<String>,
    /// The current turn's prompt.
    turn_prompt: String,
    /// Index of the current turn's prompt message.
    turn_idx: usize,
    /// Recap lines of everything compacted away, oldest first.
    recap: Vec<String>,
    /// Lines dropped from the recap itself.
    recap_dropped: usize,
    /// The most characters the recap keeps.
    recap_budget: usize,
    /// Most characters of the session's first prompt kept when pinned.
    launch_budget: usize,
    /// `prompt_tokens` of the last request and how many messages it carried.
    baseline: Option<(u64, usize)>,
}

impl History {
    /// A conversation with `system` as its system prompt, for a window of `context_tokens`.
    pub fn new(system: String, context_tokens: u32) -> History {
        let window_chars = (context_tokens as f64 * CHARS_PER_TOKEN) as usize;
        History {
            msgs: vec![Msg::new(
                json!({ "role": "system", "content": system }),
                Kind::System,
                None,
            )],
            launch: None,
            turn_prompt: String::new(),
            turn_idx: 0,
            recap: Vec::new(),
            recap_dropped: 0,
            recap_budget: (window_chars / 8).max(600),
            launch_budget: (window_chars / 5).max(1000),
            baseline: None,
        }
    }

    /// Replaces the system prompt.
    pub fn set_system(&mut self, system: String) {
        self.msgs[0] = Msg::new(
            json!({ "role": "system", "content": system }),
            Kind::System,
            None,
        );
        self.baseline = None;
    }

    /// The messages to send.
    pub fn messages(&self) -> Vec<Value> {
        self.msgs.iter().map(|m| m.value.clone()).collect()
    }

    /// How many messages (the system prompt included).
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Never: the system prompt is always there.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Total characters of the messages.
    pub fn chars(&self) -> usize {
        self.msgs.iter().map(|m| m.chars).sum()
    }

    /// Starts a turn on `prompt`.
    pub fn begin_turn(&mut self, prompt: &str) {
        if self.launch.is_none() {
            self.launch = Some(prompt.to_string());
        }
        self.turn_prompt = prompt.to_string();
        self.turn_idx = self.msgs.len();
        let line = format!("earlier prompt: {}", one_line(prompt, 100));
        self.msgs.push(Msg::new(
            json!({ "role": "user", "content": prompt }),
            Kind::Prompt,
            Some(line),
        ));
    }

    /// Adds a reply of the model.
    pub fn push_assistant(&mut self, value: Value, line: Option<String>) {
        self.msgs.push(Msg::new(value, Kind::Assistant, line));
    }

    /// Adds a tool result (its message as sent) with its recap line.
    pub fn push_result(&mut self, value: Value, line: String) {
        self.msgs.push(Msg::new(value, Kind::Result, Some(line)));
    }

    /// Remembers the endpoint's count of the prompt just sent.
    pub fn set_baseline(&mut self, prompt_tokens: Option<u64>, sent: usize) {
        self.baseline = prompt_tokens.filter(|&t| t > 0).map(|t| (t, sent));
    }

    /// The estimated prompt size in tokens; `extra_chars` is what the request adds besides
    /// the messages (tool definitions).
    pub fn estimate(&self, extra_chars: usize) -> u64 {
        let est = |chars: usize, msgs: usize| {
            (chars as f64 / CHARS_PER_TOKEN).ceil() as u64 + (msgs * MESSAGE_TOKENS) as u64
        };
        match self.baseline {
            Some((tokens, sent)) if sent <= self.msgs.len() => {
                let new = &self.msgs[sent..];
                tokens + est(new.iter().map(|m| m.chars).sum(), new.len())
            }
            _ => est(self.chars() + extra_chars, self.msgs.len()),
        }
    }

    /// Replaces the middle of the conversation with a recap, keeping the last `keep`
    /// exchanges of this turn; `result_cap` also cuts the kept results. False when there
    /// was nothing to compact.
    pub fn compact(&mut self, keep: usize, result_cap: Option<usize>) -> bool {
        let starts: Vec<usize> = (self.turn_idx + 1..self.msgs.len())
            .filter(|&i| self.msgs[i].kind == Kind::Assistant)
            .collect();
        let tail_start = if starts.len() > keep {
            starts[starts.len() - keep]
        } else {
            starts.first().copied().unwrap_or(self.msgs.len())
        };
        let middle: Vec<usize> = (1..tail_start).filter(|&i| i != self.turn_idx).collect();
        let mut changed = !middle.is_empty();
        let mut lines: Vec<String> = middle
            .iter()
            .filter_map(|&i| self.msgs[i].line.clone())
            .map(|l| format!("- {}", one_line(&l, RECAP_LINE)))
            .collect();
        // A compacted prompt's own recap is already in `self.recap`.
        self.recap.append(&mut lines);
        let mut size: usize = self.recap.iter().map(|l| l.chars().count() + 1).sum();
        while size > self.recap_budget && !self.recap.is_empty() {
            size -= self.recap[0].chars().count() + 1;
            self.recap.remove(0);
            self.recap_dropped += 1;
        }
        let mut tail: Vec<Msg> = self.msgs.split_off(tail_start);
        if let Some(cap) = result_cap {
            for m in tail.iter_mut().filter(|m| m.kind == Kind::Result) {
                if let Some(text) = m.value.get("content").and_then(Value::as_str) {
                    // (A result cut before is about `cap` plus the note: left alone.)
                    if text.chars().count() > cap + 100 {
                        let cut = cut_text(text, cap);
                        m.value["content"] = Value::String(cut);
                        *m = Msg::new(m.value.clone(), m.kind, m.line.clone());
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            self.msgs.append(&mut tail);
            return false;
        }
        let prompt = Msg {
            line: Some(format!(
                "earlier prompt: {}",
                one_line(&self.turn_prompt, 100)
            )),
            ..Msg::new(
                json!({ "role": "user", "content": self.composite() }),
                Kind::Prompt,
                None,
            )
        };
        self.msgs.truncate(1);
        self.msgs.push(prompt);
        self.turn_idx = 1;
        self.msgs.append(&mut tail);
        self.baseline = None;
        true
    }

    /// The turn's prompt with the session's goal and the recap.
    fn composite(&self) -> String {
        let mut s = String::new();
        if let Some(launch) = &self.launch {
            if launch != &self.turn_prompt {
                s.push_str("The first prompt of this session (your goal):\n");
                s.push_str(&cut_text(launch, self.launch_budget));
                s.push_str("\n\nThe current prompt:\n");
            }
        }
        s.push_str(&self.turn_prompt);
        if !self.recap.is_empty() || self.recap_dropped > 0 {
            s.push_str("\n\n");
            s.push_str(RECAP_HEADING);
            if self.recap_dropped > 0 {
                s.push_str(&format!("\n- ({} older steps omitted)", self.recap_dropped));
            }
            for l in &self.recap {
                s.push('\n');
                s.push_str(l);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_head_and_tail_with_a_note() {
        let text: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let c = cut_text(&text, 300);
        assert!(c.starts_with("0\n1\n"));
        assert!(c.ends_with("999\n"));
        assert!(c.contains("characters cut; read a smaller range or narrow the command"));
        assert!(c.chars().count() < 400);
        assert_eq!(cut_text("short", 300), "short");
    }

    fn exchange(h: &mut History, i: usize) {
        h.push_assistant(
            json!({ "role": "assistant", "content": format!("{{\"tool\":\"run\",\"args\":{{\"command\":\"echo {i}\"}}}}") }),
            None,
        );
        h.push_result(
            json!({ "role": "user", "content": format!("result of run:\nexit code: 0\n{i}{}", "x".repeat(500)) }),
            recap_line("run", &json!({ "command": format!("echo {i}") }), true, "exit code: 0"),
        );
    }

    #[test]
    fn compaction_keeps_system_prompt_and_last_exchanges() {
        let mut h = History::new("sys".into(), 2000);
        h.begin_turn("first goal");
        for i in 0..3 {
            exchange(&mut h, i);
        }
        h.begin_turn("second prompt");
        for i in 3..10 {
            exchange(&mut h, i);
        }
        let before = h.estimate(0);
        assert!(h.compact(2, None));
        assert!(h.estimate(0) < before);
        let m = h.messages();
        assert_eq!(m.len(), 1 + 1 + 4);
        assert_eq!(m[0]["content"], "sys");
        let p = m[1]["content"].as_str().unwrap();
        assert!(
            p.contains("first goal") && p.contains("second prompt"),
            "{p}"
        );
        assert!(p.contains(RECAP_HEADING));
        assert!(
            p.contains("- You ran the command echo 0: exit code: 0."),
            "{p}"
        );
        assert!(
            p.contains("- You ran the command echo 7: exit code: 0."),
            "{p}"
        );
        assert!(!p.contains("echo 8"), "{p}");
        assert_eq!(m[2]["role"], "assistant");
        assert!(m[5]["content"].as_str().unwrap().contains("\n9x"));
        // Again: the recap grows, nothing is lost twice or repeated.
        exchange(&mut h, 10);
        assert!(h.compact(1, Some(100)));
        let m = h.messages();
        assert_eq!(m.len(), 4);
        let p = m[1]["content"].as_str().unwrap();
        assert_eq!(p.matches("command echo 7:").count(), 1, "{p}");
        assert!(p.contains("command echo 9:"));
        assert!(m[3]["content"].as_str().unwrap().contains("characters cut"));
        assert!(!h.compact(1, Some(100)), "nothing left to compact");
    }

    #[test]
    fn recap_lines_are_prose_without_placeholders_or_file_text() {
        let body = "def f():\n    return 1\n";
        let line = recap_line(
            "write_file",
            &json!({ "path": "a.py", "content": body }),
            true,
            "wrote 24 bytes (2 lines) to a.py",
        );
        assert_eq!(line, "You wrote a.py (2 lines).");
        let line = recap_line(
            "read_file",
            &json!({ "path": "a.py" }),
            true,
            "a.py: lines 1-2 of 2\ndef f():\n    return 1",
        );
        assert_eq!(line, "You read a.py (lines 1-2 of 2).");
        let line = recap_line(
            "edit_file",
            &json!({ "path": "a.py", "old": "1", "new": "2\n3" }),
            true,
            "edited a.py",
        );
        assert_eq!(line, "You edited a.py, replacing 1 line with 2 lines.");
        let line = recap_line(
            "run",
            &json!({ "command": "python3 t.py" }),
            false,
            "exit code: 1\nTraceback\nAssertionError: 2 != 3\n",
        );
        assert_eq!(
            line,
            "You ran the command python3 t.py: exit code: 1; its last line: AssertionError: 2 != 3"
        );
        let long = format!("python3 -c '{}'", "x".repeat(200));
        let line = recap_line(
            "run",
            &json!({ "command": long }),
            true,
            "exit code: 0\n(no output)",
        );
        assert_eq!(line, "You ran a long command starting with python3: exit code: 0; its last line: (no output)");
        let line = recap_line(
            "board_write",
            &json!({ "kind": "FAIL", "text": "t", "detail": "d".repeat(300) }),
            true,
            "posted G1 FAIL t",
        );
        assert_eq!(line, "You called board_write (kind FAIL, text t, a detail of 300 characters): posted G1 FAIL t");
        let line = recap_line(
            "edit_file",
            &json!({ "path": "a.py", "old": "x", "new": "y" }),
            false,
            "error: old text not found in \"a.py\"; read_file it",
        );
        assert_eq!(
            line,
            "You tried to edit a.py; it failed: old text not found in \"a.py\"; read_file it"
        );
        assert!(
            super::super::content::placeholder(&line, true).is_none(),
            "{line}"
        );
    }

    #[test]
    fn estimate_uses_the_last_count_plus_what_was_added() {
        let mut h = History::new("s".repeat(350), 8192);
        h.begin_turn("p");
        let n = h.len();
        h.set_baseline(Some(1000), n);
        assert_eq!(h.estimate(0), 1000);
        exchange(&mut h, 1);
        assert!(h.estimate(0) > 1100);
        h.set_baseline(None, h.len());
        assert!(h.estimate(0) < 400);
    }
}
