"""Grammar-to-grammar passes that prepare a Grammar for the automaton builder.

In:  a Grammar (IR) from any front-end.
Out: a Grammar with the same language that the automaton builder accepts: a root wrapper that
     nothing references, no left recursion (direct, indirect, or hidden behind nullable
     prefixes), small non-recursive rules inlined, and no dead rules.

Every pass is a pure function ``Grammar -> Grammar`` (the input is never changed); rule names,
the root name and each rule's lookahead survive every pass (a pass may add rules with new names
derived from old ones, and ``remove_dead_rules`` drops rules). ``prepare`` is the pipeline the
compiler calls:

    eliminate_left_recursion -> remove_dead_rules -> inline_small_rules -> remove_dead_rules
    -> wrap_root

Vocabulary used below
---------------------
* *nullable*: derives the empty string. *productive*: derives at least one finite string.
  A ``TokenSet`` leaf (one whole token) is neither nullable nor empty: it is a terminal like a
  literal, so a rule made of token sets is productive and no left corner passes through it.
* *left corners* of an expression: the rules it references at a position that only nullable
  things precede (``b a "x"`` with nullable ``b`` has left corners ``b`` and ``a``). The PDA
  pushes a rule's left corners without reading a byte, so a cycle of left corners
  (*left recursion*, possibly *hidden* behind nullable prefixes) is a push cycle that closure
  would never finish; ``find_left_recursion`` reports such cycles.
* The *empty language* (a rule that derives nothing, e.g. ``a ::= a``) has no direct spelling
  in the IR; the passes write it as ``MATCHES_NOTHING``, a character class with no code points.

Graph walks (strongly connected components, fixed points, reachability) are iterative, so
grammars with very long chains of rules do not hit Python's recursion limit; expression trees
are walked recursively, as ``normalize`` does.
"""
from __future__ import annotations

import itertools
from typing import Dict, Iterable, List, Optional, Sequence as Seq, Set, Tuple

from gxg import compile_budget
from gxg.graphs import reachable, strongly_connected_components
from gxg.grammar.ir import (
    MAX_CODE_POINT,
    CharClass,
    Choice,
    Expr,
    Grammar,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TokenSet,
    iter_rule_refs,
    iter_subexprs,
    normal_forms_kept,
    normalize,
)
from gxg.grammar.rule_analysis import (
    _matches_no_code_point, is_nullable, is_productive, least_fixpoint,
)

__all__ = [
    "MATCHES_NOTHING",
    "ROOT_WRAPPER",
    "eliminate_left_recursion",
    "expr_size",
    "find_left_recursion",
    "grammar_size",
    "inline_small_rules",
    "is_productive",
    "least_fixpoint",
    "nullable_rules",
    "prepare",
    "productive_rules",
    "remove_dead_rules",
    "wrap_root",
]

ROOT_WRAPPER = "root_wrapper"

# The empty language: a class of "every code point except every code point". It is valid IR,
# prints as ``[^\x00-\U0010FFFF]``, and the automaton lowers it to a byte automaton without
# edges. XGrammar accepts such a grammar too (its matcher then allows no token at all).
MATCHES_NOTHING = CharClass(((0, MAX_CODE_POINT),), negated=True)

# inline_small_rules defaults: the paper (§3.4) bounds both sizes by constants without naming
# them; these keep typical fragment rules (whitespace, digits, escapes, keywords) inlined while
# a caller's FSM stays small.
DEFAULT_MAX_INLINED_RULE_SIZE = 16
DEFAULT_MAX_INLINE_RESULT_SIZE = 256

# A tail expression that the left-recursion rewrite would copy into several places is moved
# into a rule of its own once it has more nodes than this, so copies stay references.
_SHARE_TAILS_ABOVE_SIZE = 12


# ============================================================================ small analyses


def expr_size(expr: Optional[Expr]) -> int:
    """Number of IR nodes in ``expr`` (0 for None)."""
    return sum(1 for _ in iter_subexprs(expr))


def grammar_size(grammar: Grammar) -> Tuple[int, int]:
    """``(number of rules, number of IR nodes in all bodies and lookaheads)``."""
    nodes = sum(expr_size(rule.body) + expr_size(rule.lookahead) for rule in grammar.rules)
    return len(grammar.rules), nodes


