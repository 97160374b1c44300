//! A worker's turn as its node reports it to the hub (`POST /workers/{id}/turns`): the
//! limits of a report, how the node cuts what it sends to fit them, and the checks the hub
//! applies. The texts of a turn come from agents (a prompt, tool titles, a stop reason), so
//! the hub escapes their controls ([`crate::text::escape`]) rather than refusing them; what
//! is refused is only a report over these limits, which a node never sends.

use crate::error::{Error, Result};

/// Most bytes of a turn's prompt in a report, its cut marker included.
pub const PROMPT_BYTES: usize = 8 * 1024;
/// Ends a prompt the node cut to [`PROMPT_BYTES`].
pub const PROMPT_CUT_MARKER: &str =
    "\n[… cut at 8 KiB: the whole prompt is in the node's turn log]";
/// Most tool calls a report lists; the node counts the rest in `tool_calls_dropped`.
pub const TOOL_CALLS: usize = 200;
/// Most event seqs a report lists: a prompt carries at most one poll's events.
pub const EVENTS: usize = crate::page::POLL.max;
/// Longest tool name, in characters.
pub const NAME_CHARS: usize = 100;
/// Longest tool title (what the call works on), in characters.
pub const TITLE_CHARS: usize = 300;
/// Longest tool status, stop reason, in characters.
pub const STATUS_CHARS: usize = 64;
/// Longest last action, in characters.
pub const LAST_ACTION_CHARS: usize = 300;

/// `prompt` cut to at most [`PROMPT_BYTES`] bytes at a character boundary, ending with
/// [`PROMPT_CUT_MARKER`] when cut.
pub fn clip_prompt(prompt: &str) -> String {
    if prompt.len() <= PROMPT_BYTES {
        return prompt.to_string();
    }
    let mut end = PROMPT_BYTES - PROMPT_CUT_MARKER.len();
    while !prompt.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{PROMPT_CUT_MARKER}", &prompt[..end])
}

/// `text` cut to at most `max` characters, the last of them `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some(_) => {
            let keep: String = text.chars().take(max.saturating_sub(1)).collect();
            keep + "…"
        }
        None => text.to_string(),
    }
}

/// Refuses `text` (the report's `field`) over `max` characters.
pub fn check_chars(field: &str, text: &str, max: usize) -> Result<()> {
    let n = text.chars().count();
    if n > max {
        return Err(Error::invalid(
            "text_too_long",
            format!("{field} is {n} characters; a turn report takes at most {max} — cut it (the node's turn log keeps the whole text)"),
        ));
    }
    Ok(())
}

/// Refuses a prompt over [`PROMPT_BYTES`] bytes.
pub fn check_prompt(prompt: &str) -> Result<()> {
    if prompt.len() > PROMPT_BYTES {
        return Err(Error::invalid(
            "text_too_long",
            format!(
                "the prompt is {} bytes; a turn report takes at most {PROMPT_BYTES} — cut it at a character boundary and end it with a marker that it was cut",
                prompt.len()
            ),
        ));
    }
    Ok(())
}

/// Checks the numbers of a report: a turn from 1, an end not before its start, at most
/// [`EVENTS`] event seqs (each from 1) and [`TOOL_CALLS`] tool calls.
pub fn check_counts(
    turn: u64,
    started_at: i64,
    ended_at: i64,
    events: &[i64],
    tool_calls: usize,
) -> Result<()> {
    if turn == 0 || turn > i64::MAX as u64 {
        return Err(Error::invalid(
            "bad_turn",
            format!("turn {turn} is out of range — number a worker's turns from 1"),
        ));
    }
    if ended_at < started_at {
        return Err(Error::invalid(
            "bad_turn",
            format!("ended_at ({ended_at}) is before started_at ({started_at}) — send the turn's start and end in unix ms"),
        ));
    }
    if events.len() > EVENTS {
        return Err(Error::invalid(
            "too_many_events",
            format!(
                "the report lists {} events; at most {EVENTS} — list the seqs of the events the prompt carried",
                events.len()
            ),
        ));
    }
    if let Some(bad) = events.iter().find(|&&s| s < 1) {
        return Err(Error::invalid(
            "bad_turn",
            format!("event seq {bad} is not an event's — seqs start at 1"),
        ));
    }
    if tool_calls > TOOL_CALLS {
        return Err(Error::invalid(
            "too_many_tool_calls",
            format!("the report lists {tool_calls} tool calls; at most {TOOL_CALLS} — send the first {TOOL_CALLS} and count the rest in tool_calls_dropped"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_prompt_is_cut_at_a_character_boundary_with_a_marker() {
        assert_eq!(clip_prompt("short"), "short");
        let exact = "a".repeat(PROMPT_BYTES);
        assert_eq!(
            clip_prompt(&exact),
            exact,
            "exactly the limit is kept whole"
        );
        // Two-byte characters: the cut lands inside one unless it steps back.
        let long = format!("a{}", "é".repeat(PROMPT_BYTES));
        let cut = clip_prompt(&long);
        assert!(cut.len() <= PROMPT_BYTES, "{}", cut.len());
        assert!(cut.len() >= PROMPT_BYTES - 1, "{}", cut.len());
        assert!(cut.ends_with(PROMPT_CUT_MARKER));
        assert!(long.starts_with(cut.strip_suffix(PROMPT_CUT_MARKER).unwrap()));
        check_prompt(&cut).unwrap();
        let e = check_prompt(&long).unwrap_err();
        assert_eq!(e.code, "text_too_long");
        assert!(e.message.contains("at most 8192"), "{}", e.message);
    }

    #[test]
    fn clip_counts_characters_and_marks_the_cut() {
        assert_eq!(clip("claim", 5), "claim");
        assert_eq!(clip("claimed", 5), "clai…");
        assert_eq!(clip(&"ü".repeat(10), 4).chars().count(), 4);
        check_chars(
            "the title",
            &clip(&"x".repeat(500), TITLE_CHARS),
            TITLE_CHARS,
        )
        .unwrap();
        let e = check_chars("the title", &"x".repeat(301), TITLE_CHARS).unwrap_err();
        assert_eq!(e.code, "text_too_long");
        assert!(e.message.starts_with("the title is 301 characters"));
    }

    #[test]
    fn counts_out_of_range_are_refused_with_what_to_send() {
        check_counts(1, 10, 10, &[1, 2], TOOL_CALLS).unwrap();
        let code = |r: Result<()>| r.unwrap_err().code;
        assert_eq!(code(check_counts(0, 0, 1, &[], 0)), "bad_turn");
        assert_eq!(code(check_counts(u64::MAX, 0, 1, &[], 0)), "bad_turn");
        assert_eq!(code(check_counts(1, 5, 4, &[], 0)), "bad_turn");
        assert_eq!(code(check_counts(1, 0, 1, &[0], 0)), "bad_turn");
        assert_eq!(
            code(check_counts(1, 0, 1, &vec![1; EVENTS + 1], 0)),
            "too_many_events"
        );
        assert_eq!(
            code(check_counts(1, 0, 1, &[], TOOL_CALLS + 1)),
            "too_many_tool_calls"
        );
    }
}
