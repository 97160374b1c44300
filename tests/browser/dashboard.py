"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against a real
`agensh run` of scripted workers.

    AGENSH_BIN=target/debug/agensh python tests/browser/dashboard.py

Each check prints a line; the first that fails stops the run with its reason (exit 1).
Screenshots of every view go to $AGENSH_BROWSER_ARTEFACTS (see harness.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import ResponseLog, browser_page, launch, shot  # noqa: E402

BIN = os.environ.get("AGENSH_BIN", "target/debug/agensh")
WORKERS = 4

SCENARIO = """
parts = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"]
[templates]
part = "def {part}():\\n    return '{part}'\\n"
[[step]]
action = "claim_free_part"
wait = true
[[step]]
action = "sleep"
ms = 800
[[step]]
action = "write_part"
[[step]]
action = "commit_push"
[[step]]
action = "open_and_merge_pr"
[[step]]
action = "end_turn"
[[step]]
action = "take_issue"
wait = true
[[step]]
action = "end_turn"
"""


def check(what: str, ok: bool, detail: str = "") -> None:
    if not ok:
        print(f"FAIL {what}: {detail}", flush=True)
        raise SystemExit(1)
    print(f"ok   {what}" + (f" ({detail})" if detail else ""), flush=True)


class Hub:
    """The REST API as the admin or a worker (the test's own calls, not the page's)."""

    def __init__(self, url: str, admin: str):
        self.url, self.admin = url, admin

    def call(self, method: str, path: str, token: str | None = None, body=None):
        req = urllib.request.Request(self.url + "/api/v1" + path, method=method)
        req.add_header("authorization", "Bearer " + (token or self.admin))
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            req.add_header("content-type", "application/json")
        with urllib.request.urlopen(req, data, timeout=30) as r:
            return json.loads(r.read() or b"null")


def wait_for(what: str, cond, limit: float, every: float = 0.1):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(every)
    check(what, False, f"not within {limit} s")


def wait_js(page, expr: str, timeout: int) -> None:
    """Waits until `expr` is true in the page. Playwright's wait_for_function compiles its
    predicate with eval, which the dashboard's Content-Security-Policy forbids (as it
    should); page.evaluate goes through the debugging protocol, which the policy does not
    govern."""
    end = time.monotonic() + timeout / 1000
    while time.monotonic() < end:
        if page.evaluate(expr):
            return
        time.sleep(0.05)
    check(f"the page shows {expr}", False, f"not within {timeout} ms")


def agent_pid(org: Path, worker: str) -> int | None:
    """The scripted agent process working in `worker`'s checkout."""
    want = str(org / "workers" / worker)
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            if b"agent" in cmd and b"script" in cmd and os.readlink(p / "cwd") == want:
                return int(p.name)
        except OSError:
            continue
    return None


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="agensh-browser-"))
    org = tmp / "org"
    scenario = tmp / "scenario.toml"
    scenario.write_text(SCENARIO)
    subprocess.run([BIN, "init", str(org), "--goal", "Build the parts p1..p8 of textkit"], check=True, capture_output=True)
    toml = (org / "agensh.toml").read_text()
    toml = re.sub(r"(?m)^max_restarts = \d+", "max_restarts = 0", toml)
    toml = re.sub(r'(?m)^listen = ".*"', 'listen = "127.0.0.1:0"', toml)
    (org / "agensh.toml").write_text(toml)
    err = open(tmp / "run.err", "w+")
    run = subprocess.Popen(
        [BIN, "run", str(org), "--agent", "script", "--scenario", str(scenario), "--workers", str(WORKERS), "--hours", "0.2"],
        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
    )
    try:
        link = wait_for("agensh run prints a dashboard link", lambda: re.search(r"dashboard: (http://\S+/login\?code=[0-9a-f]+)", (tmp / "run.err").read_text()), 60)
        link = link.group(1)
        info = json.loads((org / ".agensh" / "hub.json").read_text())
        hub = Hub(info["url"], info["admin_token"])
        tokens = {w["id"]: hub.call("GET", f"/workers/{w['id']}/token")["token"] for w in hub.call("GET", "/workers")}
        check("the run has its workers", len(tokens) == WORKERS, str(sorted(tokens)))
        drive(hub, link, org, tokens)
    finally:
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        err.seek(0)
        tail = err.read()[-3000:]
        if run.returncode not in (0, 4, 130, -2):
            print(tail)


