//! The evaluator's sandbox, run for real: namespaces, mounts, timeouts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agensh_eval::sandbox::{Outcome, Sandbox, Spec, Workspace};

fn sandbox() -> Sandbox {
    Sandbox {
        program: PathBuf::from(env!("CARGO_BIN_EXE_agensh-sandbox")),
        args: Vec::new(),
    }
}

fn spec(dir: &Path, workspace: Workspace, command: &str) -> Spec {
    Spec {
        workspace,
        tmp: None,
        hide: Vec::new(),
        expose: Vec::new(),
        home: None,
        network: false,
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        command: command.into(),
        scratch: dir.join("scratch"),
        nice: 0,
        max_processes: 2048,
    }
}

/// A directory outside /tmp (the sandbox has its own /tmp).
fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

async fn run(s: &Spec) -> Outcome {
    sandbox()
        .run(s, Duration::from_secs(30))
        .await
        .expect("the sandbox starts")
}

#[tokio::test]
async fn the_command_runs_in_workspace_with_its_exit_code_and_both_streams() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("in"), "given\n").unwrap();
    let s = spec(
        d.path(),
        Workspace::Bind(ws.clone()),
        "pwd; cat in; echo made > out; echo oops >&2; exit 7",
    );
    let o = run(&s).await;
    assert_eq!(o.returncode, 7);
    assert_eq!(o.stdout, "/workspace\ngiven\n");
    assert_eq!(o.stderr, "oops\n");
    assert_eq!(std::fs::read_to_string(ws.join("out")).unwrap(), "made\n");
}

#[tokio::test]
async fn the_host_is_read_only_inside() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A directory of the host's that a command could otherwise write as root.
    let target = Path::new("/usr/agensh-sandbox-test");
    let cmd = format!("touch {}", target.display());
    let o = run(&spec(d.path(), Workspace::Bind(ws), &cmd)).await;
    assert_ne!(o.returncode, 0, "{o:?}");
    assert!(o.stderr.contains("Read-only file system"), "{o:?}");
    assert!(!target.exists());
}

#[tokio::test]
async fn an_overlay_leaves_the_lower_workspace_as_it_was() {
    let d = tmp();
    let (lower, upper, work) = (d.path().join("l"), d.path().join("u"), d.path().join("w"));
    for p in [&lower, &upper, &work] {
        std::fs::create_dir(p).unwrap();
    }
    std::fs::write(lower.join("kept"), "1").unwrap();
    let o = run(&spec(
        d.path(),
        Workspace::Overlay {
            lower: lower.clone(),
            upper: upper.clone(),
            work,
        },
        "rm kept && echo 2 > new && ls",
    ))
    .await;
    assert_eq!((o.returncode, o.stdout.as_str()), (0, "new\n"), "{o:?}");
    assert_eq!(std::fs::read_to_string(lower.join("kept")).unwrap(), "1");
    assert!(!lower.join("new").exists());
    assert_eq!(std::fs::read_to_string(upper.join("new")).unwrap(), "2\n");
}

#[tokio::test]
async fn without_network_there_is_only_loopback_and_it_is_up() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A listener on the host's loopback: the sandbox's own loopback cannot reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmd = format!(
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; \
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo reached; else echo refused; fi"
    );
    let o = run(&spec(d.path(), Workspace::Bind(ws), &cmd)).await;
    assert_eq!(o.stdout, "lo\nrefused\n", "{o:?}");
}

#[tokio::test]
async fn hidden_directories_are_empty_inside() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A directory of the host that is never empty.
    let mut s = spec(d.path(), Workspace::Bind(ws), "ls -A /usr/share | wc -l");
    let shown = run(&s).await;
    assert_ne!(shown.stdout.trim(), "0", "{shown:?}");
    s.hide = vec![PathBuf::from("/usr/share")];
    let hidden = run(&s).await;
    assert_eq!(
        (hidden.returncode, hidden.stdout.trim()),
        (0, "0"),
        "{hidden:?}"
    );
}

#[tokio::test]
async fn exposed_directories_are_there_read_only_even_under_tmp() {
    // Under /tmp, which the sandbox replaces with its own: exposing shows it anyway.
    let d = tempfile::tempdir_in("/tmp").unwrap();
    let ws = d.path().join("ws");
    let env = d.path().join("env");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&env).unwrap();
    std::fs::write(env.join("tool"), "present\n").unwrap();
    let cmd = format!(
        "cat {0}/tool; touch {0}/new 2>&1 | grep -c 'Read-only'",
        env.display()
    );
    let mut s = spec(d.path(), Workspace::Bind(ws), &cmd);
    s.expose = vec![env.clone()];
    let o = run(&s).await;
    assert_eq!(o.stdout, "present\n1\n", "{o:?}");
    assert!(!env.join("new").exists());
}

#[tokio::test]
async fn a_timeout_kills_every_process_of_the_sandbox() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A background process that would write a file after the timeout.
    let s = spec(
        d.path(),
        Workspace::Bind(ws.clone()),
        "(sleep 2; touch late) & sleep 60",
    );
    let o = sandbox().run(&s, Duration::from_millis(500)).await.unwrap();
    assert!(o.timed_out);
    assert_eq!(o.returncode, -1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!ws.join("late").exists(), "a process outlived the timeout");
}

#[tokio::test]
async fn the_environment_is_exactly_the_one_given() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut s = spec(
        d.path(),
        Workspace::Bind(ws),
        "env | sort | grep -v '^_=\\|^PWD=\\|^SHLVL='",
    );
    s.env.push(("ONLY".into(), "this".into()));
    let o = run(&s).await;
    assert_eq!(
        o.stdout, "ONLY=this\nPATH=/usr/local/bin:/usr/bin:/bin\n",
        "{o:?}"
    );
}

#[tokio::test]
async fn niceness_is_set_for_everything_inside() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut s = spec(
        d.path(),
        Workspace::Bind(ws),
        "cut -d' ' -f19 /proc/self/stat",
    );
    s.nice = 10;
    let o = run(&s).await;
    assert_eq!(o.stdout, "10\n", "{o:?}");
}

#[tokio::test]
async fn a_runaway_recursion_is_stopped_at_the_process_limit() {
    let d = tmp();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A compile.sh that runs itself: each waits for the next, forever.
    std::fs::write(ws.join("compile.sh"), "#!/bin/bash\n./compile.sh\n").unwrap();
    let mut s = spec(
        d.path(),
        Workspace::Bind(ws),
        "chmod +x compile.sh && ./compile.sh",
    );
    s.max_processes = 64;
    let t = std::time::Instant::now();
    let o = sandbox().run(&s, Duration::from_secs(60)).await.unwrap();
    assert_eq!(o.returncode, 137, "{o:?}");
    assert!(o.stderr.contains("more than the limit of 64"), "{o:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}
