//! The push policy, enforced by a `pre-receive` hook in the bare repository.
//!
//! The hook is plain POSIX sh so that any push reaches it — over the hub's smart HTTP or
//! straight into the bare repository by path — without an agensh binary on the machine.
//!
//! Who pushes: `$AGENSH_PUSHER` when set (the hub sets it to the authenticated id for
//! pushes over HTTP). Otherwise the hook walks up its process ancestry and takes the first
//! ancestor whose working directory lies inside `<org>/workers/<id>/` (a worker pushing
//! from its own checkout); `<org>` is two levels above the bare repository. When neither
//! names anyone, the push is refused with advice.
//!
//! What they may push: `admin` anything; a worker only creates, moves or deletes branches
//! under `refs/heads/<id>/`. `main` moves only through the hub's merge of a pull request.
//!
//! How much: when `$AGENSH_NAMESPACE_BYTES` is set (the hub sets `limits.namespace_bytes`
//! for a worker's push), the objects the worker's branches would hold beyond `main` after
//! the push — counted on disk by `git rev-list --disk-usage`, the push's own pack included
//! — must fit in it, so no worker can fill the disk through its own branches.
//!
//! This is a policy for cooperating agents, not a security boundary against a local user:
//! anyone who can write the bare repository's files can move its refs without a push.

use std::path::Path;

use agensh_domain::{Error, Result};

use crate::Workspace;

/// The hook's file name inside `hooks/`.
pub const PRE_RECEIVE: &str = "pre-receive";

/// The `pre-receive` hook: the whole push policy.
pub const PRE_RECEIVE_SCRIPT: &str = r#"#!/bin/sh
# agensh push policy (written by the hub; changes here are overwritten when it starts).
# A worker may push only branches refs/heads/<id>/<name>; main moves only through a
# pull request merged by the hub; admin may push anything.

say() {
	printf 'agensh: %s\n' "$*" >&2
}

git_dir=${GIT_DIR:-.}
org=$(cd "$git_dir/../.." 2>/dev/null && pwd -P) || org=
workers="$org/workers"

is_worker_id() {
	case $1 in
	w | w*[!0-9]*) return 1 ;;
	w*) [ ${#1} -le 12 ] ;;
	*) return 1 ;;
	esac
}

