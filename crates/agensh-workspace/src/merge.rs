//! Merging a branch into `main` inside the bare repository, with no temporary clone:
//! `merge-tree --write-tree` computes the merged tree, `commit-tree` makes the merge
//! commit, and `update-ref main NEW OLD` moves `main` only if nobody moved it meanwhile
//! (else the merge is redone on the new `main`).
//!
//! Merges wait in one queue and go in batches. Ungated ones are folded onto `main` one
//! after another, each its own merge commit, and `main` moves once for the batch. Gated
//! ones go through the merge train ([`crate::train`]): folded into a chain, gated in
//! parallel on its prefixes, landed up to the longest that passed, each failing merge
//! refused alone with its own gate output. `main` only ever moves to a commit the gate
//! passed on, with `AGENSH_GATE_BASE` set to `main` before the merges it tests.

use std::path::Path;
use std::time::Duration;

use agensh_domain::pr::BASE;
use agensh_domain::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::Workspace;

/// How often a batch of merges is redone because something outside the merge queue (an
/// admin's push, another process) moved `main` first.
pub(crate) const MAX_ATTEMPTS: u32 = 64;
/// Most merges folded into one move of `main`: a batch answers nobody before it ends, so
/// a bound keeps the first answers coming while a thousand merges wait.
const MAX_BATCH: usize = 128;
/// The environment variable that tells a gate which commit `main` was before the merges
/// it tests (for one merge, `HEAD^1`; for a batch, the first merge's first parent).
pub const GATE_BASE_VAR: &str = "AGENSH_GATE_BASE";
/// How much of a failing gate's output is kept.
const GATE_TAIL_LINES: usize = 40;
const GATE_TAIL_BYTES: usize = 4_000;

/// A command run on the merged tree before `main` moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// Run with `sh -c` in a scratch checkout of the merge commit.
    pub command: String,
    pub timeout: Duration,
    /// Most merges in one gated chain (`merge.gate_batch`; 1: each alone). A failing run
    /// is searched, so a longer chain costs more runs to find a failure in.
    pub batch: usize,
    /// Gate runs at once on a chain's prefixes (`merge.gate_jobs`; 1: one at a time, a
    /// failing chain bisected).
    pub jobs: usize,
}

/// What to merge.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    pub branch: String,
    /// The commit of `branch` to merge (the one its approvals are for); `None` merges the
    /// branch's tip as it is when the merge starts.
    pub head: Option<String>,
    /// The merge commit's message.
    pub message: String,
    pub gate: Option<Gate>,
}

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum MergeOutcome {
    /// `main` now points at `commit`, which merges `head`.
    Merged {
        commit: String,
        head: String,
        attempts: u32,
    },
    /// Both sides changed the same lines; `main` did not move.
    Conflict { files: Vec<String> },
    /// The gate failed on the merged tree; `main` did not move.
    GateFailed {
        exit: Option<i32>,
        timed_out: bool,
        output_tail: String,
    },
    /// `main` already contains every commit of the branch.
    UpToDate { head: String },
}

/// Whether a branch would merge into `main` now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Mergeability {
    Mergeable,
    Conflict { files: Vec<String> },
    UpToDate,
}

/// One commit of a branch, as `pr view` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub sha: String,
    pub author: String,
    pub subject: String,
}

/// Lines added and removed in one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub path: String,
    /// `None` for binary files.
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A branch compared with `main`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchSummary {
    pub head: String,
    pub base: String,
    /// Commits on the branch that `main` lacks, newest first (at most 100).
    pub commits: Vec<CommitInfo>,
    pub files: Vec<FileStat>,
    pub mergeability: Mergeability,
}

/// One merge waiting in the queue: what to merge, the commit it merges, and where its
/// caller waits for the outcome.
pub(crate) struct Waiting {
    pub(crate) req: MergeRequest,
    pub(crate) head: String,
    pub(crate) answer: tokio::sync::oneshot::Sender<Result<MergeOutcome>>,
}

/// A merge in the queue, as `pr list` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedMerge {
    pub branch: String,
    /// The commit of the branch it merges.
    pub head: String,
    /// Its place in the queue: 1 lands first.
    pub place: usize,
    /// The gated chain it is folded into (numbered from 1 since the workspace was
    /// opened); none while it waits behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The gate run whose verdict it waits for (numbered from 1); none between rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_run: Option<u64>,
}

