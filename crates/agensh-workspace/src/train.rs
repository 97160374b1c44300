//! The merge train: gated merges folded onto `main` in a chain and gated in parallel.
//!
//! The merges waiting for the same gate are folded onto `main` one after another, each its
//! own merge commit (a conflicting one left out alone), up to `merge.gate_batch` of them:
//! the chain. Then up to `merge.gate_jobs` gates run at once, each on a *prefix* of the
//! chain (its k-th merge commit, which holds the first k merges) in a scratch worktree of
//! its own, with `AGENSH_GATE_BASE` set to `main` before the chain. `main` moves, by
//! compare-and-swap, to the longest prefix that passed; the shortest prefix that failed
//! narrows the search to the merges between the two, probed again in parallel, until the
//! failing merge is the first one left: it is refused alone, with its own gate output (the
//! run on `main` plus it), and what came after it is folded again without it.
//!
//! With one job that is bisection; with `jobs` probes a failing merge among `n` is found in
//! about `log(n) / log(jobs + 1)` rounds, and a passing chain lands in one. A probe made
//! useless by another's answer (below a longer prefix that passed, above a shorter one that
//! failed) is stopped at once with its whole process group. `main` only ever points at a
//! commit some gate run passed on: the invariant.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use agensh_domain::Result;

use crate::merge::{answer_all, contended, Gate, MergeOutcome, Waiting, MAX_ATTEMPTS};
use crate::Workspace;

/// The prefixes (lengths, ascending) to probe in a chain of `window` merges with `jobs`
/// gates at once: spread evenly, the whole window included unless it is already known to
/// fail (`end_fails`), then only the lengths below it.
pub(crate) fn probe_points(window: usize, end_fails: bool, jobs: usize) -> Vec<usize> {
    let jobs = jobs.max(1);
    if end_fails {
        let j = jobs.min(window.saturating_sub(1));
        (1..=j).map(|i| i * window / (j + 1)).collect()
    } else {
        let j = jobs.min(window);
        (1..=j).map(|i| (i * window).div_ceil(j)).collect()
    }
}

/// What became of one chain.
enum ChainEnd {
    /// Every merge of the chain was answered but these, which go again (folded anew).
    Decided(Vec<Waiting>),
    /// `main` moved outside the queue under the chain: these go again, nothing else lost.
    Raced(Vec<Waiting>),
}

/// One merge of a chain: the waiting caller and its outcome when folded onto the chain.
type Link = (Waiting, Result<MergeOutcome>);

impl Workspace {
    /// Merges `list` (all waiting for `gate`, in order) as chains of at most `gate.batch`
    /// merges, refilled from the front of the list as merges are decided. Answers every
    /// caller.
    pub(crate) async fn merge_gated(&self, list: Vec<Waiting>, gate: &Gate) {
        let mut rest: VecDeque<Waiting> = list.into();
        let mut attempt = 1u32;
        // Forget the scratch worktrees of runs that were stopped (their directories are gone).
        {
            let _one = self.queue().worktrees.lock().await;
            let _ = self.git().output(["worktree", "prune"]).await;
        }
        loop {
            rest.retain(|w| !w.answer.is_closed());
            if rest.is_empty() {
                return;
            }
            let n = rest.len().min(gate.batch.max(1));
            let chain: Vec<Waiting> = rest.drain(..n).collect();
            let (again, raced) = match self.gate_chain(chain, gate, attempt, &rest).await {
                ChainEnd::Decided(again) => (again, false),
                ChainEnd::Raced(again) => (again, true),
            };
            if raced {
                attempt += 1;
                if attempt > MAX_ATTEMPTS {
                    answer_all(again, |_| Err(contended()));
                    attempt = 1;
                    continue;
                }
                tracing::debug!(
                    attempt,
                    "main moved outside the merge queue under a gated chain; folding it again"
                );
                let jitter = (u64::from(attempt) * 7 + again.len() as u64) % 13;
                tokio::time::sleep(std::time::Duration::from_millis(1 + jitter)).await;
            } else {
                attempt = 1;
            }
            for w in again.into_iter().rev() {
                rest.push_front(w);
            }
        }
    }

