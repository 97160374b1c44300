//! Merging in the bare repository with real git: disjoint changes, conflicts, gates,
//! and many merges racing for `main`.

use std::time::{Duration, Instant};

use agensh_testkit::Org;
use agensh_workspace::merge::{Gate, MergeOutcome, MergeRequest, Mergeability};
use agensh_workspace::Workspace;

/// A workspace seeded with `shared.txt`, without a hub.
async fn org() -> Org {
    Org::builder()
        .file("shared.txt", "one\ntwo\nthree\n")
        .no_hub()
        .start()
        .await
}

/// Commits `files` on `branch` in `worker`'s checkout and pushes it.
async fn push_branch(org: &Org, worker: &str, branch: &str, files: &[(&str, &str)]) {
    org.push_branch(worker, branch, files, &format!("change on {branch}"))
        .await;
}

fn request(branch: &str) -> MergeRequest {
    MergeRequest {
        branch: branch.into(),
        head: None,
        message: format!("Merge {branch}"),
        gate: None,
    }
}

#[tokio::test]
async fn a_branch_merges_into_main_with_a_merge_commit() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("a.txt", "a\n")]).await;
    let before = org.main().await;
    let MergeOutcome::Merged { commit, head, .. } =
        org.ws.merge(&request("w01/feature")).await.unwrap()
    else {
        panic!("not merged")
    };
    assert_eq!(org.main().await, commit);
    let parents = org
        .ws
        .git()
        .run(["rev-parse", &format!("{commit}^1"), &format!("{commit}^2")])
        .await
        .unwrap();
    assert_eq!(parents, format!("{before}\n{head}"));
    assert!(org.files_on_main().await.contains("a.txt"));
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn a_merged_branch_is_up_to_date() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("a.txt", "a\n")]).await;
    org.ws.merge(&request("w01/feature")).await.unwrap();
    let again = org.ws.merge(&request("w01/feature")).await.unwrap();
    assert!(matches!(again, MergeOutcome::UpToDate { .. }), "{again:?}");
}

#[tokio::test]
async fn two_branches_editing_the_same_lines_conflict_and_name_the_file() {
    let org = org().await;
    push_branch(
        &org,
        "w01",
        "w01/edit",
        &[("shared.txt", "one\nTWO by w01\nthree\n")],
    )
    .await;
    push_branch(
        &org,
        "w02",
        "w02/edit",
        &[("shared.txt", "one\nTWO by w02\nthree\n")],
    )
    .await;
    assert!(matches!(
        org.ws.merge(&request("w01/edit")).await.unwrap(),
        MergeOutcome::Merged { .. }
    ));
    let head = org.main().await;
    let second = org.ws.merge(&request("w02/edit")).await.unwrap();
    assert_eq!(
        second,
        MergeOutcome::Conflict {
            files: vec!["shared.txt".into()]
        }
    );
    assert_eq!(org.main().await, head, "main did not move");
    let summary = org.ws.summary("w02/edit").await.unwrap();
    assert_eq!(
        summary.mergeability,
        Mergeability::Conflict {
            files: vec!["shared.txt".into()]
        }
    );
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn an_unknown_branch_is_a_clear_not_found() {
    let org = org().await;
    let e = org.ws.merge(&request("w01/nothing")).await.unwrap_err();
    assert_eq!(e.code, "unknown_branch");
    assert!(e.message.contains("push it first"));
}

#[tokio::test]
async fn summary_lists_commits_and_changed_files() {
    let org = org().await;
    push_branch(
        &org,
        "w01",
        "w01/feature",
        &[("a.txt", "a\nb\n"), ("dir/b.txt", "b\n")],
    )
    .await;
    let s = org.ws.summary("w01/feature").await.unwrap();
    assert_eq!(s.commits.len(), 1);
    assert_eq!(s.commits[0].author, "w01");
    let files: Vec<(&str, Option<u64>)> =
        s.files.iter().map(|f| (f.path.as_str(), f.added)).collect();
    assert_eq!(files, vec![("a.txt", Some(2)), ("dir/b.txt", Some(1))]);
    assert_eq!(s.mergeability, Mergeability::Mergeable);
}

#[tokio::test]
async fn a_passing_gate_lets_main_move() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("ok.txt", "fine\n")]).await;
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: "test -f ok.txt && test -f shared.txt".into(),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    assert!(matches!(
        org.ws.merge(&req).await.unwrap(),
        MergeOutcome::Merged { .. }
    ));
}

