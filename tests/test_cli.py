"""The ``gxg`` command line (gxg/__main__.py) and what it relies on in gxg/generate.py: the JSON
layouts, argument checks, messages, Ctrl-C and the model cache.

* ``--version``, and ``--help`` in plain text listing the exit statuses;
* every usage error exits 2 with a message naming the problem and no traceback: bad
  temperatures, token counts, seeds and layout values, layout options with --regex/--grammar,
  a ``--model`` that holds no model or that transformers cannot load;
* a warning is one line, ``gxg: warning: ...``, without a source path;
* Ctrl-C (a real SIGINT sent to a subprocess, while loading and while generating) ends quietly
  with status 130 and says the output is incomplete;
* the layouts' languages (reference recognizer): one line as json.dumps writes it, --indent,
  bounded flexible whitespace; --json is an object or an array;
* the model cache: a second start reads it, a corrupt or partial entry is rebuilt with a
  warning, an unwritable cache is a warning, an interrupted write leaves nothing, --no-cache
  does not touch it.

In-process calls of ``main`` where no subprocess is needed; the model cache is the session's
(``cli_helpers.model_cache_dir``), so the GGUF file is converted once per session.
"""
from __future__ import annotations

import json
import shutil
import signal

import pytest
import torch

import gxg
from cli_helpers import (gxg_process, model_cache_dir, needs_smollm2, run_cli,  # noqa: F401
                         run_gxg, use_session_model_cache)
from gxg.__main__ import main
from gxg.generate import (CACHE_MANIFEST, DecodingOptions, GenerationStats, GrammarRequest,
                          JsonLayout, ModelCacheWarning, UsageError, build_grammar,
                          model_cache_entry)
from gxg.testing import grammar_accepts

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
DOCUMENTS = [{}, [], {"a": [1, {"b": None}], "c": "x\ny é"}, [1.5, True, False, "", [[]]],
             {"name": "Tom", "age": 3}]


# ------------------------------------------------------------------------------ help, version


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"gxg {gxg.__version__}"


@pytest.mark.parametrize("argv", [["--help"], ["generate", "--help"]])
def test_help_is_plain_text_and_lists_the_exit_statuses(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out
    assert "exit status:" in out
    for status, words in [("0", "complete"), ("1", "INCOMPLETE"), ("2", "usage error"),
                          ("130", "interrupted")]:
        assert any(line.split()[:1] == [status] and words in line for line in out.splitlines())
    if argv[0] == "generate":
        for option in ("--indent", "--any-whitespace", "--max-whitespace", "--no-cache",
                       "--seed"):
            assert option in out
        assert "model cache:" in out and "GXG_CACHE_DIR" in out


# ------------------------------------------------------------------------------ usage errors


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--temperature", "-inf"], "--temperature"),
    (["--temperature", "warm"], "--temperature"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--max-new-tokens", "1.5"], "--max-new-tokens"),
    (["--max-new-tokens", "many"], "--max-new-tokens"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2 ** 64)], "--seed"),
    (["--indent", "-2"], "--indent"),
    (["--any-whitespace", "--max-whitespace", "0"], "--max-whitespace"),
    (["--indent", "2", "--any-whitespace"], "not allowed with"),
])
def test_bad_option_values_are_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--json", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--json", "--max-whitespace", "3"], "add --any-whitespace"),
    (["--regex", "a", "--indent", "2"], "not to --regex"),
    (["--grammar", "g.ebnf", "--any-whitespace"], "not to --grammar"),
])
def test_layout_options_need_json_output(capsys, args, message):
    status, out, err = run_cli(capsys, *args)
    assert status == 2 and message in err and "Traceback" not in err and out == ""


def _empty(path):
    return path


def _gguf_without_config(path):
    (path / "model.gguf").write_bytes(b"GGUF")
    return path


def _config_only(path):
    (path / "config.json").write_text('{"model_type": "llama"}')
    return path


