//! The one error shape every layer shares: what kind of failure, a stable code, and a
//! message that says what went wrong and what to do instead.

use serde::{Deserialize, Serialize};

/// Broad class of a failure; the hub maps it to an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or breaks a limit (HTTP 400).
    Invalid,
    /// No or a wrong token (HTTP 401).
    Unauthorized,
    /// The caller may not do this (HTTP 403).
    Forbidden,
    /// The named thing does not exist (HTTP 404).
    NotFound,
    /// The request conflicts with the current state (HTTP 409).
    Conflict,
    /// The body is larger than the hub accepts (HTTP 413).
    TooLarge,
    /// The caller is past one of its limits (`[limits]`); wait and try again (HTTP 429).
    RateLimited,
    /// Something failed inside the hub (HTTP 500).
    Internal,
}

/// An error with a stable machine code and a message for people and agents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    pub code: String,
    pub message: String,
    /// How many seconds to wait before trying again (a [`ErrorKind::RateLimited`] error:
    /// the hub's `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
}

impl Error {
    pub fn new(kind: ErrorKind, code: &str, message: impl Into<String>) -> Self {
        Error {
            kind,
            code: code.to_string(),
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// The same error, saying to wait `secs` seconds before trying again.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// A request that breaks a rule; `code` names the rule.
    pub fn invalid(code: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, code, message)
    }

    pub fn not_found(code: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, code, message)
    }

    pub fn forbidden(code: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, code, message)
    }

    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, "internal", message)
    }
}

/// Result with the domain error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
