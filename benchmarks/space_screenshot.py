"""Drive the search Space in headless Chromium as a person would, and save a screenshot.

    python benchmarks/space_screenshot.py                       # -> docs/img/search_demo.png
    python benchmarks/space_screenshot.py --retriever "SPLADE-CAI" --query "..." --out /tmp/x.png

Starts ``spaces/search_demo/app.py`` on a free localhost port (GRADIO_SERVER_PORT), starts Debian's
``chromium`` headless (``--headless --no-sandbox --disable-gpu --disable-background-networking
--disable-component-update``), and talks to it with the Chrome DevTools Protocol over
``--remote-debugging-pipe`` (file descriptors 3/4: no websocket client, no downloaded browser).
The corpus is the first of the app's list (``HF_DR_CORPUS`` / ``HF_DR_CORPORA``: names only,
never paths). It picks the retriever in the dropdown, types the query into the query box with real key input
(``Input.insertText``), clicks *Search* with the mouse, waits for the ranked list, prints the hits
it sees in the page and saves a full-page PNG. Models come from the app's environment variables
(defaults: all-MiniLM-L6-v2 for dense, as ``hf-dr quickstart``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "spaces" / "search_demo" / "app.py"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


# argv: the fd to become 3, the fd to become 4, then the program and its arguments (both copied
# above 9 first, so that moving one to 3 or 4 cannot overwrite the other; the copies are closed)
_FDS_3_4 = """import fcntl, os, sys
fds = [int(fd) for fd in sys.argv[1:3]]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
for fd in fds:
    os.close(fd)
os.dup2(high[0], 3)
os.dup2(high[1], 4)
for fd in high:
    os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