    /// Folds `chain` onto `main` and gates it, round after round, until each of its merges
    /// is answered or goes again ([`ChainEnd`]). `behind` is what waits after the chain (only
    /// shown in the queue's view, which is brought up to date before callers are answered).
    async fn gate_chain(
        &self,
        chain: Vec<Waiting>,
        gate: &Gate,
        attempt: u32,
        behind: &VecDeque<Waiting>,
    ) -> ChainEnd {
        let q = self.queue();
        let (mut base, _tip, outcomes) = match self.fold_all(&chain, attempt).await {
            Ok(folded) => folded,
            Err(e) => {
                answer_all(chain, |_| Err(e.clone()));
                return ChainEnd::Decided(Vec::new());
            }
        };
        let batch = q.batches.fetch_add(1, Ordering::Relaxed) + 1;
        let mut links: VecDeque<Link> = chain.into_iter().zip(outcomes).collect();
        q.batched_merges
            .fetch_add(merged_count(&links) as u64, Ordering::Relaxed);
        // Shows what is left of the chain, then answers `done`.
        let settle = |links: &VecDeque<Link>, runs: &[(u64, usize)], done: Vec<Link>| {
            q.show(&links_waiting(links), batch, runs, behind);
            for (w, outcome) in done {
                let _ = w.answer.send(outcome);
            }
        };
        // The shortest prefix known to fail, counted in merge commits from the front of
        // `links`, with that run's outcome.
        let mut known_fail: Option<(usize, MergeOutcome)> = None;
        loop {
            let done = take_leading_unmerged(&mut links);
            settle(&links, &[], done);
            let commits: Vec<String> = links
                .iter()
                .filter_map(|(_, o)| match o {
                    Ok(MergeOutcome::Merged { commit, .. }) => Some(commit.clone()),
                    _ => None,
                })
                .collect();
            if commits.is_empty() {
                return ChainEnd::Decided(Vec::new());
            }
            if let Some((1, failed)) = &known_fail {
                // The first merge left is the one that fails: refused alone with its own
                // run's output; what came after it is folded again without it.
                let (w, _) = links.pop_front().expect("a merge commit is left");
                let again: Vec<Waiting> = links.into_iter().map(|(w, _)| w).collect();
                q.show(&[], batch, &[], behind);
                let _ = w.answer.send(Ok(failed.clone()));
                return ChainEnd::Decided(again);
            }
            let window = known_fail.as_ref().map_or(commits.len(), |(k, _)| *k);
            if known_fail.is_some() {
                q.bisections.fetch_add(1, Ordering::Relaxed);
            }
            let probes = probe_points(window, known_fail.is_some(), gate.jobs);
            let first = q
                .gate_runs
                .fetch_add(probes.len() as u64, Ordering::Relaxed)
                + 1;
            let runs: Vec<(u64, usize)> = (first..).zip(probes.iter().copied()).collect();
            settle(&links, &runs, Vec::new());
            let (passed, failed) = match self.probe(gate, &commits, &probes, &base).await {
                Ok(r) => r,
                Err(e) => {
                    q.show(&[], batch, &[], behind);
                    answer_all(links.into_iter().map(|(w, _)| w).collect(), |_| {
                        Err(e.clone())
                    });
                    return ChainEnd::Decided(Vec::new());
                }
            };
            if passed > 0 {
                let tip = &commits[passed - 1];
                match self.move_main_by(tip, &base, passed).await {
                    Ok(true) => {}
                    Ok(false) => {
                        q.show(&[], batch, &[], behind);
                        return ChainEnd::Raced(links.into_iter().map(|(w, _)| w).collect());
                    }
                    Err(e) => {
                        q.show(&[], batch, &[], behind);
                        answer_all(links.into_iter().map(|(w, _)| w).collect(), |_| {
                            Err(e.clone())
                        });
                        return ChainEnd::Decided(Vec::new());
                    }
                }
                let mut landed = Vec::new();
                while landed
                    .iter()
                    .filter(|(_, o): &&Link| matches!(o, Ok(MergeOutcome::Merged { .. })))
                    .count()
                    < passed
                {
                    landed.push(links.pop_front().expect("the landed merges are here"));
                }
                settle(&links, &[], landed);
                base = tip.clone();
                self.extend_commit_graph(&base).await;
            }
            known_fail = match (failed, known_fail) {
                (Some(f), _) => Some((f.0 - passed, f.1)),
                (None, Some((k, out))) => Some((k - passed, out)),
                (None, None) => None,
            };
        }
    }

