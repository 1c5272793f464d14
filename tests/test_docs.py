"""Every command in a documentation code block marked `sh runnable` runs and exits 0."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks():
    out = []
    for path in DOCS:
        for i, block in enumerate(re.findall(r"```(?:sh|bash) runnable\n(.*?)```",
                                             path.read_text(), re.S)):
            out.append(pytest.param(block, id=f"{path.name}-{i}"))
    return out


def test_the_docs_have_runnable_blocks():
    assert len(_blocks()) >= 3


@pytest.mark.parametrize("block", _blocks())
def test_runnable_block(block, tmp_path):
    pytest.importorskip("matplotlib")
    env = {k: v for k, v in os.environ.items() if k != "AIRPLAN_CATALOG"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for line in block.splitlines():
        line = line.split("  #")[0].strip()
        if not line or line.startswith("#"):
            continue
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, line
