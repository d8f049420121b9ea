"""Tokenizer information: what the grammar compiler and the matcher need to know about a vocabulary.

In:  a vocabulary as the tokenizer spells it (``encoded_vocab``: one ``str`` or ``bytes`` per token
     id), how it spells bytes (``VocabType``), the model's vocabulary size and the stop tokens — or
     a Hugging Face tokenizer (``TokenizerInfo.from_huggingface``), from which all of that is read.
Out: ``TokenizerInfo``: per token id the bytes the token stands for (``decoded_vocab``), the stop
     and special token ids, and — built lazily, cached on the instance — the sorted vocabulary as a
     flattened byte trie in numpy arrays, which the compiler walks (``SortedVocab``). The trie
     holds every token that is neither special nor a stop token: stop tokens are decided by
     whether the root rule can end, never by their text.

The semantics are XGrammar's (``xgrammar.TokenizerInfo``, release 0.2.8), so that masks agree:

* ``vocab_size`` is the mask width (the model's lm_head size). It may exceed
  ``len(encoded_vocab)``; the ids in between are padding.
* Special tokens — never allowed by a grammar — are the tokens whose decoded bytes are empty and
  every padding id. Texts like ``<s>``, ``<|im_start|>`` or ``[INST]`` are *ordinary* tokens,
  matched by their text wherever the grammar allows that text.
* Stop tokens are the given ids, or by default the tokens whose decoded text is a well-known
  end-of-sequence marker. A stop token is never special, even if its text is empty.

Decoding (``decode_token``):

* RAW: the token's bytes as given (``str`` → UTF-8). Tiktoken vocabularies.
* BYTE_FALLBACK: ``<0xNN>`` → the byte 0xNN; otherwise UTF-8 with ``▁`` (U+2581) → space.
  SentencePiece / Llama-2 style vocabularies.
* BYTE_LEVEL: every character goes back through the GPT-2 byte↔unicode map (``Ġ`` → space …).
  A token with a character outside the map is kept as its UTF-8 text (that is how the
  ``tokenizers`` ByteLevel decoder and XGrammar treat such tokens, e.g. ``<｜end▁of▁sentence｜>``).
  Added tokens go through the same map: ``tokenizers`` decodes them that way too, so the bytes a
  grammar checks are the bytes the engine's detokenizer will print. For ASCII added tokens such as
  ``<|im_start|>`` that is their text.

Deliberate differences from XGrammar (each gives an error or the tokenizer's own reading where
XGrammar is silent or wrong):

* ``stop_token_ids`` containing an id outside ``[0, len(encoded_vocab))`` raises ``ValueError``
  naming the id; XGrammar silently drops it. (``from_huggingface`` drops an out-of-range *default*
  eos id with a warning, as XGrammar drops it silently, because the caller did not choose it.)
* ``<0xNN>`` with lower-case hex digits decodes to byte 0xNN (as the ``tokenizers`` ByteFallback
  decoder does); XGrammar computes a wrong byte. ``<0xZZ>``-like pieces that are not hex are
  ordinary text; XGrammar raises.
* In BYTE_LEVEL, ``U+0000`` is outside the GPT-2 map (byte 0 is spelt ``Ā``), so a token holding
  it is kept verbatim; XGrammar drops the character.
* ``from_huggingface`` reads a ``Metaspace`` decoder (without ``ByteFallback``) as BYTE_FALLBACK,
  so ``▁`` means space; XGrammar reads it as RAW and would require a literal ``▁``.
* ``from_huggingface`` also accepts a bare ``sentencepiece.SentencePieceProcessor``, and any
  object with ``get_vocab()`` when ``vocab_type=`` is given or the vocabulary shows its type.
"""
from __future__ import annotations

import enum
import functools
import json
import operator
import re
import string
import types
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

__all__ = [
    "VocabType",
    "TokenizerInfo",
    "SortedVocab",
    "DEFAULT_STOP_TEXTS",
    "decode_token",
    "decode_vocab",
    "build_sorted_vocab",
    "byte_level_char_to_byte",
    "BYTE_LEVEL_CHARSET",
    "vocab_type_from_vocab",
    "metadata_from_backend",
]


class VocabType(enum.IntEnum):
    """How a vocabulary spells bytes. Values are XGrammar's."""

    RAW = 0
    BYTE_FALLBACK = 1
    BYTE_LEVEL = 2


#: Texts whose tokens are stop tokens when no stop ids are given (XGrammar's list).
DEFAULT_STOP_TEXTS = frozenset(
    t.encode("utf-8")
    for t in (
        "</s>", "<|end_of_text|>", "<|eot_id|>", "<|endoftext|>", "<eos>", "<|eos|>",
        "<end_of_turn>", "<｜end▁of▁sentence｜>",
    )
)

