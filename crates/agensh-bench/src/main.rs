//! `agensh-bench`: benchmarks anyone can rerun. Each prints a table (or `--json`) and
//! the figures quoted in docs/PERFORMANCE.md come from here.
//!
//! Run: `cargo run --release -p agensh-bench -- hub` (builds `agensh` first:
//! `cargo build --release -p agensh`).

mod agents;
mod cluster;
mod dashboard;
mod economy;
mod faults;
mod firstrun;
mod gateway;
mod hub;
mod merge;
mod merges;
mod migrate;
mod model;
mod node;
mod pg;
mod programbench;
mod stats;
mod urgent;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "agensh-bench", about = "Rerunnable agensh benchmarks")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// One worker of each real agent CLI: time to its first prompt, memory of its process
    /// tree, and the harness's share of a turn against the replay model server.
    Agents(agents::Args),
    /// N nodes × M scripted workers (16 × 64), each node in a network namespace of its own,
    /// against one hub on SQLite or PostgreSQL: event-to-prompt p50/p99, durable appends/s,
    /// the hub's CPU and memory. Needs root and iproute2.
    Cluster(cluster::Args),
    /// What `cluster` runs inside its probe host (a post, or the appends).
    #[command(hide = true)]
    ClusterProbe(cluster::ProbeArgs),
    /// The live dashboard with 1,024 busy scripted workers: the hub's extra CPU with 5
    /// pages open, the page's first load (time, bytes), and a board post's time to a page.
    Dashboard(dashboard::Args),
    /// The organization's economy: a run of scripted workers that ends when its goal is
    /// met (how soon after, turns after it), and idle workers parked (their turns against
    /// parking off, the busy half's merges per minute).
    Economy(economy::Args),
    /// The fault-injection run: N scripted workers on a goal of many parts, undisturbed and
    /// while the hub, agents and the node are killed with SIGKILL; every part merged, no
    /// acknowledged write lost, no event shown twice, git fsck clean, no process left.
    Faults(faults::Args),
    /// The README's first command as a user runs it: parts merged into main over time.
    Firstrun(firstrun::Args),
    /// The model gateway against direct to the same replay upstream: added latency, first
    /// byte, streaming throughput, memory per open stream.
    Gateway(gateway::Args),
    /// The hub: appends/s, wake of all long-polls, grep over a large history, memory.
    Hub(hub::Args),
    /// The git workspace: merge latency against a temporary-clone merge; 1,024 checkouts.
    Merge(merge::Args),
    /// Merge throughput: N workers (1,024) each merging a disjoint PR at once through a
    /// real hub over HTTP — merges/s, p50/p99 time to merge, none lost, the hub's CPU.
    Merges(merges::Args),
    /// The node: memory per worker and turn-dispatch latency with 1,024 scripted workers.
    Node(node::Args),
    /// `agensh store migrate`'s move of a SQLite store of N records and M messages into an
    /// empty PostgreSQL database (`--to URL`): rows per second.
    Migrate(migrate::Args),
    /// The built-in agent on the local model: N workers sharing one model server.
    Model(model::Args),
    /// Scoring one ProgramBench checkpoint in agensh's sandbox against a plain
    /// `compile.sh && run.sh` (the floor).
    Programbench(programbench::Args),
    /// Urgent news and busy agents: a storm of direct messages among N scripted workers
    /// (each shown exactly once? receipts acknowledged? stored→presented p50/p99), and the
    /// time for a DM to reach an agent busy in a ten-minute command.
    Urgent(urgent::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.bench {
        Bench::Agents(a) => rt.block_on(agents::run(a)),
        Bench::Cluster(a) => rt.block_on(cluster::run(a)),
        Bench::ClusterProbe(a) => rt.block_on(cluster::probe(a)),
        Bench::Dashboard(a) => rt.block_on(dashboard::run(a)),
        Bench::Economy(a) => rt.block_on(economy::run(a)),
        Bench::Faults(a) => rt.block_on(faults::run(a)),
        Bench::Firstrun(a) => rt.block_on(firstrun::run(a)),
        Bench::Gateway(a) => rt.block_on(gateway::run(a)),
        Bench::Hub(a) => rt.block_on(hub::run(a)),
        Bench::Merge(a) => rt.block_on(merge::run(a)),
        Bench::Merges(a) => rt.block_on(merges::run(a)),
        Bench::Node(a) => rt.block_on(node::run(a)),
        Bench::Migrate(a) => rt.block_on(migrate::run(a)),
        Bench::Model(a) => rt.block_on(model::run(a)),
        Bench::Programbench(a) => rt.block_on(programbench::run(a)),
        Bench::Urgent(a) => rt.block_on(urgent::run(a)),
    }
}
