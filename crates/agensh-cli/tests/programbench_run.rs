//! `agensh bench programbench` end to end on ProgramBench's fixture task: scripted workers
//! build the calculator while `main` is checkpointed and scored on schedule; a stopped run
//! resumes without scoring a checkpoint twice; `agensh bench report` combines runs. In the
//! ProgramBench tier (`--ignored`): it needs the test environment `agensh bench install`
//! makes.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{agensh, stderr, succeed};
use serde_json::Value;

const FIXTURE: &str = "testorg__calculator.abc1234";
/// A run of 72 s with a checkpoint every 18 s: due at 0, 18, 36, 54 and 72 s.
const HOURS: &str = "0.02";
const EVERY: &str = "0.3";
const DUE_SECONDS: [f64; 5] = [0.0, 18.0, 36.0, 54.0, 72.0];

/// Each worker writes one operator of the calculator and `compile.sh`, and ships it.
const SCENARIO: &str = r##"
parts = ["add", "sub", "mul"]
part_path = "ops/{part}.sh"

[templates]
part = """case "{part}" in add) s=+ ;; sub) s=- ;; mul) s='*' ;; esac
if [ "$op" = "$s" ]; then echo $((a $s b)); exit 0; fi
"""

[[step]]
action = "claim_free_part"
[[step]]
action = "write_part"
[[step]]
action = "write_file"
path = "compile.sh"
text = """#!/bin/bash
set -e
{ echo '#!/bin/bash'; echo 'a=$1; op=$2; b=$3'; cat ops/*.sh; echo 'exit 2'; } > executable
chmod +x executable
"""
[[step]]
action = "commit_push"
[[step]]
action = "open_and_merge_pr"
[[step]]
action = "end_turn"
"##;

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    scenario: PathBuf,
    reference: PathBuf,
}

/// The package's fixture: the correct sample's calculator as the reference.
fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let out = succeed(agensh().args(["bench", "install", "--json"]));
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sample = PathBuf::from(env["package_dir"].as_str().unwrap())
        .join("data/test_runs/correct")
        .join(FIXTURE)
        .join("submission.zip");
    let st = Command::new("unzip")
        .args(["-q", "-o"])
        .arg(&sample)
        .arg("calculator.sh")
        .arg("-d")
        .arg(root.join("ref"))
        .status()
        .unwrap();
    assert!(st.success());
    let scenario = root.join("calc.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    Setup {
        reference: root.join("ref/calculator.sh"),
        scenario,
        root,
        _tmp: tmp,
    }
}

fn bench_command(s: &Setup, dir: &Path, first: bool) -> Command {
    let mut c = agensh();
    c.args(["bench", "programbench", FIXTURE])
        .arg(dir)
        .args(["--agent", "script", "--scenario"])
        .arg(&s.scenario)
        .args(["--listen", "127.0.0.1:0"]);
    if first {
        c.args([
            "--workers",
            "3",
            "--hours",
            HOURS,
            "--checkpoint-minutes",
            EVERY,
        ])
        .arg("--reference")
        .arg(&s.reference);
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

fn report(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("bench/report.json")).unwrap()).unwrap()
}

