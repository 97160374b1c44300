//! The command line behaves as users of cargo, uv and gh expect: `--dir` everywhere it
//! means something, JSON errors with `--json`, exit codes that say whose failure it was,
//! quiet on a closed pipe, colour only where asked, completions, `doctor` and `config`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{agensh, new_org, run_in, stderr, stdout, HubProcess};
use serde_json::Value;

/// The one JSON error line on stderr.
fn json_error(o: &Output) -> Value {
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line of JSON on stderr: {err}");
    serde_json::from_str::<Value>(lines[0]).expect("the error is JSON")["error"].clone()
}

const UNREACHABLE: [&str; 4] = ["--hub", "http://127.0.0.1:9", "--token", "agw_x"];

#[test]
fn dir_is_honoured_by_every_command_that_takes_an_organization() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path();
    let dir = elsewhere.join("org");
    let d = dir.to_str().unwrap();
    let out = run_in(elsewhere, &["--dir", d, "init", "--goal", "g"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("agensh.toml").exists());

    let mut hub = agensh()
        .current_dir(elsewhere)
        .args(["--dir", d, "hub", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while agensh_hub::read_hub_info(&dir).ok().map(|i| i.pid) != Some(hub.id()) {
        assert!(Instant::now() < deadline, "the hub did not start for --dir");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_in(elsewhere, &["--dir", d, "workers", "add", "2"]);
    assert_eq!(stdout(&out), "w01\nw02\n", "{}", stderr(&out));
    let out = run_in(elsewhere, &["status", "--dir", d, "--json"]);
    let status: Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(status["workers"].as_array().unwrap().len(), 2);
    let out = run_in(elsewhere, &["--dir", d, "config", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = hub.kill();
    let _ = hub.wait();

    // run and node read agensh.toml from --dir before anything else.
    let missing = elsewhere.join("not-an-org");
    for args in [&["run"][..], &["node"][..]] {
        let out = agensh()
            .current_dir(elsewhere)
            .arg("--dir")
            .arg(&missing)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{}/agensh.toml", missing.display())),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_global_flag_a_command_would_ignore_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (&["--dir", "x", "model", "status"][..], "--dir"),
        (&["completions", "bash", "--dir", "x"][..], "--dir"),
        (&["--hub", "http://h", "run", "x"][..], "--hub"),
        (&["--as", "w01", "node"][..], "--as"),
    ] {
        let out = run_in(tmp.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains(&format!("does not use {flag} — leave it out")),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // The environment is ambient, not a request: AGENSH_DIR does not trip it.
    let out = agensh()
        .current_dir(tmp.path())
        .env("AGENSH_DIR", "x")
        .args(["completions", "fish"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn with_json_errors_are_one_json_line_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = UNREACHABLE.to_vec();
    args.extend(["board", "read", "--json"]);
    let out = run_in(tmp.path(), &args);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "", "stdout carries results only");
    let e = json_error(&out);
    assert_eq!(e["code"], "unreachable");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("is `agensh hub` running?"),
        "{e}"
    );

    let out = run_in(tmp.path(), &["board", "grep", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error(&out)["code"], "usage");

    let out = run_in(tmp.path(), &["config", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(json_error(&out)["code"], "local_failure");

    // Without --json the same failure is one plain line.
    let mut args = UNREACHABLE.to_vec();
    args.extend(["board", "read"]);
    let out = run_in(tmp.path(), &args);
    assert!(
        stderr(&out).starts_with("error: cannot reach the hub"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exit_codes_and_flag_hints_for_what_the_hub_refuses() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "1"]);
    // The hub's message names the header; the command line adds its flag.
    let out = run_in(&dir, &["events", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let e = json_error(&out);
    assert_eq!(e["code"], "needs_worker");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("in the X-Agensh-As header (e.g. w01) (--as ID)"),
        "{e}"
    );
    let long = "y".repeat(101);
    let out = run_in(
        &dir,
        &["--as", "w01", "board", "post", "FACT", &long, "--json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let e = json_error(&out);
    assert_eq!(e["code"], "text_too_long");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("move the rest to detail (--detail)"),
        "{e}"
    );
    // A bad agensh.toml is a local failure, not a refusal.
    std::fs::write(dir.join("agensh.toml"), "[organization]\ngoal = \"\"\n").unwrap();
    let out = run_in(&dir, &["config"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("organization.goal is empty"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_closed_pipe_ends_output_quietly_with_0() {
    let (_tmp, dir) = new_org("x");
    let _hub = HubProcess::start(&dir);
    run_in(&dir, &["workers", "add", "1"]);
    for i in 0..3 {
        let out = run_in(
            &dir,
            &[
                "--as",
                "w01",
                "board",
                "post",
                "FACT",
                &format!("quokka {i}"),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // The reader is gone before agensh writes its first line: every write is EPIPE.
    let mut child = agensh()
        .current_dir(&dir)
        .args(["board", "grep", "quokka"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");

    // A real shell pipe, with more output than a pipe holds.
    let script = format!(
        "'{}' completions zsh | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_agensh")
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_eq!(stdout(&out).trim(), "0", "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn colour_only_on_a_terminal_or_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = UNREACHABLE.to_vec();
    args.extend(["board", "read"]);
    let plain = run_in(tmp.path(), &args);
    assert!(!stderr(&plain).contains('\x1b'), "{:?}", stderr(&plain));
    let mut always = vec!["--color", "always"];
    always.extend(&args);
    let coloured = agensh()
        .current_dir(tmp.path())
        .env("NO_COLOR", "1")
        .args(&always)
        .output()
        .unwrap();
    assert!(
        stderr(&coloured).starts_with("\x1b[1;31merror\x1b[0m: cannot reach"),
        "{:?}",
        stderr(&coloured)
    );
    // clap's own messages follow --color too.
    let usage = run_in(tmp.path(), &["--color=always", "bogus"]);
    assert!(stderr(&usage).contains('\x1b'), "{:?}", stderr(&usage));
    let usage = run_in(tmp.path(), &["--color=never", "bogus"]);
    assert!(!stderr(&usage).contains('\x1b'), "{:?}", stderr(&usage));
}

#[test]
fn logs_are_coloured_only_when_asked() {
    let (tmp, dir) = new_org("x");
    for (color, want_ansi) in [("auto", false), ("always", true), ("never", false)] {
        let log = tmp.path().join(format!("hub-{color}.log"));
        let mut hub = agensh()
            .args([
                "--color",
                color,
                "hub",
                dir.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .env("AGENSH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&log)
            .unwrap()
            .contains("hub listening")
        {
            assert!(Instant::now() < deadline, "no log line from the hub");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = hub.kill();
        let _ = hub.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text.contains('\x1b'),
            want_ansi,
            "--color {color}: {text:?}"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = run_in(tmp.path(), &["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["agensh", "doctor", "board", "unfold", "detail"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let out = run_in(tmp.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn config_never_prints_a_store_urls_password() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("agensh.toml"),
        "[organization]\ngoal = \"g\"\n[hub]\nstore = \"postgres://agensh:hunter2@db:5432/org\"\n",
    )
    .unwrap();
    for json in [false, true] {
        let mut args = vec!["config"];
        if json {
            args.push("--json");
        }
        let out = agensh().current_dir(dir).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(!text.contains("hunter2"), "the password is shown: {text}");
        assert!(text.contains("postgres://agensh:***@db:5432/org"), "{text}");
    }
}

#[test]
fn config_says_where_each_value_came_from() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("agensh.toml"),
        "[organization]\ngoal = \"g\"\n[board]\nview_cap = 50\n",
    )
    .unwrap();
    let out = agensh()
        .current_dir(dir)
        .env("AGENSH_LISTEN", "127.0.0.1:7999")
        .args(["config", "--workers", "16", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let setting = |key: &str| {
        v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .unwrap_or_else(|| panic!("no {key}"))
            .clone()
    };
    assert_eq!(setting("run.workers")["value"], 16);
    assert_eq!(
        setting("run.workers")["source"],
        serde_json::json!({"from": "flag", "name": "--workers"})
    );
    assert_eq!(setting("hub.listen")["value"], "127.0.0.1:7999");
    assert_eq!(
        setting("hub.listen")["source"],
        serde_json::json!({"from": "env", "name": "AGENSH_LISTEN"})
    );
    assert_eq!(setting("board.view_cap")["source"]["from"], "file");
    assert_eq!(setting("run.hours")["source"]["from"], "default");
    assert_eq!(setting("run.hours")["value"], 6.0);

    let out = run_in(dir, &["config", "--model-url", "http://m:8000/v1"]);
    let text = stdout(&out);
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    assert!(line("model.url").ends_with("# flag --model-url"), "{text}");
    assert!(line("board.view_cap").ends_with("# agensh.toml"), "{text}");
    assert!(line("run.workers").contains("= 4 ") && line("run.workers").ends_with("# default"));
}

/// A directory of fake programs for `agensh doctor`, used as the whole PATH.
fn fake_bin(programs: &[(&str, &str)]) -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    for (name, body) in programs {
        let path = bin.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

const GIT_OK: (&str, &str) = ("git", "echo 'git version 2.39.5'");
const PYTHON_OK: (&str, &str) = (
    "python3",
    "case \"$2\" in *version_info*) echo 3.12.1;; *venv*) exit 0;; esac",
);

fn doctor(bin: &Path, json: bool) -> Output {
    let data = tempfile::tempdir().unwrap();
    let mut c = agensh();
    c.env("PATH", bin)
        .env("AGENSH_DATA_DIR", data.path())
        .env_remove("AGENSH_PYTHON")
        .arg("doctor");
    if json {
        c.arg("--json");
    }
    c.output().unwrap()
}

fn check(report: &Value, name: &str) -> Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
        .clone()
}

#[test]
fn doctor_reports_versions_and_what_to_do_for_each_missing_piece() {
    let sleep = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("sleep"))
        .find(|p| p.exists())
        .expect("sleep on PATH");
    let hang = format!("exec {} 30", sleep.display());
    let bin = fake_bin(&[GIT_OK, PYTHON_OK, ("node", "echo v20.19.0"), ("npm", &hang)]);
    let started = Instant::now();
    let out = doctor(bin.path(), true);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a hung program is cut off"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(check(&report, "git")["found"], "2.39.5");
    assert_eq!(check(&report, "python")["found"], "python3 3.12.1");
    assert_eq!(check(&report, "python venv")["ok"], true);
    let npm = check(&report, "node and npm");
    assert_eq!(npm["ok"], false);
    assert!(
        npm["found"]
            .as_str()
            .unwrap()
            .contains("did not answer in 3 s"),
        "{npm}"
    );
    // Each preset's CLI, in agensh's data directory (empty here), with the command that
    // installs it.
    for name in ["claude", "codex", "copilot", "gemini", "pi"] {
        let agent = check(&report, &format!("agent {name}"));
        assert_eq!(
            (agent["ok"].clone(), agent["required"].clone()),
            (false.into(), false.into())
        );
        assert!(
            agent["found"]
                .as_str()
                .unwrap()
                .starts_with("not installed ("),
            "{agent}"
        );
        assert!(
            agent["fix"].as_str().unwrap().starts_with(&format!(
                "agensh agents install {name} — then `agensh run --agent {name}`"
            )),
            "{agent}"
        );
    }
    let model = check(&report, "local model");
    assert_eq!(model["ok"], false);
    assert!(
        model["found"]
            .as_str()
            .unwrap()
            .contains("1.5b not installed"),
        "{model}"
    );
    assert!(
        model["fix"]
            .as_str()
            .unwrap()
            .contains("agensh model install"),
        "{model}"
    );
}

#[test]
fn doctor_fails_when_git_is_too_old() {
    let bin = fake_bin(&[("git", "echo 'git version 2.30.1'"), PYTHON_OK]);
    let out = doctor(bin.path(), false);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("MISSING git: 2.30.1 is too old: agensh needs git 2.38 or newer"),
        "{text}"
    );
    assert!(text.contains("→ install git 2.38 or newer"), "{text}");
    assert!(
        stderr(&out).contains("agensh needs git"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn doctor_fails_without_python_or_its_venv_module() {
    let bin = fake_bin(&[GIT_OK]);
    let out = doctor(bin.path(), true);
    assert_eq!(out.status.code(), Some(4));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["ok"], false);
    let python = check(&report, "python");
    assert!(
        python["found"].as_str().unwrap().contains("not found"),
        "{python}"
    );
    assert_eq!(json_error(&out)["code"], "local_failure");

    let bin = fake_bin(&[
        GIT_OK,
        (
            "python3",
            "case \"$2\" in *version_info*) echo 3.11.2;; *) echo 'No module named ensurepip' >&2; exit 1;; esac",
        ),
    ]);
    let out = doctor(bin.path(), true);
    assert_eq!(out.status.code(), Some(4));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let venv = check(&report, "python venv");
    assert_eq!(venv["ok"], false);
    assert!(
        venv["found"].as_str().unwrap().contains("ensurepip"),
        "{venv}"
    );
    assert!(
        venv["fix"].as_str().unwrap().contains("python3-venv"),
        "{venv}"
    );
}
