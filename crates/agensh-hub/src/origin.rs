//! Which hosts and web origins the hub answers, for every route (DNS rebinding).
//!
//! A web page can make a browser send requests to any address its own domain resolves to,
//! 127.0.0.1 included, with the page's domain in `Host` and its origin in `Origin`. So:
//! - a hub that listens on loopback answers only requests addressed to loopback (`Host`
//!   `127.x.y.z`, `[::1]` or `localhost`, any port), and only loopback `Origin`s;
//! - a hub that listens beyond loopback accepts a browser `Origin` only when agensh.toml lists
//!   it (`hub.allowed_origins`).
//!
//! Clients that are not browsers (agents, the CLI, git, MCP) send no `Origin`.

use std::net::{IpAddr, SocketAddr};

use agensh_domain::config::web_origin;
use agensh_domain::Error;

/// The hosts and origins one hub accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    /// It listens on a loopback address.
    pub loopback: bool,
    /// `hub.allowed_origins`, as [`web_origin`] writes them.
    pub origins: Vec<String>,
}

impl HostPolicy {
    pub fn new(bound: SocketAddr, allowed_origins: &[String]) -> Self {
        Self {
            loopback: bound.ip().is_loopback(),
            origins: allowed_origins
                .iter()
                .filter_map(|o| web_origin(o).ok())
                .collect(),
        }
    }

    /// Whether a request with these `Host` and `Origin` headers is answered.
    pub fn check(&self, host: Option<&str>, origin: Option<&str>) -> Result<(), Error> {
        if self.loopback {
            if let Some(h) = host.filter(|h| !is_loopback(host_of(h))) {
                return Err(Error::forbidden(
                    "bad_host",
                    format!(
                        "this hub listens on loopback and answers only requests addressed to 127.0.0.1, [::1] or localhost, not {:?} (a web page of another site that resolves here is refused)",
                        agensh_domain::ids::truncate_for_message(h)
                    ),
                ));
            }
        }
        let Some(origin) = origin else {
            return Ok(());
        };
        let allowed = if self.loopback {
            origin.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https") && is_loopback(host_of(rest))
            })
        } else {
            web_origin(origin).is_ok_and(|o| self.origins.contains(&o))
        };
        if allowed {
            return Ok(());
        }
        Err(Error::forbidden(
            "bad_origin",
            format!(
                "requests from the web origin {:?} are refused — agents and the CLI send no Origin{}",
                agensh_domain::ids::truncate_for_message(origin),
                if self.loopback {
                    ", and a hub on loopback accepts loopback origins only"
                } else {
                    "; list a dashboard's origin in hub.allowed_origins in agensh.toml"
                }
            ),
        ))
    }
}

/// `host` of `host[:port][/path]`, with IPv6 brackets kept.
pub fn host_of(s: &str) -> &str {
    let s = s.split('/').next().unwrap_or("");
    if s.starts_with('[') {
        return s.split_inclusive(']').next().unwrap_or(s);
    }
    s.split(':').next().unwrap_or(s)
}

/// `localhost`, or an IP address that is loopback (127.0.0.0/8, ::1) — parsed, so
/// `127.0.0.1.evil.example` is not one.
fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(addr: &str, origins: &[&str]) -> HostPolicy {
        HostPolicy::new(
            addr.parse().unwrap(),
            &origins.iter().map(|o| o.to_string()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn hosts_are_taken_from_origins_and_host_headers() {
        assert_eq!(host_of("127.0.0.1:7420"), "127.0.0.1");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of("[::1]:80/x"), "[::1]");
        assert_eq!(host_of("evil.example:443"), "evil.example");
    }

    #[test]
    fn on_loopback_only_requests_addressed_to_loopback_are_answered() {
        let p = on("127.0.0.1:7420", &[]);
        assert!(p.check(Some("127.0.0.1:7420"), None).is_ok());
        assert!(p.check(Some("localhost:7420"), None).is_ok());
        assert!(p.check(Some("[::1]:7420"), None).is_ok());
        assert!(p.check(None, None).is_ok());
        // DNS rebinding: the attacker's name in Host, even with a matching Origin.
        let e = p
            .check(
                Some("rebind.evil.example:7420"),
                Some("http://rebind.evil.example:7420"),
            )
            .unwrap_err();
        assert_eq!(e.code, "bad_host");
        assert!(p.check(Some("127.0.0.1.evil.example:7420"), None).is_err());
    }

    #[test]
    fn on_loopback_only_loopback_origins_are_accepted() {
        let p = on("127.0.0.1:7420", &[]);
        let ok = |o: &str| p.check(Some("127.0.0.1:7420"), Some(o)).is_ok();
        assert!(ok("http://127.0.0.1:3000"));
        assert!(ok("http://localhost:3000"));
        assert!(ok("http://[::1]:3000"));
        assert!(!ok("http://127.0.0.1.evil.example"));
        assert!(!ok("http://evil.example"));
        assert!(!ok("null"));
        assert!(!ok("file://127.0.0.1"));
        assert_eq!(
            p.check(Some("127.0.0.1:7420"), Some("http://evil.example"))
                .unwrap_err()
                .code,
            "bad_origin"
        );
    }

    #[test]
    fn beyond_loopback_only_listed_origins_are_accepted() {
        let p = on("0.0.0.0:7420", &["https://dash.example.com"]);
        assert!(p.check(Some("hub.lan:7420"), None).is_ok());
        assert!(p
            .check(Some("hub.lan:7420"), Some("https://DASH.example.com"))
            .is_ok());
        // Origin equal to Host is not enough.
        assert!(p
            .check(Some("hub.lan:7420"), Some("http://hub.lan:7420"))
            .is_err());
        assert!(p
            .check(Some("hub.lan:7420"), Some("http://127.0.0.1:3000"))
            .is_err());
    }
}
