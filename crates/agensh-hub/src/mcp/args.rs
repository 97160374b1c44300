//! Reading a tool's arguments. A missing or mistyped argument is a tool error the model
//! reads (`bad_arguments`), saying which argument and what it should be: the model can fix
//! it on the next call (MCP 2025-11-25 puts input validation errors in the tool result).
//! Limits on the values themselves are checked by the shared REST functions, not here.

use agensh_domain::Error;
use serde_json::{Map, Value};

/// The arguments of one call of tool `tool`.
pub struct Args<'a> {
    pub tool: &'static str,
    pub map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub fn new(tool: &'static str, map: &'a Map<String, Value>) -> Self {
        Args { tool, map }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, what: &str) -> Error {
        Error::invalid(
            "bad_arguments",
            format!(
                "{} needs `{key}`: {what} — call {} again with it (its inputSchema in tools/list has every argument)",
                self.tool, self.tool
            ),
        )
    }

    /// A required string.
    pub fn string(&self, key: &str, what: &str) -> Result<String, Error> {
        self.opt_string(key, what)?
            .ok_or_else(|| self.bad(key, what))
    }

    /// An optional string (`null` counts as absent).
    pub fn opt_string(&self, key: &str, what: &str) -> Result<Option<String>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.bad(key, what)),
        }
    }

    /// An optional non-negative integer; a string of digits is taken too.
    pub fn opt_u64(&self, key: &str, what: &str) -> Result<Option<u64>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| self.bad(key, what)),
            Some(Value::String(s)) => s
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.bad(key, what)),
            Some(_) => Err(self.bad(key, what)),
        }
    }

    /// An optional count (`limit`, `cap`).
    pub fn opt_usize(&self, key: &str, what: &str) -> Result<Option<usize>, Error> {
        Ok(self
            .opt_u64(key, what)?
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
    }

    /// A required identifier given as a string or a number (`G12`, `12`; PR `3`, `#3`),
    /// returned as text for the hub's own parser.
    pub fn ident(&self, key: &str, what: &str) -> Result<String, Error> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s.trim().to_string()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => Err(self.bad(key, what)),
        }
    }

    /// An optional list of strings; one string with commas is taken as a list too.
    pub fn opt_strings(&self, key: &str, what: &str) -> Result<Vec<String>, Error> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.bad(key, what))
                })
                .collect(),
            Some(Value::String(s)) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()),
            Some(_) => Err(self.bad(key, what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn missing_and_mistyped_arguments_say_what_to_send() {
        let m = map(json!({"text": 5}));
        let a = Args::new("board_write", &m);
        let e = a.string("text", "one line of text").unwrap_err();
        assert_eq!(e.code, "bad_arguments");
        assert!(e
            .message
            .contains("board_write needs `text`: one line of text"));
        assert!(a.string("kind", "a kind").is_err());
        assert_eq!(a.opt_string("label", "x").unwrap(), None);
    }

    #[test]
    fn numbers_and_ids_are_lenient_about_their_form() {
        let m = map(json!({"n": 3, "s": "#4", "lim": "20", "paths": "a, b,", "neg": -1}));
        let a = Args::new("pr_view", &m);
        assert_eq!(a.ident("n", "").unwrap(), "3");
        assert_eq!(a.ident("s", "").unwrap(), "#4");
        assert_eq!(a.opt_usize("lim", "").unwrap(), Some(20));
        assert_eq!(a.opt_strings("paths", "").unwrap(), vec!["a", "b"]);
        assert!(a.opt_u64("neg", "").is_err());
    }
}