#[tokio::test]
async fn a_failing_gate_refuses_the_merge_with_the_tail_of_its_output() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("bad.txt", "broken\n")]).await;
    let head = org.main().await;
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: "seq 1 100; echo 'test parser ... FAILED'; exit 3".into(),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    let MergeOutcome::GateFailed {
        exit,
        timed_out,
        output_tail,
    } = org.ws.merge(&req).await.unwrap()
    else {
        panic!("the gate did not refuse")
    };
    assert_eq!((exit, timed_out), (Some(3), false));
    assert!(
        output_tail.ends_with("test parser ... FAILED"),
        "{output_tail}"
    );
    assert!(!output_tail.contains("\n50\n"), "only the tail is kept");
    assert_eq!(org.main().await, head);
    let worktrees = org
        .ws
        .git()
        .run(["worktree", "list", "--porcelain"])
        .await
        .unwrap();
    assert_eq!(
        worktrees.matches("worktree ").count(),
        1,
        "the scratch worktree is removed: {worktrees}"
    );
}

#[tokio::test]
async fn a_gate_does_not_see_the_hubs_secrets_in_its_environment() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("x.txt", "x\n")]).await;
    std::env::set_var("AGENSH_TOKEN", "agw_secret_of_the_hub");
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: "env; exit 1".into(),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    let out = org.ws.merge(&req).await.unwrap();
    std::env::remove_var("AGENSH_TOKEN");
    let MergeOutcome::GateFailed { output_tail, .. } = out else {
        panic!("{out:?}")
    };
    assert!(
        output_tail.contains("PATH="),
        "the gate sees an ordinary environment"
    );
    assert!(!output_tail.contains("agw_secret_of_the_hub"));
}

#[tokio::test]
async fn a_gate_runs_on_a_merge_commit_whose_first_parent_is_main_before_the_merge() {
    let org = org().await;
    let before = org.main().await;
    push_branch(&org, "w01", "w01/feature", &[("x.txt", "x\n")]).await;
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: format!("test \"$(git rev-parse HEAD^1)\" = {before}"),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    let out = org.ws.merge(&req).await.unwrap();
    assert!(matches!(out, MergeOutcome::Merged { .. }), "{out:?}");
}

#[tokio::test]
async fn a_gate_can_refuse_a_change_to_protected_files_by_diffing_against_head_1() {
    let org = org().await;
    let protect = "git diff --quiet HEAD^1 HEAD -- shared.txt";
    push_branch(&org, "w01", "w01/other", &[("x.txt", "x\n")]).await;
    push_branch(&org, "w02", "w02/edit", &[("shared.txt", "edited\n")]).await;
    let gated = |branch: &str| {
        let mut req = request(branch);
        req.gate = Some(Gate {
            command: protect.into(),
            timeout: Duration::from_secs(30),
            batch: 32,
            jobs: 1,
        });
        req
    };
    let out = org.ws.merge(&gated("w01/other")).await.unwrap();
    assert!(matches!(out, MergeOutcome::Merged { .. }), "{out:?}");
    let out = org.ws.merge(&gated("w02/edit")).await.unwrap();
    assert!(
        matches!(out, MergeOutcome::GateFailed { exit: Some(1), .. }),
        "{out:?}"
    );
}

#[tokio::test]
async fn background_processes_of_a_passing_gate_do_not_outlive_it() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("x.txt", "x\n")]).await;
    let marker = org.dir().join("leftover-ran");
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: format!("(sleep 2; touch {}) & exit 0", marker.display()),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    let started = Instant::now();
    let out = org.ws.merge(&req).await.unwrap();
    assert!(matches!(out, MergeOutcome::Merged { .. }), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the merge did not wait for the leftover"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!marker.exists(), "the leftover was killed with the gate");
}

