"""Regenerate docs/img/report.png: a real `memdoc bill … --html` page, photographed by headless Chromium.

    python scripts/report_screenshot.py            # needs Debian's chromium (apt-get install -y chromium)

The page is written by the installed CLI (`python -m memdoc.cli`, the README's Llama-2-7b example on an
RTX 4090) into a temporary folder; Chromium's own `--headless --screenshot` takes the picture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "report.png"
COMMAND = ["bill", "meta-llama/Llama-2-7b", "--gpu", "rtx-4090"]


def main() -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("chromium is absent: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run(
            [sys.executable, "-m", "memdoc.cli", *COMMAND, "--html", str(page)], check=True, capture_output=True
        )
        subprocess.run(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=960,1020",
                f"--screenshot={OUT}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
