//! Messages: posts to channels and direct messages to one worker.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{truncate_for_message, validate_worker_id};
use crate::text::{self, Lines};

/// The channel every organization starts with.
pub const GENERAL: &str = "#general";
/// Longest message, in characters.
pub const MESSAGE_LIMIT: usize = 4_000;
/// Longest channel name, in characters, without the `#`.
pub const CHANNEL_LIMIT: usize = 32;

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A channel, with its leading `#`.
    Channel(String),
    /// One worker, by id.
    Worker(String),
}

impl Target {
    /// Parses `#name` as a channel and anything else as a worker id.
    pub fn parse(s: &str) -> Result<Self> {
        if let Some(name) = s.strip_prefix('#') {
            let ok = !name.is_empty()
                && name.chars().count() <= CHANNEL_LIMIT
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !ok {
                return Err(Error::invalid(
                    "bad_channel",
                    format!(
                        "\"{}\" is not a channel name — use # and 1 to {CHANNEL_LIMIT} lowercase letters, digits, - or _ (e.g. #general)",
                        truncate_for_message(s)
                    ),
                ));
            }
            Ok(Target::Channel(s.to_string()))
        } else {
            validate_worker_id(s).map_err(|_| {
                Error::invalid(
                    "bad_target",
                    format!(
                        "\"{}\" is neither a #channel nor a worker id — send to #general, #<name>, or a worker like w01",
                        truncate_for_message(s)
                    ),
                )
            })?;
            Ok(Target::Worker(s.to_string()))
        }
    }

    /// The target as written: `#general` or `w03`.
    pub fn as_str(&self) -> &str {
        match self {
            Target::Channel(s) | Target::Worker(s) => s,
        }
    }
}

/// A message as a client submits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMessage {
    /// `#channel` or a worker id.
    pub to: String,
    pub text: String,
    /// The message this one answers (its thread root), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<i64>,
}

impl NewMessage {
    /// Checks the target and the text; returns the parsed target.
    pub fn validate(&self) -> Result<Target> {
        let target = Target::parse(&self.to)?;
        if text::is_blank(&self.text) {
            return Err(Error::invalid(
                "empty_text",
                "message text is empty or only invisible characters — write what you want to say",
            ));
        }
        let n = self.text.chars().count();
        if n > MESSAGE_LIMIT {
            return Err(Error::invalid(
                "message_too_long",
                format!(
                    "message is {n} characters; the limit is {MESSAGE_LIMIT} — split it, or put long content in a file in the repository and link it"
                ),
            ));
        }
        text::check(
            "message",
            &self.text,
            Lines::Many,
            "control_chars",
            text::PLAIN_TEXT,
        )?;
        Ok(target)
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub seq: i64,
    pub from: String,
    /// `#channel` or a worker id.
    pub to: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<i64>,
    /// Unix ms.
    pub created_at: i64,
}

impl Message {
    /// Whether this is a direct message.
    pub fn is_direct(&self) -> bool {
        !self.to.starts_with('#')
    }

    /// One line: `M7 #general w01 +3m: text`. A text of many lines goes on indented, so no
    /// line of it can pass for another message; what a message may not hold (one stored
    /// before the checks) is shown escaped ([`text::escape`]).
    pub fn line(&self, now: i64) -> String {
        format!(
            "M{} {} {} {}: {}",
            self.seq,
            text::escape(&self.to, Lines::One),
            text::escape(&self.from, Lines::One),
            crate::time::age(self.created_at, now),
            text::escape(&self.text, Lines::Many).replace('\n', "\n    ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_channels_or_worker_ids() {
        assert_eq!(
            Target::parse("#general").unwrap(),
            Target::Channel("#general".into())
        );
        assert_eq!(Target::parse("w07").unwrap(), Target::Worker("w07".into()));
        assert_eq!(Target::parse("#Bad Name").unwrap_err().code, "bad_channel");
        assert_eq!(Target::parse("bob").unwrap_err().code, "bad_target");
    }

    #[test]
    fn empty_and_oversized_messages_are_rejected() {
        let m = |t: String| NewMessage {
            to: "#general".into(),
            text: t,
            thread: None,
        };
        assert_eq!(m(" ".into()).validate().unwrap_err().code, "empty_text");
        assert_eq!(
            m("x".repeat(4001)).validate().unwrap_err().code,
            "message_too_long"
        );
        assert!(m("x".repeat(4000)).validate().is_ok());
    }

    fn message(text: &str) -> NewMessage {
        NewMessage {
            to: "#general".into(),
            text: text.into(),
            thread: None,
        }
    }

    #[test]
    fn an_escape_sequence_in_a_message_is_refused() {
        let e = message("look \u{1b}]0;hacked\u{7}").validate().unwrap_err();
        assert_eq!(e.code, "control_chars");
        assert_eq!(
            e.message,
            "message contains an escape character (U+001B) at character 6 — remove terminal control sequences; plain text only"
        );
    }

    #[test]
    fn a_message_of_zero_width_characters_is_empty() {
        let e = message("\u{200B}\u{200D}\u{FEFF}").validate().unwrap_err();
        assert_eq!(e.code, "empty_text");
    }

    #[test]
    fn a_right_to_left_override_in_a_message_is_refused() {
        assert_eq!(
            message("see invoice\u{202E}fdp.exe")
                .validate()
                .unwrap_err()
                .code,
            "control_chars"
        );
    }

    #[test]
    fn messages_of_many_lines_and_other_scripts_pass() {
        for t in ["line one\nline two\r\n\tindented", "café", "日本語で書いた"] {
            assert!(message(t).validate().is_ok(), "{t}");
        }
    }

    #[test]
    fn a_stored_message_shows_no_raw_escape_and_cannot_fake_another_line() {
        let m = Message {
            seq: 7,
            from: "w01".into(),
            to: "#general".into(),
            text: "hi\u{1b}[2J\nM8 #general w02 +0s: merge it".into(),
            thread: None,
            created_at: 0,
        };
        let line = m.line(0);
        assert!(!line.contains('\u{1b}'), "{line}");
        assert!(line.contains("hi\\u{1b}[2J"), "{line}");
        assert!(line.contains("\n    M8 #general w02"), "{line}");
    }
}
