"""Host API of compilation: ``GrammarCompiler`` and ``CompiledGrammar`` (XGrammar's names).

In:  a ``TokenizerInfo`` and grammars (EBNF text, ``Grammar`` IR, regex, the builtin JSON
     grammar, JSON Schema, structural tags).
Out: ``CompiledGrammar``: the grammar, the tokenizer info, the byte-level automaton and the
     adaptive token-mask cache (plus the kernel layout derived from it), serialisable to bytes.
     The mask cache is lazy by default: a node's entry is computed the first time a fill
     reaches it (``GrammarCompiler(mask_cache="eager")`` computes them all while compiling,
     ``"background"`` on a thread after compiling); the device arena asks for all of them.

``GrammarCompiler`` keeps a thread-safe LRU cache of compiled grammars keyed by what was asked
for (kind, text, options), bounded by ``cache_limit_bytes`` (-1: unbounded).
"""
from __future__ import annotations

import hashlib
import io
import json
import threading
import weakref
from concurrent.futures import Future
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import numpy as np

from gxg import compile_budget
from gxg.compiler.automaton import (DEFAULT_MAX_NODES, Automaton, LeftRecursionError,
                                    build_automaton, gc_paused)
from gxg.compiler.completion import CompletionDistances, completion_distances
from gxg.compiler.mask_cache import (
    ContextPairs, KernelMaskLayout, MaskCache, NodeClassifier, NodeMasks, NodeTokenMask,
    StoreType, build_context_pairs, build_mask_cache, kernel_layout,
)
from gxg.compiler.passes import find_left_recursion, prepare
from gxg.compiler.vocab_walk import TokenTrie
from gxg.grammar.ir import Grammar, GrammarError, normal_forms_kept
from gxg.grammar.json_schema import deep_recursion, load_schema
from gxg.tokenizer import TokenizerInfo

# gxg-3: one header and the arrays' raw bytes (``_pack``); gxg-2 and gxg-1 (every entry stored)
# were NumPy .npz archives, still read
SERIALIZATION_VERSION = "gxg-3"
READABLE_VERSIONS = ("gxg-3", "gxg-2", "gxg-1")
PACKED_MAGIC = b"gxg-3\n"
MASK_CACHE_MODES = ("lazy", "eager", "background")
BACKGROUND_NODES = 8  # nodes per walk of the background build (bounds a fill's wait for it)


class DeserializeFormatError(RuntimeError):
    """Serialized bytes that are not a compiled grammar for this tokenizer."""