#[tokio::test]
async fn a_gate_that_runs_too_long_is_killed_with_its_children() {
    let org = org().await;
    push_branch(&org, "w01", "w01/feature", &[("x.txt", "x\n")]).await;
    let marker = org.dir().join("child-survived");
    let mut req = request("w01/feature");
    req.gate = Some(Gate {
        command: format!("(sleep 3; touch {}) & sleep 30", marker.display()),
        timeout: Duration::from_millis(500),
        batch: 32,
        jobs: 1,
    });
    let started = Instant::now();
    let out = org.ws.merge(&req).await.unwrap();
    assert!(
        matches!(
            out,
            MergeOutcome::GateFailed {
                timed_out: true,
                ..
            }
        ),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !marker.exists(),
        "the gate's background child was killed too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_disjoint_merges_racing_for_main_all_land() {
    let org = org().await;
    let mut branches = Vec::new();
    for i in 0..32 {
        let worker = format!("w{:02}", i + 1);
        let branch = format!("{worker}/part");
        push_branch(
            &org,
            &worker,
            &branch,
            &[(&format!("parts/{i}.txt"), "done\n")],
        )
        .await;
        branches.push(branch);
    }
    let mut merges = Vec::new();
    for b in &branches {
        let ws = org.ws.clone();
        let req = request(b);
        merges.push(tokio::spawn(async move { ws.merge(&req).await }));
    }
    let mut attempts = 0;
    for m in merges {
        match m.await.unwrap().unwrap() {
            MergeOutcome::Merged { attempts: a, .. } => attempts += a,
            other => panic!("not merged: {other:?}"),
        }
    }
    let files = org.files_on_main().await;
    for i in 0..32 {
        assert!(
            files.contains(&format!("parts/{i}.txt")),
            "part {i} missing from main"
        );
    }
    let merges_on_main = org
        .ws
        .git()
        .run(["rev-list", "--merges", "--count", "main"])
        .await
        .unwrap();
    assert_eq!(merges_on_main, "32");
    assert!(attempts >= 32);
    org.assert_fsck_clean().await;
}

/// Moves of `main` recorded in its reflog (the seed's first commit included).
async fn reflog_moves(ws: &Workspace) -> usize {
    let out = ws
        .git()
        .run(["reflog", "show", "--format=%H", "refs/heads/main"])
        .await
        .unwrap();
    out.lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_merges_at_once_all_land_with_fewer_moves_of_main_than_merges() {
    let org = org().await;
    let count = 48;
    let mut branches = Vec::new();
    for i in 0..count {
        let worker = format!("w{:02}", i + 1);
        let branch = format!("{worker}/part");
        push_branch(
            &org,
            &worker,
            &branch,
            &[(&format!("parts/{i}.txt"), "done\n")],
        )
        .await;
        branches.push(branch);
    }
    let moves_before = reflog_moves(&org.ws).await;
    let mut merges = Vec::new();
    for b in &branches {
        let ws = org.ws.clone();
        let req = request(b);
        merges.push(tokio::spawn(async move { ws.merge(&req).await }));
    }
    let mut commits = std::collections::HashSet::new();
    for (m, b) in merges.into_iter().zip(&branches) {
        match m.await.unwrap().unwrap() {
            MergeOutcome::Merged { commit, head, .. } => {
                let second = org
                    .ws
                    .git()
                    .run(["rev-parse", &format!("{commit}^2")])
                    .await
                    .unwrap();
                assert_eq!(second, head, "{b}'s merge commit merges its own head");
                commits.insert(commit);
            }
            other => panic!("{b} not merged: {other:?}"),
        }
    }
    assert_eq!(commits.len(), count, "each PR has its own merge commit");
    let files = org.files_on_main().await;
    for i in 0..count {
        assert!(
            files.contains(&format!("parts/{i}.txt")),
            "part {i} missing"
        );
    }
    let merges_on_main = org
        .ws
        .git()
        .run(["rev-list", "--merges", "--count", "main"])
        .await
        .unwrap();
    assert_eq!(merges_on_main, count.to_string());
    let moves = reflog_moves(&org.ws).await - moves_before;
    assert_eq!(moves as u64, org.ws.main_moves());
    assert!(
        moves < count,
        "{moves} moves of main for {count} merges: no batching"
    );
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn a_conflicting_merge_in_a_batch_fails_alone_with_its_files() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("a.txt", "a\n")]).await;
    push_branch(
        &org,
        "w02",
        "w02/edit",
        &[("shared.txt", "one\nTWO by w02\nthree\n")],
    )
    .await;
    push_branch(
        &org,
        "w03",
        "w03/edit",
        &[("shared.txt", "one\nTWO by w03\nthree\n")],
    )
    .await;
    push_branch(&org, "w04", "w04/b", &[("b.txt", "b\n")]).await;
    let before = org.main().await;
    let reqs: Vec<MergeRequest> = ["w01/a", "w02/edit", "w03/edit", "w04/b"]
        .into_iter()
        .map(request)
        .collect();
    let out = org.ws.merge_together(&reqs).await;
    let out: Vec<MergeOutcome> = out.into_iter().map(Result::unwrap).collect();
    assert!(matches!(out[0], MergeOutcome::Merged { .. }), "{out:?}");
    assert!(matches!(out[1], MergeOutcome::Merged { .. }), "{out:?}");
    assert_eq!(
        out[2],
        MergeOutcome::Conflict {
            files: vec!["shared.txt".into()]
        }
    );
    let MergeOutcome::Merged { commit: last, .. } = &out[3] else {
        panic!("{out:?}")
    };
    assert_eq!(&org.main().await, last, "main is the batch's last merge");
    assert_eq!(org.ws.main_moves(), 1, "one move of main for the batch");
    // History stays per merge: each merge commit's first parent is the previous one.
    let chain = org
        .ws
        .git()
        .run(["rev-list", "--first-parent", &format!("{before}..main")])
        .await
        .unwrap();
    assert_eq!(chain.lines().count(), 3);
    let files = org.files_on_main().await;
    assert!(files.contains("a.txt") && files.contains("b.txt"));
    let shared = org.ws.git().run(["show", "main:shared.txt"]).await.unwrap();
    assert_eq!(shared, "one\nTWO by w02\nthree");
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn a_branch_merged_earlier_in_the_same_batch_is_up_to_date() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("a.txt", "a\n")]).await;
    let out = org
        .ws
        .merge_together(&[request("w01/a"), request("w01/a")])
        .await;
    assert!(matches!(out[0], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    assert!(
        matches!(out[1], Ok(MergeOutcome::UpToDate { .. })),
        "{out:?}"
    );
}

#[tokio::test]
async fn an_unknown_branch_in_a_batch_fails_alone() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("a.txt", "a\n")]).await;
    let out = org
        .ws
        .merge_together(&[request("w01/nothing"), request("w01/a")])
        .await;
    assert_eq!(out[0].as_ref().unwrap_err().code, "unknown_branch");
    assert!(matches!(out[1], Ok(MergeOutcome::Merged { .. })), "{out:?}");
}

