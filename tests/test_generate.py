"""``gxg generate`` (gxg/__main__.py over gxg/generate.py) with the embedded SmolLM2 model.

Short greedy generations on the CPU under a JSON schema file, a regex and an EBNF file: stdout
must be exactly the generated text, and that text must be valid (json + jsonschema,
re.fullmatch, the reference recognizer) and JSON laid out as json.dumps writes it (one line, or
with --indent); the device-op grammar backend (the CUDA path, here on
its CPU kernels) must generate the same text as the host matcher. Then the ways the command
refuses: a schema gxg cannot compile (exit 2, the keyword named, no traceback, also through
``python -m gxg``), bad arguments (exit 2), no or two grammar options (argparse usage error),
a token budget below the grammar's shortest output (exit 1, said on stderr). Token budgets:
sampled generations with tight budgets end complete and valid; --no-budget lets them run out. The model loads once
(``load_model`` is cached), through the session's model cache (``cli_helpers``). The other
command-line behaviours are in test_cli.py.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from cli_helpers import (assert_json_dumps_layout, model_cache_dir,  # noqa: F401 (fixtures)
                         needs_smollm2, run_cli, use_session_model_cache)
from gxg.__main__ import main
from gxg.generate import UsageError, read_schema_argument

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer"}},
          "required": ["name", "age"]}
GREEDY_CPU = ["--temperature", "0", "--device", "cpu"]


@needs_smollm2
def test_schema_generation_is_valid_json(capsys, tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    status, out, err = run_cli(capsys, "--schema", str(path), *GREEDY_CPU,
                               "--prompt", "Give a person's name and age as JSON.",
                               "--max-new-tokens", "64")
    assert status == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    assert_json_dumps_layout(out, None)
    assert "tokens/s" in err and "TTFT" in err and "grammar" in err


@needs_smollm2
def test_indented_schema_generation(capsys):
    status, out, err = run_cli(capsys, "--schema", json.dumps(SCHEMA), "--indent", "2",
                               *GREEDY_CPU, "--prompt", "Give a person's name and age as JSON.",
                               "--max-new-tokens", "64")
    assert status == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    assert_json_dumps_layout(out, 2)


@needs_smollm2
def test_regex_generation_matches(capsys):
    pattern = r"[A-Z][a-z]{2,10}"
    status, out, err = run_cli(capsys, "--regex", pattern, *GREEDY_CPU,
                               "--prompt", "Name a cat.", "--max-new-tokens", "16")
    assert status == 0, err
    assert re.fullmatch(pattern, out)


@needs_smollm2
def test_ebnf_grammar_file(capsys, tmp_path):
    from gxg import Grammar
    from gxg.testing import grammar_accepts

    ebnf = 'root ::= animal " says " sound\nanimal ::= "cat" | "dog"\nsound ::= [a-z]+ "!"'
    path = tmp_path / "animal.ebnf"
    path.write_text(ebnf)
    status, out, err = run_cli(capsys, "--grammar", str(path), *GREEDY_CPU,
                               "--prompt", "What does a cat say?", "--max-new-tokens", "16")
    assert status == 0, err
    assert grammar_accepts(Grammar.from_ebnf(ebnf), out), out


@needs_smollm2
def test_host_and_device_op_grammar_backends_generate_the_same_text():
    """The CUDA path (GrammarBatch ops; here their CPU kernels) against the CPU path."""
    from gxg.generate import (DecodingOptions, GenerationStats, GrammarRequest, build_grammar,
                              compile_grammar, generate, load_model)

    loaded = load_model(None, "cpu")
    compiled = compile_grammar(build_grammar(GrammarRequest("json_schema", json.dumps(SCHEMA))),
                               loaded.tokenizer_info)
    texts = {}
    for backend in ("matcher", "batch"):
        options = DecodingOptions(max_new_tokens=64, temperature=0, grammar_backend=backend)
        stats = GenerationStats()
        texts[backend] = "".join(generate(loaded, compiled, "A person as JSON.", options, stats))
        assert stats.complete and stats.stop_reason in ("stop token", "grammar complete")
    assert texts["matcher"] == texts["batch"]
    jsonschema.validate(json.loads(texts["batch"]), SCHEMA)


@needs_smollm2
def test_a_budget_below_the_shortest_output_is_an_error(capsys):
    # SmolLM2 spells digits one per token: twelve digits need twelve tokens
    status, out, err = run_cli(capsys, "--regex", "[0-9]{12}", *GREEDY_CPU,
                               "--max-new-tokens", "3")
    assert status == 1
    assert out  # what was generated is shown ...
    assert "INCOMPLETE" in err and "--max-new-tokens 3" in err  # ... and said to be unfinished
    assert "no output that short" in err


@needs_smollm2
def test_without_the_budget_the_output_runs_out(capsys):
    status, out, err = run_cli(capsys, "--json", *GREEDY_CPU, "--max-new-tokens", "3",
                               "--no-budget")
    assert status == 1
    assert out and "INCOMPLETE" in err and "--no-budget" in err
    status, out, err = run_cli(capsys, "--json", *GREEDY_CPU, "--max-new-tokens", "3")
    assert status == 0, err  # the same budget, kept: the model closes what it opened
    json.loads(out)


TIGHT_SCHEMA = {"type": "object",
                "properties": {"name": {"type": "string"},
                               "tags": {"type": "array", "items": {"type": "string"},
                                        "minItems": 1},
                               "note": {"type": "string"}},
                "required": ["name", "tags"]}


@needs_smollm2
@pytest.mark.parametrize("grammar,budget", [
    (["--json"], 40),
    (["--json", "--indent", "2"], 40),
    (["--json", "--any-whitespace"], 30),
    (["--schema", json.dumps(TIGHT_SCHEMA)], 40),
    (["--schema", json.dumps(TIGHT_SCHEMA)], 24),
])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tight_budgets_end_with_complete_valid_output(capsys, grammar, budget, seed):
    """Sampled (temperature 1, a fresh draw per seed) with a budget the small model would
    otherwise overrun: the output is complete, parses and satisfies the schema."""
    status, out, err = run_cli(capsys, *grammar, "--temperature", "1", "--device", "cpu",
                               "--seed", str(seed), "--max-new-tokens", str(budget),
                               "--prompt", "Describe a cat as JSON with many details.")
    assert status == 0, err
    value = json.loads(out)
    if grammar[0] == "--schema":
        jsonschema.validate(value, TIGHT_SCHEMA)
    else:
        assert isinstance(value, (dict, list))
    assert re.search(r"\b(\d+) tokens? in", err) and \
        int(re.search(r"\b(\d+) tokens? in", err).group(1)) <= budget


def test_schema_argument_is_a_file_or_inline_json(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text('{"type": "integer"}')
    assert read_schema_argument(str(path)) == '{"type": "integer"}'
    assert read_schema_argument(' {"type": "string"}') == ' {"type": "string"}'
    with pytest.raises(UsageError, match="no such file"):
        read_schema_argument(str(tmp_path / "missing.json"))


def test_uncompilable_schema_exits_2_naming_the_keyword(capsys):
    status, out, err = run_cli(capsys, "--schema", '{"type": "array", "uniqueItems": true}')
    assert status == 2
    assert "uniqueItems" in err and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize("args, message", [
    (["--schema", "no-such-schema.json"], "no such file"),
    (["--grammar", "no-such-grammar.ebnf"], "no-such-grammar.ebnf"),
    (["--regex", "(ab"], "unterminated group"),
])
def test_bad_grammar_arguments_exit_2(capsys, args, message):
    status, out, err = run_cli(capsys, *args)
    assert status == 2 and message in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine has no CUDA device")
def test_cuda_without_a_device_exits_2(capsys):
    status, out, err = run_cli(capsys, "--json", "--device", "cuda")
    assert status == 2 and "no CUDA device" in err


@pytest.mark.parametrize("args", [[], ["--json", "--regex", "a"]])
def test_exactly_one_grammar_option_is_required(capsys, args):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "hi", *args])
    assert exit_info.value.code == 2
    assert "--schema" in capsys.readouterr().err


def test_python_m_gxg_reports_an_uncompilable_schema():
    result = subprocess.run(
        [sys.executable, "-m", "gxg", "generate", "--schema", '{"uniqueItems": true}'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "uniqueItems" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
