"""The docs site and the HTML report in a real headless browser (Debian's chromium): each page
renders (a title, text, its stylesheets loaded), every image loads, and every link on the page
leads to a page the site serves. A small page of ours (check.html, same origin) loads the page
in a frame, reads it once loaded, and writes what it saw into its own DOM, which chromium's
--dump-dom prints: no driver or extra package needed."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = [pytest.mark.functional, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

CHECK_HTML = """<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" width="1280" height="900"></iframe>
<script>
const f = document.getElementById("f");
f.onload = () => setTimeout(() => {
  const d = f.contentDocument;
  const sheets = [...d.querySelectorAll('link[rel="stylesheet"]')];
  document.getElementById("result").textContent = JSON.stringify({
    title: d.title, text: d.body.innerText.length,
    stylesheets: sheets.length, styled: sheets.filter(l => l.sheet !== null).length,
    images: [...d.images].map(i => ({src: (i.currentSrc || i.src).slice(0, 80), ok: i.complete && i.naturalWidth > 0})),
    links: [...d.querySelectorAll("a[href]")].map(a => a.href)});
}, 300);
f.src = new URLSearchParams(location.search).get("page");
</script></body></html>
"""


def _serve(folder: Path):
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _look(base: str, page: str, tmp: Path) -> dict:
    # chromium keeps caches under $HOME and the XDG folders whatever --user-data-dir says: all in tmp
    home = tmp / "chromium-home"
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"))
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
                        f"{base}/check.html?page={page}"], capture_output=True, text=True, timeout=120, env=env)
    found = re.search(r'<pre id="result">(.*?)</pre>', r.stdout, flags=re.S)
    assert found and found.group(1) != "pending", f"{page}: the page did not load\n{r.stdout[-500:]}{r.stderr[-500:]}"
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&quot;", '"'))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url.split("#")[0], timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (Debian: apt-get install chromium; .ci/run installs it)")
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_the_docs_site_and_the_html_report_render_in_a_browser(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    # the HTML report of a workspace with a serving profile (its plots are images)
    work = tmp_path / "work"
    work.mkdir()
    nav = [sys.executable, "-m", "navigator"]
    for args in (["convert", str(ROOT / "examples" / "tiny_classifier.onnx"), "--targets", "onnx", "--no-profile"],
                 ["profile", "navigator_workdir", "--triton", "--cpu-backends", "--budget-s", "8",
                  "--concurrency", "1:2", "--instance-counts", "1", "--max-batch-sizes", "1,2"],
                 ["report", "navigator_workdir", "--html"]):
        r = subprocess.run(nav + args, cwd=work, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
    (site / "report").mkdir()
    shutil.copy(work / "navigator_workdir" / "tiny_classifier.nav.workspace" / "report" / "summary.html",
                site / "report" / "summary.html")
    (site / "check.html").write_text(CHECK_HTML, encoding="utf-8")
    server = _serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        pages = ["/", "/getting-started/", "/how-to/ensembles/", "/concepts/verification/", "/reference/cli/",
                 "/reference/status-yaml/", "/report/summary.html"]
        seen_links: set[str] = set()
        for page in pages:
            got = _look(base, page, tmp_path)
            assert got["title"] and got["text"] > 500, (page, got["title"], got["text"])
            assert got["styled"] == got["stylesheets"], (page, "a stylesheet did not load")
            assert all(i["ok"] for i in got["images"]), (page, [i for i in got["images"] if not i["ok"]])
            seen_links.update(u for u in got["links"] if u.startswith(base))
        report = _look(base, "/report/summary.html", tmp_path)
        assert len(report["images"]) >= 2, report["images"]     # the serving plots, embedded
        broken = sorted(u for u in seen_links if _status(u) != 200)
        assert not broken, broken
        assert len(seen_links) > 50
    finally:
        server.shutdown()
