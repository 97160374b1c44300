//! `agensh.toml`: the organization's configuration, with every default written out.
//!
//! Precedence, applied by the callers: flags > environment (`AGENSH_*`) > this file > defaults.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub organization: Organization,
    #[serde(default)]
    pub hub: HubConfig,
    #[serde(default)]
    pub board: BoardConfig,
    #[serde(default)]
    pub merge: MergeConfig,
    #[serde(default)]
    pub run: RunConfig,
}

/// `[run]`: how a run drives its workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Workers in the organization.
    pub workers: usize,
    /// The agent: `script` (tests and load), `acp` (any ACP agent, see `agent_command`).
    pub agent: String,
    /// For `acp`: the command line that starts the agent.
    pub agent_command: Vec<String>,
    /// For `script`: the scenario file.
    pub scenario: String,
    /// Length of the run in hours (0: no limit).
    pub hours: f64,
    /// Seconds between two workers' activation.
    pub stagger_secs: f64,
    /// Seconds without events after a turn before a continue prompt.
    pub idle_timeout_secs: u64,
    /// Deadline notices, in minutes before the end.
    pub notices_minutes: Vec<f64>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: 4,
            agent: String::new(),
            agent_command: Vec::new(),
            scenario: String::new(),
            hours: 6.0,
            stagger_secs: 2.0,
            idle_timeout_secs: 300,
            notices_minutes: vec![45.0, 5.0],
        }
    }
}

/// `[merge]`: how the hub merges pull requests into `main`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MergeConfig {
    /// A shell command run on the merged tree before `main` moves; empty for none.
    pub gate: String,
    /// Longest the gate may run, in seconds; past it the merge is refused.
    pub gate_timeout_secs: u64,
    /// Approving reviews a PR needs before it may merge.
    pub required_approvals: u32,
}

impl Default for MergeConfig {
    fn default() -> Self {
        MergeConfig {
            gate: String::new(),
            gate_timeout_secs: 600,
            required_approvals: 0,
        }
    }
}

/// `[organization]`: what the workers work toward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Organization {
    pub goal: String,
}

/// `[hub]`: where and how the hub serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// Address to listen on; loopback unless you mean to open it.
    pub listen: String,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Longest long-poll wait a client may ask for, in seconds.
    pub max_wait_secs: u64,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            listen: "127.0.0.1:7420".into(),
            body_limit: 65_536,
            max_wait_secs: 60,
        }
    }
}

/// `[board]`: the shared context board.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BoardConfig {
    /// Most entries in the recent view.
    pub view_cap: usize,
    /// Default CLAIM lease, in seconds.
    pub claim_lease_secs: u64,
}

impl Default for BoardConfig {
    fn default() -> Self {
        BoardConfig {
            view_cap: crate::view::DEFAULT_CAP,
            claim_lease_secs: 3_600,
        }
    }
}

impl Config {
    /// A configuration with `goal` and every default.
    pub fn with_goal(goal: &str) -> Self {
        Config {
            organization: Organization {
                goal: goal.to_string(),
            },
            hub: HubConfig::default(),
            board: BoardConfig::default(),
            merge: MergeConfig::default(),
            run: RunConfig::default(),
        }
    }