def left_corners(expr: Expr, nullable: Set[str]) -> Set[str]:
    """Rules referenced in ``expr`` at a position that only nullable things precede."""
    if isinstance(expr, (Literal, CharClass, TokenSet)):
        return set()
    if isinstance(expr, RuleRef):
        return {expr.name}
    if isinstance(expr, Sequence):
        corners: Set[str] = set()
        for item in expr.items:
            corners |= left_corners(item, nullable)
            if not is_nullable(item, nullable):
                break
        return corners
    if isinstance(expr, Choice):
        corners = set()
        for alt in expr.alternatives:
            corners |= left_corners(alt, nullable)
        return corners
    if isinstance(expr, Repeat):
        # Later iterations start where earlier (possibly empty) ones ended: same corners.
        return left_corners(expr.expr, nullable)
    raise TypeError(f"not a grammar expression: {expr!r}")


def _is_cycle(component: List[str], successors: Dict[str, Seq[str]]) -> bool:
    return len(component) > 1 or component[0] in successors.get(component[0], ())


def _reference_graph(grammar: Grammar) -> Dict[str, List[str]]:
    """Rule -> rules referenced anywhere in its body or lookahead (deduplicated, in order)."""
    return {rule.name: (list(dict.fromkeys([*rule.refs, *iter_rule_refs(rule.lookahead)]))
                        if rule.lookahead is not None else list(rule.refs))
            for rule in grammar.rules}


def nullable_rules(grammar: Grammar) -> Set[str]:
    """Names of the rules that derive the empty string."""
    return least_fixpoint(_bodies(grammar), is_nullable, _body_refs(grammar))


def productive_rules(grammar: Grammar) -> Set[str]:
    """Names of the rules that derive at least one finite string."""
    return least_fixpoint(_bodies(grammar), is_productive, _body_refs(grammar))


def _bodies(grammar: Grammar) -> Dict[str, Expr]:
    return {rule.name: rule.body for rule in grammar.rules}


def _body_refs(grammar: Grammar) -> Dict[str, Seq[str]]:
    return {rule.name: rule.refs for rule in grammar.rules}


def _left_corner_graph(grammar: Grammar, nullable: Set[str]) -> Dict[str, List[str]]:
    return {rule.name: sorted(left_corners(rule.body, nullable)) for rule in grammar.rules}


def find_left_recursion(grammar: Grammar) -> List[List[str]]:
    """One left-recursive cycle per strongly connected component of the left-corner graph.

    A cycle ``[a, b, c]`` means: ``b`` is a left corner of ``a``, ``c`` of ``b`` and ``a`` of
    ``c`` (nullable prefixes included), i.e. ``a`` can reach a reference to itself without
    consuming input. ``[a]`` is direct recursion. The empty list means no left recursion.
    Lookahead expressions are not rules the PDA enters, so they are not checked.
    """
    graph = _left_corner_graph(grammar, nullable_rules(grammar))
    cycles = []
    for component in strongly_connected_components(grammar.rule_names, graph):
        if _is_cycle(component, graph):
            cycles.append(_shortest_cycle_through(component[0], set(component), graph))
    cycles.sort(key=lambda cycle: grammar.rule_names.index(cycle[0]))
    return cycles


def _shortest_cycle_through(start: str, members: Set[str],
                            graph: Dict[str, List[str]]) -> List[str]:
    """Breadth-first search from ``start`` back to itself inside one component."""
    parent: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in graph[node]:
                if succ == start:
                    cycle = [node]
                    while cycle[-1] != start:
                        cycle.append(parent[cycle[-1]])
                    return cycle[::-1]
                if succ in members and succ not in parent:
                    parent[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start} is not on a cycle")


# ============================================================================ expression helpers


def _seq(*items: Optional[Expr]) -> Optional[Expr]:
    """Concatenation; None (the empty language) absorbs everything."""
    if any(item is None for item in items):
        return None
    return normalize(Sequence(tuple(items)))


def _choice(alternatives: Iterable[Optional[Expr]]) -> Optional[Expr]:
    """Union of the non-None alternatives; None when there are none (empty language)."""
    present = [alt for alt in alternatives if alt is not None]
    if not present:
        return None
    return normalize(Choice(tuple(present)))


def _fresh_name(base: str, suffix: str, taken: Set[str]) -> str:
    """``base_suffix``, or ``base_suffix_2``, ... : the first one not in ``taken`` (added)."""
    name = f"{base}_{suffix}"
    counter = 1
    while name in taken:
        counter += 1
        name = f"{base}_{suffix}_{counter}"
    taken.add(name)
    return name


# ============================================================================ left recursion


