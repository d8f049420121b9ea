"""README.md works as written.

* Every ```python block runs as is, each in a fresh subprocess of the .venv's interpreter (the one
  the README's install command makes; this interpreter where there is none), from an empty
  directory. A block that needs CUDA (it names a "cuda" device) is marked gpu and skipped
  where none exists.
* The main job: the last ``&&`` part of the README's install line (``.venv/bin/gxg generate
  --json --prompt ...``), run from the repository root exactly as written plus ``--seed N`` for
  a few seeds, exits 0 with JSON on stdout in json.dumps's one-line layout. (Slow: up to 256
  tokens a seed on the CPU.)
* What the README points to exists: the design notes, and the CPU index for torch.

The subprocesses share the session's model cache (``cli_helpers.model_cache_dir``).
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
import torch

from cli_helpers import (PYTHON, REPO, assert_json_dumps_layout, gxg_env,  # noqa: F401
                         model_cache_dir, needs_smollm2, use_session_model_cache)

README = (REPO / "README.md").read_text(encoding="utf-8")
MAIN_JOB_SEEDS = (0, 1, 2)


def fenced_blocks(language: str):
    """[(the heading above it, its text)] of every ```language block of the README."""
    blocks, heading, fence = [], "", None  # fence: (its language, its lines) while inside one
    for line in README.splitlines():
        if fence is None and line.startswith("```"):
            fence = (line[3:].strip(), [])
        elif fence is not None and line.strip() == "```":
            if fence[0] == language:
                blocks.append((heading, "\n".join(fence[1]) + "\n"))
            fence = None
        elif fence is not None:
            fence[1].append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    return blocks


def needs_cuda(code: str) -> bool:
    return re.search(r"""device\s*=\s*["']cuda""", code) is not None


PYTHON_BLOCKS = fenced_blocks("python")


def test_the_readme_has_python_examples():
    headings = [heading for heading, _ in PYTHON_BLOCKS]
    assert "Using it" in headings and "With transformers" in headings
    assert any(needs_cuda(code) for _, code in PYTHON_BLOCKS)


@needs_smollm2
@pytest.mark.parametrize("code", [pytest.param(code, marks=[pytest.mark.gpu] if needs_cuda(code)
                                               else []) for _, code in PYTHON_BLOCKS],
                         ids=[f"{i}-{heading}" for i, (heading, _) in enumerate(PYTHON_BLOCKS)])
def test_python_example_runs(code, tmp_path):
    if needs_cuda(code) and not torch.cuda.is_available():
        pytest.skip("the example needs a CUDA device")
    result = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=600,
                            cwd=tmp_path, env=gxg_env())
    assert result.returncode == 0, result.stderr[-3000:]


def main_job_command() -> str:
    """The last ``&&`` part of the README's install line (the first bash block of "Run the main
    job")."""
    [line] = [code for heading, code in fenced_blocks("bash")
              if heading.startswith("Run the main job")][0].strip().splitlines()
    return line.split("&&")[-1].strip()


def test_the_main_job_command_is_gxg_generate():
    assert main_job_command().startswith(".venv/bin/gxg generate --json ")


@pytest.mark.slow
@needs_smollm2
@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "gxg").exists(),
                    reason="no .venv/bin/gxg: the README's install command has not been run")
@pytest.mark.parametrize("seed", MAIN_JOB_SEEDS)
def test_main_job_command_prints_json(seed):
    command = shlex.split(main_job_command()) + ["--seed", str(seed)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO,
                            env=gxg_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert isinstance(json.loads(result.stdout), (dict, list))
    assert_json_dumps_layout(result.stdout, None)


def test_the_readme_points_to_what_exists():
    assert "gxg/DESIGN.md" in README and (REPO / "gxg" / "DESIGN.md").is_file()
    assert "--index-url https://download.pytorch.org/whl/cpu" in README
    for option in ("--indent", "--any-whitespace", "--max-whitespace", "--no-cache",
                   "GXG_CACHE_DIR", "--version"):
        assert option in README