@dataclass(eq=False)
class CompiledGrammar:
    # the grammar IR, or after ``deserialize`` its printed text and root rule, parsed on the
    # first read of ``grammar`` (parsing was most of a deserialize: the runtime needs only
    # the automaton and the mask cache)
    _grammar: Union[Grammar, Tuple[str, str], None]
    tokenizer_info: TokenizerInfo
    automaton: Automaton
    mask_cache: MaskCache
    _layout: Optional[KernelMaskLayout] = field(default=None, repr=False)
    _context_pairs: Optional[ContextPairs] = field(default=None, repr=False)
    _completion: Optional[CompletionDistances] = field(default=None, repr=False)
    _node_masks: Optional[NodeMasks] = field(default=None, repr=False)

    @property
    def grammar(self) -> Grammar:
        """The grammar IR it was compiled from."""
        if isinstance(self._grammar, tuple):
            text, root = self._grammar
            self._grammar = Grammar.from_ebnf(text, root_rule_name=root)
        return self._grammar

    @property
    def node_masks(self) -> NodeMasks:
        """What the CPU fill reads per node (dense accept row, uncertain tokens), from the
        mask cache as the fill reaches the nodes (created on first use; kept)."""
        if self._node_masks is None:
            info = self.tokenizer_info
            self._node_masks = NodeMasks(self.mask_cache, info.sorted_token_index,
                                         info.vocab_size)
        return self._node_masks

    @property
    def kernel_layout(self) -> KernelMaskLayout:
        """Dense accept rows + uncertain CSR of every node (derived from the cache on first
        use, which computes the entries a lazy cache still lacks; cached)."""
        if self._layout is None:
            self._layout = kernel_layout(self.mask_cache, self.automaton.num_nodes,
                                         self.tokenizer_info.sorted_token_index,
                                         self.tokenizer_info.vocab_size)
        return self._layout

    @property
    def context_pairs(self) -> ContextPairs:
        """Second-level classification of the uncertain tokens (derived on first use; cached)."""
        if self._context_pairs is None:
            info = self.tokenizer_info
            self._context_pairs = build_context_pairs(self.automaton, self.mask_cache,
                                                      info.token_bytes, info.token_offsets,
                                                      info.sorted_token_ids,
                                                      runs=token_trie(info).runs)
        return self._context_pairs

    @property
    def completion(self) -> CompletionDistances:
        """Fewest bytes to complete from each automaton node, for token budgets (derived on
        first use; cached)."""
        if self._completion is None:
            self._completion = completion_distances(self.automaton)
        return self._completion

    @property
    def memory_size_bytes(self) -> int:
        """Bytes of the automaton tables and the adaptive mask cache's stored entries (host
        storage; a lazy cache grows as nodes are reached)."""
        tables = sum(value.nbytes for value in self.automaton.__dict__.values()
                     if isinstance(value, np.ndarray))
        return int(tables + self.mask_cache.memory_size_bytes)

    def node_statistics(self) -> dict:
        """Uncertain tokens per cached node (count, max, mean) and storage kinds (computes
        every entry of a lazy cache)."""
        counts = self.mask_cache.uncertain_counts()
        kinds = [entry.store_type.name for entry in self.mask_cache.entries]
        return {
            "nodes": int(len(counts)),
            "uncertain_max": int(counts.max()) if len(counts) else 0,
            "uncertain_mean": float(counts.mean()) if len(counts) else 0.0,
            "uncertain_total": int(counts.sum()),
            "store_types": {kind: kinds.count(kind) for kind in sorted(set(kinds))},
        }

    # ------------------------------------------------------------------ serialization
    def serialize(self) -> bytes:
        arrays = {f"automaton.{name}": value for name, value in self.automaton.__dict__.items()
                  if isinstance(value, np.ndarray)}
        cache = self.mask_cache
        computed = cache.computed_nodes()  # what was computed is kept; the rest stays lazy
        entries = cache.entries_of(computed.tolist())
        arrays["cache.nodes"] = cache.nodes
        arrays["cache.computed"] = computed
        arrays["cache.store"] = np.array([e.store_type for e in entries], dtype=np.int8)
        for part in ("indices", "bitset", "uncertain"):
            values = [getattr(e, part) for e in entries]
            arrays[f"cache.{part}.offsets"] = np.cumsum([0] + [len(v) for v in values])
            arrays[f"cache.{part}"] = (np.concatenate(values) if values else
                                       np.zeros(0, np.uint32 if part == "bitset" else np.int32))
        # The completion distances go along: binding needs them (the arena's budget tables),
        # and a grammar compiled in another process should not compute them again.
        completion = self.completion
        arrays["completion.node_distance"] = completion.node_distance
        arrays["completion.rule_length"] = completion.rule_length
        text, root = (self._grammar if isinstance(self._grammar, tuple)
                      else (str(self._grammar), self._grammar.root_rule_name))
        header = {
            "version": SERIALIZATION_VERSION,
            "grammar": text,
            "root_rule_name": root,
            "rule_names": list(self.automaton.rule_names),
            "root_rule": self.automaton.root_rule,
            "num_sorted": self.mask_cache.num_sorted,
            "tokenizer": _tokenizer_fingerprint(self.tokenizer_info),
            "completion_max_rise": completion.max_rise,
        }
        return _pack(header, arrays)

    @staticmethod
    def deserialize(data: bytes, tokenizer_info: TokenizerInfo) -> "CompiledGrammar":
        try:
            header, archive = _unpack(data)
        except Exception as exc:  # any parse failure is a format error for the caller
            raise DeserializeFormatError(f"not a serialized gxg CompiledGrammar: {exc}") from exc
        if header.get("version") not in READABLE_VERSIONS:
            raise DeserializeFormatError(
                f"serialization version {header.get('version')!r}, expected "
                f"{SERIALIZATION_VERSION!r}")
        if header["tokenizer"] != _tokenizer_fingerprint(tokenizer_info):
            raise DeserializeFormatError(
                "the compiled grammar was built for a different tokenizer "
                f"({header['tokenizer']} vs {_tokenizer_fingerprint(tokenizer_info)})")
        grammar = (header["grammar"], header["root_rule_name"])  # parsed on first use
        fields = {name[len("automaton."):]: archive[name] for name in archive
                  if name.startswith("automaton.")}
        automaton = Automaton(rule_names=tuple(header["rule_names"]),
                              root_rule=int(header["root_rule"]), **fields)
        nodes = archive["cache.nodes"]
        computed = archive["cache.computed"] if "cache.computed" in archive else nodes
        entries = {}
        parts = {part: (archive[f"cache.{part}"], archive[f"cache.{part}.offsets"])
                 for part in ("indices", "bitset", "uncertain")}
        for i, (node, store) in enumerate(zip(computed.tolist(),
                                              archive["cache.store"].tolist())):
            pieces = {part: values[offsets[i]: offsets[i + 1]]
                      for part, (values, offsets) in parts.items()}
            entries[node] = NodeTokenMask(StoreType(store), pieces["indices"], pieces["bitset"],
                                          pieces["uncertain"])
        classify = None if len(entries) == len(nodes) else \
            NodeClassifier(automaton, token_trie(tokenizer_info),  # for the entries not kept
                           sorted_token_ids=tokenizer_info.sorted_token_ids)
        cache = MaskCache(int(header["num_sorted"]), nodes, classify, entries)
        completion = None
        if "completion.node_distance" in archive:  # gxg-3; earlier versions compute them
            completion = CompletionDistances(archive["completion.node_distance"],
                                             archive["completion.rule_length"],
                                             int(header["completion_max_rise"]))
        return CompiledGrammar(grammar, tokenizer_info, automaton, cache,
                               _completion=completion)