def eliminate_left_recursion(grammar: Grammar) -> Grammar:
    """The same language with no left recursion, direct, indirect or hidden.

    In:  any Grammar (left recursion through any number of rules, behind nullable prefixes,
         inside repeats, optionals and nested choices; epsilon cycles; rules with an empty
         language).
    Out: a Grammar with the same root, the same rule names (each keeping its lookahead), the
         same language for every original rule, possibly some new rules named after the rule
         they come from (``x_nonempty``, ``x_tail``), and ``find_left_recursion(out) == []``.
         A grammar without left recursion comes back unchanged (the same object).

    How. Rules outside left-recursive cycles are left alone. The cycles (strongly connected
    components of the left-corner graph) are solved sinks first. For a component C, each
    member's non-empty language is split into ``sum over Y in C of Y+ . tail(X, Y)`` plus a
    *base* part whose left corners avoid C, where ``Y+`` is Y without the empty string; that
    makes hidden recursion explicit (``b a "x"`` with nullable b becomes ``b+ a "x" | a "x"``).
    This is a system of left-linear equations ``X+ = sum Y+ t_XY + base_X``, solved by
    Gaussian elimination in grammar order: substitute earlier members, then remove the
    self-term with ``X+ = (rest) t_XX*`` (the least solution, also when ``t_XX`` is nullable).
    Afterwards every left corner of ``X+`` inside C comes later in the order, so no cycle is
    left. Direct recursion ``A ::= A a1 | A a2 | b1 | b2`` therefore becomes
    ``A ::= (b1 | b2) (a1 | a2)*`` without new rules.

    New rules appear only where needed: ``x_nonempty`` (x without the empty string) for a
    nullable rule x whose non-empty part must stand at a left edge, and ``x_tail`` for a large
    tail expression that would otherwise be copied several times.

    Special cases. A nullable left-recursive rule keeps its empty string:
    ``a ::= a "x" | ""`` becomes ``a ::= "x" "x"* | ""``. An epsilon cycle contributes nothing:
    ``a ::= a | "x"`` becomes ``a ::= "x"``. A rule whose language is empty (``a ::= a``, or
    ``a ::= a "x"``) becomes ``a ::= MATCHES_NOTHING`` (``remove_dead_rules`` then removes it
    and every alternative that needs it); a nullable one whose only string is empty
    (``a ::= a | ""``) becomes ``a ::= ""``.
    """
    nullable = nullable_rules(grammar)
    graph = _left_corner_graph(grammar, nullable)
    components = [component
                  for component in strongly_connected_components(grammar.rule_names, graph)
                  if _is_cycle(component, graph)]
    if not components:
        return grammar
    rewriter = _LeftRecursionRewriter(grammar, nullable)
    for component in components:  # sinks first: lower components are final when used
        rewriter.solve_component(component)
    result = rewriter.grammar()
    remaining = find_left_recursion(result)
    if remaining:  # a bug, never the input's fault
        raise AssertionError(f"left recursion survived elimination: {remaining}")
    return result


# One side of the split ``L(e) = [eps] + sum Y+ . tails[Y] + sum bases`` (see decompose).
_Split = Tuple[bool, Dict[str, List[Expr]], List[Expr]]


