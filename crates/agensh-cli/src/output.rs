//! How the binary answers: results on stdout (human lines, or JSON with `--json`), errors
//! on stderr (one `error:` line, or one `{"error":{"code","message"}}` line with `--json`),
//! and an exit code that says whose failure it was.
//!
//! Writing to stdout goes through [`print`] (and the `outln!` macro): a closed pipe
//! (`agensh board grep x | head -1`) ends the process quietly with 0, as `head` wants,
//! instead of panicking. SIGPIPE stays ignored, as Rust sets it: the same binary runs the
//! hub and the node, which write to sockets and to agents' stdin, and must see a peer that
//! went away as an error, not die of it.
//!
//! Nothing stored reaches the terminal raw: [`print`] writes every line through the
//! domain's [`text::escape`] (an escape, a carriage return or a bidirectional control shows
//! as `\u{1b}`; line feeds and tabs stay), [`json`] writes the characters JSON lets stand
//! raw (DEL, C1 controls, bidirectional controls) as JSON escapes, error messages on stderr
//! are escaped the same way, and stored text written to stderr by hand is escaped to one
//! line by the library that words it (`agensh_client::show`). Data stored before the hub refused such characters, or by another
//! program, is shown safely too.

use std::io::Write;
use std::sync::OnceLock;

use agensh_domain::text::{self, Lines};
use agensh_domain::ErrorKind;
use serde::Serialize;

/// The exit codes, as `agensh --help` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The hub refused the request (or agensh checked the same rule before sending it).
    Refused = 1,
    /// Bad usage: an unknown command, flag or value, or a flag this command does not use.
    Usage = 2,
    /// The hub (or the store's PostgreSQL server) could not be reached.
    Unreachable = 3,
    /// A local failure: agensh.toml or a setting, a file, git, a child process.
    Local = 4,
    /// Something failed inside the hub, or its answer was not understood.
    Internal = 5,
    /// `agensh run` ended by itself without meeting its goal (`organization.done_when`).
    GoalNotMet = 6,
}

/// The text after `agensh --help`: the exit codes and the error format.
pub const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  the hub refused the request (or agensh checked the same rule before sending it)
  2  bad usage: an unknown command, flag or value, or a flag this command does not use
  3  the hub (or the store's PostgreSQL server) could not be reached
  4  a local failure: agensh.toml or a setting, a file, git, a child process (agensh run: every worker failed)
  5  something failed inside the hub, or its answer was not understood
  6  agensh run ended by itself without meeting its goal (organization.done_when)

Errors go to stderr: `error: MESSAGE`, or with --json one line {\"error\":{\"code\":…,\"message\":…}}.";

/// How to write errors, chosen once from the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// The command was given `--json`: errors are JSON too.
    pub json_errors: bool,
    /// Colour on stderr.
    pub color: bool,
}

static STYLE: OnceLock<Style> = OnceLock::new();

/// Sets the style for the rest of the process (the first call wins).
pub fn set_style(style: Style) {
    let _ = STYLE.set(style);
}

fn style() -> Style {
    STYLE.get().copied().unwrap_or_default()
}

/// A failure of the command line itself (exit 2), found after clap accepted it.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A rule of agensh's own broken on this machine (a bad agensh.toml, a bad flag value):
/// exit 4, with the rule's code, although it is a domain error.
#[derive(Debug)]
pub struct Local(pub agensh_domain::Error);

impl std::fmt::Display for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Local {}

/// What the command line adds to an error code's message: the flag that fixes it. The
/// hub's messages name fields and headers, because models read them too.
const FLAG_HINTS: [(&str, &str); 12] = [
    ("text_too_long", "(--detail)"),
    ("text_control_chars", "(--detail)"),
    ("needs_worker", "(--as ID)"),
    ("impersonation", "(drop --as)"),
    ("unknown_worker", "(agensh workers list)"),
    ("bad_worker_id", "(agensh workers list)"),
    ("unknown_thread", "(agensh msg read --all shows the ids)"),
    ("unknown_record", "(agensh board grep WORDS)"),
    ("bad_filter", "(agensh msg read --all --with X)"),
    ("takeover_not_claim", "(drop --take-over)"),
    ("claim_alive", "(agensh msg send ID TEXT)"),
    ("claim_taken_over", "(agensh msg send ID TEXT)"),
];

/// An error as the command line reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    #[serde(skip)]
    pub exit: Exit,
    /// The domain's stable code, or `usage` / `local_failure`.
    pub code: String,
    /// What went wrong and what to do, with the flag hint.
    pub message: String,
}

/// Classifies `e`: whose failure, which code, and the message with its flag hint.
pub fn failure(e: &anyhow::Error) -> Failure {
    let mut message = format!("{e:#}");
    let (exit, code) = if e.downcast_ref::<Usage>().is_some() {
        (Exit::Usage, "usage".to_string())
    } else if e.downcast_ref::<crate::cmd::goal::GoalNotMet>().is_some() {
        (Exit::GoalNotMet, "goal_not_met".to_string())
    } else if let Some(Local(d)) = e.downcast_ref::<Local>() {
        (Exit::Local, d.code.clone())
    } else if let Some(d) = e.downcast_ref::<agensh_domain::Error>() {
        let exit = match (d.kind, d.code.as_str()) {
            (_, "unreachable" | "store_unreachable") => Exit::Unreachable,
            // A store a newer agensh wrote: this machine's to fix (install that agensh).
            (_, agensh_store::migrate::TOO_NEW) => Exit::Local,
            (ErrorKind::Internal, _) => Exit::Internal,
            _ => Exit::Refused,
        };
        (exit, d.code.clone())
    } else {
        (Exit::Local, "local_failure".to_string())
    };
    if let Some((_, hint)) = FLAG_HINTS.iter().find(|(c, _)| *c == code) {
        message = format!("{message} {hint}");
    }
    Failure {
        exit,
        code,
        message,
    }
}