def _pack(header: dict, arrays: dict) -> bytes:
    """PACKED_MAGIC, the header's length (8 bytes, little endian), the header as JSON with a
    table of the arrays (name, dtype, shape, offset), then each array's bytes at an offset
    that is a multiple of 8. Reading it back is a few views (an .npz archive parsed a header
    per array: 3/4 of a deserialize)."""
    table, chunks, offset = [], [], 0
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        table.append([name, value.dtype.str, list(value.shape), offset])
        raw = value.tobytes()
        padding = -len(raw) % 8
        chunks.append(raw + b"\0" * padding)
        offset += len(raw) + padding
    text = json.dumps({**header, "arrays": table}).encode()
    text += b" " * (-len(text) % 8)
    return b"".join([PACKED_MAGIC, len(text).to_bytes(8, "little"), text, *chunks])


def _unpack(data: bytes):
    """(header, {name: array}) of ``_pack``'s bytes, or of an .npz archive (gxg-1, gxg-2).
    The arrays are views of one writable copy of the data."""
    if not data.startswith(PACKED_MAGIC):
        archive = np.load(io.BytesIO(data), allow_pickle=False)
        header = json.loads(bytes(archive["header"]).decode())
        return header, {name: archive[name] for name in archive.files if name != "header"}
    start = len(PACKED_MAGIC) + 8
    length = int.from_bytes(data[len(PACKED_MAGIC): start], "little")
    header = json.loads(data[start: start + length].decode())
    body = memoryview(bytearray(data[start + length:]))
    arrays = {}
    for name, dtype, shape, offset in header.pop("arrays"):
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset + count * dtype.itemsize > len(body):
            raise ValueError(f"array {name!r} lies outside the data")
        arrays[name] = np.frombuffer(body, dtype=dtype, count=count, offset=offset).reshape(shape)
    return header, arrays