/// The merge queue of one workspace (shared by its clones): the merges waiting, and the
/// turn a batch holds while it runs. Merges that arrive while a batch runs wait together
/// and become the next batch.
#[derive(Default)]
pub(crate) struct MergeQueue {
    waiting: std::sync::Mutex<Vec<Waiting>>,
    turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    main_moves: std::sync::atomic::AtomicU64,
    pub(crate) gate_runs: std::sync::atomic::AtomicU64,
    pub(crate) bisections: std::sync::atomic::AtomicU64,
    /// Gated chains, and the merge commits they held (their mean size).
    pub(crate) batches: std::sync::atomic::AtomicU64,
    pub(crate) batched_merges: std::sync::atomic::AtomicU64,
    /// The merges the running batch holds, as last shown.
    view: std::sync::Mutex<Vec<QueuedMerge>>,
    /// Held while a scratch worktree is added, removed or pruned.
    pub(crate) worktrees: tokio::sync::Mutex<()>,
}

impl MergeQueue {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        // A panic while holding it cannot leave the list half-changed (push and take).
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl MergeQueue {
    /// Shows the chain `links` (branch, head, the prefix length that includes it) of
    /// `batch`, waiting for the gate runs `runs` (id, prefix length), and `behind` it.
    pub(crate) fn show(
        &self,
        links: &[(String, String, usize)],
        batch: u64,
        runs: &[(u64, usize)],
        behind: &std::collections::VecDeque<Waiting>,
    ) {
        let mut view = Vec::with_capacity(links.len() + behind.len());
        for (branch, head, k) in links {
            view.push(QueuedMerge {
                branch: branch.clone(),
                head: head.clone(),
                place: view.len() + 1,
                batch: Some(batch),
                gate_run: runs.iter().find(|(_, p)| p >= k).map(|(id, _)| *id),
            });
        }
        for w in behind {
            view.push(QueuedMerge {
                branch: w.req.branch.clone(),
                head: w.head.clone(),
                place: view.len() + 1,
                batch: None,
                gate_run: None,
            });
        }
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = view;
    }
}

impl std::fmt::Debug for MergeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeQueue")
            .field("waiting", &self.waiting().len())
            .field("main_moves", &self.main_moves)
            .finish()
    }
}

/// Answers every caller of `batch` with `f` of its merge.
pub(crate) fn answer_all(batch: Vec<Waiting>, f: impl Fn(&Waiting) -> Result<MergeOutcome>) {
    for w in batch {
        let outcome = f(&w);
        let _ = w.answer.send(outcome);
    }
}

/// Answers each caller of `batch` with its own outcome (same order).
fn answer_each(batch: Vec<Waiting>, outcomes: Vec<Result<MergeOutcome>>) {
    for (w, outcome) in batch.into_iter().zip(outcomes) {
        let _ = w.answer.send(outcome);
    }
}

/// The answer when `main` kept moving under a batch.
pub(crate) fn contended() -> Error {
    Error::conflict(
        "merge_contended",
        format!(
            "main kept moving: {MAX_ATTEMPTS} merge attempts lost the race — try the merge again"
        ),
    )
}

enum TreeMerge {
    Clean(String),
    Conflict(Vec<String>),
}

impl Workspace {
    /// The commit `branch` points at, or a not-found error that says how to publish it.
    pub async fn branch_head(&self, branch: &str) -> Result<String> {
        self.git()
            .resolve(&format!("refs/heads/{branch}"))
            .await?
            .ok_or_else(|| {
                Error::not_found(
                    "unknown_branch",
                    format!(
                        "branch {branch} does not exist in the workspace — push it first, from your checkout: git push origin HEAD:{branch}"
                    ),
                )
            })
    }

    async fn main_head(&self) -> Result<String> {
        self.git()
            .resolve(&format!("refs/heads/{BASE}"))
            .await?
            .ok_or_else(|| Error::internal("the workspace has no main branch"))
    }

