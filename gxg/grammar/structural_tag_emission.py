"""Structural tag -> Grammar IR: the grammar writer of ``gxg.grammar.structural_tag``.

In:  a ``StructuralTag`` as ``gxg.grammar.structural_tag`` read it.
Out: ``emit_structural_tag(tag) -> Grammar`` (root rule ``root``), or a ``GrammarError`` whose
     message starts with the JSON path of the format that cannot be written.

The grammar is XGrammar 0.2.8's (``StructuralTagGrammarConverter`` in its
``cpp/structural_tag.cc``), built from gxg's own front ends: sub-grammars from
``Grammar.from_json_schema`` / ``from_ebnf`` / ``from_regex`` (their rules renamed apart), free
text from the ``TagDispatch`` macro of ``gxg.grammar.macros``, the rest as plain IR. Format by
format:

* ``const_string``: the string (``""`` allowed).
* ``json_schema``: ``json_schema_to_grammar(schema, any_whitespace=True, strict_mode=True,
  max_whitespace_cnt=..., any_order=..., excludes=...)``, XGrammar's settings for structural
  tags; an XML ``style``: ``gxg.grammar.json_schema_xml.xml_schema_to_grammar``.
* ``grammar`` / ``regex``: the EBNF grammar (root ``root``, macros allowed) / the regex.
* ``any_text``: any text; with ``excludes`` — plus the end strings of the nearest enclosing
  ``tag`` (its non-empty ones), wherever the any_text stands below it — free text in which no
  exclude occurs (``TagDispatch(excludes=...)``: the enclosing tag's end then follows at the
  first place it can). An empty exclude leaves only the empty text (as XGrammar).
  ``max_chars``: at most that many code points (the free-text automaton intersected with a
  length bound). ``max_tokens=0``: the empty text.
* ``sequence`` / ``or``: concatenation / choice of the elements.
* ``tag``: ``begin content end``; several ends are alternatives. Content that is "unlimited"
  (any_text, triggered_tags, dispatch, tags_with_separator, star, plus, an unbounded repeat, and
  sequences / ors / optionals / repeats of such that are not excluded) needs a non-empty end
  string unless the content has excludes (XGrammar's rule).
* ``triggered_tags``: each tag must start with exactly one trigger. Free text (with the
  format's excludes and the enclosing tag's ends excluded) in which a trigger dispatches to
  "rest of the begin, content, end" of one of that trigger's tags; after it, free text again,
  or the end (``stop_after_first``). ``at_least_one``: one whole tag first (no text before
  it), then the same free text. Both: exactly one tag.
* ``tags_with_separator``: ``tag (separator tag)*`` or nothing (not with ``at_least_one``);
  ``stop_after_first``: one tag (or nothing).
* ``optional`` / ``plus`` / ``star`` / ``repeat`` (``max=-1``: unbounded): as their names say.
* ``dispatch``: ``TagDispatch((pattern, content), ..., loop_after_dispatch=loop,
  excludes=excludes)`` (no end strings added: XGrammar adds none).

Refused (GrammarError naming the format): the token-level formats (``token``,
``exclude_token``, ``any_tokens``, ``token_triggered_tags``, ``token_dispatch``, a tag whose
begin or end is a token format, ``any_text`` with ``max_tokens`` > 0) — gxg grammars have no
token-level items yet; ``json_schema`` with the style ``cohere_xml`` (recursive XML bodies),
and what ``gxg.grammar.json_schema_xml`` refuses.

Where XGrammar would build a TagDispatch whose exclude is a prefix of a trigger (the trigger can
then never be written: its tags are unreachable), gxg leaves those triggers out, which is the
same language (gxg's macro refuses such a call outright).
"""
from __future__ import annotations

from typing import Dict, List, Sequence as Seq, Set, Tuple

