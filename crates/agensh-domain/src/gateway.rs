//! The model gateway's configuration: upstreams (`[[gateway.upstreams]]`), routes from
//! workers to an upstream and a model (`[[gateway.routes]]`), retries, and the limits of
//! one request (`[gateway] prompt_window`, `output_cap`). The one-upstream shorthand
//! (`[model] url`, `name`, `api_key_env`, and `run.agents`' own `model_url`) becomes
//! upstreams and routes here too ([`GatewayConfig::with_shorthand`]), so the hub sees one
//! shape whatever the user wrote.
//!
//! No IO: keys are named by environment variable; the hub reads them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The APIs an upstream may speak (`api`): one of them, or `any` (a server that speaks
/// them all, or the one the worker's agent speaks — what the `[model]` shorthand means).
pub const UPSTREAM_APIS: [&str; 4] = ["openai", "anthropic", "gemini", "any"];

/// Most upstreams and most routes.
pub const MAX_UPSTREAMS: usize = 64;
pub const MAX_ROUTES: usize = 1024;

/// Prices of an upstream, in dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PriceTable {
    pub input: f64,
    pub cached_input: f64,
    pub output: f64,
}

/// One upstream: where requests go and how they are paid for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Its name in routes, logs and usage.
    pub name: String,
    /// `openai`, `anthropic`, `gemini` or `any`.
    #[serde(default = "any")]
    pub api: String,
    /// Base URL, with or without `/v1`.
    pub url: String,
    /// The hub's environment variable that holds its key (empty: no key is sent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_key_env: String,
    /// Most requests in flight at once (0: no limit); the rest wait in a queue that is
    /// fair across workers.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    #[serde(default)]
    pub prices: PriceTable,
    /// Another upstream's name: requests go there while this one answers "quota exhausted".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fallback: String,
}

fn any() -> String {
    "any".into()
}

fn default_concurrency() -> u32 {
    64
}

/// Which workers use which upstream, and which model (empty: the one the agent asks for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// `all`, a range `w01-w04`, a list `w01,w03`, or one id.
    pub workers: String,
    pub upstream: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
}

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Tries after the first for a request refused with 429 or 5xx, or whose connection
    /// dropped before its first byte.
    pub retries: u32,
    /// The first wait between tries, in milliseconds; it doubles each time (with jitter),
    /// or is what the upstream's `Retry-After` says.
    pub retry_base_ms: u64,
    /// The longest wait between two tries, in seconds.
    pub retry_max_secs: u64,
    /// Most prompt tokens one request may send (estimated from its size before it goes).
    pub prompt_window: u64,
    /// Most tokens one request may ask to generate; a larger ask is lowered to it.
    pub output_cap: u64,
    /// Log request and answer bodies (never keys). Off: only what each request was.
    pub log_bodies: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            retries: 6,
            retry_base_ms: 500,
            retry_max_secs: 60,
            prompt_window: 272_000,
            output_cap: 128_000,
            log_bodies: false,
            upstreams: Vec::new(),
            routes: Vec::new(),
        }
    }
}

/// Whether `spec` (`all`, `w01-w04`, `w01,w03`, `w01`) names the worker `id`. A range
/// covers the ids between its ends with the same letters, compared by number.
pub fn covers(spec: &str, id: &str) -> bool {
    spec.split(',')
        .map(str::trim)
        .any(|part| match part.split_once('-') {
            _ if part == "all" || part == "*" => true,
            Some((from, to)) => in_range(id, from.trim(), to.trim()),
            None => part == id,
        })
}

/// `id` between `from` and `to` (same letters, then a number).
fn in_range(id: &str, from: &str, to: &str) -> bool {
    fn split(s: &str) -> Option<(&str, u64)> {
        let digits = s.len() - s.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
        let (prefix, n) = s.split_at(digits);
        Some((prefix, n.parse().ok()?))
    }
    match (split(id), split(from), split(to)) {
        (Some((p, n)), Some((pf, a)), Some((pt, b))) => p == pf && p == pt && (a..=b).contains(&n),
        _ => false,
    }
}

/// An upstream made from the one-upstream shorthand: `[model]`, a `run.agents` group's own
/// endpoint, the local model, or a vendor's service with a key from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Shorthand {
    /// Which workers (`all` for `[model]`).
    pub workers: String,
    /// The upstream's name (`model`, `local`, `agents-1`, …).
    pub name: String,
    pub url: String,
    pub model: String,
    pub api_key_env: String,
}

