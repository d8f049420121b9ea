"""Grammar front-ends and the Grammar IR (stage 1 of the pipeline: text -> IR)."""
from gxg.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TokenSet,
    normalize,
)


def _from_structural_tag(*args, **kwargs) -> Grammar:
    """The grammar of an XGrammar 0.2.8 structural tag: ``from_structural_tag(structural_tag)``
    (a JSON text, a dict, an XGrammar pydantic ``StructuralTag`` or
    ``gxg.grammar.structural_tag.StructuralTag``) or the deprecated
    ``from_structural_tag(tags, triggers)``. See ``gxg.grammar.structural_tag``; invalid input
    and the formats gxg cannot express yet are a GrammarError naming the JSON path."""
    from gxg.grammar.structural_tag import structural_tag_to_grammar
    return structural_tag_to_grammar(*args, **kwargs)


def _from_lark(lark_string: str, *, tokenizer_info=None, named_grammars=None) -> Grammar:
    """The grammar of Lark text in XGrammar 0.2.8's dialect (``start`` is the root; see
    ``gxg.grammar.lark``). ``named_grammars`` maps the names used as ``@name`` to gxg Grammars
    or Lark texts; ``tokenizer_info`` resolves named special tokens (``<|im_end|>``). Errors are
    GrammarErrors with line and column."""
    from gxg.grammar.lark import parse_lark
    return parse_lark(lark_string, named_grammars, tokenizer_info)


# The front ends live in their own modules; Grammar (gxg.grammar.ir) gets them as static methods.
Grammar.from_structural_tag = staticmethod(_from_structural_tag)
Grammar.from_lark = staticmethod(_from_lark)

__all__ = [
    "CharClass", "Choice", "Expr", "Grammar", "GrammarError", "Literal", "Repeat", "Rule",
    "RuleRef", "Sequence", "TokenSet", "normalize",
]