class _LeftRecursionRewriter:
    """Holds the rule bodies while components are solved one after another."""

    def __init__(self, grammar: Grammar, nullable: Set[str]):
        self.root = grammar.root_rule_name
        self.lookaheads = {rule.name: rule.lookahead for rule in grammar.rules}
        self.max_tokens = {rule.name: rule.max_tokens for rule in grammar.rules}
        self.bodies: Dict[str, Expr] = {rule.name: rule.body for rule in grammar.rules}
        # new rules go right after the rule they were made for
        self.added_after: Dict[str, List[str]] = {rule.name: [] for rule in grammar.rules}
        self.order = list(grammar.rule_names)
        self.taken = set(grammar.rule_names)
        self.nullable = set(nullable)  # languages never change, so neither does this set
        self.nonempty_twin: Dict[str, Optional[str]] = {}  # None: only the empty string
        self.component: Set[str] = set()
        self.owner = ""  # the original rule that new rules are being made for

    # -- output

    def grammar(self) -> Grammar:
        rules = []
        pending = list(reversed(self.order))
        while pending:  # each rule, then (depth first) the rules made for it
            name = pending.pop()
            rules.append(Rule(name, self.bodies[name], self.lookaheads.get(name),
                              self.max_tokens.get(name)))
            pending.extend(reversed(self.added_after[name]))
        return Grammar(tuple(rules), self.root)

    def _new_rule(self, suffix: str, body: Expr) -> str:
        name = _fresh_name(self.owner, suffix, self.taken)
        self.bodies[name] = body
        self.added_after[self.owner].append(name)
        self.added_after[name] = []
        if is_nullable(body, self.nullable):
            self.nullable.add(name)
        return name

    def _share(self, expr: Expr, copies: int) -> Expr:
        """``expr``, or a reference to a new rule holding it when it is large and copied.

        Safe for left recursion: shared tails only ever follow a non-nullable head, so nothing
        reaches the new rule at a left edge.
        """
        if copies > 1 and expr_size(expr) > _SHARE_TAILS_ABOVE_SIZE:
            return RuleRef(self._new_rule("tail", expr))
        return expr

    # -- the non-empty part of an expression whose left corners avoid the current component

    def nonempty(self, expr: Expr) -> Optional[Expr]:
        """An expression for ``L(expr)`` minus the empty string that is not nullable (None: the
        empty language). Only left edges change, so ``expr`` must have no left corner in the
        component being solved (its nullable left-corner rules get ``_nonempty`` twins)."""
        if not is_nullable(expr, self.nullable):
            return expr
        if isinstance(expr, Literal):  # the empty string
            return None
        if isinstance(expr, RuleRef):
            twin = self._nonempty_twin(expr.name)
            return None if twin is None else RuleRef(twin)
        if isinstance(expr, Choice):
            return _choice(self.nonempty(alt) for alt in expr.alternatives)
        if isinstance(expr, Sequence):
            # Every item is nullable: the first non-empty item decides where the string starts.
            items = expr.items
            return _choice(_seq(self.nonempty(item), *items[i + 1:])
                           for i, item in enumerate(items))
        if isinstance(expr, Repeat):
            inner = expr.expr
            shorter_max = None if expr.max is None else expr.max - 1
            if is_nullable(inner, self.nullable):
                # Drop the empty iterations: one non-empty one, then up to max-1 of anything.
                return _seq(self.nonempty(inner), Repeat(inner, 0, shorter_max))
            return normalize(Repeat(inner, 1, expr.max))  # min was 0
        raise TypeError(f"not a grammar expression: {expr!r}")

    def _nonempty_twin(self, name: str) -> Optional[str]:
        """A rule for ``name`` without the empty string (None if that language is empty)."""
        if name not in self.nonempty_twin:
            self._make_twins_leaves_first(name)
        return self.nonempty_twin[name]

    def _make_twins_leaves_first(self, name: str) -> None:
        """Make the twin of ``name`` after the twins its non-empty part needs (post-order, with
        an explicit stack: chains of nullable rules at left edges may be long). Those needs
        form no cycle: they follow left corners outside the component being solved, where
        every cycle has been solved already."""
        in_progress: Set[str] = set()
        stack = [(name, False)]
        while stack:
            current, needs_done = stack.pop()
            if current in self.nonempty_twin:
                continue
            if not needs_done:
                if current in in_progress:
                    raise AssertionError(f"cyclic non-empty twins through {current!r}")
                in_progress.add(current)
                stack.append((current, True))
                stack.extend((need, False) for need in self._twins_needed(self.bodies[current])
                             if need not in self.nonempty_twin)
                continue
            body = self.nonempty(self.bodies[current])
            previous_owner, self.owner = self.owner, current
            self.nonempty_twin[current] = None if body is None else self._new_rule("nonempty",
                                                                                   body)
            self.owner = previous_owner

    def _twins_needed(self, expr: Expr) -> List[str]:
        """The rules whose twins ``nonempty(expr)`` asks for (it follows nullable parts)."""
        if not is_nullable(expr, self.nullable):
            return []
        if isinstance(expr, RuleRef):
            return [expr.name]
        if isinstance(expr, Choice):
            return [name for alt in expr.alternatives for name in self._twins_needed(alt)]
        if isinstance(expr, Sequence):
            return [name for item in expr.items for name in self._twins_needed(item)]
        if isinstance(expr, Repeat):
            return self._twins_needed(expr.expr)
        return []

    # -- splitting an expression at left corners inside the component

    def decompose(self, expr: Expr) -> _Split:
        """``(eps, tails, bases)`` with ``L(expr) = [eps] + sum_Y Y+ . (tails[Y]) + bases``.

        ``eps``: expr is nullable; ``tails``: for each member Y of the component that can start
        a non-empty string of expr, the expressions that may follow it; ``bases``: non-nullable
        expressions whose left corners avoid the component.
        """
        if not left_corners(expr, self.nullable) & self.component:
            rest = self.nonempty(expr)
            return is_nullable(expr, self.nullable), {}, [] if rest is None else [rest]
        if isinstance(expr, RuleRef):
            return expr.name in self.nullable, {expr.name: [Literal(b"")]}, []
        if isinstance(expr, Choice):
            eps, tails, bases = False, {}, []
            for alt in expr.alternatives:
                alt_eps, alt_tails, alt_bases = self.decompose(alt)
                eps = eps or alt_eps
                _merge_tails(tails, alt_tails)
                bases.extend(alt_bases)
            return eps, tails, bases
        if isinstance(expr, Sequence):
            head, rest = expr.items[0], normalize(Sequence(expr.items[1:]))
            return self._then(self.decompose(head), rest,
                              lambda: self.decompose(rest))
        if isinstance(expr, Repeat):
            inner = expr.expr
            inner_split = self.decompose(inner)
            inner_eps = inner_split[0]
            # A non-empty string starts with a non-empty iteration; empty iterations (when the
            # body is nullable) can be dropped, so what follows is up to max-1 more of anything.
            more = normalize(Repeat(inner, 0 if inner_eps else max(expr.min - 1, 0),
                                    None if expr.max is None else expr.max - 1))
            eps, tails, bases = self._then(inner_split, more, None)
            return inner_eps or expr.min == 0, tails, bases
        raise TypeError(f"not a grammar expression: {expr!r}")  # literals have no corners

    def _then(self, first: _Split, rest: Expr, split_rest) -> _Split:
        """The split of ``first . rest``; ``split_rest()`` splits ``rest`` (needed when first is
        nullable; None means: do not add rest's own strings)."""
        first_eps, first_tails, first_bases = first
        copies = sum(len(ts) for ts in first_tails.values()) + len(first_bases)
        shared_rest = self._share(rest, copies)
        tails = {name: [_seq(t, shared_rest) for t in ts] for name, ts in first_tails.items()}
        bases = [_seq(b, shared_rest) for b in first_bases]
        eps = False
        if first_eps and split_rest is not None:
            eps, rest_tails, rest_bases = split_rest()
            _merge_tails(tails, rest_tails)
            bases.extend(rest_bases)
        return eps, tails, bases

    # -- solving one component

    def solve_component(self, component: List[str]) -> None:
        self.component = set(component)
        equations: Dict[str, Tuple[Dict[str, Expr], Optional[Expr]]] = {}
        nullable_member = {}
        for name in component:
            self.owner = name
            eps, tails, bases = self.decompose(self.bodies[name])
            nullable_member[name] = eps
            equations[name] = ({y: _choice(ts) for y, ts in tails.items()}, _choice(bases))

        position = {name: i for i, name in enumerate(component)}
        for i, name in enumerate(component):
            self.owner = name
            tails, base = equations[name]
            # Substitute earlier members; each only has later members as heads, so walking the
            # earlier members in order leaves heads at positions >= i only.
            for earlier in component[:i]:
                if earlier not in tails:
                    continue
                tail = tails.pop(earlier)
                earlier_tails, earlier_base = equations[earlier]
                tail = self._share(tail, len(earlier_tails) + (earlier_base is not None))
                for head, head_tail in earlier_tails.items():
                    tails[head] = _choice([tails.get(head), _seq(head_tail, tail)])
                if earlier_base is not None:
                    base = _choice([base, _seq(earlier_base, tail)])
            if name in tails:  # X+ = X+ loop | rest  ==>  X+ = rest loop*
                loop = normalize(Repeat(tails.pop(name), 0, None))
                loop = self._share(loop, len(tails) + (base is not None))
                tails = {head: _seq(t, loop) for head, t in tails.items()}
                base = None if base is None else _seq(base, loop)
            assert all(position[head] > i for head in tails)
            # Later members substitute this equation, copying each part once per member.
            later = len(component) - i - 1
            tails = {head: self._share(t, later) for head, t in tails.items()}
            base = None if base is None else self._share(base, later)
            equations[name] = (tails, base)

        # Heads that are nullable members need a rule for their non-empty part.
        needs_twin = {head for tails, _ in equations.values() for head in tails
                      if nullable_member[head]}
        for name in component:
            if name in needs_twin:
                self.owner = name
                self.nonempty_twin[name] = _fresh_name(name, "nonempty", self.taken)
                self.added_after[name].append(self.nonempty_twin[name])
                self.added_after[self.nonempty_twin[name]] = []

        def head_ref(head: str) -> RuleRef:
            return RuleRef(self.nonempty_twin[head] if nullable_member[head] else head)

        for name in component:
            tails, base = equations[name]
            plus = _choice([*(_seq(head_ref(head), t) for head, t in tails.items()), base])
            if name in needs_twin:
                self.bodies[self.nonempty_twin[name]] = MATCHES_NOTHING if plus is None else plus
                plus = RuleRef(self.nonempty_twin[name])
            if nullable_member[name]:
                self.bodies[name] = _choice([plus, Literal(b"")])
            else:
                self.bodies[name] = MATCHES_NOTHING if plus is None else plus
        self.component = set()