    /// Parses `agensh.toml`; the error names the file's problem and how to fix it.
    pub fn parse(text: &str) -> Result<Self> {
        let c: Config = toml::from_str(text).map_err(|e| {
            Error::invalid(
                "bad_config",
                format!("agensh.toml is not valid: {e}— fix the line named above (`agensh init` writes a commented example)"),
            )
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.organization.goal.trim().is_empty() {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: organization.goal is empty — say what the organization should build",
            ));
        }
        if self.board.view_cap == 0 || self.board.view_cap > 100_000 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: board.view_cap must be between 1 and 100000",
            ));
        }
        crate::record::validate_lease(self.board.claim_lease_secs).map_err(|e| {
            Error::invalid(
                "bad_config",
                format!("agensh.toml: board.claim_lease_secs: {}", e.message),
            )
        })?;
        if self.hub.body_limit < 1024 || self.hub.body_limit > 64 << 20 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: hub.body_limit must be between 1024 and 67108864 bytes",
            ));
        }
        if self.merge.gate_timeout_secs == 0 || self.merge.gate_timeout_secs > 86_400 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: merge.gate_timeout_secs must be between 1 and 86400",
            ));
        }
        if self.merge.required_approvals > 100 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: merge.required_approvals must be between 0 and 100",
            ));
        }
        if self.run.workers == 0 || self.run.workers > crate::worker::ADD_LIMIT {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.workers must be between 1 and {}",
                    crate::worker::ADD_LIMIT
                ),
            ));
        }
        if !(0.0..=24.0 * 30.0).contains(&self.run.hours)
            || !(0.0..=3600.0).contains(&self.run.stagger_secs)
        {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: run.hours must be 0 to 720 and run.stagger_secs 0 to 3600",
            ));
        }
        if self.run.idle_timeout_secs == 0 || self.run.notices_minutes.iter().any(|m| *m <= 0.0) {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: run.idle_timeout_secs and every run.notices_minutes must be positive",
            ));
        }
        if self.hub.max_wait_secs == 0 || self.hub.max_wait_secs > 3_600 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: hub.max_wait_secs must be between 1 and 3600",
            ));
        }
        Ok(())
    }

    /// The file `agensh init` writes: every setting with its default and a comment.
    pub fn template(&self) -> String {
        let goal = toml::Value::String(self.organization.goal.clone());
        let listen = toml::Value::String(self.hub.listen.clone());
        format!(
            r#"# agensh organization configuration.
# Precedence: command-line flags > environment (AGENSH_*) > this file > built-in defaults.

[organization]
# What every worker works toward. Each worker gets the same prompt but its ID.
goal = {goal}

[hub]
# Address the hub listens on. Keep loopback unless nodes on other hosts must reach it.
listen = {listen}
# Largest request body the hub accepts, in bytes; larger ones get HTTP 413.
body_limit = {body_limit}
# Longest long-poll wait (`agensh events --wait`) a client may ask for, in seconds.
max_wait_secs = {max_wait}

[board]
# Most entries in the board's recent view (`agensh board read --all`).
view_cap = {view_cap}
# Default lease of a CLAIM, in seconds; renew it while the work goes on.
claim_lease_secs = {lease}

[merge]
# A shell command run on the merged tree (in a scratch checkout) before main moves,
# e.g. "cargo test" or "make check". Empty: no gate. A failing gate refuses the merge.
gate = {gate}
# Longest the gate may run, in seconds.
gate_timeout_secs = {gate_timeout}
# Approving reviews a pull request needs before it may merge (0: none).
required_approvals = {approvals}

[run]
# Workers in the organization (`agensh run --workers N` overrides it).
workers = {workers}
# The agent: "script" (a deterministic agent for tests and load; needs `scenario`), or
# "acp" (any Agent Client Protocol agent, started with `agent_command`).
agent = {agent}
agent_command = {agent_command}
scenario = {scenario}
# Length of the run in hours (0: no limit).
hours = {hours}
# Seconds between two workers' activation, so many workers do not start on the same second.
stagger_secs = {stagger}
# Seconds without events after a turn before the worker gets a continue prompt.
idle_timeout_secs = {idle}
# Deadline notices, in minutes before the end of the run.
notices_minutes = {notices}
"#,
            body_limit = self.hub.body_limit,
            max_wait = self.hub.max_wait_secs,
            view_cap = self.board.view_cap,
            lease = self.board.claim_lease_secs,
            gate = toml::Value::String(self.merge.gate.clone()),
            gate_timeout = self.merge.gate_timeout_secs,
            approvals = self.merge.required_approvals,
            workers = self.run.workers,
            agent = toml::Value::String(self.run.agent.clone()),
            agent_command = toml::Value::Array(
                self.run
                    .agent_command
                    .iter()
                    .cloned()
                    .map(toml::Value::String)
                    .collect()
            ),
            scenario = toml::Value::String(self.run.scenario.clone()),
            hours = toml::Value::Float(self.run.hours),
            stagger = toml::Value::Float(self.run.stagger_secs),
            idle = self.run.idle_timeout_secs,
            notices = toml::Value::Array(
                self.run
                    .notices_minutes
                    .iter()
                    .map(|m| toml::Value::Float(*m))
                    .collect()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_back_to_the_same_configuration() {
        let c = Config::with_goal("build a \"calculator\"\nwith tests");
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
    }

    #[test]
    fn missing_sections_take_their_defaults() {
        let c = Config::parse("[organization]\ngoal = \"x\"\n").unwrap();
        assert_eq!(c.board.view_cap, 2_000);
        assert_eq!(c.board.claim_lease_secs, 3_600);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[board]\nview_capp = 3\n").unwrap_err();
        assert!(e.message.contains("view_capp"), "{}", e.message);
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        let e = Config::parse("[organization]\ngoal = \"x\"\n[board]\nview_cap = 0\n").unwrap_err();
        assert!(e.message.contains("view_cap"));
    }
}
