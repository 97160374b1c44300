//! The agent presets: what `--agent claude | codex | copilot | gemini` means. Each preset
//! knows its npm package and pinned version, the program in that package, and how to start
//! it for one worker — its arguments, environment and settings files, with its updates,
//! telemetry and error reports off, pointed at the model endpoint the user chose
//! (`[model] url`, `name`, `api_key_env`), with its home under the worker's own directory.
//!
//! No IO: [`Preset::launch`] returns what to write and what to run; the node writes it.

use crate::error::{Error, Result};

/// The API a preset's CLI speaks to its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelApi {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/v1/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAiChat,
    /// Gemini (`/v1beta/models/{model}:streamGenerateContent`).
    Gemini,
}

impl ModelApi {
    /// The API family of the hub's model gateway that serves it (`/model/<family>`).
    pub fn family(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "anthropic",
            ModelApi::OpenAiResponses | ModelApi::OpenAiChat => "openai",
            ModelApi::Gemini => "gemini",
        }
    }

    /// The gateway's base URL for this API at the hub `hub_url` (`{hub}/model/{family}`;
    /// each API's paths, `/v1/...` or `/v1beta/...`, go after it).
    pub fn gateway_base(self, hub_url: &str) -> String {
        format!("{}/model/{}", hub_url.trim_end_matches('/'), self.family())
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "Anthropic Messages",
            ModelApi::OpenAiResponses => "OpenAI Responses",
            ModelApi::OpenAiChat => "OpenAI Chat Completions",
            ModelApi::Gemini => "Gemini",
        }
    }
}

/// How agensh talks to a preset's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The Agent Client Protocol over stdio.
    Acp,
    /// pi's RPC mode (JSON lines over stdio: `prompt`, then events until `agent_end`).
    PiRpc,
}

/// How an agent reports the tokens a turn used, so each is counted once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageReport {
    /// The `session/prompt` answer's `usage` (or `_meta.usage`) is this turn's.
    #[default]
    PerTurn,
    /// The answer's `usage` is the session's total so far: a turn's is the difference.
    Cumulative,
    /// Tokens only in the answer's `_meta.quota.token_count` (gemini), per turn.
    MetaQuota,
    /// The agent reports no token counts: shown as "not reported", never a guess.
    None,
}

/// One preset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// The name `--agent` takes.
    pub name: &'static str,
    /// What it is, for people.
    pub title: &'static str,
    /// The npm package.
    pub package: &'static str,
    /// The version installed and tested.
    pub version: &'static str,
    /// The program, relative to the install prefix; `{arch}` is `x64` or `arm64`.
    pub program: &'static str,
    /// Arguments always given.
    pub args: &'static [&'static str],
    pub protocol: Protocol,
    pub api: ModelApi,
    pub usage: UsageReport,
    /// The agent's input count leaves out prompt-cache reads and writes (Claude's, as
    /// Anthropic counts): they are added to make the input the whole prompt.
    pub cache_apart: bool,
    /// The environment variable the CLI reads its API key from when no endpoint is set.
    pub key_var: &'static str,
    /// The vendor's API when no endpoint is set, for the model gateway to reach with the key
    /// of `key_var`; empty: the CLI signs in its own way (the gateway cannot stand in).
    pub vendor_url: &'static str,
    /// Files the agent writes for itself in its working directory, kept out of git.
    pub checkout_excludes: &'static [&'static str],
}

