//! ProgramBench's results as people read them: `agensh eval`'s outcome of one submission
//! and table of a run directory, `agensh bench programbench`'s report and `bench report`'s
//! comparison. Pure functions to lines; the caller prints them.

use std::path::Path;

use crate::bench::{self, Report};
use crate::evaluate::Outcome;
use crate::run::{self, Comparison};
use crate::submissions::RunScores;
use crate::task::Task;

/// One submission's evaluation: compiled or not (with the tail of the error), each test
/// branch's counts and errors, warnings and the scores.
pub fn outcome(o: &Outcome, task: &Task) -> Vec<String> {
    let e = &o.evaluation;
    let s = &o.scores;
    let mut out = Vec::new();
    match (&e.executable_hash, &e.error_code) {
        (Some(h), _) => out.push(format!(
            "{}: compiled (executable sha256 {h})",
            o.instance_id
        )),
        (None, Some(code)) => {
            out.push(format!("{}: {code}", o.instance_id));
            if let Some(d) = e.error_details.as_deref().filter(|d| !d.is_empty()) {
                for line in tail(d, 20) {
                    out.push(format!("  | {line}"));
                }
            }
        }
        (None, None) => out.push(format!("{}: no active test branch", o.instance_id)),
    }
    for b in &e.test_branches {
        let mine: Vec<_> = e.test_results.iter().filter(|r| &r.branch == b).collect();
        let passed = mine.iter().filter(|r| r.passed()).count();
        let not_run = mine
            .iter()
            .filter(|r| r.status == agensh_domain::programbench::Status::NotRun)
            .count();
        let failed = mine.len() - passed - not_run;
        let expected = task.expected(b).map_or(0, |t| t.len());
        out.push(format!(
            "  branch {b}: {passed} passed, {failed} failed, {not_run} not run ({expected} expected)"
        ));
        for err in e.test_branch_errors.get(b).into_iter().flatten() {
            out.push(format!(
                "    {}: {}",
                err.error_code,
                err.error_details.lines().next().unwrap_or("")
            ));
        }
    }
    if let Some(code) = e
        .error_code
        .as_ref()
        .filter(|_| e.executable_hash.is_some())
    {
        out.push(format!(
            "  error: {code}: {}",
            e.error_details.as_deref().unwrap_or("")
        ));
    }
    for w in &e.warnings {
        out.push(format!("  warning: {w}"));
    }
    out.push(format!(
        "score: kept {:.4} ({}/{} tests passed), raw {:.4}, as `programbench eval` shows it {:.4} — in {:.1} s",
        s.kept, s.passed, s.tests, s.raw, s.eval, o.wall_time
    ));
    out
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// A run directory's evaluation: a line per task, then the headline.
pub fn scores(scores: &RunScores) -> Vec<String> {
    let (lines, headline, mean) = (&scores.instances, &scores.headline, scores.mean_attempted);
    let mut out = vec![format!(
        "{:<44}  {:>7}  {:>7}  {:>7}  {:>9}  NOTE",
        "TASK", "KEPT", "EVAL", "RAW", "TESTS"
    )];
    for l in lines {
        out.push(format!(
            "{:<44}  {:>7.4}  {:>7.4}  {:>7.4}  {:>9}  {}",
            l.instance_id,
            l.kept,
            l.eval,
            l.raw,
            format!("{}/{}", l.tests_passed, l.tests),
            l.error_code.as_deref().unwrap_or("")
        ));
    }
    out.push(format!(
        "headline over {} task(s), {} attempted: mean {:.4}, resolved {:.1}%, near-resolved {:.1}%; mean over the attempted {:.4}",
        headline.n_instances_total,
        headline.n_instances_attempted,
        headline.mean_score,
        headline.resolved_pct,
        headline.near_resolved_pct,
        mean
    ));
    out
}

/// A ProgramBench run's report: its setup, a line per checkpoint, the cost, and where the
/// report and the charts of the organization `org` are.
pub fn report(r: &Report, org: &Path) -> Vec<String> {
    let mut out = vec![
        format!(
            "{}: {} worker(s), {} h, {} ({} checkpoint(s))",
            r.setup.instance_id,
            r.setup.workers,
            r.setup.hours,
            r.setup.agent,
            r.checkpoints.len()
        ),
        "  CHECKPOINT  HOURS  COMMIT      KEPT    RAW     TESTS    MERGES  TOKENS".to_string(),
    ];
    for c in &r.checkpoints {
        let (kept, raw, tests) = match &c.score {
            Some(s) => (
                format!("{:.4}", s.kept),
                format!("{:.4}", s.raw),
                format!("{}/{}", s.tests_passed, s.tests),
            ),
            None => ("-".into(), "-".into(), "not scored".into()),
        };
        let note = c
            .score
            .as_ref()
            .and_then(|s| s.error_code.clone())
            .unwrap_or_default();
        out.push(format!(
            "  {:<10}  {:>5.2}  {:<10}  {kept:<6}  {raw:<6}  {tests:<7}  {:>6}  {:>6}  {note}",
            c.index,
            c.hours(),
            run::short(&c.commit),
            c.merges,
            c.tokens
        ));
    }
    if let Some(e) = &r.economy {
        out.push(format!("cost: {}", e.line()));
    }
    let b = bench::bench_dir(org);
    out.push(format!(
        "report: {}  chart: {} and {}",
        b.join(bench::REPORT).display(),
        b.join("chart.png").display(),
        b.join("chart.svg").display()
    ));
    out
}

/// `bench report`'s table: a line per run (final score, time to `threshold`, tokens,
/// cost), then where the chart is.
pub fn comparison(c: &Comparison, threshold: f64) -> Vec<String> {
    let mut out = vec![format!(
        "{:>5}  {:>5}  {:<28}  {:>11}  {:>9}  {:>16}  {:>12}  {:>9}",
        "N",
        "TASKS",
        "AGENT",
        "FINAL SCORE",
        "AT HOURS",
        format!("TIME TO {:.0}%", threshold * 100.0),
        "TOKENS",
        "COST USD"
    )];
    for l in &c.lines {
        out.push(format!(
            "{:>5}  {:>5}  {:<28}  {:>11}  {:>9}  {:>16}  {:>12}  {:>9.2}",
            l.workers,
            l.tasks.len(),
            agensh_domain::turn::clip(&l.agent, 28),
            l.final_score.map_or("-".into(), |s| format!("{s:.4}")),
            l.final_hours.map_or("-".into(), |h| format!("{h:.2}")),
            l.time_to_threshold
                .map_or("not reached".into(), |h| format!("{h:.2} h")),
            l.tokens,
            l.cost_usd
        ));
    }
    out.push(format!(
        "chart: {} and {}",
        c.png.display(),
        c.svg.display()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_a_text() {
        assert_eq!(tail("a\nb\nc", 2), ["b", "c"]);
        assert_eq!(tail("a", 5), ["a"]);
    }
}