def _unreadable_tokenizer(path):
    _config_only(path)
    (path / "tokenizer.json").write_text("not json")
    return path


def _not_a_gguf_file(path):
    (path / "model.gguf").write_text("not a GGUF file")
    return path / "model.gguf"


def _other_file(path):
    (path / "weights.bin").write_bytes(b"\0")
    return path / "weights.bin"


@pytest.mark.parametrize("make, message", [
    (_empty, "holds no model (no config.json"),
    (_gguf_without_config, "to load a GGUF file, name it"),
    (_config_only, "holds no tokenizer"),
    (_unreadable_tokenizer, "transformers could not load its tokenizer"),
    (_not_a_gguf_file, "transformers could not load its tokenizer"),
    (_other_file, "not a local model directory or .gguf file"),
])
def test_a_model_path_without_a_model_is_a_usage_error(capsys, tmp_path, make, message):
    status, out, err = run_cli(capsys, "--json", "--model", str(make(tmp_path)), "--no-cache")
    assert status == 2, err
    assert message in err and "Traceback" not in err and out == ""


def test_decoding_options_refuse_bad_values():
    for bad in ({"temperature": -1.0}, {"temperature": float("nan")},
                {"temperature": float("inf")}, {"max_new_tokens": 0}, {"max_new_tokens": 1.5},
                {"seed": -1}, {"seed": 2 ** 64}):
        with pytest.raises(UsageError, match=next(iter(bad))):
            DecodingOptions(**bad)


# ------------------------------------------------------------------------------ messages


def test_a_warning_is_one_line_without_a_source_path(capsys, tmp_path):
    # maxLength above 2048 is not enforced (warned); the empty --model then ends the run
    for _ in range(2):  # shown every time, not once per process
        status, out, err = run_cli(capsys, "--schema", '{"type": "string", "maxLength": 5000}',
                                   "--model", str(tmp_path))
        assert status == 2
        warnings = [line for line in err.splitlines() if "maxLength" in line]
        assert len(warnings) == 1 and warnings[0].startswith("gxg: warning: maxLength at # ")
        assert ".py" not in err and "warnings.warn" not in err


def test_messages_of_a_subprocess_have_no_traceback(tmp_path):
    result = run_gxg("generate", "--schema", '{"type": "string", "maxLength": 5000}',
                     "--model", str(tmp_path), timeout=120)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert [line for line in lines if line.startswith("gxg: warning: maxLength")]
    assert "holds no model" in result.stderr
    assert "Traceback" not in result.stderr and ".py" not in result.stderr


def test_the_summary_counts_in_the_singular_and_the_plural():
    one = GenerationStats(prompt_tokens=1, new_tokens=1, stop_reason="stop token").summary()
    assert one.startswith("1 token in ") and "(prompt 1 token)" in one
    two = GenerationStats(prompt_tokens=2, new_tokens=2, stop_reason="stop token").summary()
    assert two.startswith("2 tokens in ") and "(prompt 2 tokens)" in two


# ------------------------------------------------------------------------------ JSON layouts


@pytest.mark.parametrize("indent", [None, 0, 2])
def test_fixed_layouts_are_json_dumps(indent):
    grammar = build_grammar(GrammarRequest("json", layout=JsonLayout(indent=indent)))
    for document in DOCUMENTS:
        for ascii_only in (True, False):
            text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
            assert grammar_accepts(grammar, text), text
        if document:
            assert not grammar_accepts(grammar, json.dumps(document, separators=(",", ":")))
            assert not grammar_accepts(grammar, json.dumps(document, indent=4))
    schema = build_grammar(GrammarRequest("json_schema", json.dumps(SCHEMA),
                                          JsonLayout(indent=indent)))
    assert grammar_accepts(schema, json.dumps({"name": "Tom", "age": 3}, indent=indent))


