"""Helpers for agensh's browser tests: Debian's Chromium driven by Playwright.

Run the tests with the venv python that `scripts/browser-env` prints
(AGENSH_BROWSER_PYTHON); no browser is ever downloaded.

    from harness import browser_page, shot, ResponseLog

    with browser_page() as page:
        log = ResponseLog(page)          # before the first navigation
        page.goto(url)
        ...
        shot(page, "dashboard")          # $AGENSH_BROWSER_ARTEFACTS/dashboard.png
        log.assert_absent(secret)        # no response body or stream message holds it

Environment:
    AGENSH_BROWSER_CHROMIUM   the browser (default /usr/bin/chromium)
    AGENSH_BROWSER_ARTEFACTS  where shot() writes (default target/browser-artefacts)
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from playwright.sync_api import Browser, Page, Playwright, Request, sync_playwright

CHROMIUM = os.environ.get("AGENSH_BROWSER_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1400, "height": 900}
# Root in a container needs --no-sandbox; Playwright passes it already (chromium_sandbox
# defaults to False), and it is named here so that stays true. Playwright also passes
# --headless, a fresh temporary profile, --disable-background-networking,
# --disable-component-update, --disable-sync, --no-first-run and --disable-dev-shm-usage,
# so nothing else is needed (--disable-gpu and --disable-quic changed nothing here).
ARGS = ["--no-sandbox"]


def launch(p: Playwright) -> Browser:
    """Start headless Chromium at CHROMIUM with ARGS."""
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


@contextmanager
def browser_page() -> Iterator[Page]:
    """Yield a fresh page (viewport 1400x900) in a new browser; on exit close the page,
    its context and the browser, and stop Playwright's driver, even after an error."""
    with sync_playwright() as p:
        browser = launch(p)
        try:
            context = browser.new_context(viewport=VIEWPORT)
            try:
                yield context.new_page()
            finally:
                context.close()
        finally:
            browser.close()


def artefacts_dir() -> Path:
    d = Path(os.environ.get("AGENSH_BROWSER_ARTEFACTS", "target/browser-artefacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def shot(page: Page, name: str) -> Path:
    """Save a full-page PNG screenshot as <artefacts dir>/<name>.png; return its path."""
    path = artefacts_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@dataclass
class Body:
    url: str
    kind: str  # "response", "event-stream" (one EventSource message) or "websocket"
    data: bytes


class ResponseLog:
    """Every body the page receives, for checking that no secret reaches the browser.

    Attach it before navigating. It keeps: each finished response's body (read when the
    request finishes, so streamed responses are read in full), each EventSource message
    (a live server-sent-events stream never finishes, so its messages are taken from the
    DevTools protocol as they arrive), and each WebSocket frame received. Responses seen
    but not finished when checked (an open stream) are listed in `unfinished()`."""

    def __init__(self, page: Page):
        self.bodies: list[Body] = []
        self._seen: dict[Request, str] = {}
        self._urls: dict[str, str] = {}  # DevTools request id -> URL
        page.on("response", self._on_response)
        page.on("requestfinished", self._on_finished)
        page.on("websocket", self._on_websocket)
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.requestWillBeSent", self._on_request_sent)
        cdp.on("Network.eventSourceMessageReceived", self._on_event_source)
        cdp.send("Network.enable")

    def _on_response(self, response) -> None:
        self._seen[response.request] = response.url

    def _on_finished(self, request: Request) -> None:
        self._seen.pop(request, None)
        response = request.response()
        if response is None or 300 <= response.status < 400:
            return  # redirects carry no body the page can read
        try:
            data = response.body()
        except Exception as e:  # the page navigated away before the body was read
            data = f"<body unavailable: {e}>".encode()
        self.bodies.append(Body(response.url, "response", data))

    def _on_request_sent(self, event: dict) -> None:
        self._urls[event["requestId"]] = event["request"]["url"]

    def _on_event_source(self, event: dict) -> None:
        url = self._urls.get(event["requestId"], f"request {event['requestId']}")
        self.bodies.append(Body(url, "event-stream", event.get("data", "").encode()))

    def _on_websocket(self, ws) -> None:
        def frame(payload) -> None:
            data = payload if isinstance(payload, bytes) else payload.encode()
            self.bodies.append(Body(ws.url, "websocket", data))

        ws.on("framereceived", frame)

    def unfinished(self) -> list[str]:
        """URLs of responses whose bodies have not finished arriving (open streams)."""
        return sorted(self._seen.values())

    def assert_absent(self, *secrets: str) -> None:
        """Fail naming every body that holds one of `secrets` (as UTF-8 bytes)."""
        found = [
            f"{b.kind} {b.url}"
            for b in self.bodies
            for s in secrets
            if s and s.encode() in b.data
        ]
        assert not found, f"a secret reached the browser in: {found}"
