//! `agensh dashboard` and `agensh status --watch` against a running hub.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::{agensh, new_org, run_in, HubProcess};

#[test]
fn the_dashboard_command_prints_a_link_that_logs_in_once() {
    let (_tmp, dir) = new_org("dashboard");
    let hub = HubProcess::start(&dir);
    let out = run_in(&dir, &["dashboard", "--no-open", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let url = link["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/login?code=", hub.info.url)),
        "{url}"
    );
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = |u: &str| rt.block_on(browser.get(u).send()).unwrap().status();
    assert_eq!(status(url), 303);
    assert_eq!(status(url), 401, "spent");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&hub.info.admin_token));
}

#[test]
fn the_dashboard_command_needs_a_running_hub() {
    let (_tmp, dir) = new_org("no hub");
    let out = run_in(&dir, &["dashboard", "--no-open"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no hub is running"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn status_watch_follows_the_stream() {
    let (_tmp, dir) = new_org("watch");
    let hub = HubProcess::start(&dir);
    let admin = hub.admin();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tokens = rt.block_on(admin.add_workers(1)).unwrap();
    let mut watch = agensh()
        .current_dir(&dir)
        .args(["status", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker = agensh_client::Client::new(&hub.info.url, &tokens[0].token);
    // The watch prints each change on a line of its own when stdout is not a terminal.
    let lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let poster = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        for _ in 0..50 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            let r = agensh_domain::record::NewRecord::new(
                agensh_domain::record::RecordKind::Fact,
                "watched from a terminal",
            );
            let _ = rt.block_on(worker.post_record(&r));
        }
    });
    let mut seen = None;
    for line in lines {
        let line = line.unwrap();
        if line.contains("watched from a terminal") {
            seen = Some(line);
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watch.kill();
    let _ = watch.wait();
    poster.join().unwrap();
    let seen = seen.expect("the watch printed the record");
    assert!(seen.starts_with("w01 posted FACT G"), "{seen}");
}
