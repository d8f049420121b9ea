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
    A walker caches, per rule, the closure of its escape (``_escape_closure``); that cache
    only grows, and is dropped with the walker.
    """

    def __init__(self, automaton: Automaton, *, escape_bottom: bool = False,
                 use_lookahead: bool = True, context_expansion: bool = True):
        self.automaton = automaton
        self.escape_bottom = escape_bottom
        self.use_lookahead = use_lookahead and escape_bottom
        # Without context expansion an escape matches any bytes at all (the paper's baseline,
        # kept to measure what the expansion saves).
        self.context_expansion = context_expansion
        lists = automaton.lists  # shared by every walker of the automaton
        self._next = lists.next_node
        self._class = lists.byte_class
        self._final = lists.is_final
        self._scannable = lists.is_scannable
        self._pure_return = lists.is_pure_return
        self._plain = lists.is_plain
        self._node_rule = lists.node_rule
        self._start = lists.rule_start
        self._lookahead_rule = lists.rule_lookahead if self.use_lookahead else None
        self._refs: List[Tuple[Tuple[int, int], ...]] = lists.refs
        self._callers = lists.callers
        # the rules of token budgets, whose pushes ``initial`` leaves out (see there)
        self._counted_rules = lists.counted_rules
        self._lookahead_walker = (StackWalker(automaton, escape_bottom=False)
                                  if self.use_lookahead else None)
        # Caches (they only grow, at most one entry per rule; see ``_escape_closure``): the
        # closed escape of each rule, and each rule's initial lookahead configuration.
        self._escape_cache: Dict[int, Config] = {}
        self._initial_lookahead_cache: Dict[int, Optional[Config]] = {}

    # ------------------------------------------------------------------ configurations
    def initial(self, stack: Stack, *, as_top: bool = False) -> Config:
        """The closure of one stack (e.g. ``(node,)`` for the mask cache). ``as_top``: the
        stack is a live top of the runtime (a mask-cache entry's start), whose closure's
        pushes of budgeted rules (``Rule.max_tokens``) are tops of their own that the token
        boundary may drop (``gxg.compiler.automaton``, token budgets): they are left out, so
        the entry does not hold the tokens they would allow."""
        elements = [(tuple(stack), False, None)]
        if as_top and self._counted_rules:
            return self.close(elements, self._counted_rules)
        return self.close(elements)

    def close(self, elements: Iterable[Element], skip_rules: FrozenSet[int] = frozenset()
              ) -> Config:
        """Everything reachable from ``elements`` by push and pop moves (and escapes), keeping
        the elements whose top can scan a byte, ``END`` and ``ANYTHING``.

        An escape (a bottom frame completing with an unknown caller) is not walked here: its
        closure depends only on the rule and the lookahead, so it is taken, whole, from
        ``_escape_closure`` (computed once per rule). ``MAX_CLOSURE_ELEMENTS`` bounds the
        elements walked here plus those the escapes add.

        Elements whose tops are all plain (they scan, are not final and call nothing: inside
        a key or a string) close to themselves: returned as they are, without the walk (most
        steps inside a key trie or a string; ``_walk_closure`` is the walk)."""
        elements = elements if isinstance(elements, list) else list(elements)
        plain = self._plain
        for stack, _, _ in elements:
            if not stack or stack is ANYTHING or not plain[stack[-1]]:
                return self._walk_closure(elements, skip_rules)
        if len(elements) > MAX_CLOSURE_ELEMENTS:
            return self._walk_closure(elements, skip_rules)  # (which reports it)
        return frozenset(elements)

    def _walk_closure(self, elements: List[Element], skip_rules: FrozenSet[int] = frozenset()
                      ) -> Config:
        """``close`` by walking the push, pop and escape moves (any elements)."""
        seen = set()
        out = set()   # kept elements: those walked here (``local`` of them) and the escapes'
        local = 0
        work = list(elements)
        while work:
            element = work.pop()
            if element in seen:
                continue
            seen.add(element)
            # |seen ∪ escapes' elements|: an escape's element that was walked here is kept
            if len(seen) + len(out) - local > MAX_CLOSURE_ELEMENTS:
                raise self._too_ambiguous(element[0])
            stack, escaped, lookahead = element
            if not stack or stack is ANYTHING:
                out.add(element)
                local += 1
                continue
            top = stack[-1]
            if self._scannable[top]:
                out.add(element)
                local += 1
            below = stack[:-1]
            for rule, ret in self._refs[top]:
                if rule in skip_rules:
                    continue
                frame = below if self._pure_return[ret] else below + (ret,)
                work.append((frame + (self._start[rule],), escaped, lookahead))
            if self._final[top]:
                if below:
                    work.append((below, escaped, lookahead))
                    continue
                if escaped or self.escape_bottom:
                    if not self.context_expansion:
                        work.extend(self._escape(self._node_rule[top], escaped, lookahead))
                    else:
                        escape = self._closed_escape(self._node_rule[top], escaped, lookahead)
                        if escape:
                            out |= escape
                            if len(seen) + len(out) - local > MAX_CLOSURE_ELEMENTS:
                                raise self._too_ambiguous(stack)
                if not escaped:
                    # The bottom frame completes here with every byte consumed inside it: in
                    # full-stack mode the root is complete; in mask-cache mode the token is
                    # accepted whatever the caller (END then dies on any further byte).
                    work.append((END, False, None))
        return frozenset(out)

    def _too_ambiguous(self, stack: Stack) -> GrammarError:
        return GrammarError(
            f"the grammar is too ambiguous: one step has more than "
            f"{MAX_CLOSURE_ELEMENTS} parse stacks ({self._where(stack)}); nested "
            f"nullable or repeated rules that can match the same text in many ways "
            f"cause this: rewrite them without the ambiguity")

    def _closed_escape(self, rule: int, escaped: bool, lookahead) -> Config:
        """``close(_escape(rule, escaped, lookahead))`` (with context expansion), from the
        cache: every element of an escape's closure is escaped and carries the lookahead of
        the escape unchanged, so the closure is the rule's (``_escape_closure``, computed
        without lookahead) with the lookahead put in."""
        if not escaped and self.use_lookahead:
            lookahead = self._initial_lookahead(rule)
            if lookahead == EMPTY_CONFIG:
                return EMPTY_CONFIG
        closure = self._escape_closure(rule)
        if lookahead is None:
            return closure
        return frozenset([(stack, True, lookahead) for stack, _, _ in closure])

    def _escape_closure(self, rule: int) -> Config:
        """``close(_escape(rule, True, None))``: what 'rule completed with an unknown caller'
        leads to. A cache (``_escape_cache``, one entry per rule, kept for the walker's life):
        a closure that completes a rule with c call sites would otherwise walk all c again for
        each of the k nodes that can complete it (k·c), and a chain of tail calls would walk
        the whole chain again from each link.

        Computed with a work list per rule; an escape into another rule met on the way takes
        that rule's cached closure, computed first (an explicit stack of suspended work
        lists, no recursion); an escape into a rule whose closure is still being computed
        (a cycle through the callers) is walked in place instead. Elements walked per rule
        plus those taken from other rules are bounded by ``MAX_CLOSURE_ELEMENTS`` as in
        ``close``."""
        cache = self._escape_cache
        hit = cache.get(rule)
        if hit is not None:
            return hit
        frames = [_EscapeFrame(rule, self._escape(rule, True, None))]
        in_progress = {rule}
        while frames:
            frame = frames[-1]
            needed = self._walk_escape_frame(frame, in_progress)
            if needed is None:
                frames.pop()
                in_progress.discard(frame.rule)
                cache[frame.rule] = frozenset(frame.out)
            else:
                in_progress.add(needed)
                frames.append(_EscapeFrame(needed, self._escape(needed, True, None)))
        return cache[rule]

    def _walk_escape_frame(self, frame: "_EscapeFrame", in_progress) -> Optional[int]:
        """Walks ``frame``'s work list (escaped elements, no lookahead) to its end (returns
        None), or until it needs the closure of a rule neither cached nor in progress (returns
        that rule; the frame resumes where it stopped once the rule is cached)."""
        cache = self._escape_cache
        work, seen, out = frame.work, frame.seen, frame.out
        scannable, refs, pure_return, start = (self._scannable, self._refs, self._pure_return,
                                               self._start)
        while work:
            element = work.pop()
            if element.__class__ is int:  # the node at which a bottom frame completed
                rule = self._node_rule[element]
                closure = cache.get(rule)
                if closure is not None:
                    out |= closure
                    if len(seen) + len(out) - frame.local > MAX_CLOSURE_ELEMENTS:
                        raise self._too_ambiguous((element,))
                elif rule in frame.walked:
                    pass
                elif rule in in_progress:  # a cycle through the callers: walk it here
                    frame.walked.add(rule)
                    work.extend(self._escape(rule, True, None))
                else:
                    work.append(element)
                    return rule
                continue
            if element in seen:
                continue
            seen.add(element)
            if len(seen) + len(out) - frame.local > MAX_CLOSURE_ELEMENTS:
                raise self._too_ambiguous(element[0])
            stack = element[0]
            if not stack:
                out.add(element)
                frame.local += 1
                continue
            top = stack[-1]
            if scannable[top]:
                out.add(element)
                frame.local += 1
            below = stack[:-1]
            for rule, ret in refs[top]:
                base = below if pure_return[ret] else below + (ret,)
                work.append((base + (start[rule],), True, None))
            if self._final[top]:
                work.append((below, True, None) if below else top)
        return None

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
        cache = self._initial_lookahead_cache
        if rule not in cache:
            config = self._lookahead_walker.initial((self._start[lookahead_rule],))
            cache[rule] = _satisfied_or(config)
        return cache[rule]

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

    def step_classes(self, config: Config, classes: Iterable[int]
                     ) -> Optional[List[Tuple[List[int], Config]]]:
        """``step`` for a byte of each of ``classes`` (byte classes), as (classes, the
        configuration they lead to) groups: classes that move every element to the same
        nodes lead to the same configuration, so each group costs one closure, not one per
        class (inside a key trie most classes leave the trie the same way). None for a
        configuration with a lookahead (its step reads the byte itself): step each class."""
        fixed: List[Element] = []  # ANYTHING: the same whatever the byte
        moving = []                # (below the top, the top's row of next_node, escaped)
        for stack, escaped, lookahead in config:
            if not stack:
                continue
            if lookahead is not None:
                return None
            if stack is ANYTHING:
                fixed.append((stack, escaped, lookahead))
            else:
                moving.append((stack[:-1], self._next[stack[-1]], escaped))
        groups: Dict[tuple, List[int]] = {}
        for cls in classes:
            groups.setdefault(tuple([row[cls] for _, row, _ in moving]), []).append(cls)
        out = []
        for targets, group in groups.items():
            advanced = fixed + [(below + (target,), escaped, None)
                                for (below, _, escaped), target in zip(moving, targets)
                                if target >= 0]
            out.append((group, self.close(advanced)))
        return out

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


class _EscapeFrame:
    """One rule's escape closure while ``StackWalker._escape_closure`` computes it."""

    __slots__ = ("rule", "work", "seen", "out", "local", "walked")

    def __init__(self, rule: int, escape: List[Element]):
        self.rule = rule
        self.work: list = list(escape)  # elements, and ints: nodes where a bottom frame ends
        self.seen: set = set()
        self.out: set = set()           # kept elements: walked here (``local``) or taken
        self.local = 0
        self.walked = {rule}            # rules whose escape elements were put on ``work``


def _satisfied_or(config: Config):
    """A lookahead configuration, or None once the lookahead has been matched in full."""
    if StackWalker.can_end(config):
        return None
    return config