    /// Runs the gate on the prefixes `probes` of `commits` at once; returns the longest
    /// prefix that passed (0: none) and the shortest above it that failed, with its outcome.
    /// A run whose answer can no longer matter is stopped.
    async fn probe(
        &self,
        gate: &Gate,
        commits: &[String],
        probes: &[usize],
        base: &str,
    ) -> Result<(usize, Option<(usize, MergeOutcome)>)> {
        let mut runs = tokio::task::JoinSet::new();
        let mut handles = Vec::with_capacity(probes.len());
        for &k in probes {
            let (ws, gate, commit, base) = (
                self.clone(),
                gate.clone(),
                commits[k - 1].clone(),
                base.to_string(),
            );
            let handle = runs.spawn(async move { (k, ws.run_gate(&gate, &commit, &base).await) });
            handles.push((k, handle));
        }
        let mut passed = 0usize;
        let mut failed: Option<(usize, MergeOutcome)> = None;
        while let Some(joined) = runs.join_next().await {
            let Ok((k, result)) = joined else { continue };
            match result? {
                None if k > passed => {
                    passed = k;
                    // Shorter prefixes can only tell what this one did.
                    handles
                        .iter()
                        .filter(|(p, _)| *p < k)
                        .for_each(|(_, h)| h.abort());
                }
                Some(outcome) if failed.as_ref().is_none_or(|(f, _)| k < *f) => {
                    failed = Some((k, outcome));
                    // Longer prefixes hold the failing merge too.
                    handles
                        .iter()
                        .filter(|(p, _)| *p > k)
                        .for_each(|(_, h)| h.abort());
                }
                _ => {}
            }
        }
        Ok((passed, failed.filter(|(k, _)| *k > passed)))
    }
}

fn merged_count(links: &VecDeque<Link>) -> usize {
    links
        .iter()
        .filter(|(_, o)| matches!(o, Ok(MergeOutcome::Merged { .. })))
        .count()
}

/// Takes the merges at the front of the chain that made no merge commit (a conflict, up to
/// date, an error): each was folded onto what is now `main`, so its answer is final.
fn take_leading_unmerged(links: &mut VecDeque<Link>) -> Vec<Link> {
    let mut done = Vec::new();
    while links
        .front()
        .is_some_and(|(_, o)| !matches!(o, Ok(MergeOutcome::Merged { .. })))
    {
        done.push(links.pop_front().expect("checked above"));
    }
    done
}

/// The chain's merges still waiting (branch, head), with how many merge commits precede
/// each plus one (its prefix length), for the queue's view.
fn links_waiting(links: &VecDeque<Link>) -> Vec<(String, String, usize)> {
    let mut k = 0;
    links
        .iter()
        .map(|(w, o)| {
            k += usize::from(matches!(o, Ok(MergeOutcome::Merged { .. })));
            (w.req.branch.clone(), w.head.clone(), k.max(1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::probe_points;

    #[test]
    fn one_job_gates_the_whole_chain_then_bisects() {
        assert_eq!(probe_points(32, false, 1), vec![32]);
        assert_eq!(probe_points(32, true, 1), vec![16]);
        assert_eq!(probe_points(2, true, 1), vec![1]);
    }

    #[test]
    fn several_jobs_spread_their_probes_and_end_on_the_chain() {
        assert_eq!(
            probe_points(32, false, 8),
            vec![4, 8, 12, 16, 20, 24, 28, 32]
        );
        assert_eq!(probe_points(4, true, 8), vec![1, 2, 3]);
        assert_eq!(probe_points(5, true, 2), vec![1, 3]);
        assert_eq!(probe_points(3, false, 8), vec![1, 2, 3]);
        assert_eq!(probe_points(1, false, 4), vec![1]);
    }

    #[test]
    fn probes_are_distinct_ascending_and_inside_the_window() {
        for window in 1..70 {
            for jobs in 1..40 {
                for end_fails in [false, true] {
                    if end_fails && window < 2 {
                        continue;
                    }
                    let p = probe_points(window, end_fails, jobs);
                    assert!(!p.is_empty(), "{window} {jobs} {end_fails}");
                    assert!(p.windows(2).all(|w| w[0] < w[1]), "{p:?}");
                    assert!(p[0] >= 1);
                    let top = if end_fails { window - 1 } else { window };
                    assert!(*p.last().unwrap() <= top, "{p:?}");
                    if !end_fails {
                        assert_eq!(*p.last().unwrap(), window);
                    }
                    assert!(p.len() <= jobs);
                }
            }
        }
    }
}