/// Every preset, in the order they are listed.
pub const PRESETS: [Preset; 5] = [
    Preset {
        name: "claude",
        cache_apart: true,
        title: "Claude Code through its official ACP adapter (claude-agent-acp)",
        package: "@agentclientprotocol/claude-agent-acp",
        version: "0.49.0",
        program: "node_modules/.bin/claude-agent-acp",
        args: &[],
        protocol: Protocol::Acp,
        api: ModelApi::Anthropic,
        usage: UsageReport::PerTurn,
        key_var: "ANTHROPIC_API_KEY",
        vendor_url: "https://api.anthropic.com",
        checkout_excludes: &[".claude/settings.local.json", "CLAUDE.local.md"],
    },
    Preset {
        name: "codex",
        cache_apart: false,
        title: "OpenAI Codex through codex-acp (its native binary)",
        package: "@zed-industries/codex-acp",
        version: "0.16.0",
        program: "node_modules/@zed-industries/codex-acp-linux-{arch}/bin/codex-acp",
        args: &[],
        protocol: Protocol::Acp,
        api: ModelApi::OpenAiResponses,
        usage: UsageReport::None,
        key_var: "OPENAI_API_KEY",
        vendor_url: "https://api.openai.com/v1",
        checkout_excludes: &[],
    },
    Preset {
        name: "copilot",
        cache_apart: false,
        title: "GitHub Copilot CLI (copilot --acp)",
        package: "@github/copilot",
        version: "1.0.102",
        program: "node_modules/.bin/copilot",
        args: &["--acp", "--disable-client-telemetry"],
        protocol: Protocol::Acp,
        api: ModelApi::OpenAiChat,
        usage: UsageReport::Cumulative,
        key_var: "COPILOT_PROVIDER_API_KEY",
        vendor_url: "",
        checkout_excludes: &[],
    },
    Preset {
        name: "gemini",
        cache_apart: false,
        title: "Gemini CLI (gemini --acp)",
        package: "@google/gemini-cli",
        version: "0.61.0",
        program: "node_modules/.bin/gemini",
        args: &["--acp"],
        protocol: Protocol::Acp,
        api: ModelApi::Gemini,
        usage: UsageReport::MetaQuota,
        key_var: "GEMINI_API_KEY",
        vendor_url: "https://generativelanguage.googleapis.com",
        checkout_excludes: &[],
    },
    Preset {
        name: "pi",
        cache_apart: true,
        title: "pi (pi-coding-agent) through its RPC mode",
        package: "@mariozechner/pi-coding-agent",
        version: "0.73.1",
        program: "node_modules/.bin/pi",
        args: &["--mode", "rpc"],
        protocol: Protocol::PiRpc,
        api: ModelApi::OpenAiChat,
        usage: UsageReport::PerTurn,
        key_var: "ANTHROPIC_API_KEY",
        vendor_url: "",
        checkout_excludes: &[],
    },
];

