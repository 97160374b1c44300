//! schemathesis (the OpenAPI fuzzer, from PyPI) against a real hub's own document, with
//! the admin token and with a worker's: no 5xx, no answer off the document (status,
//! content type, headers, body schema), no request held past its timeout.
//!
//! Ignored by default: it needs schemathesis, which `scripts/test` installs into a venv
//! under the target directory and names with `AGENSH_SCHEMATHESIS` (the `schemathesis`
//! program). By hand:
//!
//! ```text
//! python3 -m venv target/schemathesis-4.32.5
//! target/schemathesis-4.32.5/bin/pip install schemathesis==4.32.5
//! AGENSH_SCHEMATHESIS=target/schemathesis-4.32.5/bin/schemathesis \
//!   cargo test -p agensh-hub --test schemathesis -- --ignored --nocapture
//! ```
//!
//! `AGENSH_SCHEMATHESIS_SECS` (default 90) is each run's time budget and
//! `AGENSH_SCHEMATHESIS_SEED` (default 15) its seed.

mod common;

use std::time::Duration;

use common::org;

/// The checks: the ones where the document is precise. Not `negative_data_rejection` and
/// `positive_data_acceptance`: the document gives types and limits, not every rule (a
/// label's characters, a branch's namespace, `hub.max_wait_secs` of this hub), and the hub
/// ignores unknown fields and takes `null` for an absent optional one.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs schemathesis (AGENSH_SCHEMATHESIS); scripts/test runs it"]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let program = std::env::var("AGENSH_SCHEMATHESIS").expect(
        "AGENSH_SCHEMATHESIS names the schemathesis program (scripts/test installs it into a venv)",
    );
    let secs: u64 = env_or("AGENSH_SCHEMATHESIS_SECS", 90);
    let seed: u64 = env_or("AGENSH_SCHEMATHESIS_SEED", 15);
    let mut config = common::config();
    // The fuzzing should reach the handlers, not the rate limits (tests/limits.rs has
    // those), and a long-poll should hold no request for long.
    config.limits.requests_per_sec = 0.0;
    config.limits.burst = 0;
    config.limits.records_per_hour = 0;
    config.limits.record_bytes_per_hour = 0;
    config.limits.messages_per_hour = 0;
    config.hub.max_wait_secs = 2;
    let org = org::example_with(config).await;
    let url = format!("{}/api/v1/openapi.json", org.hub().url);
    let reports = org.tmp.path().join("schemathesis");
    // Both at once, each in one thread: schemathesis' own threads (`--workers 2`) broke
    // inside Python now and then (a `SystemError` from its AST walk), which is not the
    // hub's failure.
    let run = |who: &'static str, token: String| {
        let (program, url, reports) = (program.clone(), url.clone(), reports.join(who));
        let dir = org.tmp.path().to_path_buf();
        async move {
            let started = std::time::Instant::now();
            let mut cmd = tokio::process::Command::new(&program);
            cmd.arg("run")
                .arg(&url)
                .args(["--header", &format!("Authorization: Bearer {token}")])
                .args(["--checks", CHECKS])
                .args(["--max-examples", "30"])
                .args(["--max-time", &secs.to_string()])
                .args(["--request-timeout", "10"])
                .args(["--seed", &seed.to_string()])
                // The live stream never ends: tests/dashboard.rs reads it instead.
                .args(["--exclude-operation-id", "stream"])
                .args(["--workers", "1"])
                .args(["--report", "junit"])
                .arg("--report-dir")
                .arg(reports)
                .env("NO_COLOR", "1")
                .current_dir(dir)
                .kill_on_drop(true);
            // The run's own budget, the time to load and shrink, and a margin.
            let out = tokio::time::timeout(Duration::from_secs(secs + 120), cmd.output())
                .await
                .unwrap_or_else(|_| panic!("schemathesis as {who} ran past its time budget"))
                .expect("schemathesis starts (is AGENSH_SCHEMATHESIS right?)");
            let report = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let summary: Vec<&str> = report
                .lines()
                .filter(|l| {
                    l.contains(" generated, ") || l.starts_with("====") && l.contains(" in ")
                })
                .collect();
            eprintln!(
                "schemathesis as {who}: {} in {:.0?}: {}",
                out.status,
                started.elapsed(),
                summary.join(" ")
            );
            (!out.status.success())
                .then(|| format!("schemathesis as {who}: {}\n{report}", out.status))
        }
    };
    let (admin, worker) = tokio::join!(
        run("admin", org.hub().admin_token.clone()),
        run("w01", org.token("w01").to_string())
    );
    let failed: Vec<String> = admin.into_iter().chain(worker).collect();
    org.shutdown().await;
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