from gxg.grammar.code_point_dfa import (
    DEFAULT_MAX_STATES, dfa_from_expr, dfa_to_expr, intersect, length_between,
)
from gxg.grammar.combine import rename_refs
from gxg.grammar.json_schema import json_schema_to_grammar
from gxg.grammar.json_schema_xml import REFUSED_STYLES as XML_REFUSED_STYLES, xml_schema_to_grammar
from gxg.grammar.ir import (
    EMPTY, MAX_CODE_POINT, CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat, Rule,
    RuleRef, Sequence,
)
from gxg.grammar.macros import MacroCall, MacroError, MacroKeyword, MacroValue, expand_macro
from gxg.grammar.structural_tag import (
    AnyTextFormat, AnyTokensFormat, ConstStringFormat, DispatchFormat, ExcludeTokenFormat,
    Format, GrammarFormat, JSONSchemaFormat, OptionalFormat, OrFormat, PlusFormat, RegexFormat,
    RepeatFormat, SequenceFormat, StarFormat, StructuralTag, TagFormat, TagsWithSeparatorFormat,
    TokenDispatchFormat, TokenFormat, TokenTriggeredTagsFormat, TriggeredTagsFormat,
)

__all__ = ["emit_structural_tag", "MAX_CHARS_STATES"]

ANY_CHAR = CharClass(((0, MAX_CODE_POINT),))
# The most automaton states an any_text with both excludes and max_chars may take (its free-text
# automaton times max_chars + 1, before minimisation); past it the format is a GrammarError.
MAX_CHARS_STATES = 50_000


def emit_structural_tag(tag: StructuralTag) -> Grammar:
    return _Emitter().grammar(tag)


def _fail(path: str, message: str) -> GrammarError:
    return GrammarError(f"{path}: {message}")


def _token_level(fmt, what: str) -> GrammarError:
    return _fail(fmt.path, f"{what} is a token-level format; token-level formats are not "
                           "supported by gxg yet")


def _lit(text: str) -> Literal:
    return Literal(text.encode("utf-8"))


# ----------------------------------------------------------------------------- analysis


def _is_excluded(fmt: Format) -> bool:
    """XGrammar's IsExcluded: free text that carries its own excludes."""
    if isinstance(fmt, (AnyTextFormat, TriggeredTagsFormat, DispatchFormat)):
        return bool(fmt.excludes)
    if isinstance(fmt, (TokenTriggeredTagsFormat, TokenDispatchFormat, AnyTokensFormat)):
        return bool(fmt.exclude_tokens)
    return False


def _is_unlimited(fmt: Format) -> bool:
    """XGrammar's IsUnlimited: whether the format can run on without an end of its own."""
    if isinstance(fmt, (AnyTextFormat, TriggeredTagsFormat, TokenTriggeredTagsFormat,
                        DispatchFormat, TokenDispatchFormat, AnyTokensFormat,
                        TagsWithSeparatorFormat, StarFormat, PlusFormat)):
        return True
    if isinstance(fmt, (SequenceFormat, OrFormat)):
        return any(_is_unlimited(e) and not _is_excluded(e) for e in fmt.elements)
    if isinstance(fmt, OptionalFormat):
        return _is_unlimited(fmt.content)
    if isinstance(fmt, RepeatFormat):
        return fmt.max == -1 or (fmt.max != 0 and _is_unlimited(fmt.content))
    return False


# ----------------------------------------------------------------------------- the writer


