//! The evaluator end to end on ProgramBench's own fixture task (`testorg__calculator`), in
//! the real sandbox with the real test environment. A tier of its own (`--ignored`): it
//! needs the environment `agensh bench install` makes, which scripts/test installs first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agensh_domain::programbench::{self as pb, Status};
use agensh_eval::env::{self, TestEnv};
use agensh_eval::evaluate::{evaluate, Options, Outcome, Submission};
use agensh_eval::sandbox::Sandbox;
use agensh_eval::task::Task;

const FIXTURE: &str = "testorg__calculator.abc1234";

fn test_env() -> TestEnv {
    let data = agensh_model::data_dir().expect("a data directory");
    env::installed(&data).unwrap_or_else(|| {
        panic!(
            "the ProgramBench test environment is not installed in {}: run `agensh bench install` (scripts/test does)",
            data.display()
        )
    })
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn options(env: &TestEnv, work: &Path) -> Options {
    let sandbox = Sandbox {
        program: PathBuf::from(env!("CARGO_BIN_EXE_agensh-sandbox")),
        args: Vec::new(),
    };
    let mut o = Options::new(sandbox, env.clone(), work.join("eval"));
    o.cpus = 2;
    o
}

fn fixture_task(env: &TestEnv) -> Task {
    Task::load(FIXTURE, Some(&env.package_dir.join("data/tasks")), None).unwrap()
}

fn sample(env: &TestEnv, which: &str) -> PathBuf {
    env.package_dir
        .join("data/test_runs")
        .join(which)
        .join(FIXTURE)
}

async fn eval(task: &Task, submission: &Submission, opts: &Options) -> Outcome {
    evaluate(task, submission, opts, &mut |_| {})
        .await
        .expect("the evaluation runs")
}

/// The sample's own eval.json, as the package wrote it.
fn sample_evaluation(env: &TestEnv, which: &str) -> (pb::Evaluation, String) {
    let path = sample(env, which).join(format!("{FIXTURE}.eval.json"));
    let text = std::fs::read_to_string(path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (
        serde_json::from_value(v.clone()).unwrap(),
        v["executable_hash"].as_str().unwrap().to_string(),
    )
}

fn statuses(results: &[pb::TestResult]) -> Vec<(String, Status)> {
    let mut v: Vec<_> = results.iter().map(|r| (r.full_name(), r.status)).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

async fn matches_sample(which: &str) {
    let env = test_env();
    let task = fixture_task(&env);
    let d = tmp();
    let zip = sample(&env, which).join("submission.zip");
    let got = eval(
        &task,
        &Submission::at(&zip).unwrap(),
        &options(&env, d.path()),
    )
    .await;
    let (want, want_hash) = sample_evaluation(&env, which);
    assert_eq!(
        statuses(&got.evaluation.test_results),
        statuses(&want.test_results)
    );
    assert_eq!(
        got.evaluation.executable_hash.as_deref(),
        Some(want_hash.as_str())
    );
    let ignored = task.tests.ignored_tests();
    assert_eq!(got.scores.raw, pb::raw_score(&want.test_results));
    assert_eq!(
        got.scores.eval,
        pb::eval_score(&want.test_results, &ignored)
    );
    assert_eq!(got.scores.kept, pb::score_instance(&want, &task.tests));
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn the_correct_sample_scores_what_the_package_says() {
    matches_sample("correct").await;
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn the_incorrect_sample_scores_what_the_package_says() {
    matches_sample("incorrect").await;
}

/// A submission as a directory: compile.sh and calculator.sh (`body` is the script's).
fn calculator(dir: &Path, compile: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in [("compile.sh", compile), ("calculator.sh", body)] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

const COPY: &str = "#!/bin/bash\ncp calculator.sh executable && chmod +x executable\n";
const RIGHT: &str = "#!/bin/bash\necho $(($1 $2 $3))\n";

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn a_failing_compile_scores_zero_with_its_output_in_the_report() {
    let env = test_env();
    let task = fixture_task(&env);
    let d = tmp();
    let sub = d.path().join("sub");
    calculator(
        &sub,
        "#!/bin/bash\necho cannot find the compiler >&2\nexit 3\n",
        RIGHT,
    );
    let got = eval(&task, &Submission::Dir(sub), &options(&env, d.path())).await;
    let e = &got.evaluation;
    assert_eq!(e.error_code.as_deref(), Some("compile_failed"));
    assert!(e
        .error_details
        .as_deref()
        .unwrap()
        .contains("cannot find the compiler"));
    assert_eq!(e.test_results.len(), 3);
    assert!(e
        .test_results
        .iter()
        .all(|r| r.status == Status::NotRun && r.extra["error_code"] == "compile_failed"));
    assert_eq!((got.scores.raw, got.scores.kept), (0.0, 0.0));
    assert!(!got.scores.compiled);
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn a_file_carrying_a_clean_hash_is_removed_before_compiling() {
    let env = test_env();
    let d = tmp();
    // The fixture with the hash of a "reference executable" in eval_clean_hashes.
    let task_dir = d.path().join(FIXTURE);
    agensh_eval::evaluate::copy_tree(&env.package_dir.join("data/tasks").join(FIXTURE), &task_dir)
        .unwrap();
    let reference = b"the reference executable's bytes\n";
    let hash = {
        use sha2::Digest;
        sha2::Sha256::digest(reference)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let yaml = std::fs::read_to_string(task_dir.join("task.yaml")).unwrap();
    std::fs::write(
        task_dir.join("task.yaml"),
        format!("{yaml}eval_clean_hashes:\n- {hash}\n"),
    )
    .unwrap();
    let task = Task::load(task_dir.to_str().unwrap(), None, None).unwrap();
    assert_eq!(task.yaml.eval_clean_hashes, vec![hash]);
    let sub = d.path().join("sub");
    // compile.sh fails if the copied reference is still there when it runs.
    calculator(
        &sub,
        "#!/bin/bash\nif [ -e bin/ref ]; then echo the reference is still here; exit 9; fi\ncp calculator.sh executable && chmod +x executable\n",
        RIGHT,
    );
    std::fs::create_dir(sub.join("bin")).unwrap();
    std::fs::write(sub.join("bin/ref"), reference).unwrap();
    std::fs::write(sub.join("bin/other"), b"kept").unwrap();
    let got = eval(&task, &Submission::Dir(sub), &options(&env, d.path())).await;
    let e = &got.evaluation;
    assert_eq!(e.error_code, None, "{:?}", e.error_details);
    let removal = e
        .log
        .iter()
        .find(|l| l.step == "remove_hashed_files")
        .expect("the step ran");
    assert!(removal.output.contains("bin/ref"), "{removal:?}");
    assert!(!removal.output.contains("bin/other"), "{removal:?}");
    assert_eq!(got.scores.passed, 3);
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn the_seeded_git_commit_depends_only_on_the_tree() {
    let env = test_env();
    let task = fixture_task(&env);
    let d = tmp();
    let sub = d.path().join("sub");
    // The executable embeds the commit id: two evaluations must hash alike.
    calculator(
        &sub,
        "#!/bin/bash\n{ cat calculator.sh; echo \"# built from $(git rev-parse HEAD)\"; } > executable && chmod +x executable\n",
        RIGHT,
    );
    let a = eval(
        &task,
        &Submission::Dir(sub.clone()),
        &options(&env, d.path()),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let b = eval(&task, &Submission::Dir(sub), &options(&env, d.path())).await;
    assert!(a.scores.compiled && b.scores.compiled);
    assert_eq!(a.evaluation.executable_hash, b.evaluation.executable_hash);
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn compiling_has_no_network() {
    let env = test_env();
    let task = fixture_task(&env);
    let d = tmp();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sub = d.path().join("sub");
    calculator(
        &sub,
        &format!("#!/bin/bash\nif (exec 3<>/dev/tcp/127.0.0.1/{port}); then echo reached the host; exit 4; fi\n{}", &COPY[12..]),
        RIGHT,
    );
    let got = eval(&task, &Submission::Dir(sub), &options(&env, d.path())).await;
    assert_eq!(
        got.evaluation.error_code, None,
        "{:?}",
        got.evaluation.error_details
    );
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn a_branch_that_hangs_is_cut_off_tried_again_and_counted_not_run() {
    let env = test_env();
    let d = tmp();
    let task_dir = d.path().join(FIXTURE);
    agensh_eval::evaluate::copy_tree(&env.package_dir.join("data/tasks").join(FIXTURE), &task_dir)
        .unwrap();
    let run_sh = task_dir.join("tests/33128f6b8600/eval/run.sh");
    std::fs::write(&run_sh, "#!/bin/bash\nsleep 600\n").unwrap();
    let task = Task::load(task_dir.to_str().unwrap(), None, None).unwrap();
    let sub = d.path().join("sub");
    calculator(&sub, COPY, RIGHT);
    let mut opts = options(&env, d.path());
    opts.tests_timeout = Duration::from_secs(1);
    let got = eval(&task, &Submission::Dir(sub), &opts).await;
    let e = &got.evaluation;
    let runs: Vec<_> = e.log.iter().filter(|l| l.step == "run_tests").collect();
    assert_eq!(runs.len(), 2, "one retry");
    assert!(runs
        .iter()
        .all(|r| r.returncode == -1 && r.exception_info.contains("timed out")));
    assert_eq!(
        e.test_branch_errors["33128f6b8600"][0].error_code,
        "results_read_failed"
    );
    assert!(e.test_results.iter().all(|r| r.status == Status::NotRun));
    assert_eq!(got.scores.kept, 0.0);
}

#[tokio::test]
#[ignore = "needs `agensh bench install`; the ProgramBench tier runs it"]
async fn a_tar_gz_submission_is_evaluated_like_its_directory() {
    let env = test_env();
    let task = fixture_task(&env);
    let d = tmp();
    let sub = d.path().join("sub");
    calculator(&sub, COPY, RIGHT);
    let archive = d.path().join("submission.tar.gz");
    let st = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&sub)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let got = eval(
        &task,
        &Submission::at(&archive).unwrap(),
        &options(&env, d.path()),
    )
    .await;
    // Three right answers, under the names tests.json expects or not: the package's
    // fixture run.sh names them eval.tests.*, so three passed and three not run.
    assert_eq!(got.scores.passed, 3);
    assert_eq!(got.scores.kept, 0.5);
}
