"""Smoke test for the browser tier: Debian's Chromium, driven by Playwright, headless.

    "$AGENSH_BROWSER_PYTHON" tests/browser/smoke.py SCREENSHOT.png

Serves a page with `python3 -m http.server` on 127.0.0.1 (a port the kernel picks),
clicks its button, checks that the page's script changed the text, checks the harness's
ResponseLog, and writes a screenshot to SCREENSHOT.png. Every process it starts (the
server, Playwright's driver, the browser) is gone when it exits.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ResponseLog, browser_page  # noqa: E402

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>agensh browser smoke</title></head>
<body style="font-family: sans-serif; margin: 2em">
  <h1>agensh browser smoke</h1>
  <p id="status">waiting</p>
  <button id="go" onclick="document.getElementById('status').textContent = 'clicked at ' + new Date().toISOString().slice(0, 10)">Go</button>
</body></html>
"""


def serve(directory: str) -> tuple[subprocess.Popen, int]:
    """Start http.server on 127.0.0.1, port 0 (a free one); return it and its port."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
         "--directory", directory],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://...) ..."
    m = re.search(r" port (\d+) ", line)
    if not m:
        stop(server)
        raise SystemExit(f"http.server did not start: {line!r}")
    return server, int(m.group(1))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} SCREENSHOT.png")
    screenshot = Path(sys.argv[1])
    screenshot.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as root:
        Path(root, "index.html").write_text(PAGE)
        server, port = serve(root)
        try:
            t0 = time.monotonic()
            with browser_page() as page:
                t_launch = time.monotonic() - t0
                log = ResponseLog(page)
                page.goto(f"http://127.0.0.1:{port}/index.html")
                assert page.text_content("#status") == "waiting"
                page.click("#go")
                page.wait_for_function(
                    "document.getElementById('status').textContent.startsWith('clicked')",
                    timeout=5000,
                )
                text = page.text_content("#status")
                assert text.startswith("clicked at "), text
                page.screenshot(path=str(screenshot), full_page=True)

                # The log holds the page itself: a string of the page is found, a
                # string nowhere on it is not.
                assert any(b"agensh browser smoke" in b.data for b in log.bodies), log.bodies
                log.assert_absent("sk-not-a-real-secret-0123456789")
                try:
                    log.assert_absent("agensh browser smoke")
                except AssertionError:
                    pass
                else:
                    raise AssertionError("ResponseLog.assert_absent missed a string in the page")
            t_total = time.monotonic() - t0
        finally:
            stop(server)

    print(f"ok: status {text!r}; screenshot {screenshot} ({screenshot.stat().st_size} bytes)")
    print(f"browser launch (driver + chromium + page) {t_launch:.2f} s; "
          f"whole browser session {t_total:.2f} s")


if __name__ == "__main__":
    main()