/// A `reference-transaction` hook that, the first time something moves `main`, refuses
/// that move and — once its locks are released — moves `main` itself to a commit adding
/// `outside.txt`: as if an admin's push won the race for `main`.
const OUTSIDE_MOVE_HOOK: &str = r#"#!/bin/sh
input=$(cat)
case "$input" in *" refs/heads/main"*) ;; *) exit 0 ;; esac
if [ "$1" = prepared ] && [ ! -e "$GIT_DIR/refused-once" ]; then
    touch "$GIT_DIR/refused-once"
    exit 1
fi
if [ "$1" = aborted ] && [ ! -e "$GIT_DIR/moved-outside" ]; then
    touch "$GIT_DIR/moved-outside"
    old=$(git rev-parse refs/heads/main)
    blob=$(echo outside | git hash-object -w --stdin)
    tree=$( (git ls-tree "$old"; printf '100644 blob %s\toutside.txt\n' "$blob") | git mktree)
    commit=$(git commit-tree "$tree" -p "$old" -m "pushed from outside the queue")
    git update-ref refs/heads/main "$commit" "$old"
fi
exit 0
"#;

#[tokio::test]
async fn a_batch_that_loses_main_to_an_outside_move_is_merged_again_on_the_new_main() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("a.txt", "a\n")]).await;
    push_branch(&org, "w02", "w02/b", &[("b.txt", "b\n")]).await;
    let hook = org.ws.git_dir().join("hooks/reference-transaction");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(&hook, OUTSIDE_MOVE_HOOK).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let out = org
        .ws
        .merge_together(&[request("w01/a"), request("w02/b")])
        .await;
    assert!(
        org.ws.git_dir().join("moved-outside").exists(),
        "the hook moved main"
    );
    let mut commits = Vec::new();
    for o in out {
        match o.unwrap() {
            MergeOutcome::Merged {
                commit, attempts, ..
            } => {
                assert_eq!(attempts, 2, "the batch was merged a second time");
                commits.push(commit);
            }
            other => panic!("not merged: {other:?}"),
        }
    }
    assert_eq!(org.main().await, commits[1]);
    let files = org.files_on_main().await;
    for f in ["outside.txt", "a.txt", "b.txt"] {
        assert!(files.contains(f), "{f} missing from main: {files:?}");
    }
    // The outside commit is kept under the batch, not overwritten.
    let outside = org
        .ws
        .git()
        .run(["log", "--format=%H", "--grep=pushed from outside", "main"])
        .await
        .unwrap();
    assert_eq!(outside.lines().count(), 1);
    let first = org
        .ws
        .git()
        .run(["rev-parse", &format!("{}^1", commits[0])])
        .await
        .unwrap();
    assert_eq!(first, outside, "the batch was redone on the moved main");
    assert_eq!(org.ws.main_moves(), 1);
    org.assert_fsck_clean().await;
}

/// A gated request for `branch`, its gate `command`.
fn gated(branch: &str, command: &str) -> MergeRequest {
    let mut req = request(branch);
    req.gate = Some(Gate {
        command: command.into(),
        timeout: Duration::from_secs(30),
        batch: 32,
        jobs: 1,
    });
    req
}

/// `n` branches `w01/part` … each adding `parts/<i>.txt`; the ones in `bad` add `bad-<i>.txt` too.
async fn parts(org: &Org, n: usize, bad: &[usize]) -> Vec<String> {
    let mut branches = Vec::new();
    for i in 0..n {
        let worker = format!("w{:02}", i + 1);
        let branch = format!("{worker}/part");
        let part = format!("parts/{i}.txt");
        let flaw = format!("bad-{i}.txt");
        let mut files = vec![(part.as_str(), "done\n")];
        if bad.contains(&i) {
            files.push((flaw.as_str(), "broken\n"));
        }
        push_branch(org, &worker, &branch, &files).await;
        branches.push(branch);
    }
    branches
}

