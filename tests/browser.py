"""A real headless browser (Debian's Chromium, which `make test` installs with the other system packages) looking at
a page from its file, as a person opening it on a laptop would: a screenshot of its first screen, kept under
.cache/test-artifacts/, and the page as the browser parsed it. The network is cut (every host name resolves to
nothing), so a page that needed anything from elsewhere would show it missing."""

import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(REPO, ".cache", "test-artifacts")
FIRST_SCREEN = (1280, 800)


def _chromium() -> list:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "no chromium on PATH: make system-packages installs it (Debian's chromium package)"
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"]


def screenshot(page: str, name: str, size: tuple = FIRST_SCREEN) -> tuple:
    """The page's first screen as a PNG under ARTIFACTS (its path) and what the browser logged."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    out = os.path.join(ARTIFACTS, name)
    done = subprocess.run(_chromium() + ["--window-size=%d,%d" % size, "--screenshot=%s" % out, "file://" + page],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and os.path.exists(out), done.stderr[-3000:]
    return out, done.stderr


def dom(page: str) -> str:
    """The page as the browser parsed it (its DOM, serialised)."""
    done = subprocess.run(_chromium() + ["--dump-dom", "file://" + page], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def has_colour(png: str, colour: tuple, at_least: int = 20) -> bool:
    """Whether the screenshot has at least that many pixels of the colour (within a small tolerance)."""
    import numpy  # pylint: disable=import-outside-toplevel
    from matplotlib import image  # pylint: disable=import-outside-toplevel

    pixels = (image.imread(png)[:, :, :3] * 255).astype(int)
    return int((abs(pixels - numpy.array(colour)).sum(axis=2) < 30).sum()) >= at_least