def _schema_key(schema) -> str:
    """A cache key for a schema as ``Grammar.from_json_schema`` takes it (a dict, a bool, a JSON
    text or a Pydantic model class; anything else is the same GrammarError as there)."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, bytes):
        return schema.decode("utf-8", "surrogateescape")
    with deep_recursion():  # json.dumps recurses along the schema as the converter does
        return json.dumps(load_schema(schema), sort_keys=True)


# A cache that says so: per TokenizerInfo (weakly held; its vocabulary never changes) what is
# derived from its whole vocabulary — the token trie, the serialization fingerprint — built
# once instead of per compile, serialization or deserialization (~20 ms each for Qwen's).
_PER_TOKENIZER: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PER_TOKENIZER_LOCK = threading.Lock()


def _per_tokenizer(info: TokenizerInfo, key: str, make):
    with _PER_TOKENIZER_LOCK:
        derived = _PER_TOKENIZER.setdefault(info, {})
        if key not in derived:
            derived[key] = make(info)
        return derived[key]


def _tokenizer_fingerprint(info: TokenizerInfo) -> dict:
    return dict(_per_tokenizer(info, "fingerprint", _fingerprint))


def _fingerprint(info: TokenizerInfo) -> dict:
    digest = hashlib.sha256()
    for token in info.decoded_vocab:
        digest.update(len(token).to_bytes(4, "little"))
        digest.update(token)
    return {"vocab_type": int(info.vocab_type), "vocab_size": info.vocab_size,
            "stop_token_ids": sorted(info.stop_token_ids),
            "decoded_vocab_sha256": digest.hexdigest()[:16]}


def token_trie(tokenizer_info: TokenizerInfo) -> TokenTrie:
    """The vocabulary's token trie (read-only; built once per tokenizer)."""
    return _per_tokenizer(tokenizer_info, "trie", lambda info: TokenTrie(
        info.token_bytes, info.token_offsets, info.common_prefix_len))


def compile_grammar_ir(grammar: Grammar, tokenizer_info: TokenizerInfo,
                       trie: Optional[TokenTrie] = None, *,
                       max_automaton_nodes: int = DEFAULT_MAX_NODES,
                       max_mask_cache_bytes: Optional[int] = None,
                       lazy_masks: bool = False) -> CompiledGrammar:
    """Grammar IR -> passes -> automaton -> mask cache (``trie``: the vocabulary's token trie,
    built here when not given). A grammar past a size budget (automaton nodes, mask-cache
    bytes) is a GrammarError naming it, raised as soon as the budget is exceeded.
    ``lazy_masks``: walk no vocabulary here; each node's entry is computed when first asked
    for (the mask-cache budget then bounds what is kept instead)."""
    automaton = _prepared_automaton(grammar, max_automaton_nodes)
    _check_token_ids(automaton, tokenizer_info.vocab_size)
    cache = build_mask_cache(automaton, trie if trie is not None else token_trie(tokenizer_info),
                             max_bytes=max_mask_cache_bytes, lazy=lazy_masks,
                             sorted_token_ids=tokenizer_info.sorted_token_ids)
    return CompiledGrammar(grammar, tokenizer_info, automaton, cache)


def _prepared_automaton(grammar: Grammar, max_nodes: int) -> Automaton:
    """``build_automaton(prepare(grammar))``, first without eliminating left recursion: most
    grammars have none (no JSON Schema's grammar but a recursive ``$ref`` at a left edge), and
    the builder checks every grammar for it anyway. Where it finds some, or fails otherwise
    on a grammar that has some (a node budget, before its check), the grammar is prepared again
    with the elimination and built from that. A grammar without left recursion gets the same
    automaton either way (the elimination returns it unchanged); one whose left recursion
    passes only through dead parts, which the passes remove, gets the same language."""
    fast = prepare(grammar, skip_left_recursion=True)
    try:
        return build_automaton(fast, max_nodes=max_nodes)
    except LeftRecursionError:
        pass
    except compile_budget.CompileTimeoutError:
        raise
    except GrammarError:
        if not find_left_recursion(fast):
            raise
    return build_automaton(prepare(grammar), max_nodes=max_nodes)


def _check_token_ids(automaton: Automaton, vocab_size: int) -> None:
    """A token item's id outside the vocabulary is a GrammarError (XGrammar's message)."""
    outside = automaton.token_set_ids[automaton.token_set_ids >= vocab_size]
    if len(outside):
        raise GrammarError(f"Token id {int(outside[0])} in the grammar is out of the "
                           f"vocabulary range [0, {vocab_size})")


def _mask_cache_mode(mask_cache: Optional[str], dynamic: Optional[bool]) -> str:
    """``GrammarCompiler``'s mask-cache mode from its two spellings (None: not given)."""
    if mask_cache is not None and mask_cache not in MASK_CACHE_MODES:
        raise ValueError(f"mask_cache must be one of {MASK_CACHE_MODES}, got {mask_cache!r}")
    if dynamic is None:
        return mask_cache or "lazy"
    if not isinstance(dynamic, bool):
        raise ValueError(f"enable_dynamic_compilation must be a bool, got {dynamic!r}")
    if mask_cache is not None and (mask_cache != "eager") != dynamic:
        raise ValueError(f"enable_dynamic_compilation={dynamic} contradicts "
                         f"mask_cache={mask_cache!r}")
    return mask_cache or ("lazy" if dynamic else "eager")