def _merge_tails(into: Dict[str, List[Expr]], more: Dict[str, List[Expr]]) -> None:
    for name, ts in more.items():
        into.setdefault(name, []).extend(ts)


# ============================================================================ dead rules


def remove_dead_rules(grammar: Grammar) -> Grammar:
    """Drop what can never take part in a match.

    In:  any Grammar.
    Out: the same language; rules unreachable from the root (through bodies and the
         lookaheads of reachable rules) are gone, and so is every part of a body or lookahead
         that derives no finite string: alternatives that need a non-productive rule or a
         class with no code points, and ``e*``/``e?`` of such an ``e`` (which become ``""``).
         A lookahead whose language is empty is dropped (a lookahead never changes the
         language). Rule order, names and the root are kept. The result is ``pruned``
         (``Grammar.pruned``); a grammar that already is only loses its unreachable rules.

    Empty language: when the root itself derives nothing (``root ::= root``,
    ``root ::= "x" root``), the result is the single rule ``root ::= MATCHES_NOTHING`` (no
    lookahead). This follows XGrammar, which compiles such grammars and then allows no token;
    raising an error instead would reject grammars XGrammar accepts.
    """
    if grammar.pruned:  # nothing derives nothing: only the unreachable rules can go
        return _remove_unreachable_rules(grammar)
    productive = productive_rules(grammar)
    root = grammar.root_rule_name
    if root not in productive:
        return Grammar((Rule(root, MATCHES_NOTHING),), root)
    if len(productive) == len(grammar.rules) and \
            not any(rule.has_empty_class for rule in grammar.rules):
        # every leaf derives something (no reference to a rule that does not, no class that
        # matches nothing), so every part does: nothing to prune, the grammar is pruned
        return _remove_unreachable_rules(Grammar(grammar.rules, root, pruned=True))
    bodies: Dict[str, Expr] = {}
    lookaheads: Dict[str, Optional[Expr]] = {}
    pruned: Dict[int, Optional[Expr]] = {}  # _prune's: a shared subtree is pruned once
    for rule in grammar.rules:
        if rule.name in productive:
            bodies[rule.name] = _prune(rule.body, productive, pruned)
            lookaheads[rule.name] = (None if rule.lookahead is None
                                     else _prune(rule.lookahead, productive, pruned))
    original = {rule.name: rule for rule in grammar.rules}

    def pruned_refs(name: str) -> List[str]:
        body_refs = (original[name].refs if bodies[name] is original[name].body
                     else iter_rule_refs(bodies[name]))
        return [*body_refs, *iter_rule_refs(lookaheads[name])]

    kept = set(reachable([root], pruned_refs))
    # A rule whose body and lookahead came back as they were is kept as it is: building a
    # Rule normalises its body, and doing that for every rule of every grammar on every call
    # was most of this pass's time (profiling/RESULTS.md, compile time).
    rules = tuple(rule if (bodies[rule.name] is rule.body
                           and lookaheads[rule.name] is rule.lookahead)
                  else rule.replaced(bodies[rule.name], lookaheads[rule.name])
                  for rule in grammar.rules if rule.name in kept)
    return Grammar(rules, root, pruned=True)