impl GatewayConfig {
    /// The upstreams and routes with the shorthand's added: its upstreams after the
    /// configured ones (a name already configured is not added twice), its routes after
    /// the configured routes, so a `[[gateway.routes]]` entry always wins.
    pub fn with_shorthand(&self, shorthand: &[Shorthand]) -> GatewayConfig {
        let mut g = self.clone();
        for s in shorthand {
            if !g.upstreams.iter().any(|u| u.name == s.name) {
                g.upstreams.push(UpstreamConfig {
                    name: s.name.clone(),
                    api: any(),
                    url: s.url.clone(),
                    api_key_env: s.api_key_env.clone(),
                    concurrency: default_concurrency(),
                    prices: PriceTable::default(),
                    fallback: String::new(),
                });
            }
            g.routes.push(RouteConfig {
                workers: s.workers.clone(),
                upstream: s.name.clone(),
                model: s.model.clone(),
            });
        }
        g
    }

    /// The first route that covers `worker`.
    pub fn route_for(&self, worker: &str) -> Option<&RouteConfig> {
        self.routes.iter().find(|r| covers(&r.workers, worker))
    }

    /// The upstream called `name`.
    pub fn upstream(&self, name: &str) -> Option<&UpstreamConfig> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// Checks the values of `[gateway]`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("bad_config", format!("agensh.toml: {m}")));
        if self.retries > 20 {
            return bad("gateway.retries must be between 0 and 20".into());
        }
        if !(1..=60_000).contains(&self.retry_base_ms) || !(1..=3600).contains(&self.retry_max_secs)
        {
            return bad(
                "gateway.retry_base_ms must be 1 to 60000 and gateway.retry_max_secs 1 to 3600"
                    .into(),
            );
        }
        if !(1024..=10_000_000).contains(&self.prompt_window)
            || !(1..=10_000_000).contains(&self.output_cap)
        {
            return bad("gateway.prompt_window must be 1024 to 10000000 tokens and gateway.output_cap 1 to 10000000".into());
        }
        if self.upstreams.len() > MAX_UPSTREAMS || self.routes.len() > MAX_ROUTES {
            return bad(format!(
                "at most {MAX_UPSTREAMS} gateway.upstreams and {MAX_ROUTES} gateway.routes"
            ));
        }
        for (i, u) in self.upstreams.iter().enumerate() {
            let ok_name = !u.name.is_empty()
                && u.name.len() <= 64
                && u.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok_name {
                return bad(format!("gateway.upstreams[{i}].name \"{}\" — give it 1 to 64 letters, digits, '-', '_' or '.'", u.name));
            }
            if self.upstreams[..i].iter().any(|o| o.name == u.name) {
                return bad(format!(
                    "gateway.upstreams: two upstreams are called \"{}\" — give each its own name",
                    u.name
                ));
            }
            if !UPSTREAM_APIS.contains(&u.api.as_str()) {
                return bad(format!(
                    "gateway.upstreams[{i}].api \"{}\" — use one of {}",
                    u.api,
                    UPSTREAM_APIS.join(", ")
                ));
            }
            let url = u.url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return bad(format!("gateway.upstreams[{i}].url \"{url}\" is not an http(s) URL — give the API's base, e.g. https://api.anthropic.com"));
            }
            let p = u.prices;
            if [p.input, p.cached_input, p.output]
                .iter()
                .any(|x| !x.is_finite() || *x < 0.0)
            {
                return bad(format!(
                    "gateway.upstreams[{i}].prices must be zero or more dollars per million tokens"
                ));
            }
            if !u.fallback.is_empty() {
                if u.fallback == u.name {
                    return bad(format!(
                        "gateway.upstreams[{i}].fallback is the upstream itself — name another"
                    ));
                }
                if self.upstream(&u.fallback).is_none() {
                    return bad(format!(
                        "gateway.upstreams[{i}].fallback \"{}\" is no upstream's name",
                        u.fallback
                    ));
                }
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            if r.workers.trim().is_empty() {
                return bad(format!("gateway.routes[{i}].workers is empty — name its workers: \"all\", \"w01-w04\" or \"w01,w03\""));
            }
            if self.upstream(&r.upstream).is_none() {
                let names: Vec<&str> = self.upstreams.iter().map(|u| u.name.as_str()).collect();
                return bad(format!(
                    "gateway.routes[{i}].upstream \"{}\" is not an upstream — use one of: {}",
                    r.upstream,
                    if names.is_empty() {
                        "(none: add [[gateway.upstreams]])".to_string()
                    } else {
                        names.join(", ")
                    }
                ));
            }
        }
        Ok(())
    }

    /// The commented `[gateway]` section of the template.
    pub fn template(&self) -> String {
        format!(
            r#"
[gateway]
# Every agent's model requests go through the hub (unless [model] gateway = false): it
# swaps each worker's agensh token for the upstream's key, counts usage exactly, and
# retries what the upstream refuses for a while. Tries after the first (429, 5xx, a
# connection dropped before the first byte), the first wait and the longest one.
retries = {retries}
retry_base_ms = {base}
retry_max_secs = {max}
# Most prompt tokens one request may send (estimated from its size), and most tokens it
# may ask to generate (a larger ask is lowered to this).
prompt_window = {window}
output_cap = {cap}
# Log request and answer bodies too (keys never appear anywhere).
log_bodies = {bodies}
# Upstreams (without any, [model] url, name and api_key_env are the one upstream):
# [[gateway.upstreams]]
# name = "anthropic"
# api = "anthropic"                 # "openai", "anthropic", "gemini" or "any"
# url = "https://api.anthropic.com"
# api_key_env = "ANTHROPIC_API_KEY" # read from the hub's environment
# concurrency = 64                  # requests in flight; the rest queue, fairly
# prices = {{ input = 3.0, cached_input = 0.3, output = 15.0 }}  # $ per million tokens
# fallback = ""                     # another upstream, used while this one's quota is out
# Which workers use which upstream and model (the first that covers a worker wins):
# [[gateway.routes]]
# workers = "w01-w04"               # "all", a range, or "w01,w03"
# upstream = "anthropic"
# model = "claude-sonnet-4-5"       # empty: the model the agent asks for
"#,
            retries = self.retries,
            base = self.retry_base_ms,
            max = self.retry_max_secs,
            window = self.prompt_window,
            cap = self.output_cap,
            bodies = self.log_bodies,
        )
    }
}

