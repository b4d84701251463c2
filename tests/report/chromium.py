"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fd 3 in, fd 4 out),
standard library only: open a local page, collect console errors, uncaught exceptions and failed loads, ask the
page about its images, take a full-page screenshot. A test helper, not part of kevolve."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-debugging-pipe"]


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, timeout: float = 60.0):
        self.timeout, self.seq, self.events, self.buf = timeout, 0, [], b""
        self.profile = tempfile.mkdtemp(prefix="kevolve-chromium-")
        a, self._w = os.pipe()
        self._r, b = os.pipe()
        to_child, from_child = fcntl.fcntl(a, fcntl.F_DUPFD, 10), fcntl.fcntl(b, fcntl.F_DUPFD, 10)
        os.close(a)
        os.close(b)

        def fds():                       # the child reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_child, 3)         # (dup2 makes them inheritable; the originals sit above 10)
            os.dup2(from_child, 4)
        self.proc = subprocess.Popen([binary(), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=(subprocess.PIPE if os.environ.get("KEVOLVE_CHROMIUM_DEBUG")
                                             else subprocess.DEVNULL))
        os.close(to_child)
        os.close(from_child)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self._r], [], [], max(0.0, deadline - time.time()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.seq += 1
        msg = {"id": self.seq, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.seq:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        deadline = time.time() + self.timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)
        shutil.rmtree(self.profile, ignore_errors=True)


def inspect(page: Path, screenshot: Path) -> dict:
    """Loads `page`; returns {errors: [...], images: [{figure, complete, width, height}], title, requests: [...]}
    and writes a full-page PNG screenshot."""
    b = Browser()
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            b.send(f"{domain}.enable", session=s)
        b.send("Page.navigate", {"url": page.resolve().as_uri()}, session=s)
        b.wait_event("Page.loadEventFired")
        images = json.loads(b.send("Runtime.evaluate", {"expression": (
            "JSON.stringify(Array.from(document.images).map(i => ({figure: i.dataset.figure, complete: i.complete,"
            " width: i.naturalWidth, height: i.naturalHeight})))"), "returnByValue": True},
        session=s)["result"]["value"])
        title = b.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                       session=s)["result"]["value"]
        size = b.send("Page.getLayoutMetrics", session=s)["cssContentSize"]
        shot = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}, session=s)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        events = list(b.events)
    finally:
        b.close()
    errors = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            errors.append(p["exceptionDetails"].get("text"))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            errors.append(str(p.get("args")))
        elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
            errors.append(p["entry"].get("text"))
        elif m == "Network.loadingFailed":
            errors.append(f"load failed: {p.get('errorText')}")
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    return {"errors": errors, "images": images, "title": title, "requests": requests}