# --------------------------------------------------------------------------------------------
# Decoders (pure functions: one token in, its bytes out)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def byte_level_char_to_byte() -> Mapping[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode``: character → byte, 256 entries (read-only).

    Printable Latin-1 bytes spell themselves; the other 68 bytes (controls, space, DEL, NBSP,
    soft hyphen …) are spelt by U+0100, U+0101, … in byte order.
    """
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: Dict[str, int] = {}
    shifted = 0
    for byte in range(256):
        if byte in kept:
            table[chr(byte)] = byte
        else:
            table[chr(0x100 + shifted)] = byte
            shifted += 1
    return types.MappingProxyType(table)


def _byte_level_translation() -> Dict[int, str]:
    """A ``str.translate`` table that turns a byte-level token into a Latin-1 string.

    Mapped characters become the character whose code point is their byte, so that
    ``.encode("latin-1")`` yields the bytes. Code points below 256 that are *not* in the map
    (space, controls …) become U+0100, which ``encode("latin-1")`` refuses — so one C-level call
    both decodes and detects an unmappable character (code points ≥ 256 outside the map are
    left alone and refused the same way).
    """
    table: Dict[int, str] = {}
    char_to_byte = byte_level_char_to_byte()
    for cp in range(256):
        if chr(cp) not in char_to_byte:
            table[cp] = "\u0100"
    for ch, byte in char_to_byte.items():
        if ord(ch) != byte:
            table[ord(ch)] = chr(byte)
    return table


_BYTE_LEVEL_TABLE = _byte_level_translation()
_HEX_PAIR = {
    (a + b).encode(): int(a + b, 16) for a in string.hexdigits for b in string.hexdigits
}
_METASPACE = "\u2581".encode("utf-8")


def _decode_raw(token: Union[str, bytes]) -> bytes:
    if isinstance(token, str):
        return token.encode("utf-8")
    if isinstance(token, bytes):
        return token
    raise TypeError(f"a vocabulary entry must be str or bytes, not {type(token).__name__}")


def _decode_byte_fallback(token: Union[str, bytes]) -> bytes:
    data = token.encode("utf-8") if isinstance(token, str) else token
    # A byte piece is exactly "<0x" + two hex digits + ">"; anything else is text.
    if len(data) == 6 and data[:3] == b"<0x" and data[5] == 0x3E:  # 0x3E == ord(">")
        byte = _HEX_PAIR.get(data[3:5])
        if byte is not None:
            return bytes((byte,))
    return data.replace(_METASPACE, b" ")


def _decode_byte_level(token: Union[str, bytes]) -> bytes:
    if isinstance(token, bytes):
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return token  # not even text: nothing to map back
    else:
        text = token
    try:
        return text.translate(_BYTE_LEVEL_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")  # a character outside the map: keep the token verbatim


_DECODERS = {
    VocabType.RAW: _decode_raw,
    VocabType.BYTE_FALLBACK: _decode_byte_fallback,
    VocabType.BYTE_LEVEL: _decode_byte_level,
}


def _as_vocab_type(vocab_type: Any) -> VocabType:
    """Accept a gxg/XGrammar VocabType, its int value or its name."""
    if isinstance(vocab_type, str):
        try:
            return VocabType[vocab_type.upper()]
        except KeyError:
            raise ValueError(f"unknown vocab_type {vocab_type!r}; expected one of "
                             f"{[t.name for t in VocabType]}") from None
    value = getattr(vocab_type, "value", vocab_type)  # xgrammar.VocabType is a plain Enum
    try:
        return VocabType(value)
    except ValueError:
        raise ValueError(f"unknown vocab_type {vocab_type!r}") from None


def decode_token(token: Union[str, bytes], vocab_type: Any = VocabType.RAW) -> bytes:
    """The bytes that one vocabulary entry stands for."""
    return _DECODERS[_as_vocab_type(vocab_type)](token)


def _byte_level_lookup() -> np.ndarray:
    """Code point -> byte for the GPT-2 alphabet (U+0000 … U+0143); 256 marks 'not in the map'."""
    table = byte_level_char_to_byte()
    lookup = np.full(max(map(ord, table)) + 1, 256, dtype=np.uint16)
    for ch, byte in table.items():
        lookup[ord(ch)] = byte
    return lookup


_BYTE_LEVEL_LOOKUP = _byte_level_lookup()


def _texts_of(tokens: List[Union[str, bytes]], raw: Dict[int, bytes]) -> List[str]:
    """str entries as they are, bytes entries as UTF-8 text; non-UTF-8 bytes go to ``raw``."""
    texts: List[str] = []
    for i, token in enumerate(tokens):
        if isinstance(token, str):
            texts.append(token)
        elif isinstance(token, bytes):
            try:
                texts.append(token.decode("utf-8"))
            except UnicodeDecodeError:
                raw[i] = token
                texts.append("")
        else:
            raise TypeError(f"encoded_vocab[{i}] is {type(token).__name__} ({token!r}); "
                            "expected str or bytes")
    return texts


def _decode_byte_level_all(tokens: List[Union[str, bytes]]) -> List[bytes]:
    """``[_decode_byte_level(t) for t in tokens]``, vectorised: one numpy lookup for all tokens.

    The tokens are joined into one UTF-32 array of code points; each code point is looked up in
    the GPT-2 map (a clipped table lookup; 256 = not in the map); a token with any code point
    outside the map is kept verbatim. The Python work left is a join, a length per token and a
    slice per token.
    """
    raw: Dict[int, bytes] = {}  # bytes entries that are not UTF-8 text: kept as they are
    try:
        joined, texts = "".join(tokens), tokens  # the common case: all entries are str
    except TypeError:
        texts = _texts_of(tokens, raw)
        joined = "".join(texts)
    n = len(texts)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    lookup = _BYTE_LEVEL_LOOKUP
    last = lookup.shape[0] - 1
    values = lookup[np.minimum(points, last)]
    values[points > last] = 256  # the clip made big code points look like the last one
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=n), out=offsets[1:])
    unmapped = np.zeros(points.shape[0] + 1, dtype=np.int64)
    np.cumsum(values == 256, out=unmapped[1:])
    verbatim = np.flatnonzero(unmapped[offsets[1:]] > unmapped[offsets[:-1]])
    data = values.astype(np.uint8).tobytes()
    bounds = offsets.tolist()
    out = [data[start:end] for start, end in zip(bounds, bounds[1:])]
    for i in verbatim.tolist():
        out[i] = texts[i].encode("utf-8")
    for i, token in raw.items():
        out[i] = token
    return out


def decode_vocab(encoded_vocab: Sequence[Union[str, bytes]], vocab_type: Any) -> List[bytes]:
    """Decode a whole vocabulary (same result as ``decode_token`` on each entry).

    Raises TypeError naming the first entry that is not str/bytes, and ValueError naming an
    entry that is not encodable text (a lone surrogate).
    """
    vocab_type = _as_vocab_type(vocab_type)
    tokens = encoded_vocab if isinstance(encoded_vocab, list) else list(encoded_vocab)
    try:
        if vocab_type == VocabType.BYTE_LEVEL:
            return _decode_byte_level_all(tokens)
        decode = _DECODERS[vocab_type]
        return [decode(token) for token in tokens]
    except (AttributeError, TypeError, UnicodeError) as error:
        for i, token in enumerate(tokens):
            if not isinstance(token, (str, bytes)):
                raise TypeError(f"encoded_vocab[{i}] is {type(token).__name__} ({token!r}); "
                                "expected str or bytes") from None
            if isinstance(token, str):
                try:
                    token.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"encoded_vocab[{i}] ({token!r}) is not valid Unicode "
                                     "text") from None
        raise error


# --------------------------------------------------------------------------------------------
# The sorted vocabulary as a flattened trie
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class SortedVocab:
    """The matchable tokens sorted by their bytes, as a flattened trie (read-only numpy arrays).

    ``N`` tokens: every token that is neither special nor a stop token (so all have non-empty
    bytes). Stop tokens are left out because they are decided by whether the root rule can end,
    not by their text.

    * ``sorted_token_ids[i]`` (int32): the token id at sorted position i. Order: bytes
      lexicographically, ties (equal bytes) by id.
    * ``token_bytes`` (uint8) / ``token_offsets`` (int64, N+1): the bytes of sorted token i are
      ``token_bytes[token_offsets[i]:token_offsets[i+1]]``.
    * ``trie_subtree_end[i]`` (int32): positions ``i .. trie_subtree_end[i]-1`` are exactly the
      tokens at positions ≥ i whose bytes start with token i's bytes (i itself included). A walk
      that rejects token i's bytes skips to ``trie_subtree_end[i]``. (With duplicate bytes the
      earlier duplicates sit just before i and were walked already.)
    * ``common_prefix_len[i]`` (int32): length of the common prefix of sorted tokens i-1 and i
      (0 for i = 0): a walk in sorted order keeps that many bytes of its state.
    """

    sorted_token_ids: np.ndarray
    token_bytes: np.ndarray
    token_offsets: np.ndarray
    trie_subtree_end: np.ndarray
    common_prefix_len: np.ndarray

    def __len__(self) -> int:
        return int(self.sorted_token_ids.shape[0])

    def token(self, i: int) -> bytes:
        """The bytes of the token at sorted position i."""
        return self.token_bytes[self.token_offsets[i]:self.token_offsets[i + 1]].tobytes()

    def __repr__(self) -> str:
        return f"SortedVocab({len(self)} tokens, {self.token_bytes.shape[0]} bytes)"


def _common_prefix_lengths(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """lcp[i] = common prefix length of strings i-1 and i (lcp[0] = 0), vectorised by depth.

    One numpy pass per byte depth over the pairs still equal up to that depth, so the work is
    the sum of the common prefixes, with no Python loop per token.
    """
    n = offsets.shape[0] - 1
    lcp = np.zeros(n, dtype=np.int32)
    if n < 2:
        return lcp
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    pair = np.arange(1, n)  # pair p compares strings p-1 and p
    limit = np.minimum(lengths[:-1], lengths[1:])
    depth = 0
    while pair.size:
        alive = limit > depth
        pair, limit = pair[alive], limit[alive]
        same = data[starts[pair - 1] + depth] == data[starts[pair] + depth]
        pair, limit = pair[same], limit[same]
        depth += 1
        lcp[pair] = depth
    return lcp


def _subtree_ends(lengths: np.ndarray, lcp: np.ndarray) -> np.ndarray:
    """end[i] = the first j > i with lcp[j] < lengths[i] (else n), for all i at once.

    Token j > i has token i as a prefix iff min(lcp[i+1..j]) ≥ len(i) (sorted order puts every
    extension of a string in one run after it). Binary lifting over a sparse table of range
    minima: each of the log2(n) rounds advances every i by 2^k where the run allows it.
    """
    n = lengths.shape[0]
    levels = [lcp]  # levels[k][p] = min(lcp[p : p + 2^k]), defined for p + 2^k <= n
    while (1 << len(levels)) <= n:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.minimum(prev[:-half], prev[half:]))
    pos = np.arange(1, n + 1, dtype=np.int64)
    need = lengths.astype(np.int32)
    for k in range(len(levels) - 1, -1, -1):
        table = levels[k]
        fits = pos < table.shape[0]  # i.e. pos + 2^k <= n
        probe = np.where(fits, pos, 0)
        pos += np.where(fits & (table[probe] >= need), 1 << k, 0)
    return pos.astype(np.int32)


def _read_only(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.setflags(write=False)


def build_sorted_vocab(decoded_vocab: Sequence[bytes], excluded_ids: Iterable[int]) -> SortedVocab:
    """Build the SortedVocab of ``decoded_vocab`` without the ids in ``excluded_ids``.

    Empty tokens are always left out (they match nothing). Sorting uses Python's bytes ordering
    (C speed); everything after that is vectorised numpy.
    """
    excluded = set(excluded_ids)
    kept = [i for i, b in enumerate(decoded_vocab) if b and i not in excluded]
    kept.sort(key=decoded_vocab.__getitem__)  # stable: equal bytes stay in id order
    ordered = [decoded_vocab[i] for i in kept]
    n = len(kept)
    ids = np.asarray(kept, dtype=np.int32).reshape(n)
    data = np.frombuffer(b"".join(ordered), dtype=np.uint8)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, ordered), dtype=np.int64, count=n), out=offsets[1:])
    lcp = _common_prefix_lengths(data, offsets)
    ends = _subtree_ends(np.diff(offsets), lcp)
    _read_only(ids, offsets, lcp, ends)
    return SortedVocab(ids, data, offsets, ends, lcp)


# --------------------------------------------------------------------------------------------
# TokenizerInfo
# --------------------------------------------------------------------------------------------


def _normalise_stop_ids(stop_token_ids: Any, num_tokens: int) -> List[int]:
    """Validate explicit stop ids: sorted, deduplicated, each in [0, num_tokens)."""
    if isinstance(stop_token_ids, (int, np.integer)):
        stop_token_ids = [stop_token_ids]
    ids = set()
    for raw in stop_token_ids:
        try:
            i = operator.index(raw)
        except TypeError:
            raise TypeError(f"stop token id {raw!r} is not an integer") from None
        if not 0 <= i < num_tokens:
            raise ValueError(
                f"stop token id {i} is outside the tokenizer's vocabulary [0, {num_tokens}); "
                "ids in the padding range [len(encoded_vocab), vocab_size) cannot be stop tokens"
            )
        ids.add(i)
    return sorted(ids)


class TokenizerInfo:
    """A vocabulary decoded to bytes, with its stop and special tokens (XGrammar semantics).

    ``TokenizerInfo(encoded_vocab, vocab_type=VocabType.RAW, *, vocab_size=None,
    stop_token_ids=None, add_prefix_space=False)``

    * ``encoded_vocab``: one ``str`` or ``bytes`` per token id, as the tokenizer spells it.
      ``[]`` is allowed (grammar-only matching).
    * ``vocab_size``: the mask width, ≥ ``len(encoded_vocab)`` (default: equal). Ids beyond the
      vocabulary are padding, hence special.
    * ``stop_token_ids``: an int or ids in ``[0, len(encoded_vocab))`` (ValueError otherwise);
      ``[]`` means none; ``None`` means every token whose decoded text is in
      ``DEFAULT_STOP_TEXTS``.
    * ``add_prefix_space``: metadata only (whether the tokenizer prepends a space to the text).

    The sorted vocabulary / trie (``sorted_vocab`` and its arrays, see ``SortedVocab``) is built
    on first use and cached on the instance; instances are otherwise immutable, so they can be
    shared between threads (two threads racing on the first use may both build it; either
    result is the same).
    """

    def __init__(
        self,
        encoded_vocab: Sequence[Union[str, bytes]],
        vocab_type: Any = VocabType.RAW,
        *,
        vocab_size: Optional[int] = None,
        stop_token_ids: Optional[Union[int, Sequence[int]]] = None,
        add_prefix_space: bool = False,
    ) -> None:
        vocab_type = _as_vocab_type(vocab_type)
        decoded = decode_vocab(encoded_vocab, vocab_type)
        num_tokens = len(decoded)
        if vocab_size is None:
            vocab_size = num_tokens
        vocab_size = operator.index(vocab_size)
        if vocab_size < num_tokens:
            raise ValueError(f"vocab_size ({vocab_size}) must be at least the number of tokens in "
                             f"the vocabulary ({num_tokens})")

        if stop_token_ids is None:
            stop = [i for i, b in enumerate(decoded) if b in DEFAULT_STOP_TEXTS]
        else:
            stop = _normalise_stop_ids(stop_token_ids, num_tokens)
        stop_set = set(stop)
        special = [i for i, b in enumerate(decoded) if not b and i not in stop_set]
        special.extend(range(num_tokens, vocab_size))

        self._vocab_type = vocab_type
        self._vocab_size = vocab_size
        self._add_prefix_space = bool(add_prefix_space)
        self._decoded_vocab = decoded
        self._stop_token_ids = stop
        self._special_token_ids = special

    # ---- constructors --------------------------------------------------------------------

    @staticmethod
    def from_vocab_and_metadata(encoded_vocab: Sequence[Union[str, bytes]],
                                metadata: Union[str, Dict[str, Any]]) -> "TokenizerInfo":
        """Rebuild from ``encoded_vocab`` and the JSON written by ``dump_metadata()``."""
        meta = json.loads(metadata) if isinstance(metadata, str) else dict(metadata)
        return TokenizerInfo(encoded_vocab, meta.get("vocab_type", VocabType.RAW),
                             vocab_size=meta.get("vocab_size"),
                             stop_token_ids=meta.get("stop_token_ids"),
                             add_prefix_space=meta.get("add_prefix_space", False))

    @staticmethod
    def from_huggingface(tokenizer: Any, *, vocab_size: Optional[int] = None,
                         stop_token_ids: Optional[Union[int, Sequence[int]]] = None,
                         vocab_type: Any = None) -> "TokenizerInfo":
        """Build from a Hugging Face tokenizer (transformers is not imported: duck typing).

        * ``encoded_vocab`` has length ``vocab_size`` if given, else ``max(len(vocab), max_id +
          1)``, and is filled from ``get_vocab()``: ids without a token stay ``""`` (special) —
          so with a model head wider than the tokenizer, ``decoded_vocab`` has ``vocab_size``
          entries, as in XGrammar — and ids ≥ vocab_size are dropped (a head smaller than the
          tokenizer).
        * Stop tokens: ``stop_token_ids`` if given (an empty list is a ValueError, as in
          XGrammar), else ``[eos_token_id]`` (dropped with a warning if ≥ vocab_size), else the
          default stop texts (with a warning).
        * Vocab type: ``vocab_type=`` if given; else for fast tokenizers the decoder in
          ``backend_tokenizer.to_str()`` (ByteLevel → BYTE_LEVEL, ByteFallback or Metaspace →
          BYTE_FALLBACK, else RAW), overridden by the vocabulary when it clearly disagrees
          (≥128 ``<0xNN>`` pieces → BYTE_FALLBACK; ≥99% of tokens in the GPT-2 byte charset →
          BYTE_LEVEL); tiktoken-based tokenizers → RAW, or BYTE_LEVEL if ``" "`` encodes as
          ``Ġ``; SentencePiece ones (``sp_model``, or a bare ``SentencePieceProcessor``) →
          BYTE_FALLBACK if ``<0x0A>`` is a piece, else RAW.
        * ``add_prefix_space``: from the backend (a ``▁`` Prepend normaliser, or Metaspace with
          prepend_scheme always/first), by encoding ``"a"`` when the vocabulary overrode the
          backend, True for SentencePiece, False otherwise.
        """
        return _from_huggingface(tokenizer, vocab_size=vocab_size,
                                 stop_token_ids=stop_token_ids, vocab_type=vocab_type)

    # ---- XGrammar-named properties --------------------------------------------------------

    @property
    def vocab_type(self) -> VocabType:
        return self._vocab_type

    @property
    def vocab_size(self) -> int:
        """The mask width (model vocabulary size, padding included)."""
        return self._vocab_size

    @property
    def add_prefix_space(self) -> bool:
        return self._add_prefix_space

    @property
    def decoded_vocab(self) -> List[bytes]:
        """The bytes of each token id in ``[0, len(encoded_vocab))`` (a copy)."""
        return list(self._decoded_vocab)

    @property
    def stop_token_ids(self) -> List[int]:
        return list(self._stop_token_ids)

    @property
    def special_token_ids(self) -> List[int]:
        """Empty-bytes tokens that are not stop tokens, then the padding ids; ascending."""
        return list(self._special_token_ids)

    def dump_metadata(self) -> str:
        """JSON ``{"vocab_type","vocab_size","add_prefix_space","stop_token_ids"}``, as XGrammar."""
        return json.dumps({
            "vocab_type": int(self._vocab_type),
            "vocab_size": self._vocab_size,
            "add_prefix_space": self._add_prefix_space,
            "stop_token_ids": self._stop_token_ids,
        }, separators=(",", ":"))

    # ---- gxg additions ----------------------------------------------------------------------

    @property
    def num_tokens(self) -> int:
        """``len(encoded_vocab)``: ids at or beyond it (up to vocab_size) are padding."""
        return len(self._decoded_vocab)

    def token_bytes_of(self, token_id: int) -> bytes:
        """The decoded bytes of one id (``b""`` for padding ids)."""
        return self._decoded_vocab[token_id] if 0 <= token_id < len(self._decoded_vocab) else b""

    @functools.cached_property
    def sorted_vocab(self) -> SortedVocab:
        """The matchable tokens (not special, not stop) as a flattened trie; built once, cached."""
        return build_sorted_vocab(self._decoded_vocab, self._stop_token_ids)

    @property
    def sorted_token_ids(self) -> np.ndarray:
        return self.sorted_vocab.sorted_token_ids

    @functools.cached_property
    def sorted_token_index(self) -> np.ndarray:
        """``sorted_token_ids`` as intp (read-only, made once per vocabulary): numpy indexes
        with it without converting, where the int32 ids cost a vocabulary-sized copy (0.4 ms
        for Qwen) in every grammar's first fill."""
        index = self.sorted_token_ids.astype(np.intp)
        index.flags.writeable = False
        return index

    @functools.cached_property
    def token_lengths_by_id(self) -> np.ndarray:
        """int64 [vocab_size]: byte length of each id's matchable text (0 for special, stop
        and padding ids, which are outside the sorted vocabulary)."""
        lengths = np.zeros(self._vocab_size, dtype=np.int64)
        lengths[self.sorted_token_ids] = np.diff(self.token_offsets)
        return lengths

    @functools.cached_property
    def ids_by_length(self) -> np.ndarray:
        """int64 [vocab_size]: the token ids by ``token_lengths_by_id``, longest first (ties
        by id), what token budgets walk a prefix of."""
        return np.argsort(-self.token_lengths_by_id, kind="stable")

    @property
    def token_bytes(self) -> np.ndarray:
        return self.sorted_vocab.token_bytes

    @property
    def token_offsets(self) -> np.ndarray:
        return self.sorted_vocab.token_offsets

    @property
    def trie_subtree_end(self) -> np.ndarray:
        return self.sorted_vocab.trie_subtree_end

    @property
    def common_prefix_len(self) -> np.ndarray:
        return self.sorted_vocab.common_prefix_len

    def __repr__(self) -> str:
        stop = self._stop_token_ids
        stop_text = stop if len(stop) <= 8 else f"{stop[:8]}…(+{len(stop) - 8})"
        return (f"TokenizerInfo(vocab_type={self._vocab_type.name}, vocab_size={self._vocab_size}, "
                f"num_tokens={len(self._decoded_vocab)}, stop_token_ids={stop_text}, "
                f"num_special={len(self._special_token_ids)}, "
                f"add_prefix_space={self._add_prefix_space})")