def _remove_unreachable_rules(grammar: Grammar) -> Grammar:
    """``remove_dead_rules`` of a grammar that is already ``pruned``: the rules that the root
    reaches (through bodies and lookaheads), no body rewritten."""
    kept = set(reachable([grammar.root_rule_name], _reference_graph(grammar).__getitem__))
    if len(kept) == len(grammar.rules):
        return grammar
    return Grammar(tuple(rule for rule in grammar.rules if rule.name in kept),
                   grammar.root_rule_name, pruned=True)


def _prune(expr: Expr, productive: Set[str], pruned: Dict[int, Optional[Expr]]) -> Optional[Expr]:
    """``expr`` without its non-productive parts; None when nothing productive is left.

    ``expr`` itself when nothing was pruned (so callers can tell by identity). A pruned
    expression is not normalised here — ``Rule`` normalises its body once — because
    normalising at every level made the pass quadratic in the nesting depth. ``pruned``
    remembers the compound expressions done, by id (the grammar keeps them alive), so a
    subtree that many rules share is walked once."""
    if isinstance(expr, (Literal, TokenSet)):
        return expr
    if isinstance(expr, CharClass):
        return None if _matches_no_code_point(expr) else expr
    if isinstance(expr, RuleRef):
        return expr if expr.name in productive else None
    key = id(expr)
    if key not in pruned:
        pruned[key] = _pruned_compound(expr, productive, pruned)
    return pruned[key]