fn scored(r: &Value) -> usize {
    r["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["score"].is_null())
        .count()
}

/// Every checkpoint on time, each scored exactly once (the scoring log has one line per
/// evaluation started).
fn check_schedule(dir: &Path, r: &Value) {
    let started = r["setup"]["started_at"].as_i64().unwrap();
    let cps = r["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), DUE_SECONDS.len(), "{r:#}");
    for (c, due) in cps.iter().zip(DUE_SECONDS) {
        let taken = (c["taken_at"].as_i64().unwrap() - started) as f64 / 1000.0;
        assert!(
            (taken - due).abs() < 5.0,
            "checkpoint {} due at {due} s was taken at {taken} s",
            c["index"]
        );
        assert!(
            !c["score"].is_null(),
            "checkpoint {} not scored",
            c["index"]
        );
    }
    let log = std::fs::read_to_string(dir.join("bench/scoring.log")).unwrap();
    let indices: Vec<&str> = log.lines().filter_map(|l| l.split(' ').nth(1)).collect();
    let unique: BTreeSet<&str> = indices.iter().copied().collect();
    assert_eq!(
        indices.len(),
        unique.len(),
        "a checkpoint was scored twice: {log}"
    );
    assert_eq!(indices.len(), DUE_SECONDS.len());
}

#[test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
fn scripted_workers_build_the_calculator_and_main_scores_what_the_correct_sample_scores() {
    let s = setup();
    let dir = s.root.join("run");
    let out = succeed(
        bench_command(&s, &dir, true)
            .arg("--json")
            .stdout(Stdio::piped()),
    );
    let r = report(&dir);
    check_schedule(&dir, &r);
    // With --json, stdout is one document: the report.
    let printed: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(printed, r);
    let last = &r["checkpoints"][4];
    // The package's correct sample scores 0.5 on this task (its run.sh names the tests
    // eval.tests.*, which tests.json does not list): so does the organization's main.
    assert_eq!(last["score"]["kept"], 0.5, "{last:#}");
    assert_eq!(last["score"]["compiled"], true);
    assert_eq!(last["merges"], 3);
    // main holds no reference bytes and no built executable; the chart is there.
    let tar = Command::new("tar")
        .arg("-tzf")
        .arg(dir.join(last["submission"].as_str().unwrap()))
        .output()
        .unwrap();
    let names = String::from_utf8(tar.stdout).unwrap();
    assert!(names.lines().any(|l| l == "compile.sh"), "{names}");
    assert!(!names.lines().any(|l| l == "executable"), "{names}");
    let png = std::fs::read(dir.join("bench/chart.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(dir.join("bench/chart.svg")).unwrap();
    assert!(svg.contains("N = 3"), "{svg}");
}

#[test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
fn a_stopped_run_resumes_without_scoring_a_checkpoint_twice() {
    let s = setup();
    let dir = s.root.join("run");
    let first = bench_command(&s, &dir, true).spawn().unwrap();
    // Stop it once two checkpoints are scored (about 20 s in).
    let t = Instant::now();
    while !(dir.join("bench/report.json").exists() && scored(&report(&dir)) >= 2) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no two checkpoints scored"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let st = Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let stopped = report(&dir);
    assert!(stopped["checkpoints"].as_array().unwrap().len() < DUE_SECONDS.len());
    // Again on the same directory, with none of the set-up flags: it goes on.
    let out = bench_command(&s, &dir, false).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("resuming"), "{err}");
    let r = report(&dir);
    check_schedule(&dir, &r);
    // A flag that contradicts the run is refused.
    let out = agensh()
        .args(["bench", "programbench", FIXTURE])
        .arg(&dir)
        .args(["--workers", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers 3"));
    // The runs side by side: one line, with its time to the threshold.
    let chart = s.root.join("compare-1.5b");
    let out = succeed(
        agensh()
            .args(["bench", "report"])
            .arg(&dir)
            .args(["--threshold", "0.3", "--json", "--out"])
            .arg(&chart),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"][0]["workers"], 3);
    assert!(
        v["runs"][0]["time_to_threshold"].as_f64().is_some(),
        "{v:#}"
    );
    assert!(s.root.join("compare-1.5b.png").is_file());
    assert!(s.root.join("compare-1.5b.svg").is_file());
}

#[test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
fn a_run_directory_is_scored_task_by_task_with_programbench_s_headline() {
    let s = setup();
    // ProgramBench's run layout: RUN/<id>/submission.tar.gz.
    let run = s.root.join("run");
    let sub = run.join(FIXTURE);
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(
        s.root.join("ref/compile.sh"),
        "#!/bin/bash\ncp calculator.sh executable && chmod +x executable\n",
    )
    .unwrap();
    let st = Command::new("tar")
        .arg("-czf")
        .arg(sub.join("submission.tar.gz"))
        .arg("-C")
        .arg(s.root.join("ref"))
        .args(["compile.sh", "calculator.sh"])
        .status()
        .unwrap();
    assert!(st.success());
    let out = succeed(
        agensh()
            .args(["eval", "--json"])
            .arg(&run)
            .args(["--total", "4"]),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["instances"][0]["kept"], 0.5);
    // aggregate over 4 tasks, one attempted: 0.5 / 4, rounded to 4 places.
    assert_eq!(v["headline"]["mean_score"], 0.125);
    assert_eq!(v["headline"]["n_instances_total"], 4);
    assert_eq!(v["mean_attempted"], 0.5);
    assert!(sub.join(format!("{FIXTURE}.eval.json")).is_file());
}

#[test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
fn without_docker_the_docker_options_say_so_and_what_to_do_instead() {
    if Command::new("docker")
        .args(["info"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        // A machine with Docker takes the other path; nothing to check here.
        return;
    }
    let s = setup();
    let out = agensh()
        .arg("eval")
        .arg(s.root.join("ref"))
        .args(["--task", FIXTURE, "--docker"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("Docker is not available here"), "{err}");
    assert!(err.contains("agensh's own sandbox"), "{err}");
    let dir = s.root.join("img");
    let out = agensh()
        .args(["bench", "programbench", FIXTURE])
        .arg(&dir)
        .arg("--from-image")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("Docker is not available here"), "{err}");
    assert!(
        !dir.join("agensh.toml").exists(),
        "nothing half-made is left"
    );
}
