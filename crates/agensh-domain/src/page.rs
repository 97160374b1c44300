//! Page sizes: how many items one read returns by default and at most, and the one check
//! every way in (REST and MCP) applies to what a caller asks for.

use crate::error::{Error, Result};

/// A page-size rule for one kind of read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The request parameter (`limit`, `cap`); a bad value gets the code `bad_{param}`.
    pub param: &'static str,
    /// The most items one read may ask for.
    pub max: usize,
    /// What a read gets when it does not say.
    pub default: usize,
    /// What is counted and how to get more, as the error message says it ("messages").
    pub what: &'static str,
}

impl Limit {
    /// The page size to use for `requested`: the default when absent, else a number from 1
    /// to `max`; anything else is refused with `bad_{param}` and the range to ask for.
    pub fn check(self, requested: Option<usize>) -> Result<usize> {
        match requested {
            None => Ok(self.default),
            Some(n) if (1..=self.max).contains(&n) => Ok(n),
            Some(n) => Err(Error::invalid(
                &format!("bad_{}", self.param),
                format!(
                    "{} {n} is out of range — ask for 1 to {} {}",
                    self.param, self.max, self.what
                ),
            )),
        }
    }
}

/// One grep over the board's history (`GET /board/grep`, MCP `board_grep`).
pub const GREP: Limit = Limit {
    param: "limit",
    max: 500,
    default: 50,
    what: "records and page with before",
};

/// One event poll for one worker (`GET /events`).
pub const POLL: Limit = Limit {
    param: "limit",
    max: 1_000,
    default: 1_000,
    what: "events",
};

/// One event poll for many workers, counted per worker (`POST /events/poll`).
pub const POLL_MANY: Limit = Limit {
    what: "events per worker",
    ..POLL
};

/// One read of messages (`GET /messages`, MCP `msg_read`).
pub const MESSAGES: Limit = Limit {
    param: "limit",
    max: 1_000,
    default: 100,
    what: "messages",
};

/// One list of pull requests (`GET /prs`, MCP `pr_list`).
pub const PRS: Limit = Limit {
    param: "limit",
    max: 500,
    default: 100,
    what: "pull requests",
};

/// One list of issues (`GET /issues`, MCP `issue_list`).
pub const ISSUES: Limit = Limit {
    param: "limit",
    max: 500,
    default: 100,
    what: "issues and page with before",
};

/// One read of a worker's turns (`GET /workers/{id}/turns`).
pub const TURNS: Limit = Limit {
    param: "limit",
    max: 500,
    default: 50,
    what: "turns and page with before",
};

/// Default of `board.view_cap`: how many entries the recent view holds.
pub const DEFAULT_VIEW_CAP: usize = 2_000;

/// Largest `board.view_cap` the configuration accepts.
pub const MAX_VIEW_CAP: usize = 100_000;

/// One read of the recent view when `board.view_cap` is `view_cap`: that many entries by
/// default and at most.
pub fn view_cap(view_cap: usize) -> Limit {
    Limit {
        param: "cap",
        max: view_cap,
        default: view_cap,
        what: "entries (board.view_cap)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn absent_gives_the_default_and_the_range_is_inclusive() {
        assert_eq!(GREP.check(None).unwrap(), 50);
        assert_eq!(GREP.check(Some(1)).unwrap(), 1);
        assert_eq!(GREP.check(Some(500)).unwrap(), 500);
    }

    #[test]
    fn zero_and_above_max_are_refused_with_the_range() {
        for n in [0, 501] {
            let e = GREP.check(Some(n)).unwrap_err();
            assert_eq!((e.kind, e.code.as_str()), (ErrorKind::Invalid, "bad_limit"));
            assert_eq!(
                e.message,
                format!(
                    "limit {n} is out of range — ask for 1 to 500 records and page with before"
                )
            );
        }
    }

    #[test]
    fn each_read_names_what_it_counts() {
        let message = |l: Limit| l.check(Some(0)).unwrap_err().message;
        assert_eq!(
            message(POLL),
            "limit 0 is out of range — ask for 1 to 1000 events"
        );
        assert_eq!(
            message(POLL_MANY),
            "limit 0 is out of range — ask for 1 to 1000 events per worker"
        );
        assert_eq!(
            message(MESSAGES),
            "limit 0 is out of range — ask for 1 to 1000 messages"
        );
        assert_eq!(
            message(PRS),
            "limit 0 is out of range — ask for 1 to 500 pull requests"
        );
    }

    #[test]
    fn defaults_of_each_read() {
        assert_eq!(POLL.check(None).unwrap(), 1_000);
        assert_eq!(POLL_MANY.check(None).unwrap(), 1_000);
        assert_eq!(MESSAGES.check(None).unwrap(), 100);
        assert_eq!(PRS.check(None).unwrap(), 100);
    }

    #[test]
    fn the_view_cap_is_default_and_maximum_and_has_its_own_code() {
        let cap = view_cap(5);
        assert_eq!(cap.check(None).unwrap(), 5);
        assert_eq!(cap.check(Some(5)).unwrap(), 5);
        let e = cap.check(Some(6)).unwrap_err();
        assert_eq!(e.code, "bad_cap");
        assert_eq!(
            e.message,
            "cap 6 is out of range — ask for 1 to 5 entries (board.view_cap)"
        );
    }
}