def _pruned_compound(expr: Expr, productive: Set[str], pruned: Dict[int, Optional[Expr]]
                     ) -> Optional[Expr]:
    if isinstance(expr, Sequence):
        items = [_prune(item, productive, pruned) for item in expr.items]
        if any(item is None for item in items):
            return None
        if all(new is old for new, old in zip(items, expr.items)):
            return expr
        return Sequence(tuple(items))
    if isinstance(expr, Choice):
        alternatives = [_prune(alt, productive, pruned) for alt in expr.alternatives]
        present = [alt for alt in alternatives if alt is not None]
        if not present:
            return None
        if len(present) == len(expr.alternatives) and \
                all(new is old for new, old in zip(present, expr.alternatives)):
            return expr
        return present[0] if len(present) == 1 else Choice(tuple(present))
    if isinstance(expr, Repeat):
        inner = _prune(expr.expr, productive, pruned)
        if inner is None:  # only zero iterations are possible
            return Literal(b"") if expr.min == 0 else None
        return expr if inner is expr.expr else Repeat(inner, expr.min, expr.max)
    raise TypeError(f"not a grammar expression: {expr!r}")


# ============================================================================ inlining


def inline_small_rules(grammar: Grammar, *,
                       max_rule_size: int = DEFAULT_MAX_INLINED_RULE_SIZE,
                       max_result_size: int = DEFAULT_MAX_INLINE_RESULT_SIZE) -> Grammar:
    """Inline small fragment rules into the rules that reference them (paper §3.4).

    In:  any Grammar.
    Out: the same language and rule set; references to *inlinable* rules are replaced by those
         rules' bodies, as long as the body (or lookahead) that receives them stays within
         ``max_result_size`` IR nodes; a reference that would exceed it stays a reference.
         Inlined rules are not deleted here (``remove_dead_rules`` drops the ones nothing
         references any more).

    A rule is inlinable when it is not the root, has no lookahead and no token budget (an
    occurrence of a budgeted rule is a frame of its own at run time), is not recursive (not on any
    reference cycle), has at most ``max_rule_size`` IR nodes and, after its own references were
    inlined, references no rule. Rules are visited callees first, so a rule that only
    references inlinable rules becomes inlinable itself. Applying the pass twice changes
    nothing more.

    Inlining never creates left recursion: a caller's left corners after inlining are the
    inlined rule's left corners, which it reached through that rule before (and the inlined
    body is nullable exactly when the rule was).
    """
    graph = _reference_graph(grammar)
    rules = {rule.name: rule for rule in grammar.rules}
    inlinable: Dict[str, Tuple[Expr, int]] = {}  # name -> (body, its IR nodes)
    changed: Dict[str, Rule] = {}
    for component in strongly_connected_components(grammar.rule_names, graph):
        for name in component:
            rule = rules[name]
            body = _inline_into(rule.body, rule.refs, inlinable, max_result_size)
            lookahead = (None if rule.lookahead is None
                         else _inline_into(rule.lookahead, tuple(iter_rule_refs(rule.lookahead)),
                                           inlinable, max_result_size))
            if body is not rule.body or lookahead is not rule.lookahead:
                rule = changed[name] = rule.replaced(body, lookahead)  # normalises them once
            if (not rule.refs and rule.lookahead is None and rule.max_tokens is None
                    and name != grammar.root_rule_name and not _is_cycle(component, graph)):
                size = _size_up_to(rule.body, max_rule_size + 1)
                if size <= max_rule_size:
                    inlinable[name] = (rule.body, size)
    if not changed:
        return grammar
    # a pruned grammar stays pruned: an inlined body derives what its reference did
    return Grammar(tuple(changed.get(rule.name, rule) for rule in grammar.rules),
                   grammar.root_rule_name, pruned=grammar.pruned)


def _size_up_to(expr: Expr, limit: int) -> int:
    """``expr_size(expr)``, or ``limit`` when it has at least that many nodes (stops there)."""
    return sum(1 for _ in itertools.islice(iter_subexprs(expr), limit))


