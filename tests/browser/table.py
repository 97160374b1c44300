"""The workers table with 1,024 rows in a real browser: it draws only the rows in sight,
and loading, sorting and filtering it stay fast.

    AGENSH_BIN=target/debug/agensh python tests/browser/table.py

An `agensh hub` on a fresh organization with 1,024 workers registered (no agents: the
table is what is measured); each worker reports a status so the states differ.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dashboard import Hub, check, wait_for, wait_js  # noqa: E402
from harness import browser_page, shot  # noqa: E402

BIN = os.environ.get("AGENSH_BIN", "target/debug/agensh")
N = 1024
STATES = ["busy", "idle", "stalled", "dead"]


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="agensh-table-"))
    org = tmp / "org"
    subprocess.run([BIN, "init", str(org), "--goal", "A thousand workers"], check=True, capture_output=True)
    err = open(tmp / "hub.err", "w+")
    hub_proc = subprocess.Popen([BIN, "hub", str(org), "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        info = wait_for("the hub starts", lambda: (org / ".agensh" / "hub.json").exists() and json.loads((org / ".agensh" / "hub.json").read_text()), 30)
        hub = Hub(info["url"], info["admin_token"])
        wait_for("the hub answers", lambda: urllib.request.urlopen(hub.url + "/healthz", timeout=5).status == 200, 30)
        hub.call("POST", "/workers", body={"count": N})
        ids = [w["id"] for w in hub.call("GET", "/workers")]
        check(f"{N} workers registered", len(ids) == N, f"{ids[0]} … {ids[-1]}")
        reports = [{"id": w, "status": STATES[i % len(STATES)]} for i, w in enumerate(ids)]
        hub.call("PUT", "/workers/status", body={"workers": reports})
        link = hub.call("POST", "/dashboard/links")["url"]
        with browser_page() as page:
            page.goto(link)
            started = time.monotonic()
            page.goto(hub.url + "/#workers")
            wait_js(page, f"document.querySelector('#wk-count').textContent.startsWith('{N:,} of {N:,}')", timeout=10_000)
            took = time.monotonic() - started
            check(f"the table of {N} workers loads", took < 2.0, f"{took * 1000:.0f} ms from navigation")
            drawn = page.evaluate("document.querySelectorAll('.row[data-worker]').length")
            check("only the rows in sight are in the page", drawn < 100, f"{drawn} rows drawn")
            t = time.monotonic()
            page.click("#wk-head [data-key=status]")
            wait_js(page, "document.querySelector('.row[data-worker]').dataset.status == 'busy'", timeout=5_000)
            check("sorting by state", time.monotonic() - t < 1.0, f"{(time.monotonic() - t) * 1000:.0f} ms")
            t = time.monotonic()
            page.select_option("#wk-state", "dead")
            wait_js(page, f"document.querySelector('#wk-count').textContent.startsWith('{N // 4} of')", timeout=5_000)
            check("filtering by state", time.monotonic() - t < 1.0, f"{(time.monotonic() - t) * 1000:.0f} ms")
            page.select_option("#wk-state", "")
            page.evaluate("document.querySelector('#wk-viewport').scrollTop = 1e6")
            wait_js(page, f"[...document.querySelectorAll('.row[data-worker]')].some(r => parseInt(r.style.top) == {(N - 1) * 30})", timeout=5_000)
            check("scrolling to the end draws the last rows", True)
            shot(page, "workers-1024")
    finally:
        os.killpg(hub_proc.pid, signal.SIGTERM)
        try:
            hub_proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(hub_proc.pid, signal.SIGKILL)
            hub_proc.wait()


if __name__ == "__main__":
    main()