class _Emitter:
    def __init__(self):
        self.rules: List[Rule] = []
        self.used: Set[str] = {"root"}
        self.memo: Dict[Tuple[str, Tuple[str, ...]], str] = {}

    # -- rules
    def fresh(self, hint: str) -> str:
        name, counter = hint, 0
        while name in self.used:
            counter += 1
            name = f"{hint}_{counter}"
        self.used.add(name)
        return name

    def add(self, hint: str, body: Expr) -> str:
        name = self.fresh(hint)
        self.rules.append(Rule(name, body))
        return name

    def embed(self, grammar: Grammar, hint: str) -> str:
        """The rules of ``grammar`` under fresh names; returns its root's new name."""
        mapping = {}
        for rule in grammar.rules:
            mapping[rule.name] = self.fresh(hint if rule.name == grammar.root_rule_name
                                            else rule.name)
        for rule in grammar.rules:
            self.rules.append(Rule(mapping[rule.name], rename_refs(rule.body, mapping),
                                   rename_refs(rule.lookahead, mapping)))
        return mapping[grammar.root_rule_name]

    def tag_dispatch(self, pairs: Seq[Tuple[str, str]], loop: bool, excludes: Seq[str],
                     path: str) -> Tuple[Expr, Dict[str, Expr]]:
        """``TagDispatch((tag, rule), ..., loop_after_dispatch=loop, excludes=excludes)`` through
        gxg's macro: its expression, and its helper rules (already added) by name."""
        excludes = list(dict.fromkeys(excludes))
        # a tag behind an exclude can never be written (XGrammar keeps it, unreachable)
        pairs = [(tag, rule) for tag, rule in pairs
                 if not any(tag.startswith(exclude) for exclude in excludes)]
        arguments = tuple(MacroValue("tuple", (MacroValue("string", tag, 0),
                                               MacroValue("name", rule, 0)), 0)
                          for tag, rule in pairs)
        keywords = (
            MacroKeyword("loop_after_dispatch", MacroValue("boolean", loop, 0), 0),
            MacroKeyword("excludes", MacroValue(
                "tuple", tuple(MacroValue("string", text, 0) for text in excludes), 0), 0),
        )
        call = MacroCall("TagDispatch", arguments, keywords, 0, 0)
        try:
            expansion = expand_macro(call, self.fresh)
        except MacroError as error:
            raise _fail(path, f"cannot build the free text: {error.message}") from None
        helpers = {}
        for rule in expansion.rules:
            self.rules.append(rule)
            helpers[rule.name] = rule.body
        return expansion.expr, helpers

    # -- the whole tag
    def grammar(self, tag: StructuralTag) -> Grammar:
        top = self.visit(tag.format, ())
        root = Rule("root", RuleRef(top))
        return Grammar((*self.rules, root), "root")

    def visit(self, fmt: Format, ends: Tuple[str, ...]) -> str:
        """The name of a rule for ``fmt``; ``ends``: the end strings of the nearest enclosing
        tag (what any_text and triggered_tags exclude)."""
        key = (fmt.key, ends)
        name = self.memo.get(key)
        if name is None:
            method = getattr(self, "_" + type(fmt).__name__)
            name = self.memo[key] = method(fmt, ends)
        return name

    # -- basic formats
    def _ConstStringFormat(self, fmt: ConstStringFormat, ends) -> str:
        return self.add("const_string", _lit(fmt.value))

    def _JSONSchemaFormat(self, fmt: JSONSchemaFormat, ends) -> str:
        if fmt.style in XML_REFUSED_STYLES:
            raise _fail(f"{fmt.path}.style", f"json_schema with style {fmt.style!r} (recursive XML "
                        "bodies) is not supported by gxg yet")
        if fmt.style != "json":
            for i, exclude in enumerate(fmt.excludes):
                if exclude[0] in " \t\n\r" or exclude[-1] in " \t\n\r":
                    raise _fail(f"{fmt.path}.excludes[{i}]", f"{exclude!r}: XML styles refuse "
                                "excludes that start or end with whitespace (as XGrammar)")
        try:
            if fmt.style == "json":
                grammar = json_schema_to_grammar(fmt.json_schema, any_whitespace=True,
                                                 strict_mode=True,
                                                 max_whitespace_cnt=fmt.max_whitespace_cnt,
                                                 any_order=fmt.any_order, excludes=fmt.excludes)
            else:
                grammar = xml_schema_to_grammar(fmt.json_schema, fmt.style,
                                                any_order=fmt.any_order,
                                                max_whitespace_cnt=fmt.max_whitespace_cnt,
                                                excludes=fmt.excludes)
        except GrammarError as error:
            raise _fail(f"{fmt.path}.json_schema", str(error)) from None
        return self.embed(grammar, "json_schema")

    def _GrammarFormat(self, fmt: GrammarFormat, ends) -> str:
        try:
            grammar = Grammar.from_ebnf(fmt.grammar)
        except GrammarError as error:
            raise _fail(f"{fmt.path}.grammar", str(error)) from None
        return self.embed(grammar, "grammar")

    def _RegexFormat(self, fmt: RegexFormat, ends) -> str:
        try:
            grammar = Grammar.from_regex(fmt.pattern)
        except GrammarError as error:
            raise _fail(f"{fmt.path}.pattern", str(error)) from None
        return self.embed(grammar, "regex")

    def _AnyTextFormat(self, fmt: AnyTextFormat, ends) -> str:
        if fmt.max_tokens is not None and fmt.max_tokens > 0:
            raise _fail(f"{fmt.path}.max_tokens", "any_text with max_tokens is a token-level "
                        "budget; token-level formats are not supported by gxg yet")
        excludes = list(fmt.excludes) + [end for end in ends if end]
        if fmt.max_tokens == 0 or "" in excludes:
            return self.add("any_text", EMPTY)   # nothing, or every text holds ""
        if not excludes:
            if fmt.max_chars is None:
                return self.add("any_text", Repeat(ANY_CHAR, 0, None))
            return self.add("any_text", Repeat(ANY_CHAR, 0, fmt.max_chars))
        if fmt.max_chars is None:
            expr, _ = self.tag_dispatch((), False, excludes, fmt.path)
            return self.add("any_text", expr)
        return self._bounded_free_text(fmt, excludes)

    def _bounded_free_text(self, fmt: AnyTextFormat, excludes: List[str]) -> str:
        """Free text without ``excludes`` and at most ``max_chars`` code points: the macro's
        automaton intersected with a length bound, written back as right-linear rules."""
        probe = _Emitter()                 # build the macro's rules aside, to read them as a DFA
        probe.used = set(self.used)
        expr, helpers = probe.tag_dispatch((), False, excludes, fmt.path)
        limit = MAX_CHARS_STATES
        try:
            text = dfa_from_expr(expr, helpers, max_states=max(DEFAULT_MAX_STATES, 4 * sum(
                len(e) + 1 for e in excludes)))
            bound = length_between(0, fmt.max_chars, max_states=limit)
            dfa = intersect(text, bound, max_states=limit)
        except GrammarError as error:
            raise _fail(f"{fmt.path}.max_chars", f"any_text with excludes and max_chars="
                        f"{fmt.max_chars} is too large for gxg: {error}") from None
        name = self.fresh("any_text")

        def new_rule(hint: str) -> RuleRef:
            return RuleRef(self.fresh(f"{name}_state"))

        def define_rule(ref: RuleRef, body: Expr) -> None:
            self.rules.append(Rule(ref.name, body))

        body = dfa_to_expr(dfa, lambda ranges: CharClass(tuple(ranges)), new_rule, name,
                           define_rule=define_rule)
        self.rules.append(Rule(name, EMPTY if body is None else body))
        return name

    # -- combinations
    def _SequenceFormat(self, fmt: SequenceFormat, ends) -> str:
        refs = [RuleRef(self.visit(e, ends)) for e in fmt.elements]
        return self.add("sequence", Sequence(tuple(refs)))

    def _OrFormat(self, fmt: OrFormat, ends) -> str:
        refs = [RuleRef(self.visit(e, ends)) for e in fmt.elements]
        return self.add("or", Choice(tuple(refs)))

    def _end_expr(self, tag: TagFormat) -> Expr:
        if isinstance(tag.end, TokenFormat):
            raise _token_level(tag.end, "a tag end given as a token")
        if len(tag.end) == 1:
            return _lit(tag.end[0])
        return RuleRef(self.add("tag_end", Choice(tuple(_lit(e) for e in tag.end))))

    @staticmethod
    def _tag_ends(tag: TagFormat) -> Tuple[str, ...]:
        return () if isinstance(tag.end, TokenFormat) else tag.end

    def _check_tag(self, tag: TagFormat) -> None:
        if isinstance(tag.begin, TokenFormat):
            raise _token_level(tag.begin, "a tag begin given as a token")
        if isinstance(tag.end, TokenFormat):
            raise _token_level(tag.end, "a tag end given as a token")
        if _is_unlimited(tag.content) and not any(tag.end) and not _is_excluded(tag.content):
            raise _fail(f"{tag.path}.end", "when the content is unlimited, at least one end "
                        "string must be non-empty")

    def _TagFormat(self, fmt: TagFormat, ends) -> str:
        self._check_tag(fmt)
        content = self.visit(fmt.content, self._tag_ends(fmt))
        end = self._end_expr(fmt)
        return self.add("tag", Sequence((_lit(fmt.begin), RuleRef(content), end)))

    def _whole_tags(self, tags: Seq[TagFormat], contents: Seq[str]) -> Expr:
        return Choice(tuple(Sequence((_lit(tag.begin), RuleRef(content), self._end_expr(tag)))
                            for tag, content in zip(tags, contents)))

    def _TriggeredTagsFormat(self, fmt: TriggeredTagsFormat, ends) -> str:
        groups: List[List[int]] = [[] for _ in fmt.triggers]
        contents: List[str] = []
        for i, tag in enumerate(fmt.tags):
            self._check_tag(tag)
            matched = [j for j, trigger in enumerate(fmt.triggers)
                       if tag.begin.startswith(trigger)]
            if not matched:
                raise _fail(f"{tag.path}.begin", f"the tag begin {tag.begin!r} starts with none "
                            f"of the triggers {list(fmt.triggers)}")
            if len(matched) > 1:
                raise _fail(f"{tag.path}.begin", f"the tag begin {tag.begin!r} starts with "
                            f"several triggers: {[fmt.triggers[j] for j in matched]}")
            groups[matched[0]].append(i)
            contents.append(self.visit(tag.content, self._tag_ends(tag)))
        for j, members in enumerate(groups):
            if not members:
                raise _fail(f"{fmt.path}.triggers[{j}]", f"the trigger {fmt.triggers[j]!r} "
                            "begins none of the tags")
        if fmt.at_least_one and fmt.stop_after_first:
            return self.add("triggered_tags", self._whole_tags(fmt.tags, contents))
        pairs = []
        for trigger, members in zip(fmt.triggers, groups):
            body = Choice(tuple(
                Sequence((_lit(fmt.tags[i].begin[len(trigger):]), RuleRef(contents[i]),
                          self._end_expr(fmt.tags[i])))
                for i in members))
            pairs.append((trigger, self.add("triggered_tags_group", body)))
        excludes = list(fmt.excludes) + [end for end in ends if end]
        expr, _ = self.tag_dispatch(pairs, not fmt.stop_after_first, excludes, fmt.path)
        if fmt.at_least_one:
            first = self.add("triggered_tags_first", self._whole_tags(fmt.tags, contents))
            sub = self.add("triggered_tags_sub", expr)
            expr = Sequence((RuleRef(first), RuleRef(sub)))
        return self.add("triggered_tags", expr)

    def _TagsWithSeparatorFormat(self, fmt: TagsWithSeparatorFormat, ends) -> str:
        refs = tuple(RuleRef(self.visit(tag, ends)) for tag in fmt.tags)
        tags = RuleRef(self.add("tags_with_separator_tags", Choice(refs)))
        if fmt.stop_after_first:
            body = tags if fmt.at_least_one else Choice((EMPTY, tags))
            return self.add("tags_with_separator", body)
        sub = self.fresh("tags_with_separator_sub")
        self.rules.append(Rule(sub, Choice((EMPTY, Sequence((_lit(fmt.separator), tags,
                                                             RuleRef(sub)))))))
        first = Sequence((tags, RuleRef(sub)))
        return self.add("tags_with_separator",
                        first if fmt.at_least_one else Choice((EMPTY, first)))

    def _OptionalFormat(self, fmt: OptionalFormat, ends) -> str:
        return self.add("optional", Choice((EMPTY, RuleRef(self.visit(fmt.content, ends)))))

    def _PlusFormat(self, fmt: PlusFormat, ends) -> str:
        return self.add("plus", Repeat(RuleRef(self.visit(fmt.content, ends)), 1, None))

    def _StarFormat(self, fmt: StarFormat, ends) -> str:
        return self.add("star", Repeat(RuleRef(self.visit(fmt.content, ends)), 0, None))

    def _RepeatFormat(self, fmt: RepeatFormat, ends) -> str:
        content = RuleRef(self.visit(fmt.content, ends))
        return self.add("repeat", Repeat(content, fmt.min, None if fmt.max < 0 else fmt.max))

    def _DispatchFormat(self, fmt: DispatchFormat, ends) -> str:
        pairs = [(pattern, self.visit(content, ends)) for pattern, content in fmt.rules]
        expr, _ = self.tag_dispatch(pairs, fmt.loop, fmt.excludes, fmt.path)
        return self.add("tag_dispatch", expr)

    # -- token-level formats
    def _TokenFormat(self, fmt, ends) -> str:
        raise _token_level(fmt, "the format 'token'")

    def _ExcludeTokenFormat(self, fmt: ExcludeTokenFormat, ends) -> str:
        raise _token_level(fmt, "the format 'exclude_token'")

    def _AnyTokensFormat(self, fmt: AnyTokensFormat, ends) -> str:
        raise _token_level(fmt, "the format 'any_tokens'")

    def _TokenTriggeredTagsFormat(self, fmt: TokenTriggeredTagsFormat, ends) -> str:
        raise _token_level(fmt, "the format 'token_triggered_tags'")

    def _TokenDispatchFormat(self, fmt: TokenDispatchFormat, ends) -> str:
        raise _token_level(fmt, "the format 'token_dispatch'")
