"""A page the gate writes, opened in headless Chromium: its DOM once its scripts have run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from processes import run

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Put first in the page's <head>: every error the page's script raises or logs is kept.
CATCH_ERRORS = """<script>window.__errors=[];
window.addEventListener("error",function(e){window.__errors.push(String(e.message));});
var __error=console.error;console.error=function(){
window.__errors.push(Array.prototype.join.call(arguments," "));__error.apply(console,arguments);};
</script>"""


def browser() -> str:
    """Chromium or Chrome; CI installs Debian's chromium (.ci/run), so it never skips there."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("no Chromium on this CI machine: .ci/run installs Debian's `chromium`")
    pytest.skip("no Chromium here: `apt-get install chromium` (CI installs it)")


def probed(page: str, probe: str) -> str:
    """``page`` with `CATCH_ERRORS` first in its head and ``probe`` last in its body."""
    return page.replace("<head>", "<head>" + CATCH_ERRORS, 1).replace("</body>", probe + "</body>")


def rendered(page: Path, profile: Path, window: tuple[int, int] | None = None) -> str:
    """The page's DOM once its scripts (and their timers) have run, from headless Chromium;
    in a window of ``window`` (width, height) pixels where given."""
    size = [f"--window-size={window[0]},{window[1]}"] if window else []
    done = run(
        [
            browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
            *size, "--virtual-time-budget=5000", "--dump-dom", page.as_uri(),
        ],
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