    async fn is_ancestor(&self, a: &str, b: &str) -> Result<bool> {
        let out = self
            .git()
            .output(["merge-base", "--is-ancestor", a, b])
            .await?;
        match out.status {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(Error::internal(format!(
                "git merge-base failed: {}",
                out.stderr.trim()
            ))),
        }
    }

    async fn merge_trees(&self, base: &str, head: &str) -> Result<TreeMerge> {
        let out = self
            .git()
            .output([
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                base,
                head,
            ])
            .await?;
        let mut lines = out.stdout.lines();
        let tree = lines.next().unwrap_or("").trim().to_string();
        match out.status {
            Some(0) => Ok(TreeMerge::Clean(tree)),
            Some(1) => {
                let mut files: Vec<String> = lines
                    .take_while(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect();
                files.dedup();
                Ok(TreeMerge::Conflict(files))
            }
            _ => Err(Error::internal(format!(
                "git merge-tree failed: {} — the hub needs git 2.38 or newer",
                out.stderr.trim()
            ))),
        }
    }

    /// Merges `req.branch` into `main` (see the module documentation): through the merge
    /// queue, together with every other merge waiting at the moment.
    pub async fn merge(&self, req: &MergeRequest) -> Result<MergeOutcome> {
        self.merge_together(std::slice::from_ref(req))
            .await
            .pop()
            .expect("one answer per request")
    }

    /// Merges every request of `reqs` in one batch of the merge queue (with whatever else
    /// waits): in this order, each its own `merge-tree` check and merge commit, `main`
    /// moved once for the ungated ones (gated ones through the merge train). One outcome per request,
    /// in order; a request that fails (a conflict, an unknown branch) fails alone.
    pub async fn merge_together(&self, reqs: &[MergeRequest]) -> Vec<Result<MergeOutcome>> {
        let mut answers = Vec::with_capacity(reqs.len());
        let mut waiting = Vec::with_capacity(reqs.len());
        for req in reqs {
            let head = match &req.head {
                Some(h) => Ok(h.clone()),
                None => self.branch_head(&req.branch).await,
            };
            let (answer, answered) = tokio::sync::oneshot::channel();
            match head {
                Ok(head) => waiting.push(Waiting {
                    req: req.clone(),
                    head,
                    answer,
                }),
                Err(e) => {
                    let _ = answer.send(Err(e));
                }
            }
            answers.push(answered);
        }
        let queue = self.queue();
        queue.waiting().append(&mut waiting);
        let mut outcomes = Vec::with_capacity(answers.len());
        {
            let collect = async {
                for answered in answers {
                    outcomes.push(answered.await.unwrap_or_else(|_| {
                        Err(Error::internal(
                            "the merge queue stopped before answering — try the merge again",
                        ))
                    }));
                }
            };
            tokio::pin!(collect);
            // Either a running batch takes these merges and answers them, or this caller
            // gets the turn and runs the batch of everything waiting. One batch at a time;
            // the turn is held by the batch's own task, so a caller that goes away
            // mid-batch neither abandons the others nor lets a second batch start.
            tokio::select! {
                biased;
                () = &mut collect => {}
                turn = queue.turn.clone().lock_owned() => {
                    let batch = std::mem::take(&mut *queue.waiting());
                    if batch.is_empty() {
                        // An earlier batch took these merges and answered: it held the turn.
                        drop(turn);
                    } else {
                        let ws = self.clone();
                        tokio::spawn(async move {
                            ws.run_queue(batch).await;
                            drop(turn);
                        });
                    }
                    collect.await;
                }
            }
        }
        outcomes
    }

    /// Merges `batch` (the merges that were waiting): the ungated ones together, at most
    /// [`MAX_BATCH`] per move of `main`; then the gated ones in order, through the merge
    /// train of their gate ([`Self::merge_gated`]).
    async fn run_queue(&self, batch: Vec<Waiting>) {
        let (mut gated, mut ungated): (Vec<Waiting>, Vec<Waiting>) =
            batch.into_iter().partition(|w| w.req.gate.is_some());
        while !ungated.is_empty() {
            let rest = ungated.split_off(ungated.len().min(MAX_BATCH));
            self.merge_batch(std::mem::replace(&mut ungated, rest))
                .await;
        }
        while let Some(gate) = gated.first().and_then(|w| w.req.gate.clone()) {
            let same = gated
                .iter()
                .take_while(|w| w.req.gate.as_ref() == Some(&gate))
                .count();
            let rest = gated.split_off(same);
            self.merge_gated(std::mem::replace(&mut gated, rest), &gate)
                .await;
        }
        *self.queue().view.lock().unwrap_or_else(|p| p.into_inner()) = Vec::new();
    }

    /// Folds every merge of `batch` onto `main` as it is now, each its own `merge-tree`
    /// check and merge commit (a conflicting one left out alone): `main`, the last merge
    /// commit (`main` itself when nothing merged) and each merge's outcome.
    pub(crate) async fn fold_all(
        &self,
        batch: &[Waiting],
        attempt: u32,
    ) -> Result<(String, String, Vec<Result<MergeOutcome>>)> {
        let base = self.main_head().await?;
        let base_tree = self
            .git()
            .run(["rev-parse", &format!("{base}^{{tree}}")])
            .await?;
        let (mut tip, mut tip_tree) = (base.clone(), base_tree);
        let mut outcomes = Vec::with_capacity(batch.len());
        for w in batch {
            let folded = self.fold(&tip, &tip_tree, w, attempt).await;
            if let Ok((MergeOutcome::Merged { commit, .. }, tree)) = &folded {
                tip = commit.clone();
                tip_tree = tree.clone();
            }
            outcomes.push(folded.map(|(o, _)| o));
        }
        Ok((base, tip, outcomes))
    }

    /// Moves `main` from `base` to `tip` by compare-and-swap: false when something else
    /// moved it first.
    async fn move_main(&self, tip: &str, base: &str, batch: &[Waiting]) -> Result<bool> {
        let message = if batch.len() == 1 {
            batch[0].req.message.clone()
        } else {
            format!("merge queue: {} merges", batch.len())
        };
        self.move_main_to(tip, base, &message).await
    }

    /// Moves `main` from `base` to `tip`, the last of `merges` gated merge commits, by
    /// compare-and-swap: false when something else moved it first.
    pub(crate) async fn move_main_by(&self, tip: &str, base: &str, merges: usize) -> Result<bool> {
        let message = format!("merge queue: {merges} gated merge(s)");
        self.move_main_to(tip, base, &message).await
    }

    async fn move_main_to(&self, tip: &str, base: &str, message: &str) -> Result<bool> {
        let out = self
            .git()
            .output([
                "update-ref",
                "-m",
                message,
                &format!("refs/heads/{BASE}"),
                tip,
                base,
            ])
            .await?;
        if !out.success() {
            return Ok(false);
        }
        self.queue()
            .main_moves
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// Folds each ungated merge of `batch` onto what `main` becomes — its own `merge-tree`
    /// check and merge commit, a conflicting one left out alone — and moves `main` once, by
    /// compare-and-swap; when something outside the queue moved `main` meanwhile, the whole
    /// batch is redone on the new `main`. Answers every caller.
    async fn merge_batch(&self, mut batch: Vec<Waiting>) {
        {
            // A caller that has gone away (its request dropped) is not merged for nobody.
            batch.retain(|w| !w.answer.is_closed());
            if batch.is_empty() {
                return;
            }
            for attempt in 1..=MAX_ATTEMPTS {
                let (base, tip, outcomes) = match self.fold_all(&batch, attempt).await {
                    Ok(folded) => folded,
                    Err(e) => return answer_all(batch, |_| Err(e.clone())),
                };
                if tip == base {
                    // Nothing to move: every merge was up to date, conflicting or failed.
                    return answer_each(batch, outcomes);
                }
                match self.move_main(&tip, &base, &batch).await {
                    Ok(true) => {
                        answer_each(batch, outcomes);
                        return self.extend_commit_graph(&tip).await;
                    }
                    Ok(false) => {}
                    Err(e) => return answer_all(batch, |_| Err(e.clone())),
                }
                tracing::debug!(
                    merges = batch.len(),
                    attempt,
                    "main moved outside the merge queue during a batch; merging it again"
                );
                let jitter = (u64::from(attempt) * 7 + batch.len() as u64) % 13;
                tokio::time::sleep(Duration::from_millis(1 + jitter)).await;
            }
            answer_all(batch, |_| Err(contended()))
        }
    }

    /// Adds the commits of `main` up to `tip` to the repository's commit-graph (a new
    /// layer of it). Every merge-tree and merge-base walks from `main` back to where a
    /// branch left it; without the graph each commit on that walk is a loose object to
    /// open and inflate, so with many merges since the last pack each merge got slower
    /// (55 ms a merge-tree after 1,000 merges, 12 ms with the graph). Best effort: git
    /// works the same without it.
    pub(crate) async fn extend_commit_graph(&self, tip: &str) {
        let out = self
            .git()
            .output_with_input(
                [
                    "commit-graph",
                    "write",
                    "--no-progress",
                    "--split",
                    "--stdin-commits",
                ],
                Some(format!("{tip}\n").as_bytes()),
            )
            .await;
        match out {
            Ok(o) if o.success() => {}
            Ok(o) => tracing::warn!(stderr = %o.stderr.trim(), "git commit-graph write failed"),
            Err(e) => tracing::warn!(error = %e, "git commit-graph write failed"),
        }
    }

    /// Merges `w` onto `tip` (whose tree is `tip_tree`): its outcome, and the merged tree
    /// when it made a merge commit.
    async fn fold(
        &self,
        tip: &str,
        tip_tree: &str,
        w: &Waiting,
        attempt: u32,
    ) -> Result<(MergeOutcome, String)> {
        let head = &w.head;
        let tree = match self.merge_trees(tip, head).await? {
            TreeMerge::Clean(tree) => tree,
            TreeMerge::Conflict(files) => {
                return Ok((MergeOutcome::Conflict { files }, String::new()))
            }
        };
        // A branch `tip` already contains merges to `tip`'s own tree; only then is it
        // worth asking git whether it does.
        if tree == tip_tree && self.is_ancestor(head, tip).await? {
            return Ok((MergeOutcome::UpToDate { head: head.clone() }, String::new()));
        }
        let commit = self
            .git()
            .run([
                "commit-tree",
                &tree,
                "-p",
                tip,
                "-p",
                head,
                "-m",
                &w.req.message,
            ])
            .await?;
        Ok((
            MergeOutcome::Merged {
                commit,
                head: head.clone(),
                attempts: attempt,
            },
            tree,
        ))
    }

    /// How often merges moved `main` since this workspace was opened (a batch moves it
    /// once for all its merges).
    pub fn main_moves(&self) -> u64 {
        self.queue()
            .main_moves
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The merge train's counts since this workspace was opened.
    pub fn gate_stats(&self) -> GateStats {
        let q = self.queue();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        GateStats {
            runs: load(&q.gate_runs),
            searches: load(&q.bisections),
            batches: load(&q.batches),
            batched_merges: load(&q.batched_merges),
        }
    }

    /// The merges in the queue now, in the order they land: the running chain's (with
    /// its batch and the gate run each waits for), then those waiting behind it.
    pub fn merge_queue(&self) -> Vec<QueuedMerge> {
        let q = self.queue();
        let mut view = q.view.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for w in q.waiting().iter() {
            view.push(QueuedMerge {
                branch: w.req.branch.clone(),
                head: w.head.clone(),
                place: view.len() + 1,
                batch: None,
                gate_run: None,
            });
        }
        view
    }

    /// Runs the gate on `commit`, with [`GATE_BASE_VAR`] set to `base` (`main` before the
    /// merges it tests); `Some(outcome)` when it fails.
    pub(crate) async fn run_gate(
        &self,
        gate: &Gate,
        commit: &str,
        base: &str,
    ) -> Result<Option<MergeOutcome>> {
        // Outside the organization directory: the gate runs the branch's code, which has
        // no business next to the hub's state.
        let scratch_root = std::env::temp_dir().join("agensh-gates");
        std::fs::create_dir_all(&scratch_root).map_err(|e| {
            Error::internal(format!("cannot create {}: {e}", scratch_root.display()))
        })?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = scratch_root.join(format!(
            "{}-{}-{n}",
            &commit[..12.min(commit.len())],
            std::process::id()
        ));
        let scratch_s = scratch.to_string_lossy().to_string();
        // A run stopped because its answer no longer matters (its task dropped) leaves no
        // directory behind; `git worktree prune` forgets it.
        let _scratch = RemoveOnDrop(scratch.clone());
        {
            // git reads every worktree's metadata while it adds one: one at a time.
            let _one = self.queue().worktrees.lock().await;
            self.git()
                .run(["worktree", "add", "--detach", "--quiet", &scratch_s, commit])
                .await?;
        }
        let env = [(GATE_BASE_VAR, base)];
        let result = run_in_group(&gate.command, &scratch, gate.timeout, "the gate", &env).await;
        {
            let _one = self.queue().worktrees.lock().await;
            let _ = self
                .git()
                .output(["worktree", "remove", "--force", &scratch_s])
                .await;
        }
        let (status, timed_out, output) = result?;
        if status == Some(0) && !timed_out {
            return Ok(None);
        }
        Ok(Some(MergeOutcome::GateFailed {
            exit: status,
            timed_out,
            output_tail: tail(&output),
        }))
    }

    /// Compares `branch` with `main`: commits, changed files, mergeability.
    pub async fn summary(&self, branch: &str) -> Result<BranchSummary> {
        let head = self.branch_head(branch).await?;
        let base = self.main_head().await?;
        let git = self.git();
        let log = git
            .run([
                "log",
                "--max-count=100",
                "--format=%H%x1f%an%x1f%s",
                &format!("{base}..{head}"),
            ])
            .await?;
        let commits = log
            .lines()
            .filter_map(|l| {
                let mut p = l.split('\u{1f}');
                Some(CommitInfo {
                    sha: p.next()?.to_string(),
                    author: p.next()?.to_string(),
                    subject: p.next().unwrap_or("").to_string(),
                })
            })
            .collect();
        let fork = git.run(["merge-base", &base, &head]).await?;
        let numstat = git.run(["diff", "--numstat", "-z", &fork, &head]).await?;
        let files = parse_numstat_z(&numstat);
        let mergeability = if self.is_ancestor(&head, &base).await? {
            Mergeability::UpToDate
        } else {
            match self.merge_trees(&base, &head).await? {
                TreeMerge::Clean(_) => Mergeability::Mergeable,
                TreeMerge::Conflict(files) => Mergeability::Conflict { files },
            }
        };
        Ok(BranchSummary {
            head,
            base,
            commits,
            files,
            mergeability,
        })
    }
}

/// A branch's changes against `main` as a patch, cut to a size a page can show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchDiff {
    #[serde(flatten)]
    pub summary: BranchSummary,
    /// `git diff` from where the branch left `main` to its head (what a merge would add).
    pub patch: String,
    /// The patch was longer than asked for and is cut at a line's end.
    pub truncated: bool,
}

impl Workspace {
    /// The branches of `worker`'s namespace (`<worker>/...`), the most recently committed
    /// first.
    pub async fn branches_of(&self, worker: &str) -> Result<Vec<String>> {
        agensh_domain::ids::validate_worker_id(worker)?;
        let out = self
            .git()
            .run([
                "for-each-ref",
                "--sort=-committerdate",
                "--format=%(refname:strip=2)",
                &format!("refs/heads/{worker}/"),
            ])
            .await?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// `branch` against `main`: the summary and the patch, at most `max_bytes` of it.
    pub async fn diff(&self, branch: &str, max_bytes: usize) -> Result<BranchDiff> {
        let summary = self.summary(branch).await?;
        let git = self.git();
        let fork = git
            .run(["merge-base", &summary.base, &summary.head])
            .await?;
        let mut patch = git
            .run(["diff", "--no-color", "--no-ext-diff", &fork, &summary.head])
            .await?;
        let truncated = patch.len() > max_bytes;
        if truncated {
            let mut end = max_bytes;
            while !patch.is_char_boundary(end) {
                end -= 1;
            }
            let end = patch[..end].rfind('\n').map_or(end, |i| i + 1);
            patch.truncate(end);
        }
        Ok(BranchDiff {
            summary,
            patch,
            truncated,
        })
    }
}

/// Parses `git diff --numstat -z` (renames give `added\tremoved\t\0old\0new\0`).
fn parse_numstat_z(s: &str) -> Vec<FileStat> {
    let mut out = Vec::new();
    let mut parts = s.split('\0');
    while let Some(entry) = parts.next() {
        if entry.is_empty() {
            continue;
        }
        let mut f = entry.splitn(3, '\t');
        let (Some(a), Some(r), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = if path.is_empty() {
            let _old = parts.next();
            parts.next().unwrap_or("").to_string()
        } else {
            path.to_string()
        };
        out.push(FileStat {
            path,
            added: a.parse().ok(),
            removed: r.parse().ok(),
        });
    }
    out
}

/// The merge train's counts (`/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Gate runs started.
    pub runs: u64,
    /// Rounds that searched inside a chain a run had failed on.
    pub searches: u64,
    /// Gated chains, and the merge commits they held.
    pub batches: u64,
    pub batched_merges: u64,
}

/// Removes a directory when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills a process group when dropped, unless it was taken out.
struct KillOnDrop(Option<agensh_process::group::ProcessGroup>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(group) = self.0.take() {
            group.kill();
        }
    }
}

/// The last lines of `output`, at most [`GATE_TAIL_LINES`] lines and [`GATE_TAIL_BYTES`].
pub(crate) fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines.len().saturating_sub(GATE_TAIL_LINES);
    let mut t = lines[start..].join("\n");
    if t.len() > GATE_TAIL_BYTES {
        let mut cut = t.len() - GATE_TAIL_BYTES;
        while !t.is_char_boundary(cut) {
            cut += 1;
        }
        t = t[cut..].to_string();
    }
    t
}

/// Most gate output kept in memory (the end of it).
const GATE_CAPTURE_BYTES: usize = 256 * 1024;

/// Runs `sh -c command` in `dir` in its own process group, without the hub's `AGENSH_*`
/// and `GIT_*` variables but with `env`. When the command ends or runs past `timeout`, the whole group
/// is killed, so nothing it started in the background lingers. Returns (exit code,
/// timed out, the end of its combined output).
pub(crate) async fn run_in_group(
    command: &str,
    dir: &Path,
    timeout: Duration,
    what: &str,
    env: &[(&str, &str)],
) -> Result<(Option<i32>, bool, String)> {
    use tokio::io::AsyncReadExt;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("AGENSH_") || k.starts_with("GIT_") {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(env.iter().copied());
    let mut gate = agensh_process::group::spawn(&mut cmd, agensh_process::Priority::Normal)
        .map_err(|e| Error::internal(format!("cannot start {what}: {e}")))?;
    // A caller that stops waiting (its task dropped) takes the whole group down with it.
    let mut group = KillOnDrop(Some(gate.group));
    let mut stdout = gate.child.stdout.take().expect("stdout is piped");
    let reader = tokio::spawn(async move {
        let mut kept: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        while let Ok(n) = stdout.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&chunk[..n]);
            if kept.len() > GATE_CAPTURE_BYTES {
                kept.drain(..kept.len() - GATE_CAPTURE_BYTES);
            }
        }
        kept
    });
    let waited = gate.wait_timeout(timeout).await;
    if let Some(g) = group.0.take() {
        g.kill();
    }
    // The group is dead, so the pipe closes; a process that left the group cannot hold
    // the answer for more than a moment.
    let output = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let mut text = String::from_utf8_lossy(&output).into_owned();
    match waited {
        Some(status) => {
            let status =
                status.map_err(|e| Error::internal(format!("{what} failed to run: {e}")))?;
            Ok((status.code(), false, text))
        }
        None => {
            text.push_str(&format!(
                "\n[agensh: {what} ran longer than {} s and was killed]",
                timeout.as_secs()
            ));
            Ok((None, true, text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_handles_binary_files_and_renames() {
        let s = "3\t1\tsrc/a.rs\0-\t-\tlogo.png\0\x30\t0\t\0old.txt\0new.txt\0";
        let f = parse_numstat_z(s);
        assert_eq!(f.len(), 3);
        assert_eq!(
            (f[0].path.as_str(), f[0].added, f[0].removed),
            ("src/a.rs", Some(3), Some(1))
        );
        assert_eq!((f[1].path.as_str(), f[1].added), ("logo.png", None));
        assert_eq!(f[2].path, "new.txt");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let out: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&out);
        assert!(t.starts_with("line 60"));
        assert!(t.ends_with("line 99"));
    }
}
