//! The server's lifecycle against a stand-in xllamacpp (tests/fake/xllamacpp.py) run by
//! the real python3 and the real serve script: ready line, /health, options, stop, drop,
//! stdin EOF, and the log tail when it fails to start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agensh_model::{Error, Installed, ModelServer, ServeOptions, Size, Throughput};

/// A "venv python" that runs python3 with the fake xllamacpp importable, or None (and
/// a note) when python3 is missing.
fn fake_python(dir: &Path) -> Option<PathBuf> {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("python3 not found: skipping");
        return None;
    }
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
    let p = dir.join("python");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nPYTHONPATH='{}' exec python3 \"$@\"\n",
            fake.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(p)
}

fn inst(dir: &Path, python: PathBuf, model: &str) -> Installed {
    Installed {
        size: Size::B05,
        python,
        model_file: dir.join(model),
    }
}

/// Gone or a zombie (killed, not yet reaped).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
    }
}

async fn wait_dead(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn starts_answers_and_stops() {
    let t = tempfile::tempdir().unwrap();
    let Some(py) = fake_python(t.path()) else {
        return;
    };
    let opts = ServeOptions {
        parallel: 3,
        context_per_request: 1000,
        threads: 2,
        ..ServeOptions::default()
    };
    let server = ModelServer::start(&inst(t.path(), py, "m.gguf"), &opts)
        .await
        .unwrap();
    assert_ne!(server.port(), 0, "a free port was picked");
    assert_eq!(
        server.base_url(),
        format!("http://127.0.0.1:{}/v1", server.port())
    );
    assert_eq!(server.model_name(), "qwen2.5-coder-0.5b-instruct");
    let health = format!("http://127.0.0.1:{}/health", server.port());
    let r = reqwest::get(&health).await.unwrap();
    assert_eq!(r.status(), 200);

    let params: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("params.json")).unwrap())
            .unwrap();
    assert_eq!(params["n_ctx"], 3000, "context is per request: {params}");
    assert_eq!(params["n_parallel"], 3);
    assert_eq!(params["threads"], 2);
    assert_eq!(params["batch_threads"], 2);
    assert_eq!(params["hostnames"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(
        params["alias"],
        serde_json::json!(["qwen2.5-coder-0.5b-instruct"])
    );
    assert_eq!(params["model"], t.path().join("m.gguf").to_str().unwrap());
    assert_eq!(params["cache_prompt"], true);
    assert_eq!(params["n_cache_reuse"], 256);
    assert_eq!(params["cache_ram_mib"], server.prompt_cache_mib());
    assert!(server.prompt_cache_mib() >= 256, "{params}");
    assert_eq!(server.threads(), 2);

    let pid = server.pid().unwrap();
    assert_eq!(
        params["pid"], pid,
        "the python is the group leader we spawned"
    );
    let started = Instant::now();
    server.stop().await;
    assert!(dead(pid), "stopped and reaped");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "SIGTERM works without the SIGKILL grace: {:?}",
        started.elapsed()
    );
    assert!(
        reqwest::get(&health).await.is_err(),
        "nothing listens any more"
    );
}

#[tokio::test]
async fn dropping_the_server_kills_it() {
    let t = tempfile::tempdir().unwrap();
    let Some(py) = fake_python(t.path()) else {
        return;
    };
    let server = ModelServer::start(&inst(t.path(), py, "m.gguf"), &ServeOptions::default())
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    assert!(!dead(pid));
    drop(server);
    assert!(wait_dead(pid).await, "pid {pid} still runs after drop");
}

#[tokio::test]
async fn a_server_that_dies_at_start_quotes_its_log() {
    let t = tempfile::tempdir().unwrap();
    let Some(py) = fake_python(t.path()) else {
        return;
    };
    // Log kept in memory.
    let e = ModelServer::start(
        &inst(t.path(), py.clone(), "fail.gguf"),
        &ServeOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::ServerExited { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("exited before it was ready"), "{msg}");
    assert!(msg.contains("exit status: 3"), "{msg}");
    assert!(msg.contains("boom: cannot load"), "{msg}");

    // Log in a file (appended to).
    let log = t.path().join("logs/server.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "an older run\n").unwrap();
    let opts = ServeOptions {
        log_file: Some(log.clone()),
        ..ServeOptions::default()
    };
    let e = ModelServer::start(&inst(t.path(), py, "fail.gguf"), &opts)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("boom: cannot load"), "{msg}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("an older run\n") && text.contains("boom"),
        "{text}"
    );
}

#[tokio::test]
async fn missing_python_and_bad_options_are_clear_errors() {
    let t = tempfile::tempdir().unwrap();
    let i = inst(t.path(), t.path().join("no-such-python"), "m.gguf");
    let e = ModelServer::start(&i, &ServeOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Spawn { .. }), "{e:?}");
    assert!(
        e.to_string().contains("agensh model install --force"),
        "{e}"
    );

    for opts in [
        ServeOptions {
            parallel: 0,
            ..ServeOptions::default()
        },
        ServeOptions {
            context_per_request: 10,
            ..ServeOptions::default()
        },
        ServeOptions {
            host: String::new(),
            ..ServeOptions::default()
        },
    ] {
        let e = ModelServer::start(&i, &opts).await.unwrap_err();
        assert!(matches!(e, Error::BadOption(_)), "{opts:?}: {e:?}");
    }
}

/// Compiles only if start's future can be spawned on a multi-thread runtime.
#[allow(dead_code)]
fn start_future_is_send(i: &Installed, o: &ServeOptions) {
    fn send<T: Send>(_: T) {}
    send(ModelServer::start(i, o));
}

#[tokio::test]
async fn the_speed_is_measured_with_one_request_and_gives_a_worker_count() {
    let t = tempfile::tempdir().unwrap();
    let Some(py) = fake_python(t.path()) else {
        return;
    };
    let server = ModelServer::start(&inst(t.path(), py, "m.gguf"), &ServeOptions::default())
        .await
        .unwrap();
    let speed = agensh_model::measure(&server.base_url(), server.model_name())
        .await
        .unwrap();
    assert_eq!(
        speed,
        Throughput {
            prompt_per_sec: 61.5,
            generated_per_sec: 9.8
        }
    );
    assert_eq!(agensh_model::workers_for(&speed, 8).workers, 2);
    server.stop().await;
}