def test_json_is_an_object_or_an_array():
    grammar = build_grammar(GrammarRequest("json"))
    for scalar in ("1", '"text"', "null", "true"):
        assert not grammar_accepts(grammar, scalar)
    builtin = build_grammar(GrammarRequest("builtin_json"))
    assert grammar_accepts(builtin, '{ "a" :\n\n\n 1}')  # the builtin's free whitespace


@pytest.mark.parametrize("bound", [None, 4])
def test_flexible_whitespace_is_bounded(bound):
    longest = 2 if bound is None else bound
    grammar = build_grammar(GrammarRequest(
        "json", layout=JsonLayout(any_whitespace=True, max_whitespace=bound)))
    assert grammar_accepts(grammar, '{"a":1}')
    assert grammar_accepts(grammar, '{"a":' + " " * longest + "1}")
    assert grammar_accepts(grammar, '["x",\n' + " " * (longest - 1) + "1]")
    assert not grammar_accepts(grammar, '{"a":' + " " * (longest + 1) + "1}")
    assert not grammar_accepts(grammar, '["x"\n\n' + " " * (longest - 1) + ",1]")


def test_bad_layouts_are_usage_errors():
    with pytest.raises(UsageError, match="not to regex"):
        build_grammar(GrammarRequest("regex", "a", JsonLayout(indent=2)))
    with pytest.raises(UsageError, match="not to ebnf"):
        build_grammar(GrammarRequest("ebnf", 'root ::= "a"', JsonLayout(any_whitespace=True)))
    with pytest.raises(UsageError, match="any_whitespace"):
        JsonLayout(indent=2, any_whitespace=True)
    with pytest.raises(UsageError, match="needs any_whitespace"):
        JsonLayout(max_whitespace=3)
    with pytest.raises(UsageError, match="indent"):
        JsonLayout(indent=-1)


# ------------------------------------------------------------------------------ Ctrl-C


@needs_smollm2
def test_ctrl_c_while_generating_ends_quietly():
    # at least 300 characters: still generating when the first bytes arrive
    process = gxg_process("generate", "--regex", "[a-z ]{300,}", "--max-new-tokens", "256",
                          "--device", "cpu", "--seed", "1", "--prompt", "Tell a story.")
    try:
        first = process.stdout.read(1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    err = err.decode()
    assert first and process.returncode == 130, err
    assert "interrupted after" in err and "the output above is INCOMPLETE" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@needs_smollm2
def test_ctrl_c_while_loading_ends_quietly():
    process = gxg_process("generate", "--json", "--device", "cpu")
    try:
        loading = process.stderr.readline().decode()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    err = loading + err.decode()
    assert loading.startswith("gxg: loading") and process.returncode == 130, err
    assert "gxg generate: interrupted" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


# ------------------------------------------------------------------------------ model cache


@pytest.fixture(scope="module")
def loaded(model_cache_dir):  # noqa: F811 (the fixture imported above)
    """The default model on the CPU, through the session's model cache (written if absent)."""
    from gxg.generate import load_model
    from gxg.vocabularies import missing_packages
    if missing_packages("smollm2"):
        pytest.skip(f"needs {', '.join(missing_packages('smollm2'))}")
    return load_model(None, "cpu")


def test_the_cache_entry_is_keyed_by_the_gguf_file(loaded, model_cache_dir):  # noqa: F811
    import transformers

    from gxg.vocabularies import smollm2_gguf_path
    entry = model_cache_entry(None)
    assert entry.parent == model_cache_dir / "models"
    manifest = json.loads((entry / CACHE_MANIFEST).read_text())
    gguf = smollm2_gguf_path()
    assert manifest["key"]["gguf"] == str(gguf.resolve())
    assert manifest["key"]["size"] == gguf.stat().st_size
    assert manifest["key"]["mtime_ns"] == gguf.stat().st_mtime_ns
    assert manifest["key"]["transformers"] == transformers.__version__
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest["files"])
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".tmp-")]


