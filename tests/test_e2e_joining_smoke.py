"""CPU smoke test of profiling/e2e_joining.py: a toy Llama, eager steps of every configuration,
over a folder of schemas where one does not compile (it is left out, not a crash)."""
import json
import sys
from pathlib import Path

import pytest

from gxg import vocabularies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "profiling"))

pytestmark = pytest.mark.skipif(bool(vocabularies.missing_packages("qwen")),
                                reason="the Qwen vocabulary is not installed")

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "array", "items": {"type": "integer"}},
    {"type": "array", "uniqueItems": True, "items": {"type": "object"}},  # not compiled
    {"type": "object", "properties": {"b": {"type": "number"}}, "required": ["b"]},
    {"type": "string", "maxLength": 5},
]


def test_e2e_joining_runs_on_cpu_and_leaves_out_what_does_not_compile(tmp_path, capsys):
    import e2e_joining

    folder = tmp_path / "maskbench"
    folder.mkdir()
    for index, schema in enumerate(SCHEMAS):
        (folder / f"s{index}.json").write_text(json.dumps({"schema": schema, "tests": []}))
    payload = e2e_joining.main([
        "--device", "cpu", "--layers", "1", "--hidden", "32", "--heads", "4", "--kv-heads", "2",
        "--intermediate", "64", "--max-len", "12", "--prompt-len", "4", "--batches", "2",
        "--steps", "6", "--join-every", "2", "--schemas", "5", "--mask-builder", "thread",
        "--maskbench", str(folder), "--out", str(tmp_path / "joining.json")])
    assert "s2.json left out: unsupported keyword 'uniqueItems'" in capsys.readouterr().err
    results = payload["results"]
    assert {r["config"] for r in results} >= {"off", "gxg_steady", "gxg_joining_lazy",
                                              "gxg_joining"}
    joined = {join["file"] for r in results for join in r.get("joins", ()) if "file" in join}
    assert joined and "s2.json" not in joined
    assert all(r["mean_ms"] > 0 for r in results)