/// Reports `e` on stderr in the chosen style and ends the process with its exit code.
pub fn fail(e: &anyhow::Error) -> ! {
    let f = failure(e);
    write_failure(&f);
    std::process::exit(f.exit as i32)
}

/// Writes a failure on stderr: JSON with `--json`, else one `error:` line.
pub fn write_failure(f: &Failure) {
    let line = failure_line(f, style());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The line [`write_failure`] writes for `f` in style `s`, with what could act on a
/// terminal escaped (the message may quote a gate's output or a stored text).
fn failure_line(f: &Failure, s: Style) -> String {
    if s.json_errors {
        text::escape_json(&serde_json::json!({ "error": f }).to_string()).into_owned()
    } else if s.color {
        format!(
            "\x1b[1;31merror\x1b[0m: {}",
            text::escape(&f.message, Lines::Many)
        )
    } else {
        format!("error: {}", text::escape(&f.message, Lines::Many))
    }
}

/// Writes one line on stdout, with what could act on a terminal escaped
/// ([`text::escape`]); a closed pipe ends the process quietly with 0.
pub fn print(args: std::fmt::Arguments) {
    let line = match args.as_str() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(text::escape(&line, Lines::Many).as_bytes())
        .and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        stdout_failed(e);
    }
}

/// Writes `bytes` on stdout as they are; a closed pipe ends the process quietly with 0.
pub fn print_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
}

fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(
        std::io::stderr(),
        "error: cannot write to stdout: {e} — check where the output goes"
    );
    std::process::exit(Exit::Local as i32)
}

/// `println!` that survives a closed pipe (see [`print`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::print(format_args!($($arg)*))
    };
}

/// Prints `value` as pretty JSON, with DEL, C1 and bidirectional controls inside its
/// strings written as JSON escapes ([`text::escape_json`]): the same JSON, safe to print.
pub fn json<T: Serialize>(value: &T) {
    let json = serde_json::to_string_pretty(value).expect("serializes");
    outln!("{}", text::escape_json(&json));
}

/// Writes each of `lines` on stdout as [`print`] does.
pub fn lines(lines: impl IntoIterator<Item = String>) {
    for line in lines {
        print(format_args!("{line}"));
    }
}

/// `value` as JSON with `--json` ([`json`]), else the lines `text` makes of it ([`lines`]).
pub fn json_or<T: Serialize>(as_json: bool, value: &T, text: impl FnOnce(&T) -> Vec<String>) {
    if as_json {
        json(value);
    } else {
        lines(text(value));
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::Error;

    fn of(e: impl Into<anyhow::Error>) -> Failure {
        failure(&e.into())
    }

    #[test]
    fn exit_codes_tell_whose_failure_it_was() {
        assert_eq!(of(Error::forbidden("admin_only", "no")).exit, Exit::Refused);
        assert_eq!(
            of(Error::new(ErrorKind::Internal, "unreachable", "down")).exit,
            Exit::Unreachable
        );
        assert_eq!(
            of(Error::new(ErrorKind::Internal, "store_unreachable", "down")).exit,
            Exit::Unreachable
        );
        assert_eq!(of(Error::internal("broke")).exit, Exit::Internal);
        assert_eq!(of(Usage("bad".into())).exit, Exit::Usage);
        let local = of(Local(Error::invalid("bad_config", "agensh.toml: x")));
        assert_eq!(
            (local.exit, local.code.as_str()),
            (Exit::Local, "bad_config")
        );
        let io = of(std::io::Error::other("disk full"));
        assert_eq!((io.exit, io.code.as_str()), (Exit::Local, "local_failure"));
    }

    #[test]
    fn the_cli_adds_the_flag_the_hub_message_leaves_out() {
        let hub = Error::invalid(
            "text_too_long",
            "FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail",
        );
        assert_eq!(
            of(hub).message,
            "FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail (--detail)"
        );
        let hub = Error::forbidden(
            "impersonation",
            "not as w02 — leave out the X-Agensh-As header",
        );
        assert!(of(hub).message.ends_with("header (drop --as)"));
        assert_eq!(of(Error::forbidden("admin_only", "no")).message, "no");
    }

    #[test]
    fn the_cli_adds_its_own_command_where_the_hub_says_what_to_do_in_words() {
        let hub = agensh_domain::worker::unknown_worker("w99");
        assert!(!hub.message.contains("agensh "), "{}", hub.message);
        assert_eq!(
            of(hub).message,
            "there is no worker \"w99\" — list the workers to see their ids (agensh workers list)"
        );
    }

    #[test]
    fn an_error_message_shows_controls_escaped() {
        let hub = Error::conflict(
            "gate_failed",
            "the gate failed. Last output:\n\x1b[31mFAIL\x1b[0m",
        );
        let f = of(hub);
        let plain = failure_line(&f, Style::default());
        assert!(!plain.contains('\x1b'), "{plain}");
        assert!(plain.contains("Last output:\n\\u{1b}[31mFAIL"), "{plain}");
        let as_json = failure_line(
            &Failure {
                message: "a\u{9b}b\u{202e}c".into(),
                ..f
            },
            Style {
                json_errors: true,
                color: false,
            },
        );
        assert!(as_json.contains(r"a\u009bb\u202ec"), "{as_json}");
    }

    #[test]
    fn the_help_lists_every_exit_code() {
        for e in [
            Exit::Refused,
            Exit::Usage,
            Exit::Unreachable,
            Exit::Local,
            Exit::Internal,
            Exit::GoalNotMet,
        ] {
            assert!(AFTER_HELP.contains(&format!("\n  {}  ", e as i32)), "{e:?}");
        }
    }
}