@needs_smollm2
def test_a_second_start_reads_the_model_cache(loaded):
    result = run_gxg("generate", "--regex", "(yes|no)", "--temperature", "0", "--device", "cpu",
                     "--prompt", "Is the sky blue?")
    assert result.returncode == 0, result.stderr
    assert result.stdout in ("yes", "no")
    assert "from the model cache" in result.stderr and "first run" not in result.stderr


@pytest.fixture
def conversion(loaded, monkeypatch, tmp_path):
    """An empty cache in ``tmp_path``, where converting the GGUF file gives the model already
    loaded (the same weights, without the 15 s); returns the arguments of
    ``_load_through_cache``."""
    import gxg.generate as generate

    monkeypatch.setenv("GXG_CACHE_DIR", str(tmp_path / "cache"))
    original = generate._load_pretrained

    def load(directory, gguf_file, dtype, tokenizer=None):
        if gguf_file is not None:
            return loaded.tokenizer, loaded.model
        return original(directory, gguf_file, dtype, tokenizer)

    monkeypatch.setattr(generate, "_load_pretrained", load)
    directory, gguf_file = generate.model_location(None)
    yield None, directory, gguf_file, torch.float32
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # 540 MB an entry: not kept by pytest


def _truncate_weights(entry):
    with open(entry / "model.safetensors", "r+b") as f:
        f.truncate(1000)


def _garble_manifest(entry):
    (entry / CACHE_MANIFEST).write_text("{")


def _remove_manifest(entry):  # a directory left by something else than a complete write
    (entry / CACHE_MANIFEST).unlink()


@pytest.mark.parametrize("damage", [_truncate_weights, _garble_manifest, _remove_manifest])
def test_a_damaged_cache_entry_is_rebuilt(conversion, loaded, damage):
    import gxg.generate as generate

    tokenizer, network, from_cache = generate._load_through_cache(*conversion)
    assert not from_cache and network is loaded.model  # written now
    entry = model_cache_entry(None)
    damage(entry)
    if damage is _remove_manifest:
        tokenizer, network, from_cache = generate._load_through_cache(*conversion)
    else:
        with pytest.warns(ModelCacheWarning, match="could not be read"):
            tokenizer, network, from_cache = generate._load_through_cache(*conversion)
    assert not from_cache  # converted again, and the entry rewritten:
    tokenizer, network, from_cache = generate._load_through_cache(*conversion)
    assert from_cache and network is not loaded.model
    reference = loaded.model.state_dict()
    assert all(torch.equal(value, reference[name]) for name, value in network.state_dict().items())
    assert tokenizer.get_vocab() == loaded.tokenizer.get_vocab()


def test_a_cache_that_cannot_be_written_is_a_warning(conversion, loaded, tmp_path, monkeypatch):
    import gxg.generate as generate

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("GXG_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.warns(ModelCacheWarning, match="could not write"):
        tokenizer, network, from_cache = generate._load_through_cache(*conversion)
    assert network is loaded.model and not from_cache


def test_an_interrupted_cache_write_leaves_no_entry(conversion, loaded, monkeypatch):
    import safetensors.torch

    import gxg.generate as generate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        generate._load_through_cache(*conversion)
    entry = model_cache_entry(None)
    assert not entry.exists() and not list(entry.parent.iterdir())


def test_no_cache_neither_reads_nor_writes_it(conversion, loaded, monkeypatch, capsys):
    import gxg.generate as generate

    def refuse(*args):
        raise AssertionError("the model cache was used")

    monkeypatch.setattr(generate, "_load_through_cache", refuse)
    fresh = generate._load_model.__wrapped__(None, "cpu", False)
    assert not fresh.from_cache and fresh.model is loaded.model
    assert not model_cache_entry(None).parent.exists()

    calls = []

    def record(model, device, cache=True):
        calls.append(cache)
        raise UsageError("stop here")

    monkeypatch.setattr(generate, "load_model", record)
    status, out, err = run_cli(capsys, "--json", "--no-cache")
    assert status == 2 and calls == [False] and "first run" not in err