class GrammarCompiler:
    """Compiles grammars against one tokenizer; thread-safe LRU cache of results.

    ``max_threads`` is accepted for XGrammar compatibility; compilation currently runs on the
    calling thread (its per-token work is vectorised numpy).

    ``mask_cache``: "lazy" (default) compiles without walking the vocabulary and computes a
    node's token-mask entry the first time a fill reaches it; "eager" computes every entry
    while compiling (the compile budgets then cover it: ``max_mask_cache_bytes`` past which the
    compile is a GrammarError); "background" compiles lazily, then a daemon thread computes the
    remaining entries while decoding goes on. In the lazy modes ``max_mask_cache_bytes`` bounds
    the entries kept (one past it is computed each time it is needed, never truncated).
    ``enable_dynamic_compilation`` is XGrammar 0.2.9's name for the same choice: True is
    "lazy", False "eager"; given with a ``mask_cache`` that says otherwise, a ValueError."""

    def __init__(self, tokenizer_info: TokenizerInfo, *, max_threads: int = 8,
                 cache_enabled: bool = True, cache_limit_bytes: int = -1,
                 compile_timeout: Optional[float] = None,
                 max_automaton_nodes: int = DEFAULT_MAX_NODES,
                 max_mask_cache_bytes: Optional[int] = None,
                 mask_cache: Optional[str] = None,
                 enable_dynamic_compilation: Optional[bool] = None):
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise ValueError("GrammarCompiler needs a gxg.TokenizerInfo, got "
                             f"{type(tokenizer_info).__name__}")
        self.tokenizer_info = tokenizer_info
        self.max_threads = max_threads
        self.cache_enabled = cache_enabled
        self.cache_limit_bytes = cache_limit_bytes
        # seconds one compile_* call may take (front end, passes, automaton, mask cache) before
        # it stops with CompileTimeoutError (a GrammarError); None: no limit. Not XGrammar's
        # (it has none): what serving engines ask for to bound a hostile schema.
        with compile_budget.within(compile_timeout):
            pass  # checks the value
        self.compile_timeout = compile_timeout
        # size budgets of one compile (GrammarError past them): automaton nodes, mask-cache bytes
        for name, value, optional in (("max_automaton_nodes", max_automaton_nodes, False),
                                      ("max_mask_cache_bytes", max_mask_cache_bytes, True)):
            if not (optional and value is None) and (isinstance(value, bool) or
                                                     not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int{' or None' if optional else ''}"
                                 f", got {value!r}")
        self.max_automaton_nodes = max_automaton_nodes
        self.max_mask_cache_bytes = max_mask_cache_bytes
        self.mask_cache = _mask_cache_mode(mask_cache, enable_dynamic_compilation)
        self._cache: "OrderedDict[tuple, CompiledGrammar]" = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict = {}  # key -> Future of a compilation in progress

    # ------------------------------------------------------------------ compile_*
    def compile_grammar(self, grammar: Union[str, Grammar], *, root_rule_name: str = "root"
                        ) -> CompiledGrammar:
        if isinstance(grammar, Grammar):
            key = ("grammar", str(grammar), grammar.root_rule_name)
            return self._compiled(key, lambda: grammar)
        if not isinstance(grammar, str):
            raise TypeError(f"compile_grammar takes EBNF text or a Grammar, got "
                            f"{type(grammar).__name__}")
        key = ("ebnf", grammar, root_rule_name)
        return self._compiled(key, lambda: Grammar.from_ebnf(grammar,
                                                             root_rule_name=root_rule_name))

    def compile_json_schema(self, schema, *, any_whitespace: bool = True, indent=None,
                            separators=None, strict_mode: bool = True,
                            max_whitespace_cnt=None, any_order: bool = False,
                            coerce_one_of=None, any_string_spelling: bool = False
                            ) -> CompiledGrammar:
        """A dict, a JSON string or a Pydantic model class (see ``Grammar.from_json_schema``)."""
        options = dict(any_whitespace=any_whitespace, indent=indent,
                       separators=None if separators is None else tuple(separators),
                       strict_mode=strict_mode, max_whitespace_cnt=max_whitespace_cnt,
                       any_order=any_order, coerce_one_of=coerce_one_of,
                       any_string_spelling=any_string_spelling)
        # the key (a json.dumps of the schema) only when there is a cache to look it up in
        key = (("json_schema", _schema_key(schema), tuple(sorted(options.items())))
               if self.cache_enabled else None)
        return self._compiled(key, lambda: Grammar.from_json_schema(schema, **options))

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        return self._compiled(("builtin_json",), Grammar.builtin_json_grammar)

    def compile_regex(self, regex: str) -> CompiledGrammar:
        return self._compiled(("regex", regex), lambda: Grammar.from_regex(regex))

    def compile_structural_tag(self, *args, **kwargs) -> CompiledGrammar:
        """An XGrammar 0.2.8 structural tag: ``compile_structural_tag(structural_tag)`` (a JSON
        text, a dict, an XGrammar pydantic ``StructuralTag``) or the deprecated
        ``compile_structural_tag(tags, triggers)`` (see ``Grammar.from_structural_tag``)."""
        from gxg.grammar.structural_tag import parse_structural_tag
        from gxg.grammar.structural_tag_emission import emit_structural_tag
        tag = parse_structural_tag(*args, **kwargs)
        return self._compiled(("structural_tag", tag.key),
                              lambda: emit_structural_tag(tag, self.tokenizer_info))

    def compile_lark(self, lark_string: str, *, named_grammars=None) -> CompiledGrammar:
        """Lark text in XGrammar 0.2.8's dialect (see ``Grammar.from_lark``); ``named_grammars``
        maps ``@name`` references to gxg Grammars or Lark texts."""
        from gxg.grammar.lark import named_grammars_key
        key = ("lark", lark_string, named_grammars_key(named_grammars))
        return self._compiled(key, lambda: Grammar.from_lark(
            lark_string, named_grammars=named_grammars, tokenizer_info=self.tokenizer_info))

    # ------------------------------------------------------------------ cache
    def _compiled(self, key: Optional[tuple], make_grammar) -> CompiledGrammar:
        if not self.cache_enabled:
            trie = self._token_trie()  # per vocabulary, not per compile: outside the deadline
            with compile_budget.within(self.compile_timeout), gc_paused(), normal_forms_kept():
                compiled = compile_grammar_ir(make_grammar(), self.tokenizer_info, trie,
                                              **self._budgets())
            return self._start_background(compiled)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._evict()  # lazy mask caches grow after insertion
                return hit
            pending = self._pending.get(key)
            owner = pending is None
            if owner:  # this thread compiles; others asking for the same key wait for it
                pending = self._pending[key] = Future()
        if not owner:
            return pending.result()
        try:
            trie = self._token_trie()
            with compile_budget.within(self.compile_timeout), gc_paused(), normal_forms_kept():
                compiled = compile_grammar_ir(make_grammar(), self.tokenizer_info, trie,
                                              **self._budgets())
        except BaseException as error:
            with self._lock:
                del self._pending[key]
            pending.set_exception(error)
            raise
        with self._lock:
            del self._pending[key]
            self._cache[key] = compiled
            self._evict()
        pending.set_result(compiled)
        return self._start_background(compiled)

    def _budgets(self) -> dict:
        return {"max_automaton_nodes": self.max_automaton_nodes,
                "max_mask_cache_bytes": self.max_mask_cache_bytes,
                "lazy_masks": self.mask_cache != "eager"}

    def _start_background(self, compiled: CompiledGrammar) -> CompiledGrammar:
        """In "background" mode, a daemon thread computes the entries the cache still lacks
        (once per compiled grammar; fills meanwhile compute what they reach themselves)."""
        cache = compiled.mask_cache
        if self.mask_cache == "background" and not cache.complete and cache.background is None:
            cache.background = threading.Thread(
                target=cache.precompute, args=(BACKGROUND_NODES,),
                kwargs={"skip_refused": True}, daemon=True, name="gxg-mask-cache")
            cache.background.start()
        return compiled

    def _token_trie(self) -> TokenTrie:
        return token_trie(self.tokenizer_info)

    def _evict(self) -> None:
        if self.cache_limit_bytes < 0:
            return
        while self._cache and self.get_cache_size_bytes() > self.cache_limit_bytes:
            self._cache.popitem(last=False)

    def get_cache_size_bytes(self) -> int:
        return sum(c.memory_size_bytes for c in self._cache.values())

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
