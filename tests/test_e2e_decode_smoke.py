"""CPU smoke test of profiling/e2e_decode.py: a toy Llama, a few eager steps of every
configuration, so that its logic is checked here (the real run is on the GPU machine)."""
import sys
from pathlib import Path

import pytest

from gxg import vocabularies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "profiling"))

pytestmark = pytest.mark.skipif(bool(vocabularies.missing_packages("qwen")),
                                reason="the Qwen vocabulary is not installed")


def test_e2e_decode_runs_on_cpu(tmp_path):
    import e2e_decode

    out = tmp_path / "e2e.json"
    payload = e2e_decode.main([
        "--device", "cpu", "--layers", "1", "--hidden", "32", "--heads", "4", "--kv-heads", "2",
        "--intermediate", "64", "--max-len", "12", "--prompt-len", "4", "--batches", "2",
        "--steps", "9", "--warmup", "1", "--grammars", "json", "--out", str(out)])
    assert out.is_file()
    results = payload["results"]
    assert not [r for r in results if "error" in r]
    configs = {r["config"] for r in results}
    assert {"off", "off_sync", "gxg"} <= configs
    for r in results:
        assert r["ms_per_step"] > 0
        assert r["rejected"] == r.get("errors", 0)  # sampled from masked logits
    assert payload["table"][0]["grammar"] == "builtin_json"


def test_speculative_mode_runs_on_cpu(tmp_path):
    """``--speculative``: draft masks and verification in every configuration; the grammar's
    rows take only tokens their masks allow, so nothing is rejected (no errors here)."""
    import e2e_decode

    out = tmp_path / "spec.json"
    payload = e2e_decode.main([
        "--speculative", "--device", "cpu", "--layers", "1", "--hidden", "32", "--heads", "4",
        "--kv-heads", "2", "--intermediate", "64", "--max-len", "24", "--prompt-len", "4",
        "--batches", "2", "--drafts", "2", "--steps", "8", "--warmup", "1",
        "--grammars", "json", "--out", str(out)])
    assert out.is_file()
    results = payload["results"]
    assert not [r for r in results if "error" in r]
    assert {"off", "off_sync", "gxg"} <= {r["config"] for r in results}
    for r in results:
        assert r["ms_per_step"] > 0
        assert 2 * 8 <= r["tokens"] <= 2 * 8 * 3   # 1 .. k + 1 tokens per row and step
        assert r["rejected"] == r["errors"] == 0
    assert payload["table"][0]["k"] == 2