/// The agents `run.agent` may name: the built-in one, any ACP agent by command, the
/// scripted one, and the presets.
pub fn agent_names() -> Vec<&'static str> {
    let mut names = vec!["builtin", "acp", "script"];
    names.extend(PRESETS.iter().map(|p| p.name));
    names
}

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The presets named, in order; every preset for none. An unknown name is an error that
/// lists the known ones.
pub fn presets_named(names: &[String]) -> Result<Vec<&'static Preset>> {
    if names.is_empty() {
        return Ok(PRESETS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            preset(n).ok_or_else(|| {
                Error::invalid(
                    "unknown_agent",
                    format!(
                        "\"{}\" is not an agent agensh can install — use one of {}",
                        crate::ids::truncate_for_message(n),
                        PRESETS.map(|p| p.name).join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// The model endpoint a worker's agent talks to (`[model]`, or its group's settings).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoint {
    /// Base URL, with or without `/v1`; empty: the vendor's own service.
    pub url: String,
    /// The model; empty: the CLI's default.
    pub model: String,
    /// The API key's value; `None`: the CLI reads its own variable from the environment.
    pub api_key: Option<String>,
}

impl Endpoint {
    /// The URL without a trailing `/` or `/v1`.
    pub fn root(&self) -> String {
        let u = self.url.trim().trim_end_matches('/');
        u.strip_suffix("/v1").unwrap_or(u).to_string()
    }

    fn local(&self) -> bool {
        !self.url.trim().is_empty()
    }

    /// The key to hand the CLI: the user's, else a placeholder for a local server that
    /// takes any (every CLI refuses to start without one).
    fn key(&self) -> Option<String> {
        match &self.api_key {
            Some(k) => Some(k.clone()),
            None if self.local() => Some("agensh-local".to_string()),
            None => None,
        }
    }
}

/// Where one worker's agent lives.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlace {
    /// The install prefix of the preset (`<data>/agents/<name>/<version>`).
    pub prefix: String,
    /// The agent's own home (`<org>/.agensh/agents/<worker>`): HOME and every settings
    /// directory point here.
    pub home: String,
    /// `x64` or `arm64`.
    pub arch: &'static str,
    /// The node runs as root (Claude Code then needs `IS_SANDBOX=1`).
    pub root: bool,
}

/// What to write and run to start a preset's agent for one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Variables set for the agent (added to the node's environment).
    pub env: Vec<(String, String)>,
    /// Files to write, as (path under the home, contents).
    pub files: Vec<(String, String)>,
    /// Variables removed from the agent's environment (besides [`ENV_REMOVED`]).
    pub env_removed: Vec<&'static str>,
}

/// Variables that would carry the user's own settings into an agent whose home is its
/// worker's: removed from its environment.
pub const ENV_REMOVED: [&str; 8] = [
    "AGENSH_TOKEN",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
];

impl Preset {
    /// The program's path inside `prefix`.
    pub fn program_in(&self, prefix: &str, arch: &str) -> String {
        format!(
            "{}/{}",
            prefix.trim_end_matches('/'),
            self.program.replace("{arch}", arch)
        )
    }

    /// How to start this preset for one worker at `place`, talking to `endpoint`.
    pub fn launch(&self, place: &LaunchPlace, endpoint: &Endpoint) -> Launch {
        let home = place.home.trim_end_matches('/');
        let mut command = vec![self.program_in(&place.prefix, place.arch)];
        command.extend(self.args.iter().map(|a| a.to_string()));
        let mut env = vec![
            ("HOME".to_string(), home.to_string()),
            ("XDG_CONFIG_HOME".to_string(), format!("{home}/.config")),
            ("XDG_DATA_HOME".to_string(), format!("{home}/.local/share")),
            ("XDG_STATE_HOME".to_string(), format!("{home}/.local/state")),
            ("XDG_CACHE_HOME".to_string(), format!("{home}/.cache")),
            // npm, node and the CLIs' update checks and crash reports stay off.
            ("NO_UPDATE_NOTIFIER".to_string(), "1".to_string()),
            ("DO_NOT_TRACK".to_string(), "1".to_string()),
        ];
        let mut set = |k: &str, v: String| env.push((k.to_string(), v));
        let mut files = Vec::new();
        let mut removed = Vec::new();
        let key = endpoint.key();
        let root = endpoint.root();
        match self.name {
            "claude" => {
                set("CLAUDE_CONFIG_DIR", format!("{home}/.claude"));
                set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into());
                set("DISABLE_TELEMETRY", "1".into());
                set("DISABLE_ERROR_REPORTING", "1".into());
                set("DISABLE_AUTOUPDATER", "1".into());
                set("DISABLE_BUG_COMMAND", "1".into());
                // As root Claude Code needs it; any other value (an inherited `yes`) makes
                // `session/new` fail with a bare "Internal error".
                if place.root {
                    set("IS_SANDBOX", "1".into());
                } else {
                    removed.push("IS_SANDBOX");
                }
                if endpoint.local() {
                    set("ANTHROPIC_BASE_URL", root);
                }
                if let Some(k) = key {
                    set("ANTHROPIC_API_KEY", k);
                }
                if !endpoint.model.is_empty() {
                    set("ANTHROPIC_MODEL", endpoint.model.clone());
                    set("ANTHROPIC_SMALL_FAST_MODEL", endpoint.model.clone());
                }
            }
            "codex" => {
                set("CODEX_HOME", format!("{home}/.codex"));
                if let Some(k) = key {
                    set("AGENSH_MODEL_KEY", k);
                }
                files.push((".codex/config.toml".to_string(), codex_config(endpoint)));
            }
            "copilot" => {
                if endpoint.local() {
                    set("COPILOT_OFFLINE", "true".into());
                    set("COPILOT_PROVIDER_BASE_URL", format!("{root}/v1"));
                    set("COPILOT_PROVIDER_TYPE", "openai".into());
                }
                if let Some(k) = key {
                    set("COPILOT_PROVIDER_API_KEY", k);
                }
                if !endpoint.model.is_empty() {
                    set("COPILOT_MODEL", endpoint.model.clone());
                }
                set("COPILOT_AUTO_UPDATE", "false".into());
            }
            "pi" => {
                set("PI_CODING_AGENT_DIR", format!("{home}/.pi/agent"));
                set("PI_OFFLINE", "1".into());
                set("PI_TELEMETRY", "0".into());
                if let Some(k) = key {
                    set("AGENSH_MODEL_KEY", k);
                }
                if endpoint.local() {
                    files.push((".pi/agent/models.json".to_string(), pi_models(endpoint)));
                    command.extend(["--provider".to_string(), "agensh".to_string()]);
                }
                if !endpoint.model.is_empty() {
                    command.push("--model".into());
                    command.push(endpoint.model.clone());
                }
            }
            "gemini" => {
                if endpoint.local() {
                    set("GOOGLE_GEMINI_BASE_URL", root);
                }
                if let Some(k) = key {
                    set("GEMINI_API_KEY", k);
                }
                files.push((".gemini/settings.json".to_string(), GEMINI_SETTINGS.into()));
                if !endpoint.model.is_empty() {
                    command.push("-m".into());
                    command.push(endpoint.model.clone());
                }
            }
            _ => {}
        }
        Launch {
            command,
            env,
            files,
            env_removed: removed,
        }
    }
}

/// pi's `models.json` for an endpoint: one provider, `agensh`, over Chat Completions, its
/// key read from `AGENSH_MODEL_KEY`.
fn pi_models(endpoint: &Endpoint) -> String {
    let model = if endpoint.model.is_empty() {
        "default"
    } else {
        &endpoint.model
    };
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    format!(
        r#"{{
  "providers": {{
    "agensh": {{
      "baseUrl": {url},
      "api": "openai-completions",
      "apiKey": "AGENSH_MODEL_KEY",
      "compat": {{ "supportsDeveloperRole": false, "supportsReasoningEffort": false }},
      "models": [ {{ "id": {model}, "contextWindow": 128000, "maxTokens": 8192 }} ]
    }}
  }}
}}
"#,
        url = q(&format!("{}/v1", endpoint.root())),
        model = q(model)
    )
}

