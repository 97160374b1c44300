//! Checkouts of a node on another host (`agensh_workspace::remote`) against a real hub's
//! git smart HTTP: cloned with no token in any URL, usable by the agent's own git, resumed
//! from the hub's work branch, and never more clones at once than the node's limit.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agensh_workspace::checkout::Created;
use agensh_workspace::git::{Git, NetworkJobs};
use agensh_workspace::remote::Remote;

/// The `git clone` processes of this machine whose arguments name `url`. A child git forks
/// shows its parent's arguments until it runs its own program, so a match whose parent
/// matches too is that parent's, not a clone of its own.
fn clones_running(url: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let matching: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            args.contains(&b"clone".as_slice()) && args.contains(&url.as_bytes())
        })
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // pid (comm) state ppid …: comm may hold spaces, so read after its last ')'.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    matching
        .iter()
        .filter(|(_, ppid)| !matching.iter().any(|(pid, _)| pid == ppid))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clones_at_once_never_run_more_git_than_the_limit() {
    const LIMIT: usize = 4;
    let org = support::start(64).await;
    let remote = Remote::new(
        &org.hub().url,
        org.tmp.path().join("node/.agensh/credentials"),
        NetworkJobs::new(LIMIT),
    );
    // Watches the machine's git processes while the clones run.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (done, peak, url) = (done.clone(), peak.clone(), remote.url.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(clones_running(&url), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut set = tokio::task::JoinSet::new();
    for (id, token) in org.workers.clone() {
        let (remote, dir) = (
            remote.clone(),
            org.tmp.path().join("node/workers").join(&id),
        );
        set.spawn(async move { (id.clone(), remote.create(&id, &token, &dir).await) });
    }
    let mut made = BTreeSet::new();
    while let Some(joined) = set.join_next().await {
        let (id, created) = joined.unwrap();
        assert_eq!(created.unwrap(), Created::New, "{id}");
        made.insert(id);
    }
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert_eq!(made.len(), 64);
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= LIMIT,
        "{peak} clones ran at once, the limit is {LIMIT}"
    );
    assert!(peak >= 2, "the clones did not run side by side ({peak})");
    for (id, _) in org.workers.iter().step_by(16) {
        let dir = org.tmp.path().join("node/workers").join(id);
        let g = Git::worktree(&dir);
        assert_eq!(
            g.run(["branch", "--show-current"]).await.unwrap(),
            format!("{id}/work")
        );
        assert!(dir.join("README.md").exists());
    }
}

/// Runs the agent's own git in `dir` as `id` (no global configuration), as an agent would.
async fn agent_git(dir: &Path, id: &str, args: &[&str]) -> String {
    Git::worktree(dir).as_worker(id).run(args).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_checkout_keeps_its_token_out_of_git_and_resumes_from_the_hub() {
    let org = support::start(2).await;
    let (id, token) = org.workers[0].clone();
    let node = org.tmp.path().join("node");
    let remote = Remote::new(
        &org.hub().url,
        node.join(".agensh/credentials"),
        NetworkJobs::new(2),
    );
    let dir = node.join("workers").join(&id);
    assert_eq!(
        remote.create(&id, &token, &dir).await.unwrap(),
        Created::New
    );

    // No token where `git remote -v` or the configuration shows it; the file is 0600.
    let remotes = agent_git(&dir, &id, &["remote", "-v"]).await;
    assert!(remotes.contains(&format!("{}/git/workspace.git", org.hub().url)));
    let config = std::fs::read_to_string(dir.join(".git/config")).unwrap();
    assert!(
        !remotes.contains(&token) && !config.contains(&token),
        "{config}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(remote.token_file(&id))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The agent's own git fetches and pushes with it; the push policy still holds.
    std::fs::write(dir.join("mine.txt"), "work\n").unwrap();
    agent_git(&dir, &id, &["add", "mine.txt"]).await;
    agent_git(&dir, &id, &["commit", "-q", "-m", "mine"]).await;
    agent_git(&dir, &id, &["push", "-q", "origin", &format!("{id}/work")]).await;
    agent_git(&dir, &id, &["fetch", "-q", "origin"]).await;
    let refused = Git::worktree(&dir)
        .as_worker(&id)
        .output(["push", "-q", "origin", "HEAD:refs/heads/w02/x"])
        .await
        .unwrap();
    assert!(!refused.success(), "pushed into another worker's namespace");
    let head = agent_git(&dir, &id, &["rev-parse", "HEAD"]).await;
    assert_eq!(
        org.ws
            .git()
            .resolve(&format!("refs/heads/{id}/work"))
            .await
            .unwrap(),
        Some(head.clone())
    );

    // Checkout gone: a new one resumes the worker's branch from the hub.
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        remote.create(&id, &token, &dir).await.unwrap(),
        Created::New
    );
    assert_eq!(agent_git(&dir, &id, &["rev-parse", "HEAD"]).await, head);
    assert!(dir.join("mine.txt").exists());
    // Existing: left as it is.
    std::fs::write(dir.join("unsaved.txt"), "x").unwrap();
    assert_eq!(
        remote.create(&id, &token, &dir).await.unwrap(),
        Created::Existing
    );
    assert!(dir.join("unsaved.txt").exists());

    // A token the hub does not take: a clear error, and no half checkout left.
    let other = node.join("workers/w02");
    let e = remote
        .create(
            "w02",
            "agw_0000000000000000000000000000000000000000",
            &other,
        )
        .await
        .unwrap_err();
    assert!(e.message.contains("cannot clone"), "{}", e.message);
    assert!(!e.message.contains("agw_0000"), "{}", e.message);
    assert!(!other.exists());
}
