"""Structural tag -> Grammar IR: the grammar writer of ``gxg.grammar.structural_tag``.

In:  a ``StructuralTag`` as ``gxg.grammar.structural_tag`` read it, and optionally the
     ``gxg.tokenizer.TokenizerInfo`` of the vocabulary (anything with ``decoded_vocab``), which
     only tokens given as strings need.
Out: ``emit_structural_tag(tag, tokenizer_info=None) -> Grammar`` (root rule ``root``), or a
     ``GrammarError`` whose message starts with the JSON path of the format that cannot be
     written.

The grammar is XGrammar 0.2.8's (``StructuralTagGrammarConverter`` in its
``cpp/structural_tag.cc``), built from gxg's own front ends: sub-grammars from
``Grammar.from_json_schema`` / ``from_ebnf`` / ``from_regex`` (their rules renamed apart), free
text from the ``TagDispatch`` macro of ``gxg.grammar.macros`` (free tokens from its
``TokenTagDispatch`` lowering), the rest as plain IR with ``TokenSet`` leaves for tokens. Format
by format:

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
  length bound). ``max_tokens=0``: the empty text. ``max_tokens=N``: XGrammar's
  ``any_text[max_tokens=N]``, a token budget kept while decoding (``Rule.max_tokens``: once N
  tokens that started inside the text are accepted, the text ends at the first token boundary
  where it can), on the free-text automaton written as right-linear rules. When the nearest enclosing tag ends with a
  token instead, no end is added here: XGrammar adds string ends to string-level formats and
  end tokens to token-level ones only.
* Tokens: a token given as an id is that id (the compiler checks it against the vocabulary); a
  string is the id of the first (lowest-id) token whose decoded bytes are its UTF-8 bytes, as
  XGrammar resolves it (``"\n"`` is ``Ċ`` in a byte-level vocabulary); a string that no token
  decodes to, or any string without ``tokenizer_info``, is a GrammarError. (XGrammar 0.2.8
  leaves token strings inside a ``repeat`` unresolved and then fails with "Token id -1 in the
  grammar is out of the vocabulary range"; gxg resolves them wherever they stand.)
* ``token``: ``Token(id)``. ``exclude_token``: ``ExcludeToken(ids)``, the enclosing tag's end
  token (when it ends with one) added to the ids. ``any_tokens``: ``ExcludeToken(ids)*``, the
  end token added the same way; ``max_tokens=N``: ``ExcludeToken(ids){0,N}``, an exact budget
  (a token of the region is one item; XGrammar's masks agree, its ``accept_token`` does not
  enforce the budget).
* ``sequence`` / ``or``: concatenation / choice of the elements.
* ``tag``: ``begin content end``; several ends are alternatives; a begin or end given as a
  ``token`` format is ``Token(id)``. Content that is "unlimited" (any_text, any_tokens,
  triggered_tags, token_triggered_tags, dispatch, token_dispatch, tags_with_separator, star,
  plus, an unbounded repeat, and sequences / ors / optionals / repeats of such that are not
  excluded) needs a non-empty end string unless the content has excludes or the end is a token
  (XGrammar's rule).
* ``triggered_tags``: each tag must begin with a string that starts with exactly one trigger.
  Free text (with the format's excludes and the enclosing tag's end strings excluded) in which
  a trigger dispatches to "rest of the begin, content, end" of one of that trigger's tags;
  after it, free text again, or the end (``stop_after_first``). ``at_least_one``: one whole
  tag first (no text before it), then the same free text. Both: exactly one tag.
* ``token_triggered_tags``: the same over tokens: each tag must begin with a token that is
  exactly one of the triggers; free tokens (``TokenTagDispatch``'s, with the format's
  exclude tokens and the enclosing tag's end token excluded) in which a trigger token
  dispatches to "content, end" of one of its tags. An exclude that is also a trigger (e.g.
  the enclosing tag's end token) still dispatches, as in XGrammar.
* ``tags_with_separator``: ``tag (separator tag)*`` or nothing (not with ``at_least_one``);
  ``stop_after_first``: one tag (or nothing).
* ``optional`` / ``plus`` / ``star`` / ``repeat`` (``max=-1``: unbounded): as their names say.
* ``dispatch``: ``TagDispatch((pattern, content), ..., loop_after_dispatch=loop,
  excludes=excludes)`` (no end strings added: XGrammar adds none). ``token_dispatch``: the
  ``TokenTagDispatch`` lowering with its own exclude tokens (no end token added, likewise).

XGrammar's printout of a token-level format differs from gxg's in spelling only:
``any_tokens ::= "" | any_tokens_inner any_tokens`` with ``any_tokens_inner ::=
ExcludeToken(...)`` is gxg's ``any_tokens ::= ExcludeToken(...)*``, and XGrammar's
``TokenTagDispatch(...)`` expression is gxg's lowering of it (``gxg.grammar.macros``).

Refused (GrammarError naming the format): what ``gxg.grammar.json_schema_xml`` refuses.

Where XGrammar would build a TagDispatch whose exclude is a prefix of a trigger (the trigger can
then never be written: its tags are unreachable), gxg leaves those triggers out, which is the
same language (gxg's macro refuses such a call outright).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence as Seq, Set, Tuple, Union

from gxg.grammar.code_point_dfa import (
    DEFAULT_MAX_STATES, dfa_from_expr, dfa_to_expr, intersect, length_between,
)
from gxg.grammar.combine import rename_refs
from gxg.grammar.json_schema import json_schema_to_grammar
from gxg.grammar.json_schema_xml import xml_schema_to_grammar
from gxg.grammar.ir import (
    EMPTY, MAX_CODE_POINT, CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat, Rule,
    RuleRef, Sequence, TokenSet,
)
from gxg.grammar.macros import (
    MacroCall, MacroError, MacroKeyword, MacroValue, expand_macro, token_tag_dispatch_expr,
)
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


def emit_structural_tag(tag: StructuralTag, tokenizer_info=None) -> Grammar:
    return _Emitter(tokenizer_info).grammar(tag)


def _fail(path: str, message: str) -> GrammarError:
    return GrammarError(f"{path}: {message}")


def _lit(text: str) -> Literal:
    return Literal(text.encode("utf-8"))


# What closes the nearest enclosing tag, as ``visit`` passes it down: its end strings, or its
# end token's id (one int). A tag has one kind of end, so the tuple holds one kind.
Ends = Tuple[Union[str, int], ...]


def _end_strings(ends: Ends) -> List[str]:
    """The non-empty end strings: what string-level free text excludes."""
    return [end for end in ends if isinstance(end, str) and end]


def _end_tokens(ends: Ends) -> List[int]:
    """The end token: what token-level free tokens exclude."""
    return [end for end in ends if isinstance(end, int)]


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
    def __init__(self, tokenizer_info=None):
        self.rules: List[Rule] = []
        self.used: Set[str] = {"root"}
        self.memo: Dict[Tuple[str, Ends], str] = {}
        self.tokenizer_info = tokenizer_info
        self.token_ids: Optional[Dict[bytes, int]] = None   # decoded bytes -> first id, lazily

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
                                   rename_refs(rule.lookahead, mapping), rule.max_tokens))
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

    # -- tokens
    def token_id(self, token: Union[int, str], path: str) -> int:
        """The id of a token given as an id or as its text (see the module docstring)."""
        if isinstance(token, int):
            return token
        if self.tokenizer_info is None:
            raise _fail(path, f"the token string {token!r} needs a tokenizer to be resolved to "
                              "a token id (XGrammar: \"Token string resolution requires "
                              "tokenizer_info\"); pass tokenizer_info or give the token id")
        if self.token_ids is None:
            self.token_ids = {}
            for token_id, data in enumerate(self.tokenizer_info.decoded_vocab):
                self.token_ids.setdefault(data, token_id)
        found = self.token_ids.get(token.encode("utf-8"))
        if found is None:
            raise _fail(path, f"the token string {token!r} is not in the vocabulary: no token "
                              "decodes to it")
        return found

    def token_of(self, fmt: TokenFormat) -> int:
        """The id of a ``token`` format's token."""
        return self.token_id(fmt.token, f"{fmt.path}.token")

    def token_ids_of(self, fmt, field: str) -> List[int]:
        """The ids of the token list ``field`` of ``fmt``."""
        return [self.token_id(token, f"{fmt.path}.{field}[{i}]")
                for i, token in enumerate(getattr(fmt, field))]

    def visit(self, fmt: Format, ends: Ends) -> str:
        """The name of a rule for ``fmt``; ``ends``: the end strings or the end token of the
        nearest enclosing tag (what any_text, triggered_tags and the token-level free formats
        exclude)."""
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
            grammar = (Grammar.from_lark(fmt.grammar, tokenizer_info=self.tokenizer_info)
                       if fmt.syntax == "lark" else Grammar.from_ebnf(fmt.grammar))
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
        excludes = list(fmt.excludes) + _end_strings(ends)
        if fmt.max_tokens == 0 or "" in excludes:
            return self.add("any_text", EMPTY)   # nothing, or every text holds ""
        if fmt.max_tokens is not None:
            return self._free_text_rule(fmt, excludes)
        if not excludes:
            if fmt.max_chars is None:
                return self.add("any_text", Repeat(ANY_CHAR, 0, None))
            return self.add("any_text", Repeat(ANY_CHAR, 0, fmt.max_chars))
        if fmt.max_chars is None:
            expr, _ = self.tag_dispatch((), False, excludes, fmt.path)
            return self.add("any_text", expr)
        return self._free_text_rule(fmt, excludes)

    def _free_text_rule(self, fmt: AnyTextFormat, excludes: List[str]) -> str:
        """Free text without ``excludes``, of at most ``max_chars`` code points (when given),
        under the token budget ``max_tokens`` (when given): the macro's automaton intersected
        with a length bound, written back as right-linear rules (the form a budgeted rule
        needs: ``gxg.compiler.automaton``)."""
        probe = _Emitter()                 # build the macro's rules aside, to read them as a DFA
        probe.used = set(self.used)
        expr, helpers = (probe.tag_dispatch((), False, excludes, fmt.path) if excludes
                         else (Repeat(ANY_CHAR, 0, None), {}))
        limit = MAX_CHARS_STATES
        try:
            dfa = dfa_from_expr(expr, helpers, max_states=max(DEFAULT_MAX_STATES, 4 * sum(
                len(e) + 1 for e in excludes)))
            if fmt.max_chars is not None:
                bound = length_between(0, fmt.max_chars, max_states=limit)
                dfa = intersect(dfa, bound, max_states=limit)
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
        self.rules.append(Rule(name, EMPTY if body is None else body, max_tokens=fmt.max_tokens))
        return name

    # -- combinations
    def _SequenceFormat(self, fmt: SequenceFormat, ends) -> str:
        refs = [RuleRef(self.visit(e, ends)) for e in fmt.elements]
        return self.add("sequence", Sequence(tuple(refs)))

    def _OrFormat(self, fmt: OrFormat, ends) -> str:
        refs = [RuleRef(self.visit(e, ends)) for e in fmt.elements]
        return self.add("or", Choice(tuple(refs)))

    def _begin_expr(self, tag: TagFormat) -> Expr:
        if isinstance(tag.begin, TokenFormat):
            return TokenSet((self.token_of(tag.begin),))
        return _lit(tag.begin)

    def _end_expr(self, tag: TagFormat) -> Expr:
        if isinstance(tag.end, TokenFormat):
            return TokenSet(self._tag_ends(tag))
        if len(tag.end) == 1:
            return _lit(tag.end[0])
        return RuleRef(self.add("tag_end", Choice(tuple(_lit(e) for e in tag.end))))

    def _tag_ends(self, tag: TagFormat) -> Ends:
        if isinstance(tag.end, TokenFormat):
            return (self.token_of(tag.end),)
        return tag.end

    def _check_tag(self, tag: TagFormat) -> None:
        if isinstance(tag.end, tuple) and not any(tag.end) and _is_unlimited(tag.content) \
                and not _is_excluded(tag.content):
            raise _fail(f"{tag.path}.end", "when the content is unlimited, at least one end "
                        "string must be non-empty")

    def _TagFormat(self, fmt: TagFormat, ends) -> str:
        self._check_tag(fmt)
        content = self.visit(fmt.content, self._tag_ends(fmt))
        return self.add("tag", Sequence((self._begin_expr(fmt), RuleRef(content),
                                         self._end_expr(fmt))))

    def _whole_tags(self, tags: Seq[TagFormat], contents: Seq[str]) -> Expr:
        return Choice(tuple(Sequence((self._begin_expr(tag), RuleRef(content),
                                      self._end_expr(tag)))
                            for tag, content in zip(tags, contents)))

    def _group_tags(self, fmt, triggers: Seq, begin_of,
                    begins) -> Tuple[List[List[int]], List[str]]:
        """For (token_)triggered_tags: the tags (indices) of each trigger, and each tag's
        content rule. ``begin_of(tag)``: the tag's begin in the triggers' terms (text or token
        id); ``begins(begin, trigger)``: whether the trigger begins it. Each tag needs exactly
        one trigger, and each trigger a tag."""
        groups: List[List[int]] = [[] for _ in triggers]
        contents: List[str] = []
        for i, tag in enumerate(fmt.tags):
            self._check_tag(tag)
            begin = begin_of(tag)
            matched = [j for j, trigger in enumerate(triggers) if begins(begin, trigger)]
            if not matched:
                raise _fail(f"{tag.path}.begin", f"the tag begin {begin!r} matches none of the "
                            f"triggers {list(triggers)}")
            if len(matched) > 1:
                raise _fail(f"{tag.path}.begin", f"the tag begin {begin!r} matches several "
                            f"triggers: {[triggers[j] for j in matched]}")
            groups[matched[0]].append(i)
            contents.append(self.visit(tag.content, self._tag_ends(tag)))
        field = "triggers" if isinstance(fmt, TriggeredTagsFormat) else "trigger_tokens"
        for j, members in enumerate(groups):
            if not members:
                raise _fail(f"{fmt.path}.{field}[{j}]", f"the trigger {triggers[j]!r} begins "
                            "none of the tags")
        return groups, contents

    @staticmethod
    def _string_begin(tag: TagFormat) -> str:
        if isinstance(tag.begin, TokenFormat):
            raise _fail(f"{tag.path}.begin", "tags in triggered_tags must have a string begin, "
                        "not a token format")
        return tag.begin

    def _token_begin(self, tag: TagFormat) -> int:
        if not isinstance(tag.begin, TokenFormat):
            raise _fail(f"{tag.path}.begin", "tags in token_triggered_tags must have a token "
                        "format begin, not a string")
        return self.token_of(tag.begin)

    def _triggered(self, fmt, contents: Seq[str], free: Expr) -> str:
        """The rule of a (token_)triggered_tags format whose free part with dispatch is
        ``free``; ``at_least_one``: one whole tag before it."""
        if fmt.at_least_one:
            first = self.add(f"{fmt.type}_first", self._whole_tags(fmt.tags, contents))
            sub = self.add(f"{fmt.type}_sub", free)
            free = Sequence((RuleRef(first), RuleRef(sub)))
        return self.add(fmt.type, free)

    def _TriggeredTagsFormat(self, fmt: TriggeredTagsFormat, ends) -> str:
        groups, contents = self._group_tags(fmt, fmt.triggers, self._string_begin,
                                            str.startswith)
        if fmt.at_least_one and fmt.stop_after_first:
            return self.add("triggered_tags", self._whole_tags(fmt.tags, contents))
        pairs = []
        for trigger, members in zip(fmt.triggers, groups):
            body = Choice(tuple(
                Sequence((_lit(fmt.tags[i].begin[len(trigger):]), RuleRef(contents[i]),
                          self._end_expr(fmt.tags[i])))
                for i in members))
            pairs.append((trigger, self.add("triggered_tags_group", body)))
        excludes = list(fmt.excludes) + _end_strings(ends)
        expr, _ = self.tag_dispatch(pairs, not fmt.stop_after_first, excludes, fmt.path)
        return self._triggered(fmt, contents, expr)

    def _TokenTriggeredTagsFormat(self, fmt: TokenTriggeredTagsFormat, ends) -> str:
        triggers = self.token_ids_of(fmt, "trigger_tokens")
        groups, contents = self._group_tags(fmt, triggers, self._token_begin, int.__eq__)
        if fmt.at_least_one and fmt.stop_after_first:
            return self.add("token_triggered_tags", self._whole_tags(fmt.tags, contents))
        pairs = []
        for trigger, members in zip(triggers, groups):
            body = Choice(tuple(Sequence((RuleRef(contents[i]), self._end_expr(fmt.tags[i])))
                                for i in members))
            pairs.append((trigger, RuleRef(self.add("token_triggered_tags_group", body))))
        excludes = self.token_ids_of(fmt, "exclude_tokens") + _end_tokens(ends)
        expr = token_tag_dispatch_expr(pairs, not fmt.stop_after_first, excludes)
        return self._triggered(fmt, contents, expr)

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
    def _TokenFormat(self, fmt: TokenFormat, ends) -> str:
        return self.add("token", TokenSet((self.token_of(fmt),)))

    def _ExcludeTokenFormat(self, fmt: ExcludeTokenFormat, ends) -> str:
        excludes = self.token_ids_of(fmt, "exclude_tokens") + _end_tokens(ends)
        return self.add("exclude_token", TokenSet(tuple(excludes), negated=True))

    def _AnyTokensFormat(self, fmt: AnyTokensFormat, ends) -> str:
        excludes = self.token_ids_of(fmt, "exclude_tokens") + _end_tokens(ends)
        # at most max_tokens tokens: each token of the region is one item, so the budget is
        # exact here (XGrammar's masks give the same; its accept_token lets more through)
        return self.add("any_tokens", Repeat(TokenSet(tuple(excludes), negated=True), 0,
                                             fmt.max_tokens))

    def _TokenDispatchFormat(self, fmt: TokenDispatchFormat, ends) -> str:
        pairs = [(self.token_id(token, f"{fmt.path}.rules[{i}][0]"),
                  RuleRef(self.visit(content, ends)))
                 for i, (token, content) in enumerate(fmt.rules)]
        excludes = self.token_ids_of(fmt, "exclude_tokens")
        return self.add("token_tag_dispatch",
                        token_tag_dispatch_expr(pairs, fmt.loop, excludes))