# --------------------------------------------------------------------------------------------
# Reading Hugging Face tokenizers (duck typing: transformers, tiktoken and sentencepiece are
# never imported here, so gxg works without them)
# --------------------------------------------------------------------------------------------

#: The 256 characters of the GPT-2 byte-level alphabet.
BYTE_LEVEL_CHARSET = frozenset(byte_level_char_to_byte())
_NOT_BYTE_LEVEL = re.compile("[^" + "".join(re.escape(c) for c in sorted(BYTE_LEVEL_CHARSET)) + "]")
_BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))


def vocab_type_from_vocab(vocab: Dict[Any, int]) -> Optional[VocabType]:
    """The vocabulary's own evidence of its spelling, or None when it shows neither kind.

    BYTE_FALLBACK if at least 128 of the pieces ``<0x00>`` … ``<0xFF>`` exist; BYTE_LEVEL if at
    least 128 characters of the GPT-2 alphabet are single-character tokens and at least 99% of
    all tokens are spelt in that alphabet (added tokens such as ``<｜User｜>`` may not be).
    """
    if sum(piece in vocab for piece in _BYTE_PIECES) >= 128:
        return VocabType.BYTE_FALLBACK
    if sum(ch in vocab for ch in BYTE_LEVEL_CHARSET) < 128:
        return None
    spelt = sum(1 for t in vocab if isinstance(t, str) and _NOT_BYTE_LEVEL.search(t) is None)
    return VocabType.BYTE_LEVEL if spelt >= 0.99 * len(vocab) else None