/// The name of the upstream of `run.agents[i]`'s own endpoint.
pub fn group_upstream(i: usize) -> String {
    format!("agents-{}", i + 1)
}

/// The gateway's upstreams from the one-upstream shorthand: each `run.agents` group with an
/// endpoint of its own, then `[model]` (or the local model at `local_url`) for every other
/// worker. A preset without an endpoint reaches its vendor's API through the gateway when
/// its key is set (`key_set` says, from the environment; the hub holds the key, the agent
/// never sees it); without the key the CLI signs in its own way, directly.
pub fn shorthand(
    config: &crate::config::Config,
    local_url: Option<&str>,
    key_set: &dyn Fn(&str) -> bool,
) -> Vec<Shorthand> {
    let m = &config.model;
    let pick = |own: &str, shared: &str| if own.is_empty() { shared } else { own }.to_string();
    let mut out = Vec::new();
    for (i, g) in config.run.agents.iter().enumerate() {
        let url = pick(&g.model_url, &m.url);
        let key_env = pick(&g.api_key_env, &m.api_key_env);
        if let Some((url, key_env)) = upstream_of(&g.agent, &url, &key_env, key_set) {
            out.push(Shorthand {
                workers: g.workers.clone(),
                name: group_upstream(i),
                url,
                model: pick(&g.model, &m.name),
                api_key_env: key_env,
            });
        }
    }
    let builtin = matches!(config.run.agent.as_str(), "builtin" | "");
    let main = match local_url {
        Some(local) if builtin && m.is_local() => Some(("local", local.to_string(), String::new())),
        _ if builtin && m.is_local() => None,
        _ => upstream_of(&config.run.agent, &m.url, &m.api_key_env, key_set)
            .map(|(url, key)| ("model", url, key)),
    };
    if let Some((name, url, api_key_env)) = main {
        out.push(Shorthand {
            workers: "all".into(),
            name: name.into(),
            url,
            model: m.name.clone(),
            api_key_env,
        });
    }
    out
}