# The worker whose checkout (<org>/workers/<id>/) an ancestor process works in.
infer_pusher() {
	[ -n "$org" ] && [ -d /proc ] || return 1
	pid=$$
	depth=0
	while [ -n "$pid" ] && [ "$pid" -gt 1 ] && [ "$depth" -lt 64 ]; do
		cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || cwd=
		case $cwd/ in
		"$workers"/?*)
			id=${cwd#"$workers"/}
			id=${id%%/*}
			if is_worker_id "$id"; then
				printf '%s\n' "$id"
				return 0
			fi
			;;
		esac
		ppid=
		if [ -r "/proc/$pid/status" ]; then
			while read -r key value; do
				if [ "$key" = "PPid:" ]; then
					ppid=$value
					break
				fi
			done <"/proc/$pid/status"
		fi
		pid=$ppid
		depth=$((depth + 1))
	done
	return 1
}

if [ -n "${AGENSH_PUSHER:-}" ]; then
	pusher=$AGENSH_PUSHER
	if [ "$pusher" != admin ] && ! is_worker_id "$pusher"; then
		say "AGENSH_PUSHER=\"$pusher\" is not a worker id (like w01) or admin — push refused"
		exit 1
	fi
else
	pusher=$(infer_pusher) || pusher=
fi

if [ -z "$pusher" ]; then
	say "push refused: cannot tell which worker is pushing."
	say "Push over HTTP with your worker id and token (http://<id>:<token>@<hub>/git/workspace.git),"
	say "or from your checkout under ${org:-DIR}/workers/<id>/, or set AGENSH_PUSHER=<id>."
	exit 1
fi

if [ "$pusher" = admin ]; then
	cat >/dev/null
	exit 0
fi

refused=0
updated=
tips=
while read -r old new ref; do
	case $ref in
	refs/heads/"$pusher"/?*)
		updated="$updated $ref"
		case $new in
		*[!0]*) tips="$tips $new" ;;
		esac
		;;
	refs/heads/main)
		say "$pusher may not push main ($ref): main moves only through a pull request."
		say "Push to refs/heads/$pusher/<name> and run: agensh pr open $pusher/<name> --title ..."
		refused=1
		;;
	*)
		say "$pusher may not push $ref: workers push only their own branches, refs/heads/$pusher/<name>"
		say "(e.g. git push origin HEAD:refs/heads/$pusher/work); main moves only through a pull request."
		refused=1
		;;
	esac
done
[ "$refused" = 0 ] || exit 1

limit=${AGENSH_NAMESPACE_BYTES:-}
if [ -n "$limit" ] && [ -n "$tips" ]; then
	for r in $(git for-each-ref --format='%(refname)' "refs/heads/$pusher/"); do
		case "$updated " in
		*" $r "*) ;;
		*) tips="$tips $r" ;;
		esac
	done
	if git rev-parse -q --verify refs/heads/main >/dev/null; then
		used=$(git rev-list --objects --disk-usage $tips --not refs/heads/main)
	else
		used=$(git rev-list --objects --disk-usage $tips)
	fi || {
		say "push refused: cannot measure the size of $pusher's branches"
		exit 1
	}
	if [ "$used" -gt "$limit" ]; then
		say "push refused: $pusher's branches would hold $used bytes of objects beyond main; the limit is $limit (limits.namespace_bytes in agensh.toml)."
		say "Delete merged or abandoned branches (git push origin --delete $pusher/<name>), and keep large or generated files out of git."
		exit 1
	fi
fi
exit 0
"#;

/// Writes the push policy hook into the bare repository's `hooks/` (mode 0755),
/// replacing what is there. Safe to call on every start.
pub async fn install_hooks(ws: &Workspace) -> Result<()> {
    let hooks = ws.git_dir().join("hooks");
    tokio::fs::create_dir_all(&hooks)
        .await
        .map_err(|e| io_error(&hooks, e))?;
    let path = hooks.join(PRE_RECEIVE);
    let tmp = hooks.join(format!("{PRE_RECEIVE}.agensh-tmp"));
    tokio::fs::write(&tmp, PRE_RECEIVE_SCRIPT)
        .await
        .map_err(|e| io_error(&tmp, e))?;
    set_executable(&tmp).await?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(|e| io_error(&path, e))?;
    Ok(())
}

#[cfg(unix)]
async fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .await
        .map_err(|e| io_error(path, e))
}

#[cfg(not(unix))]
async fn set_executable(_path: &Path) -> Result<()> {
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::internal(format!(
        "cannot install the push policy hook at {}: {e} — check the workspace's permissions",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    const ZERO: &str = "0000000000000000000000000000000000000000";
    const ONE: &str = "1111111111111111111111111111111111111111";

    /// An org dir with `.agensh/workspace.git/hooks/pre-receive` installed.
    async fn org() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let git_dir = dir.path().join(".agensh").join("workspace.git");
        std::fs::create_dir_all(&git_dir).unwrap();
        std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let ws = Workspace::open(&git_dir).unwrap();
        install_hooks(&ws).await.unwrap();
        install_hooks(&ws).await.unwrap(); // idempotent
        (dir, ws)
    }

    /// Runs the hook from `cwd` with `pusher` and the given ref updates.
    fn run(ws: &Workspace, cwd: &Path, pusher: Option<&str>, refs: &[&str]) -> (bool, String) {
        let mut cmd = Command::new(ws.git_dir().join("hooks").join(PRE_RECEIVE));
        cmd.current_dir(cwd)
            .env("GIT_DIR", ws.git_dir())
            .env_remove("AGENSH_PUSHER")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(p) = pusher {
            cmd.env("AGENSH_PUSHER", p);
        }
        // Another test's child, forked while the hook was being written, holds it open for
        // writing until it execs: the hook is busy for that moment (ETXTBSY).
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r.unwrap(),
            }
        };
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            for r in refs {
                writeln!(stdin, "{ZERO} {ONE} {r}").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[tokio::test]
    async fn hook_is_executable() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, ws) = org().await;
        let meta = std::fs::metadata(ws.git_dir().join("hooks/pre-receive")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
    }

    #[tokio::test]
    async fn workers_push_only_their_own_branches() {
        let (dir, ws) = org().await;
        let cwd = dir.path();
        assert!(run(&ws, cwd, Some("w01"), &["refs/heads/w01/feature"]).0);
        assert!(run(&ws, cwd, Some("w01"), &["refs/heads/w01/a/b"]).0);
        let (ok, err) = run(&ws, cwd, Some("w01"), &["refs/heads/main"]);
        assert!(!ok);
        assert!(err.contains("pull request"), "{err}");
        assert!(err.contains("agensh pr open w01/<name>"), "{err}");
        let (ok, err) = run(&ws, cwd, Some("w01"), &["refs/heads/w02/x"]);
        assert!(!ok);
        assert!(err.contains("refs/heads/w01/<name>"), "{err}");
        assert!(!run(&ws, cwd, Some("w01"), &["refs/heads/w01/"]).0);
        assert!(!run(&ws, cwd, Some("w01"), &["refs/heads/w011/x"]).0);
        assert!(!run(&ws, cwd, Some("w01"), &["refs/tags/v1"]).0);
        assert!(!run(&ws, cwd, Some("w01"), &["refs/notes/commits"]).0);
        // One bad ref refuses the whole push.
        assert!(
            !run(
                &ws,
                cwd,
                Some("w01"),
                &["refs/heads/w01/ok", "refs/heads/main"]
            )
            .0
        );
    }

    #[tokio::test]
    async fn admin_pushes_anything() {
        let (dir, ws) = org().await;
        assert!(
            run(
                &ws,
                dir.path(),
                Some("admin"),
                &["refs/heads/main", "refs/tags/v1"]
            )
            .0
        );
    }

    #[tokio::test]
    async fn a_bad_pusher_is_refused() {
        let (dir, ws) = org().await;
        let (ok, err) = run(&ws, dir.path(), Some("../w01"), &["refs/heads/w01/x"]);
        assert!(!ok);
        assert!(err.contains("not a worker id"), "{err}");
    }

    #[tokio::test]
    async fn the_pusher_is_inferred_from_the_checkout() {
        let (dir, ws) = org().await;
        let checkout = dir.path().join("workers").join("w03").join("src");
        std::fs::create_dir_all(&checkout).unwrap();
        let (ok, err) = run(&ws, &checkout, None, &["refs/heads/w03/x"]);
        assert!(ok, "{err}");
        assert!(!run(&ws, &checkout, None, &["refs/heads/w01/x"]).0);
        // The environment wins over the directory.
        assert!(!run(&ws, &checkout, Some("w01"), &["refs/heads/w03/x"]).0);
    }

    #[tokio::test]
    async fn an_unknown_pusher_gets_advice() {
        let (dir, ws) = org().await;
        let (ok, err) = run(&ws, dir.path(), None, &["refs/heads/w01/x"]);
        assert!(!ok);
        assert!(err.contains("over HTTP"), "{err}");
        assert!(err.contains("workers/<id>"), "{err}");
        assert!(err.contains("AGENSH_PUSHER"), "{err}");
    }
}