/// Gemini CLI's settings: the API key as its way in, no folder-trust question, no
/// telemetry, usage statistics or updates.
const GEMINI_SETTINGS: &str = r#"{
  "security": {
    "auth": { "selectedType": "gemini-api-key" },
    "folderTrust": { "enabled": false }
  },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "general": { "disableAutoUpdate": true, "disableUpdateNag": true }
}
"#;

/// Codex's `config.toml`: no update check, analytics or plugins; commands run without its
/// sandbox (it needs bubblewrap, and the worker's checkout is its own) and without asking.
fn codex_config(endpoint: &Endpoint) -> String {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut c = String::from(
        "# Written by agensh for this worker; rewritten at every start.\n\
         approval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\n\
         check_for_update_on_startup = false\n",
    );
    if !endpoint.model.is_empty() {
        c.push_str(&format!("model = {}\n", q(&endpoint.model)));
    }
    if endpoint.local() {
        c.push_str("model_provider = \"agensh\"\n");
    }
    c.push_str("\n[analytics]\nenabled = false\n\n[features]\nplugins = false\nremote_plugin = false\napps = false\n");
    if endpoint.local() {
        c.push_str(&format!(
            "\n[model_providers.agensh]\nname = \"agensh\"\nbase_url = {}\nenv_key = \"AGENSH_MODEL_KEY\"\nwire_api = \"responses\"\n",
            q(&format!("{}/v1", endpoint.root()))
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> LaunchPlace {
        LaunchPlace {
            prefix: "/data/agents/x/1".into(),
            home: "/org/.agensh/agents/w01/".into(),
            arch: "x64",
            root: false,
        }
    }

    fn env<'a>(l: &'a Launch, k: &str) -> Option<&'a str> {
        l.env
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_url_is_taken_with_or_without_v1() {
        for url in [
            "http://127.0.0.1:9/v1",
            "http://127.0.0.1:9/v1/",
            "http://127.0.0.1:9",
        ] {
            let e = Endpoint {
                url: url.into(),
                ..Endpoint::default()
            };
            assert_eq!(e.root(), "http://127.0.0.1:9");
            let copilot = preset("copilot").unwrap().launch(&place(), &e);
            assert_eq!(
                env(&copilot, "COPILOT_PROVIDER_BASE_URL"),
                Some("http://127.0.0.1:9/v1")
            );
            let claude = preset("claude").unwrap().launch(&place(), &e);
            assert_eq!(
                env(&claude, "ANTHROPIC_BASE_URL"),
                Some("http://127.0.0.1:9")
            );
        }
    }

    #[test]
    fn every_preset_lives_in_the_workers_home() {
        for p in PRESETS {
            let l = p.launch(&place(), &Endpoint::default());
            assert_eq!(
                env(&l, "HOME"),
                Some("/org/.agensh/agents/w01"),
                "{}",
                p.name
            );
            assert!(l.command[0].starts_with("/data/agents/x/1/node_modules/"));
            assert!(!l.command[0].contains("{arch}"));
            assert!(l.env.iter().all(|(k, _)| k != "AGENSH_TOKEN"));
        }
    }

    #[test]
    fn a_local_endpoint_gets_a_placeholder_key_and_a_vendor_one_the_users() {
        let local = Endpoint {
            url: "http://127.0.0.1:9".into(),
            model: "m1".into(),
            api_key: None,
        };
        let g = preset("gemini").unwrap().launch(&place(), &local);
        assert_eq!(env(&g, "GEMINI_API_KEY"), Some("agensh-local"));
        assert_eq!(&g.command[1..], ["--acp", "-m", "m1"]);
        let vendor = Endpoint::default();
        let g = preset("gemini").unwrap().launch(&place(), &vendor);
        assert_eq!(
            env(&g, "GEMINI_API_KEY"),
            None,
            "the user's own variable is inherited"
        );
        assert_eq!(env(&g, "GOOGLE_GEMINI_BASE_URL"), None);
        let keyed = Endpoint {
            api_key: Some("sk-1".into()),
            ..vendor
        };
        let c = preset("claude").unwrap().launch(&place(), &keyed);
        assert_eq!(env(&c, "ANTHROPIC_API_KEY"), Some("sk-1"));
    }

    #[test]
    fn codex_gets_a_provider_only_for_an_endpoint() {
        let local = Endpoint {
            url: "http://127.0.0.1:9/v1".into(),
            model: "gpt-x".into(),
            api_key: None,
        };
        let l = preset("codex").unwrap().launch(&place(), &local);
        let (path, text) = &l.files[0];
        assert_eq!(path, ".codex/config.toml");
        let t: toml::Table = toml::from_str(text).expect("valid TOML");
        assert_eq!(t["model_provider"].as_str(), Some("agensh"));
        assert_eq!(
            t["model_providers"]["agensh"]["base_url"].as_str(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(t["model"].as_str(), Some("gpt-x"));
        assert_eq!(
            env(&l, "CODEX_HOME"),
            Some("/org/.agensh/agents/w01/.codex")
        );
        let vendor = preset("codex")
            .unwrap()
            .launch(&place(), &Endpoint::default());
        let t: toml::Table = toml::from_str(&vendor.files[0].1).unwrap();
        assert!(t.get("model_provider").is_none());
        assert_eq!(env(&vendor, "AGENSH_MODEL_KEY"), None);
    }

    #[test]
    fn claude_as_root_says_it_is_sandboxed() {
        let mut p = place();
        let c = preset("claude").unwrap();
        let l = c.launch(&p, &Endpoint::default());
        assert_eq!(env(&l, "IS_SANDBOX"), None);
        assert_eq!(
            l.env_removed,
            ["IS_SANDBOX"],
            "an inherited value is not passed on"
        );
        p.root = true;
        assert_eq!(
            env(&c.launch(&p, &Endpoint::default()), "IS_SANDBOX"),
            Some("1")
        );
    }

    #[test]
    fn unknown_names_list_the_presets() {
        assert_eq!(presets_named(&[]).unwrap().len(), PRESETS.len());
        let e = presets_named(&["claud".into()]).unwrap_err();
        assert!(
            e.message.contains("claude, codex, copilot, gemini"),
            "{}",
            e.message
        );
        assert!(agent_names().contains(&"codex"));
    }
}

#[cfg(test)]
mod pi_tests {
    use super::*;

    #[test]
    fn pi_gets_a_provider_for_an_endpoint_and_its_model() {
        let place = LaunchPlace {
            prefix: "/p".into(),
            home: "/h".into(),
            arch: "x64",
            root: true,
        };
        let e = Endpoint {
            url: "http://127.0.0.1:9".into(),
            model: "m1".into(),
            api_key: None,
        };
        let l = preset("pi").unwrap().launch(&place, &e);
        assert_eq!(
            &l.command[1..],
            ["--mode", "rpc", "--provider", "agensh", "--model", "m1"]
        );
        let (path, text) = &l.files[0];
        assert_eq!(path, ".pi/agent/models.json");
        let v: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
        assert_eq!(v["providers"]["agensh"]["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(v["providers"]["agensh"]["models"][0]["id"], "m1");
    }
}
