//! Printing: human lines by default, `--json` for scripts; and exit codes.

use agensh_domain::ErrorKind;
use serde::Serialize;

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serializes")
    );
}

/// 1 when the hub refused the request, 3 when it could not be reached or failed.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    match e.downcast_ref::<agensh_domain::Error>() {
        Some(d) if d.kind == ErrorKind::Internal => 3,
        _ => 1,
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(std::time::SystemTime::now())
}
