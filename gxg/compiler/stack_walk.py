"""The PDA's moves on stacks written as tuples of nodes: the host-side reference semantics.

In:  an ``Automaton`` (tables and semantics in ``gxg.compiler.automaton``), or any object with
     the fields a walk reads: ``byte_class``, ``next_node``, ``is_final``, ``is_scannable``,
     ``is_pure_return``, ``node_rule``, ``rule_start``, ``refs(node)``, ``num_nodes`` and
     ``rule_names`` (messages); the mask-cache mode also ``rule_lookahead``. (The CPU ops rebuild
     such an object from the arena's tensors: ``gxg.ops.arena_tables``.)
Out: ``StackWalker``, which closes and advances *configurations*: frozensets of elements
     ``(stack, escaped, lookahead)``:

     * ``stack`` — a tuple of nodes, bottom first; ``()`` is ``END``: the bottom frame has
       completed (no byte may follow in that frame); unescaped in full-stack mode it means the
       input so far is a sentence of the root;
     * ``escaped`` — the mask-cache walk (``escape_bottom=True``) starts from one node with its
       rule frame as the only known part of the stack; when that frame completes, the walk
       *escapes* into every place that references the rule (context expansion, paper §3.2), and
       elements found that way are marked escaped: a token that only survives escaped is
       context-dependent ("uncertain"), one that survives unescaped is accepted everywhere;
     * ``lookahead`` — after the first escape from a rule with a lookahead assertion, the bytes
       that follow must also walk the lookahead's rule; ``None`` = no (more) constraint.

A configuration keeps only elements whose top can scan a byte, and ``END``; everything else is
an intermediate step of the closure. The mask cache (``mask_cache``), the brute-force oracle of
the tests and the CPU runtime's uncertain-token check agree because they all use these moves;
the pool-based runtime (``gxg.runtime``) and the GPU kernels implement the same moves on a
persistent stack.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from gxg.compiler.automaton import Automaton
from gxg.grammar.ir import GrammarError

Stack = Tuple[int, ...]
Element = Tuple[Stack, bool, Optional[FrozenSet]]
Config = FrozenSet[Element]

MAX_CLOSURE_ELEMENTS = 20_000  # a closure larger than this is reported, not computed
END: Stack = ()
ANYTHING: Stack = (-1,)  # an escape without context expansion: any bytes may follow
EMPTY_CONFIG: Config = frozenset()


class StackWalker:
    """Closure and byte steps of configurations over one automaton.

    ``escape_bottom``: when the bottom frame of an unescaped stack completes, escape into the
    rule's callers (mask-cache mode) instead of completing the root (full-stack mode).
    ``use_lookahead``: honour lookahead assertions at the first escape (mask-cache mode only).
    """

    def __init__(self, automaton: Automaton, *, escape_bottom: bool = False,
                 use_lookahead: bool = True, context_expansion: bool = True):
        self.automaton = automaton
        self.escape_bottom = escape_bottom
        self.use_lookahead = use_lookahead and escape_bottom
        # Without context expansion an escape matches any bytes at all (the paper's baseline,
        # kept to measure what the expansion saves).
        self.context_expansion = context_expansion
        a = automaton
        self._next = a.next_node.tolist()
        self._class = a.byte_class.tolist()
        self._final = a.is_final.tolist()
        self._scannable = a.is_scannable.tolist()
        self._pure_return = a.is_pure_return.tolist()
        self._node_rule = a.node_rule.tolist()
        self._start = a.rule_start.tolist()
        self._lookahead_rule = a.rule_lookahead.tolist() if self.use_lookahead else None
        self._refs: List[List[Tuple[int, int]]] = [a.refs(n) for n in range(a.num_nodes)]
        callers: Dict[int, List[int]] = defaultdict(list)
        for node in range(a.num_nodes):
            for rule, ret in self._refs[node]:
                callers[rule].append(ret)
        self._callers = {rule: sorted(set(rets)) for rule, rets in callers.items()}
        self._lookahead_walker = (StackWalker(automaton, escape_bottom=False)
                                  if self.use_lookahead else None)

    # ------------------------------------------------------------------ configurations
    def initial(self, stack: Stack) -> Config:
        """The closure of one stack (e.g. ``(node,)`` for the mask cache)."""
        return self.close([(tuple(stack), False, None)])

    def close(self, elements: Iterable[Element]) -> Config:
        seen = set()
        keep = []
        work = list(elements)
        while work:
            element = work.pop()
            if element in seen:
                continue
            seen.add(element)
            if len(seen) > MAX_CLOSURE_ELEMENTS:
                raise GrammarError(
                    f"the grammar is too ambiguous: one step has more than "
                    f"{MAX_CLOSURE_ELEMENTS} parse stacks ({self._where(element[0])}); nested "
                    f"nullable or repeated rules that can match the same text in many ways "
                    f"cause this: rewrite them without the ambiguity")
            stack, escaped, lookahead = element
            if not stack:
                keep.append(element)
                continue
            if stack is ANYTHING:
                keep.append(element)
                continue
            top = stack[-1]
            if self._scannable[top]:
                keep.append(element)
            below = stack[:-1]
            for rule, ret in self._refs[top]:
                frame = below if self._pure_return[ret] else below + (ret,)
                work.append((frame + (self._start[rule],), escaped, lookahead))
            if self._final[top]:
                if below:
                    work.append((below, escaped, lookahead))
                    continue
                if escaped or self.escape_bottom:
                    work.extend(self._escape(self._node_rule[top], escaped, lookahead))
                if not escaped:
                    # The bottom frame completes here with every byte consumed inside it: in
                    # full-stack mode the root is complete; in mask-cache mode the token is
                    # accepted whatever the caller (END then dies on any further byte).
                    work.append((END, False, None))
        return frozenset(keep)

    def _where(self, stack: Stack) -> str:
        rules = [self.automaton.rule_names[self._node_rule[n]] for n in stack if n >= 0]
        return "in rules " + " > ".join(rules[-4:]) if rules else "at the end of the input"

    def _escape(self, rule: int, escaped: bool, lookahead) -> List[Element]:
        """Elements for 'rule completed with an unknown caller': every return site."""
        if not self.context_expansion:
            return [(ANYTHING, True, None)]
        if not escaped and self.use_lookahead:
            lookahead = self._initial_lookahead(rule)
            if lookahead == EMPTY_CONFIG:
                return []
        callers = self._callers.get(rule)
        if not callers:  # the root: nothing can follow, the input may end here
            return [(END, True, lookahead)]
        return [((ret,), True, lookahead) for ret in callers]

    def _initial_lookahead(self, rule: int):
        lookahead_rule = self._lookahead_rule[rule]
        if lookahead_rule < 0:
            return None
        config = self._lookahead_walker.initial((self._start[lookahead_rule],))
        return _satisfied_or(config)

    def step(self, config: Config, byte: int) -> Config:
        """Advance every element by one byte, then close."""
        cls = self._class[byte]
        advanced = []
        for stack, escaped, lookahead in config:
            if not stack:
                continue  # END: nothing may follow
            if stack is ANYTHING:
                advanced.append((stack, escaped, lookahead))
                continue
            target = self._next[stack[-1]][cls]
            if target < 0:
                continue
            if lookahead is not None:
                lookahead = _satisfied_or(self._lookahead_walker.step(lookahead, byte))
                if lookahead == EMPTY_CONFIG:
                    continue
            advanced.append((stack[:-1] + (target,), escaped, lookahead))
        return self.close(advanced)

    def walk(self, config: Config, data: bytes) -> Config:
        for byte in data:
            if not config:
                break
            config = self.step(config, byte)
        return config

    # ------------------------------------------------------------------ questions
    @staticmethod
    def can_end(config: Config) -> bool:
        """The root can complete here (a stop token is allowed)."""
        return any(not stack for stack, _, _ in config)

    @staticmethod
    def has_unescaped(config: Config) -> bool:
        return any(not escaped for _, escaped, _ in config)


def _satisfied_or(config: Config):
    """A lookahead configuration, or None once the lookahead has been matched in full."""
    if StackWalker.can_end(config):
        return None
    return config