/// Fails, naming them, when the tree has any `bad-*.txt`.
const NO_BAD_FILES: &str =
    "bad=$(ls bad-*.txt 2>/dev/null); if [ -n \"$bad\" ]; then echo \"found $bad\"; exit 1; fi";

/// Every commit `main` pointed to since `from` (first parents), replayed through `gate`:
/// the names of those it fails on.
async fn main_positions_failing(org: &Org, from: &str, gate: &str) -> Vec<String> {
    let chain = org
        .ws
        .git()
        .run(["rev-list", "--first-parent", &format!("{from}..main")])
        .await
        .unwrap();
    let mut failing = Vec::new();
    for commit in chain.lines() {
        let files = org
            .ws
            .git()
            .run(["ls-tree", "-r", "--name-only", commit])
            .await
            .unwrap();
        // The gate reads the tree only: replay it on the listing.
        assert_eq!(gate, NO_BAD_FILES);
        if files.lines().any(|f| f.starts_with("bad-")) {
            failing.push(commit.to_string());
        }
    }
    failing
}

/// The branches merged on `main`'s first-parent line since `from`, oldest first.
async fn merged_in_order(org: &Org, from: &str) -> Vec<String> {
    let subjects = org
        .ws
        .git()
        .run([
            "log",
            "--first-parent",
            "--reverse",
            "--format=%s",
            &format!("{from}..main"),
        ])
        .await
        .unwrap();
    subjects
        .lines()
        .filter_map(|l| l.strip_prefix("Merge ").map(str::to_string))
        .collect()
}

#[tokio::test]
async fn gated_merges_waiting_together_are_gated_once_as_a_batch_and_all_land() {
    let org = org().await;
    let before = org.main().await;
    let branches = parts(&org, 6, &[]).await;
    // Passes only when AGENSH_GATE_BASE is main before the batch (main has not moved yet
    // while the gate runs) and the tree holds all six parts.
    let gate = "test \"$AGENSH_GATE_BASE\" = \"$(git rev-parse refs/heads/main)\" && test $(ls parts | wc -l) = 6";
    let reqs: Vec<_> = branches.iter().map(|b| gated(b, gate)).collect();
    let out = org.ws.merge_together(&reqs).await;
    for o in &out {
        assert!(matches!(o, Ok(MergeOutcome::Merged { .. })), "{out:?}");
    }
    assert_eq!(org.ws.main_moves(), 1, "one move of main for the batch");
    let stats = org.ws.gate_stats();
    assert_eq!(
        (stats.runs, stats.searches),
        (1, 0),
        "one gate run, no search"
    );
    assert_eq!(
        (stats.batches, stats.batched_merges),
        (1, 6),
        "one chain of six"
    );
    // In order: each merge's first parent is the one before it.
    assert_eq!(merged_in_order(&org, &before).await, branches);
}

#[tokio::test]
async fn with_a_gate_batch_of_one_each_gated_merge_goes_alone_through_the_gate() {
    let org = org().await;
    let branches = parts(&org, 3, &[]).await;
    // Passes only on a merge commit made directly on main as it is now.
    let alone = "test \"$(git rev-parse HEAD^1)\" = \"$(git rev-parse refs/heads/main)\"";
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| {
            let mut r = gated(b, alone);
            r.gate.as_mut().unwrap().batch = 1;
            r
        })
        .collect();
    let out = org.ws.merge_together(&reqs).await;
    for o in &out {
        assert!(matches!(o, Ok(MergeOutcome::Merged { .. })), "{out:?}");
    }
    assert_eq!(org.ws.main_moves(), 3, "one move of main per gated merge");
    let stats = org.ws.gate_stats();
    assert_eq!((stats.runs, stats.searches, stats.batches), (3, 0, 3));
}