class CDPPipe:
    """Chrome DevTools Protocol over ``--remote-debugging-pipe``: JSON messages separated by NUL,
    commands written to the browser's fd 3, replies / events read from its fd 4."""

    def __init__(self, chromium: str, user_data_dir: str, width: int, height: int):
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        args = [chromium, *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={user_data_dir}",
                f"--window-size={width},{height}", "--hide-scrollbars", "--mute-audio", "about:blank"]
        # The browser expects the pipe at fds 3 (in) and 4 (out). No Python runs between fork and exec
        # here (a preexec_fn may deadlock in the child of a process with threads, and Popen then waits
        # for it for ever): a fresh Python, handed both ends by pass_fds, moves them to 3 and 4 and
        # execs the browser.
        self.proc = subprocess.Popen([sys.executable, "-c", _FDS_3_4, str(to_browser_r), str(from_browser_w), *args],
                                     pass_fds=(to_browser_r, from_browser_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None

    def _read_message(self, timeout: float) -> dict:
        import select

        deadline = time.time() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no message from chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, timeout: float = 60, session: bool = True) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message(timeout)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def attach_page(self) -> None:
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]

    def js(self, expression: str, timeout: float = 60):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails'].get('text')} in {expression[:80]}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str, poll: float = 0.5):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.js(expression)
            if v:
                return v
            time.sleep(poll)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")

    def click(self, selector: str) -> None:
        """A real mouse click at the centre of the element."""
        box = self.js(f"(() => {{const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                      f" return [r.x + r.width / 2, r.y + r.height / 2];}})()")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1})

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:  # noqa: BLE001 - the process is terminated below anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        os.close(self._r)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(env_extra: dict | None = None, log_path: Path | None = None) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "PYTHONPATH": str(REPO), **(env_extra or {})}
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, str(APP)], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError("the app did not start" + (f"; see {log_path}" if log_path else "")) from None
            time.sleep(0.5)


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def screenshot(url: str, out: Path, query: str, retriever: str | None = None, width: int = 1280,
               height: int = 1000, timeout: float = 600) -> dict:
    """Open ``url``, choose ``retriever``, type ``query``, click Search, wait for the hits, save a
    full-page PNG to ``out``; returns what the page showed (status line, hits)."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="hf-dr-chromium-") as profile:
        cdp = CDPPipe(chromium, profile, width, height)
        try:
            cdp.attach_page()
            cdp.send("Page.enable")
            cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                            "deviceScaleFactor": 1, "mobile": False})
            cdp.send("Page.navigate", {"url": url})
            cdp.wait_for("!!document.querySelector('#query textarea')", 120, "the app to load")
            if retriever:
                # a click that lands while the page is still hydrating is lost: click again until the list opens
                deadline = time.time() + 120
                while True:
                    cdp.click("#retriever input")
                    try:
                        cdp.wait_for("document.querySelectorAll('ul[role=listbox] li').length > 0", 5,
                                     "the retriever list")
                        break
                    except TimeoutError:
                        if time.time() > deadline:
                            raise
                ok = cdp.js(f"(() => {{const li = [...document.querySelectorAll('ul[role=listbox] li')]"
                            f".find(e => e.getAttribute('aria-label') === {json.dumps(retriever)});"
                            f" if (!li) return false; li.scrollIntoView(); return true;}})()")
                if not ok:
                    raise RuntimeError(f"retriever {retriever!r} is not offered by the app")
                cdp.click(f"ul[role=listbox] li[aria-label={json.dumps(retriever)}]")
                cdp.wait_for(f"document.querySelector('#retriever input').value === {json.dumps(retriever)}", 10,
                             "the retriever to be selected")
            for _ in range(3):  # the layout may still be settling: type until the box holds the query
                cdp.click("#query textarea")
                cdp.js("document.querySelector('#query textarea').focus()")
                cdp.send("Input.insertText", {"text": query})
                if cdp.js("document.querySelector('#query textarea').value") == query:
                    break
                cdp.js("(() => { const t = document.querySelector('#query textarea'); t.value = ''; "
                       "t.dispatchEvent(new Event('input', {bubbles: true})); })()")
                time.sleep(1.0)
            else:
                raise RuntimeError("the query box did not take the query")
            t0 = time.time()
            while True:  # "the index is being built: try again in a moment" -> click again
                cdp.click("#search")
                cdp.wait_for("document.querySelectorAll('#results .hit').length > 0 || "
                             "(document.querySelector('#status') || {}).innerText?.includes('⚠️')",
                             max(1.0, timeout - (time.time() - t0)), "the ranked list")
                status = cdp.js("(document.querySelector('#status') || {}).innerText || ''")
                if "being built" not in status or time.time() - t0 > timeout:
                    break
                time.sleep(2.0)
            seconds = time.time() - t0
            time.sleep(1.0)  # let the table render
            try:  # the "being built" toasts of earlier clicks close by themselves: shoot the page without them
                cdp.wait_for("document.querySelectorAll('.toast-body, [data-testid=toast-body]').length === 0", 20,
                             "earlier notices to close")
            except Exception:
                pass
            seen = cdp.js("""(() => ({
                status: document.querySelector('#status').innerText.trim(),
                corpus: (document.querySelector('#corpus input') || {}).value,
                hits: [...document.querySelectorAll('#results .hit .head')].map(e => e.innerText.trim())}))()""")
            page_text = cdp.js("document.body.innerText")
            seen["server_path_shown"] = str(REPO) in page_text or str(REPO.parent) + "/" in page_text
            full = cdp.send("Page.getLayoutMetrics")["cssContentSize"]
            cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": int(min(full["height"], 4000)),
                                                            "deviceScaleFactor": 1, "mobile": False})
            time.sleep(0.5)
            png = cdp.send("Page.captureScreenshot", {"format": "png"})["data"]
        finally:
            cdp.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(png))
    return {**seen, "seconds_to_results": round(seconds, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", default="vitamin D deficiency and bone loss")
    ap.add_argument("--retriever", default=None, help="as labelled in the app (default: the app's, Dense)")
    ap.add_argument("--out", default=str(REPO / "docs" / "img" / "search_demo.png"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for the first results")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_app(log_path=Path(tmp) / "app.log")
        try:
            seen = screenshot(f"http://127.0.0.1:{port}/", Path(a.out), a.query, a.retriever, timeout=a.timeout)
        except Exception:
            print((Path(tmp) / "app.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            stop_app(proc)
    print(json.dumps(seen, indent=1, ensure_ascii=False))
    print(f"wrote {a.out}")
    return 0 if seen["hits"] and not seen["server_path_shown"] else 1


if __name__ == "__main__":
    sys.exit(main())