def _json_nodes(node: Any) -> Iterable[Dict[str, Any]]:
    """Every component dict in a tokenizers JSON fragment, Sequence members included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            if isinstance(value, list):
                for item in value:
                    yield from _json_nodes(item)
    elif isinstance(node, list):
        for item in node:
            yield from _json_nodes(item)


def metadata_from_backend(backend_json: str) -> tuple:
    """(vocab_type, add_prefix_space) read from ``backend_tokenizer.to_str()``.

    The decoder says how tokens spell bytes: ByteLevel → BYTE_LEVEL; ByteFallback or Metaspace
    (``▁`` is a space) → BYTE_FALLBACK; anything else → RAW. The tokenizer prepends a space when
    its normaliser prepends ``▁`` or a Metaspace component uses prepend_scheme always/first.
    """
    config = json.loads(backend_json)
    decoder_types = {n.get("type") for n in _json_nodes(config.get("decoder"))}
    if "ByteLevel" in decoder_types:
        vocab_type = VocabType.BYTE_LEVEL
    elif decoder_types & {"ByteFallback", "Metaspace"}:
        vocab_type = VocabType.BYTE_FALLBACK
    else:
        vocab_type = VocabType.RAW
    prefix = any(n.get("type") == "Prepend" and n.get("prepend") == "\u2581"
                 for n in _json_nodes(config.get("normalizer")))
    for part in ("pre_tokenizer", "decoder"):
        for n in _json_nodes(config.get(part)):
            if n.get("type") == "Metaspace" and (
                    n.get("prepend_scheme") in ("always", "first") or n.get("add_prefix_space")):
                prefix = True
    return vocab_type, prefix


def _backend_json(tokenizer: Any) -> str:
    """The parts of ``backend_tokenizer.to_str()`` that metadata_from_backend reads.

    Serialising only the normaliser, pre-tokeniser and decoder avoids writing and parsing the
    whole vocabulary and merge list (~7 MB and ~0.8 s for a 151k vocabulary); when a component
    cannot serialise itself, the whole backend is serialised instead.
    """
    backend = tokenizer.backend_tokenizer
    parts = {}
    try:
        for part in ("normalizer", "pre_tokenizer", "decoder"):
            component = getattr(backend, part)
            parts[part] = None if component is None else json.loads(component.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return backend.to_str()
    return json.dumps(parts)


def _is_instance(obj: Any, module: str, name: str) -> bool:
    cls = type(obj)
    return cls.__name__ == name and cls.__module__.split(".")[0] == module


def _sentencepiece_model(tokenizer: Any) -> Any:
    """The SentencePieceProcessor behind a tokenizer (or the tokenizer itself), else None."""
    candidates = (tokenizer, getattr(tokenizer, "sp_model", None),
                  getattr(getattr(tokenizer, "tokenizer", None), "sp_model", None),
                  getattr(tokenizer, "tok", None))
    for c in candidates:
        if c is not None and _is_instance(c, "sentencepiece", "SentencePieceProcessor"):
            return c
    return None


def _is_tiktoken_based(tokenizer: Any) -> bool:
    inner = getattr(tokenizer, "tokenizer", None)
    if inner is not None and _is_instance(inner, "tiktoken", "Encoding"):
        return True
    files = getattr(tokenizer, "vocab_files_names", None)
    return isinstance(files, dict) and "tiktoken" in str(files.get("vocab_file", ""))


def _first_token_of(tokenizer: Any, text: str) -> Any:
    """The first token (as a string) that ``tokenizer`` encodes ``text`` into, or None."""
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
        tokens = tokenizer.convert_ids_to_tokens(ids)
    except (AttributeError, TypeError, ValueError, KeyError):
        return None
    return tokens[0] if tokens else None


def _prefix_space_by_encoding(tokenizer: Any, vocab_type: VocabType) -> bool:
    first = _first_token_of(tokenizer, "a")
    marker = "\u2581" if vocab_type == VocabType.BYTE_FALLBACK else "\u0120"
    return isinstance(first, str) and first.startswith(marker)


def _hf_vocab(tokenizer: Any, sp: Any) -> Dict[Any, int]:
    if sp is not None and sp is tokenizer:
        return {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    try:
        return dict(tokenizer.get_vocab())
    except AttributeError:
        raise ValueError(f"cannot read the vocabulary of {type(tokenizer).__name__}: it has no "
                         "get_vocab() method") from None


def _hf_eos_ids(tokenizer: Any, sp: Any) -> Optional[List[int]]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None and sp is not None and sp.eos_id() >= 0:
        eos = sp.eos_id()
    if eos is None:
        return None
    return [int(eos)] if isinstance(eos, (int, np.integer)) else [int(e) for e in eos]


def _from_huggingface(tokenizer: Any, *, vocab_size: Optional[int], stop_token_ids: Any,
                      vocab_type: Any) -> TokenizerInfo:
    """Implementation of ``TokenizerInfo.from_huggingface`` (see its docstring)."""
    if isinstance(stop_token_ids, (int, np.integer)):
        stop_token_ids = [stop_token_ids]
    if stop_token_ids is not None and len(stop_token_ids) == 0:
        raise ValueError("stop_token_ids cannot be empty: pass None to use the tokenizer's eos "
                         "token, or use the TokenizerInfo constructor for a vocabulary without "
                         "stop tokens")
    sp = _sentencepiece_model(tokenizer)
    vocab = _hf_vocab(tokenizer, sp)
    ids = [i for i in vocab.values() if i >= 0]
    tokenizer_size = max(len(vocab), max(ids) + 1) if ids else 0
    if vocab_size is None:
        vocab_size = tokenizer_size
    elif operator.index(vocab_size) <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    encoded_vocab: List[Union[str, bytes]] = [""] * vocab_size
    for token, i in vocab.items():
        if 0 <= i < vocab_size:
            encoded_vocab[i] = token

    if hasattr(getattr(tokenizer, "backend_tokenizer", None), "to_str"):
        detected, add_prefix_space = metadata_from_backend(_backend_json(tokenizer))
        # The serialised backend may not describe the vocabulary (transformers rebuilds some
        # tokenizers from a SentencePiece file and drops the decoder); the vocabulary is
        # decisive evidence of its own spelling.
        from_vocab = vocab_type_from_vocab(vocab)
        if from_vocab is not None and from_vocab != detected:
            detected = from_vocab
            add_prefix_space = _prefix_space_by_encoding(tokenizer, from_vocab)
    elif _is_tiktoken_based(tokenizer):
        # Raw bytes, unless the tokenizer re-spells them byte-level (" " encodes as "Ġ").
        detected = (VocabType.BYTE_LEVEL if _first_token_of(tokenizer, " ") == "\u0120"
                    else VocabType.RAW)
        add_prefix_space = False
    elif sp is not None:
        detected = VocabType.BYTE_FALLBACK if "<0x0A>" in vocab else VocabType.RAW
        add_prefix_space = True
    else:
        detected, add_prefix_space = vocab_type_from_vocab(vocab), False
        if detected is None and vocab_type is None:
            raise ValueError(f"unsupported tokenizer {type(tokenizer).__name__}: it is not a "
                             "fast, tiktoken or SentencePiece tokenizer and its vocabulary does "
                             "not show its spelling; pass vocab_type=")
    if vocab_type is not None:
        detected = _as_vocab_type(vocab_type)

    if stop_token_ids is None:
        eos = _hf_eos_ids(tokenizer, sp)
        if eos is None:
            warnings.warn("the tokenizer has no eos token and no stop_token_ids were given: stop "
                          "tokens are detected from their text", stacklevel=3)
        else:
            kept = [e for e in eos if 0 <= e < vocab_size]
            if len(kept) != len(eos):
                warnings.warn(f"eos token id(s) {sorted(set(eos) - set(kept))} are outside "
                              f"vocab_size {vocab_size} and are not stop tokens", stacklevel=3)
            stop_token_ids = kept
    return TokenizerInfo(encoded_vocab, detected, vocab_size=vocab_size,
                         stop_token_ids=stop_token_ids, add_prefix_space=add_prefix_space)