#[tokio::test]
async fn one_failing_merge_in_a_batch_of_eight_is_refused_alone_with_its_output_and_the_seven_land()
{
    let org = org().await;
    let before = org.main().await;
    let branches = parts(&org, 8, &[5]).await;
    let reqs: Vec<_> = branches.iter().map(|b| gated(b, NO_BAD_FILES)).collect();
    let out = org.ws.merge_together(&reqs).await;
    for (i, o) in out.iter().enumerate() {
        match (i, o) {
            (
                5,
                Ok(MergeOutcome::GateFailed {
                    exit, output_tail, ..
                }),
            ) => {
                assert_eq!(*exit, Some(1));
                assert_eq!(output_tail.trim(), "found bad-5.txt", "its own gate output");
            }
            (5, other) => panic!("the bad merge was not refused: {other:?}"),
            (_, Ok(MergeOutcome::Merged { .. })) => {}
            (i, other) => panic!("merge {i} did not land: {other:?}"),
        }
    }
    let files = org.files_on_main().await;
    assert_eq!(files.iter().filter(|f| f.starts_with("parts/")).count(), 7);
    assert!(main_positions_failing(&org, &before, NO_BAD_FILES)
        .await
        .is_empty());
    let stats = org.ws.gate_stats();
    let (runs, bisections) = (stats.runs, stats.searches);
    assert!(
        bisections >= 1 && runs < 8,
        "{runs} gate runs, {bisections} bisections"
    );
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn two_failing_merges_in_a_batch_are_both_found_and_the_rest_land() {
    let org = org().await;
    let before = org.main().await;
    let branches = parts(&org, 8, &[1, 6]).await;
    let reqs: Vec<_> = branches.iter().map(|b| gated(b, NO_BAD_FILES)).collect();
    let out = org.ws.merge_together(&reqs).await;
    for (i, o) in out.iter().enumerate() {
        let refused = matches!(o, Ok(MergeOutcome::GateFailed { .. }));
        assert_eq!(refused, [1, 6].contains(&i), "merge {i}: {o:?}");
        if !refused {
            assert!(
                matches!(o, Ok(MergeOutcome::Merged { .. })),
                "merge {i}: {o:?}"
            );
        }
    }
    assert!(main_positions_failing(&org, &before, NO_BAD_FILES)
        .await
        .is_empty());
    assert_eq!(
        org.files_on_main()
            .await
            .iter()
            .filter(|f| f.starts_with("parts/"))
            .count(),
        6
    );
}

#[tokio::test]
async fn a_conflicting_merge_in_a_gated_batch_is_refused_by_merge_tree_and_never_gated() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("shared.txt", "one\nTWO\nthree\n")]).await;
    push_branch(&org, "w02", "w02/b", &[("shared.txt", "one\n2\nthree\n")]).await;
    push_branch(&org, "w03", "w03/c", &[("c.txt", "c\n")]).await;
    // The gate would refuse w02's change, were it ever gated.
    let gate = "! grep -qx 2 shared.txt";
    let reqs: Vec<_> = ["w01/a", "w02/b", "w03/c"]
        .iter()
        .map(|b| gated(b, gate))
        .collect();
    let out = org.ws.merge_together(&reqs).await;
    assert!(matches!(out[0], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    assert!(
        matches!(&out[1], Ok(MergeOutcome::Conflict { files }) if files == &["shared.txt"]),
        "{out:?}"
    );
    assert!(matches!(out[2], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    let stats = org.ws.gate_stats();
    assert_eq!((stats.runs, stats.searches), (1, 0));
}

#[tokio::test]
async fn a_protected_path_changed_early_in_a_batch_is_caught_through_agensh_gate_base() {
    let org = org().await;
    push_branch(&org, "w01", "w01/edit", &[("shared.txt", "edited\n")]).await;
    push_branch(&org, "w02", "w02/other", &[("x.txt", "x\n")]).await;
    // Against HEAD^1 the batch's last commit (w02's) would not show w01's edit.
    let protect = "git diff --quiet \"$AGENSH_GATE_BASE\" HEAD -- shared.txt";
    let reqs = [gated("w01/edit", protect), gated("w02/other", protect)];
    let out = org.ws.merge_together(&reqs).await;
    assert!(
        matches!(out[0], Ok(MergeOutcome::GateFailed { exit: Some(1), .. })),
        "{out:?}"
    );
    assert!(matches!(out[1], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    assert!(org.files_on_main().await.contains("x.txt"));
    let shared = org.ws.git().run(["show", "main:shared.txt"]).await.unwrap();
    assert_eq!(shared, "one\ntwo\nthree", "the protected file is unchanged");
}

#[tokio::test]
async fn main_moved_by_someone_else_during_a_batchs_gate_redoes_the_batch_on_the_new_main() {
    let org = org().await;
    push_branch(&org, "w01", "w01/a", &[("a.txt", "a\n")]).await;
    push_branch(&org, "w02", "w02/b", &[("b.txt", "b\n")]).await;
    push_branch(&org, "w03", "w03/outside", &[("o.txt", "o\n")]).await;
    let outside = org.ws.branch_head("w03/outside").await.unwrap();
    // The first gate run moves main itself, as an admin's push would meanwhile.
    let flag = org.dir().join("moved-once");
    let gate = format!(
        "if [ ! -e {flag} ]; then touch {flag}; git update-ref refs/heads/main {outside}; fi",
        flag = flag.display()
    );
    let reqs = [gated("w01/a", &gate), gated("w02/b", &gate)];
    let out = org.ws.merge_together(&reqs).await;
    for o in &out {
        assert!(matches!(o, Ok(MergeOutcome::Merged { .. })), "{out:?}");
    }
    assert_eq!(
        org.ws.gate_stats().runs,
        2,
        "the batch was gated again on the new main"
    );
    let files = org.files_on_main().await;
    for f in ["a.txt", "b.txt", "o.txt"] {
        assert!(files.contains(f), "{f} missing: {files:?}");
    }
}

/// `gated` with `jobs` gate runs at once and chains of at most `batch`.
fn gated_jobs(branch: &str, command: &str, batch: usize, jobs: usize) -> MergeRequest {
    let mut req = gated(branch, command);
    let gate = req.gate.as_mut().expect("gated");
    (gate.batch, gate.jobs) = (batch, jobs);
    req
}

/// Checks that merge `i` of `out` was refused by the gate exactly when `bad` holds it, with
/// its own output, and merged otherwise.
fn assert_refused_alone(out: &[agensh_domain::Result<MergeOutcome>], bad: &[usize]) {
    for (i, o) in out.iter().enumerate() {
        match o {
            Ok(MergeOutcome::GateFailed { output_tail, .. }) if bad.contains(&i) => {
                assert_eq!(
                    output_tail.trim(),
                    format!("found bad-{i}.txt"),
                    "merge {i}: its own output"
                );
            }
            Ok(MergeOutcome::Merged { .. }) if !bad.contains(&i) => {}
            other => panic!("merge {i}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn parallel_gate_runs_find_a_failing_merge_among_sixteen_in_two_rounds() {
    let org = org().await;
    let before = org.main().await;
    let branches = parts(&org, 16, &[10]).await;
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| gated_jobs(b, NO_BAD_FILES, 32, 4))
        .collect();
    let out = org.ws.merge_together(&reqs).await;
    assert_refused_alone(&out, &[10]);
    assert!(main_positions_failing(&org, &before, NO_BAD_FILES)
        .await
        .is_empty());
    let stats = org.ws.gate_stats();
    // Round 1: prefixes 4, 8, 12, 16 (12 and 16 fail, 8 lands); round 2 inside 9..12:
    // prefixes 1, 2, 3 of what is left (the third fails: merge 10); then the five after it
    // are folded again and land in one run. Stopped runs count as started.
    assert_eq!(stats.searches, 1, "{stats:?}");
    assert!(stats.runs <= 4 + 3 + 4, "{stats:?}");
    assert_eq!(
        org.files_on_main()
            .await
            .iter()
            .filter(|f| f.starts_with("parts/"))
            .count(),
        15
    );
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn parallel_gate_runs_find_every_failing_merge_and_keep_the_order() {
    let org = org().await;
    let before = org.main().await;
    let bad = [0, 3, 4, 11];
    let branches = parts(&org, 12, &bad).await;
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| gated_jobs(b, NO_BAD_FILES, 5, 3))
        .collect();
    let out = org.ws.merge_together(&reqs).await;
    assert_refused_alone(&out, &bad);
    assert!(main_positions_failing(&org, &before, NO_BAD_FILES)
        .await
        .is_empty());
    // The merges landed in the order they were asked for.
    let merged = merged_in_order(&org, &before).await;
    let expected: Vec<String> = branches
        .iter()
        .enumerate()
        .filter(|(i, _)| !bad.contains(i))
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(merged, expected);
    org.assert_fsck_clean().await;
}

#[tokio::test]
async fn gate_runs_made_useless_by_a_longer_passing_prefix_are_stopped_with_their_processes() {
    let org = org().await;
    let branches = parts(&org, 4, &[]).await;
    // The whole chain passes at once; a shorter prefix starts a child that would leave a
    // mark after 3 s, and waits 60 s.
    let marks = org.dir().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let gate = format!(
        "if [ $(ls parts | wc -l) -lt 4 ]; then (sleep 3; touch {m}/$$) & sleep 60; fi",
        m = marks.display()
    );
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| gated_jobs(b, &gate, 32, 4))
        .collect();
    let started = Instant::now();
    let out = org.ws.merge_together(&reqs).await;
    for o in &out {
        assert!(matches!(o, Ok(MergeOutcome::Merged { .. })), "{out:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the chain waited for runs whose answer did not matter"
    );
    assert_eq!(org.ws.gate_stats().runs, 4, "four prefixes at once");
    assert_eq!(org.ws.main_moves(), 1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let left: Vec<_> = std::fs::read_dir(&marks).unwrap().collect();
    assert!(left.is_empty(), "a stopped run's child lived on: {left:?}");
    let worktrees = org
        .ws
        .git()
        .run(["worktree", "list", "--porcelain"])
        .await
        .unwrap();
    for path in worktrees
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .skip(1)
    {
        assert!(
            !std::path::Path::new(path).exists(),
            "a stopped run's scratch worktree is left: {path}"
        );
    }
}

#[tokio::test]
async fn a_gate_that_hangs_on_one_merge_is_cut_at_its_timeout_and_refuses_that_merge_alone() {
    let org = org().await;
    let branches = parts(&org, 3, &[]).await;
    // Hangs on any tree holding the second part.
    let gate = "if [ -f parts/1.txt ]; then sleep 60; fi";
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| {
            let mut r = gated_jobs(b, gate, 32, 3);
            r.gate.as_mut().unwrap().timeout = Duration::from_secs(1);
            r
        })
        .collect();
    let started = Instant::now();
    let out = org.ws.merge_together(&reqs).await;
    assert!(matches!(out[0], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    assert!(
        matches!(
            out[1],
            Ok(MergeOutcome::GateFailed {
                timed_out: true,
                ..
            })
        ),
        "{out:?}"
    );
    assert!(matches!(out[2], Ok(MergeOutcome::Merged { .. })), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "runs were cut at 1 s"
    );
    let files = org.files_on_main().await;
    assert!(files.contains("parts/2.txt") && !files.contains("parts/1.txt"));
}

#[tokio::test]
async fn the_queue_shows_each_waiting_merge_its_place_batch_and_gate_run() {
    let org = org().await;
    let branches = parts(&org, 3, &[]).await;
    let hold = org.dir().join("hold");
    std::fs::write(&hold, "").unwrap();
    // Every run waits until the test removes the file.
    let gate = format!("while [ -e {} ]; do sleep 0.05; done", hold.display());
    let reqs: Vec<_> = branches
        .iter()
        .map(|b| gated_jobs(b, &gate, 2, 1))
        .collect();
    let ws = org.ws.clone();
    let merging = tokio::spawn(async move { ws.merge_together(&reqs).await });
    let deadline = Instant::now() + Duration::from_secs(20);
    let queue = loop {
        let q = org.ws.merge_queue();
        if q.iter().any(|m| m.gate_run.is_some()) {
            break q;
        }
        assert!(Instant::now() < deadline, "no gate run shown: {q:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let places: Vec<(&str, usize, Option<u64>, Option<u64>)> = queue
        .iter()
        .map(|m| (m.branch.as_str(), m.place, m.batch, m.gate_run))
        .collect();
    assert_eq!(
        places,
        vec![
            (branches[0].as_str(), 1, Some(1), Some(1)),
            (branches[1].as_str(), 2, Some(1), Some(1)),
            (branches[2].as_str(), 3, None, None),
        ]
    );
    std::fs::remove_file(&hold).unwrap();
    for o in merging.await.unwrap() {
        assert!(matches!(o, Ok(MergeOutcome::Merged { .. })), "{o:?}");
    }
    assert!(org.ws.merge_queue().is_empty());
}

#[tokio::test]
async fn a_check_runs_on_mains_tree_and_passes_by_its_exit_code() {
    let org = org().await;
    let main = org.ws.main_commit().await.unwrap();
    let limit = Duration::from_secs(30);
    let passed = org
        .ws
        .check(&main, "grep -q two shared.txt && echo found", limit)
        .await
        .unwrap();
    assert!(passed.passed(), "{passed:?}");
    assert!(passed.output_tail.contains("found"), "{passed:?}");
    let failed = org
        .ws
        .check(&main, "test -f missing.txt", limit)
        .await
        .unwrap();
    assert!(!failed.passed());
    assert_eq!(failed.exit, Some(1));
}

#[tokio::test]
async fn a_check_that_hangs_is_killed_at_its_timeout_with_what_it_started() {
    let org = org().await;
    let main = org.ws.main_commit().await.unwrap();
    let started = Instant::now();
    let run = org
        .ws
        .check(&main, "sleep 300 & sleep 300", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(run.timed_out && !run.passed(), "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_check_can_never_move_main() {
    let org = org().await;
    let before = org.ws.main_commit().await.unwrap();
    // Everything a command could try with the git it finds in its checkout.
    let hostile = "git -c user.name=x -c user.email=x@x commit -q --allow-empty -m moved; \
                   git push -q origin HEAD:refs/heads/main; \
                   git push -q \"$(git config remote.origin.url)\" HEAD:refs/heads/main; \
                   git update-ref refs/heads/main HEAD; git branch -f main HEAD; exit 0";
    let run = org
        .ws
        .check(&before, hostile, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(run.passed(), "{run:?}");
    assert_eq!(org.ws.main_commit().await.unwrap(), before, "main moved");
}