/// The upstream an agent's endpoint makes: its URL and key variable; or a preset's vendor
/// with the key the preset reads, when that key is set; or none.
fn upstream_of(
    agent: &str,
    url: &str,
    key_env: &str,
    key_set: &dyn Fn(&str) -> bool,
) -> Option<(String, String)> {
    if matches!(agent, "acp" | "script") {
        return None;
    }
    if !url.trim().is_empty() {
        return Some((url.trim().to_string(), key_env.to_string()));
    }
    let p = crate::agents::preset(agent)?;
    if p.vendor_url.is_empty() {
        return None;
    }
    let var = if key_env.is_empty() {
        p.key_var
    } else {
        key_env
    };
    key_set(var).then(|| (p.vendor_url.to_string(), var.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(name: &str) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            api: "openai".into(),
            url: "http://127.0.0.1:9/v1".into(),
            api_key_env: String::new(),
            concurrency: 4,
            prices: PriceTable::default(),
            fallback: String::new(),
        }
    }

    #[test]
    fn worker_specs_cover_all_ranges_lists_and_ids() {
        assert!(covers("all", "w07"));
        assert!(covers("w01-w04", "w03"));
        assert!(!covers("w01-w04", "w05"));
        assert!(covers("w01, w09", "w09"));
        assert!(!covers("w01,w09", "w1"));
        assert!(covers("w10-w12", "w011"));
        assert!(!covers("x01-x04", "w02"));
    }

    #[test]
    fn configured_routes_win_over_the_shorthand() {
        let g = GatewayConfig {
            upstreams: vec![up("fast")],
            routes: vec![RouteConfig {
                workers: "w01".into(),
                upstream: "fast".into(),
                model: "m1".into(),
            }],
            ..GatewayConfig::default()
        };
        let g = g.with_shorthand(&[Shorthand {
            workers: "all".into(),
            name: "model".into(),
            url: "http://127.0.0.1:8/v1".into(),
            model: "m0".into(),
            api_key_env: "K".into(),
        }]);
        g.validate().unwrap();
        assert_eq!(g.route_for("w01").unwrap().upstream, "fast");
        let r = g.route_for("w02").unwrap();
        assert_eq!((r.upstream.as_str(), r.model.as_str()), ("model", "m0"));
        let u = g.upstream("model").unwrap();
        assert_eq!((u.api.as_str(), u.api_key_env.as_str()), ("any", "K"));
    }

    #[test]
    fn the_shorthand_routes_groups_then_the_local_model_or_a_vendor_with_its_key() {
        let config = crate::config::Config::parse(
            r#"
[organization]
goal = "g"
[run]
agent = "builtin"
[[run.agents]]
workers = "w01"
agent = "claude"
[[run.agents]]
workers = "w02"
agent = "codex"
model_url = "http://127.0.0.1:9/v1"
model = "m2"
"#,
        )
        .unwrap();
        let none = |_: &str| false;
        let got = shorthand(&config, Some("http://127.0.0.1:7/v1"), &none);
        let names: Vec<_> = got
            .iter()
            .map(|s| (s.name.as_str(), s.workers.as_str()))
            .collect();
        // claude without its key signs in its own way: no upstream for group 1.
        assert_eq!(names, [("agents-2", "w02"), ("local", "all")]);
        assert_eq!(
            (got[0].url.as_str(), got[0].model.as_str()),
            ("http://127.0.0.1:9/v1", "m2")
        );
        // The local model is routed only when its server runs here.
        assert_eq!(shorthand(&config, None, &none).len(), 1);
        // With its key set, claude reaches its vendor through the gateway.
        let key = |v: &str| v == "ANTHROPIC_API_KEY";
        let got = shorthand(&config, None, &key);
        assert_eq!(got[0].name, "agents-1");
        assert_eq!(got[0].api_key_env, "ANTHROPIC_API_KEY");
        assert!(got[0].url.starts_with("https://"), "{}", got[0].url);
    }

    #[test]
    fn bad_upstreams_and_routes_are_refused_with_what_to_do() {
        let mut g = GatewayConfig {
            upstreams: vec![up("a"), up("a")],
            ..GatewayConfig::default()
        };
        assert!(g.validate().unwrap_err().message.contains("two upstreams"));
        g.upstreams[1].name = "b".into();
        g.upstreams[1].api = "cohere".into();
        assert!(g.validate().unwrap_err().message.contains("use one of"));
        g.upstreams[1].api = "any".into();
        g.upstreams[1].fallback = "c".into();
        assert!(g.validate().unwrap_err().message.contains("no upstream"));
        g.upstreams[1].fallback = "a".into();
        g.upstreams[0].prices.output = -1.0;
        assert!(g.validate().unwrap_err().message.contains("prices"));
        g.upstreams[0].prices.output = 1.0;
        g.routes.push(RouteConfig {
            workers: "all".into(),
            upstream: "z".into(),
            model: String::new(),
        });
        let e = g.validate().unwrap_err().message;
        assert!(e.contains("use one of: a, b"), "{e}");
        g.routes[0].upstream = "b".into();
        g.validate().unwrap();
    }
}