def _inline_into(expr: Expr, refs: Tuple[str, ...], inlinable: Dict[str, Tuple[Expr, int]],
                 max_result_size: int) -> Expr:
    """``expr`` (whose rule references are ``refs``) with references to inlinable rules
    replaced, left to right, while the result has at most ``max_result_size`` nodes; ``expr``
    itself when it references none (the caller builds a ``Rule``, which normalises a new body
    once)."""
    if not any(ref in inlinable for ref in refs):
        return expr
    return _inlined(expr, inlinable, [max_result_size - expr_size(expr)])


def _inlined(node: Expr, inlinable: Dict[str, Tuple[Expr, int]], budget: List[int]) -> Expr:
    """``_inline_into``'s rebuild of ``node``, spending ``budget[0]`` (a module function, not a
    closure: a closure that calls itself is a reference cycle, which only the collector frees,
    with everything it holds)."""
    if isinstance(node, RuleRef):
        body, size = inlinable.get(node.name, (None, 0))
        if body is not None and size - 1 <= budget[0]:
            budget[0] -= size - 1
            return body
        return node
    # a subtree with nothing inlined comes back as the same object, which the Rule built
    # around the result then finds normal already (not a fresh tree to walk)
    if isinstance(node, Sequence):
        items = tuple([_inlined(item, inlinable, budget) for item in node.items])
        return node if _same_items(items, node.items) else Sequence(items)
    if isinstance(node, Choice):
        alternatives = tuple([_inlined(alt, inlinable, budget) for alt in node.alternatives])
        return node if _same_items(alternatives, node.alternatives) else Choice(alternatives)
    if isinstance(node, Repeat):
        inner = _inlined(node.expr, inlinable, budget)
        return node if inner is node.expr else Repeat(inner, node.min, node.max)
    return node


def _same_items(new: Tuple[Expr, ...], old: Tuple[Expr, ...]) -> bool:
    return all(a is b for a, b in zip(new, old))


# ============================================================================ the pipeline


def wrap_root(grammar: Grammar) -> Grammar:
    """Add a rule ``root_wrapper ::= <root>`` (name made unique) and make it the root.

    Nodes of the root rule have no caller, so the mask cache never finds a token there whose
    fate depends on context; wrapping keeps that true even when the grammar's own root rule is
    referenced (e.g. a recursive JSON Schema ``$ref: "#"``).
    """
    names = set(grammar.rule_names)
    name = ROOT_WRAPPER
    counter = 0
    while name in names:
        counter += 1
        name = f"{ROOT_WRAPPER}_{counter}"
    wrapper = Rule(name, RuleRef(grammar.root_rule_name))
    return Grammar((wrapper, *grammar.rules), name, pruned=grammar.pruned)


def _unwrap_root(grammar: Grammar) -> Grammar:
    """Undo ``wrap_root`` when the root is such a wrapper (so ``prepare`` can be re-applied
    without stacking wrappers); any other grammar comes back unchanged."""
    root = grammar.root
    if not (root.name.startswith(ROOT_WRAPPER) and isinstance(root.body, RuleRef)
            and root.lookahead is None and root.body.name != root.name):
        return grammar
    if any(root.name in refs for refs in _reference_graph(grammar).values()):
        return grammar
    return Grammar(tuple(rule for rule in grammar.rules if rule.name != root.name),
                   root.body.name)


def prepare(grammar: Grammar, *, skip_left_recursion: bool = False) -> Grammar:
    """The grammar the automaton builder consumes.

    In:  any Grammar (a grammar that ``prepare`` already produced is accepted too: its wrapper
         is replaced, not wrapped again, so ``prepare(prepare(g)) == prepare(g)``).
    Out: the same language, with no left recursion, small rules inlined, no dead rules or
         non-productive alternatives, and a root wrapper (``root_wrapper ::= <old root>``) that
         nothing references. An empty language comes out as
         ``root_wrapper ::= root``, ``root ::= MATCHES_NOTHING``.
    ``skip_left_recursion``: leave left recursion as it is (the elimination's analysis is most
    of the passes' time, and few grammars need it), for a caller that learns from the automaton
    builder whether it was there (``build_automaton`` raises ``LeftRecursionError``) and then
    prepares the grammar again without skipping (``gxg.grammar_compiler``).
    """
    passes = (remove_dead_rules, inline_small_rules, remove_dead_rules)
    if not skip_left_recursion:
        passes = (eliminate_left_recursion,) + passes
    with normal_forms_kept():  # the passes rebuild rules around the same subtrees
        grammar = _unwrap_root(grammar)
        for grammar_pass in passes:
            compile_budget.check("the grammar passes", grammar_pass.__name__)
            grammar = grammar_pass(grammar)
        return wrap_root(grammar)