def drive(hub: Hub, link: str, org: Path, tokens: dict[str, str]) -> None:
    base = hub.url
    with browser_page() as page:
        log = ResponseLog(page)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        # Logging in: the link, then the page at / with no code left in the address.
        page.goto(link)
        check("the link logs in and leaves the code behind", page.url == base + "/", page.url)
        page.wait_for_selector("#live.on", timeout=10_000)
        check("the live stream is connected", True)
        wait_js(page, "document.querySelector('#ov-workers').textContent == '%d'" % len(tokens), timeout=10_000)
        check("the overview counts the workers", True)
        wait_js(page, "Number(document.querySelector('#ov-merged').textContent) >= 1", timeout=60_000)
        check("merges into main show up live", True, page.text_content("#ov-merged") + " merged")
        wait_js(page, "!document.querySelector('#ov-merges').textContent.includes('no merge yet')", timeout=10_000)
        check("and in the chart of merges over time", True, page.text_content("#ov-merges"))
        shot(page, "overview")

        # Workers table.
        page.goto(base + "/#workers")
        wait_js(page, f"document.querySelectorAll('.row[data-worker]').length == {len(tokens)}", timeout=10_000)
        check("the workers table has a row per worker", True)
        shot(page, "workers")

        # One worker.
        page.goto(base + "/#worker/w01")
        page.wait_for_selector("#w-now dd", timeout=10_000)
        page.wait_for_selector("#w-body [data-turn]", timeout=10_000)
        body = page.text_content("#w-body")
        check("one worker's turns, with their tool calls", "tool call(s)" in body and "turn 1" in body)
        page.click("#w-tabs button[data-wtab=records]")
        page.wait_for_selector("#w-body [data-record]", timeout=10_000)
        check("one worker's board records", True)
        page.click("#w-tabs button[data-wtab=diff]")
        wait_js(page, "document.querySelector('#w-body').textContent.includes('ahead of main') || document.querySelector('#w-body').textContent.includes('branch')", timeout=10_000)
        shot(page, "worker")

        # The board: a worker's post appears live, within a second, with no reload.
        page.goto(base + "/#board")
        page.wait_for_selector("#board-list [data-record]", timeout=10_000)
        page.evaluate("window.__loaded = 1")
        posted = time.monotonic()
        rec = hub.call("POST", "/board/records", tokens["w02"], {"kind": "FACT", "text": "seen live in the page"})["record"]
        page.wait_for_selector(f"#board-list [data-record='{rec['id']}']", timeout=5_000)
        took = time.monotonic() - posted
        check("a worker's record appears in the open page within 1 s", took <= 1.0, f"{took * 1000:.0f} ms")
        check("without a reload", page.evaluate("window.__loaded") == 1)

        # A record holding HTML and script is shown as text and runs nothing.
        evil = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
        bad = hub.call("POST", "/board/records", tokens["w03"], {"kind": "OBSERVED", "text": evil[:100]})["record"]
        item = page.wait_for_selector(f"#board-list [data-record='{bad['id']}'] .text", timeout=5_000)
        check("a record with <script> renders as its text", item.text_content() == evil[:100], item.text_content())
        time.sleep(0.5)
        check("and runs nothing", page.evaluate("window.__pwned") is None)
        check("no element came from it", page.query_selector("#board-list script, #board-list img") is None)
        page.fill("#grep-q", "seen live")
        page.click("#grep-form button[type=submit]")
        wait_js(page, "document.querySelector('#board-mode').textContent.includes('grep')", timeout=5_000)
        page.wait_for_selector(f"#board-list [data-record='{rec['id']}']", timeout=5_000)
        check("grep finds the record", True)
        page.click(f"#board-list [data-record='{rec['id']}'] .rec-id")
        page.wait_for_selector("#unfold-card:not([hidden])", timeout=5_000)
        check("unfold shows the whole record", "seen live in the page" in page.text_content("#unfold"))
        shot(page, "board")

        # A message sent from the page arrives in the worker's events.
        marker = f"from the page {int(time.time())}"
        page.goto(base + "/#messages")
        page.fill("#msg-to", "w01")
        page.fill("#msg-text", marker)
        page.click("#msg-send")
        wait_js(page, f"document.querySelector('#msg-list').textContent.includes({json.dumps(marker)})", timeout=5_000)
        check("the page shows the message it sent", True)
        log_file = org / ".agensh" / "logs" / "w01" / "turns.jsonl"
        wait_for("the message reaches w01's agent", lambda: log_file.exists() and marker in log_file.read_text(), 60, 0.5)
        check("the message reaches w01's agent (its turn log)", True)
        shot(page, "messages")

        # Pull requests.
        page.goto(base + "/#prs")
        page.click("#pr-tabs button[data-prs=merged]")
        page.wait_for_selector("#pr-list [data-pr]", timeout=10_000)
        page.click("#pr-list [data-pr]")
        page.wait_for_selector("#pr-card:not([hidden])", timeout=5_000)
        check("merged pull requests and their details", "merged" in page.text_content("#pr-detail"))
        shot(page, "prs")

        # An issue opened by a person on the page is taken by a scripted worker and closed
        # by its merged pull request that names it.
        page.goto(base + "/#issues")
        page.click("#is-new-toggle")
        page.fill("#is-title", "Write the changelog")
        page.fill("#is-body", "One line per part merged.")
        page.fill("#is-labels", "docs")
        page.click("#is-open")
        page.wait_for_selector("#is-card:not([hidden])", timeout=5_000)
        number = int(page.get_attribute("#is-list [data-issue]", "data-issue"))
        check("an issue opened from the page", "Write the changelog" in page.text_content("#is-detail"), f"#{number}")
        page.select_option("#is-state", "all")
        wait_js(page, f"(document.querySelector('#is-list [data-issue=\"{number}\"]') || {{textContent: ''}}).textContent.includes('closed')", timeout=90_000)
        issue = hub.call("GET", f"/issues/{number}")
        check("a scripted worker claimed it", (issue.get("assignee") or "").startswith("w"), str(issue.get("assignee")))
        check("and its merged PR closed it", issue["state"] == "closed" and str(issue.get("closed_by", "")).startswith("pr#"), str(issue.get("closed_by")))
        page.click(f"#is-list [data-issue='{number}']")
        wait_js(page, "document.querySelector('#is-detail').textContent.includes('closed by pr#')", timeout=5_000)
        shot(page, "issues")

        # A worker killed shows as dead.
        page.goto(base + "/#workers")
        pid = wait_for("w03's agent process", lambda: agent_pid(org, "w03"), 30)
        os.kill(pid, signal.SIGKILL)
        page.wait_for_selector(".row[data-worker=w03][data-status=dead]", timeout=30_000)
        check("a killed worker shows as dead", True)
        check("and stands out", "s-dead" in page.get_attribute(".row[data-worker=w03]", "class"))
        page.select_option("#wk-state", "dead")
        wait_js(page, "document.querySelectorAll('.row[data-worker]').length == 1", timeout=5_000)
        check("the table filters by state", True)
        shot(page, "workers-dead")

        page.goto(base + "/#overview")
        wait_js(page, "document.querySelectorAll('#ov-feed li').length > 5", timeout=10_000)
        shot(page, "overview-end")
        check("no script error on the page", not errors, "; ".join(errors))
        secrets = [hub.admin, *tokens.values()]
        log.assert_absent(*secrets)
        check("no token in any response body or stream message of the page", True, f"{len(log.bodies)} bodies")

    # A browser without the cookie gets nothing.
    with browser_page() as page:
        resp = page.goto(base + "/")
        body = page.content()
        check("without the cookie: 401 and the login page", resp.status == 401 and "agensh dashboard" in body)
        check("and nothing of the organization", "textkit" not in body)
        status = page.evaluate("fetch('/api/v1/overview').then(r => r.status)")
        check("the API refuses the browser", status == 401, str(status))
        spent = page.goto(link)
        check("a spent link logs nobody in", spent.status == 401)


if __name__ == "__main__":
    main()
