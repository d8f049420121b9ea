"""``GrammarCompiler(compile_timeout=...)``: a compilation past its deadline stops with
``CompileTimeoutError`` (a ``GrammarError`` naming where it stopped), from any stage; ordinary
ones are unaffected; a timed-out key is not cached; bad values are refused. The size budgets
(``max_automaton_nodes``, ``max_mask_cache_bytes``) stop a compile with a GrammarError naming
them; with the lazy mask cache the bytes budget bounds what is kept instead."""
from __future__ import annotations

import pytest

import gxg
from gxg import compile_budget
from gxg.grammar_compiler import GrammarCompiler
from gxg.tokenizer import TokenizerInfo, VocabType

INFO = TokenizerInfo([bytes([c]) for c in range(32, 127)] + [b"</s>"], VocabType.RAW,
                     stop_token_ids=[95])
SMALL = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def slow_schema(depth: int = 100) -> dict:
    """A oneOf chain with overlapping branches: seconds of complements (bench_hostile.py)."""
    schema: dict = {"type": "string"}
    for i in range(depth):
        schema = {"oneOf": [schema, {"type": "integer", "minimum": i}]}
    return schema


def test_a_slow_compile_stops_with_a_grammar_error():
    compiler = GrammarCompiler(INFO, compile_timeout=0.2)
    with pytest.raises(gxg.CompileTimeoutError, match=r"compile_timeout=0\.2 s \(in the JSON"):
        compiler.compile_json_schema(slow_schema())
    assert issubclass(gxg.CompileTimeoutError, gxg.GrammarError)


def test_ordinary_compiles_are_unaffected_and_timeouts_are_not_cached():
    compiler = GrammarCompiler(INFO, compile_timeout=0.2)
    assert compiler.compile_json_schema(SMALL) is compiler.compile_json_schema(SMALL)
    with pytest.raises(gxg.CompileTimeoutError):
        compiler.compile_json_schema(slow_schema(60))
    compiler.compile_timeout = None          # the same key compiles now: nothing was cached
    compiler.compile_json_schema(slow_schema(60))


@pytest.mark.parametrize("stage", ["the grammar passes", "the automaton", "the token-mask cache",
                                   "the vocabulary walk"])
def test_every_later_stage_checks_the_deadline(stage, monkeypatch):
    """A deadline that passes as the stage starts stops the compile there (the earlier stages'
    checks are made to pass). The eager mask cache: the lazy one walks no vocabulary here."""
    original = compile_budget.check

    def check(name, where=None):
        if name == stage:
            monkeypatch.setattr(compile_budget.time, "monotonic", lambda: float("inf"))
        original(name, where)

    monkeypatch.setattr(compile_budget, "check", check)
    compiler = GrammarCompiler(INFO, compile_timeout=30, cache_enabled=False,
                               mask_cache="eager")
    with pytest.raises(gxg.CompileTimeoutError, match=f"in {stage}"):
        compiler.compile_grammar('root ::= "[" [0-9]+ ("," [0-9]+)* "]"')


def nested_objects(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("schema,stage", [
    (nested_objects(2000), "the grammar's normalisation"),       # seconds of normalising
    ({"type": "string", "minLength": 10000}, "the automaton"),   # one rule of ~100k states
])
def test_long_single_steps_check_the_deadline_inside(schema, stage):
    """Found by the fuzz campaign: one normalisation or one rule's automaton ran for seconds
    past the deadline; they check it inside their loops now (the compile would else finish)."""
    compiler = GrammarCompiler(INFO, compile_timeout=0.3, cache_enabled=False)
    with pytest.raises(gxg.CompileTimeoutError, match=f"in {stage}"):
        compiler.compile_json_schema(schema)


@pytest.mark.parametrize("bad", [0, -1, "5", True, float("nan")])
def test_bad_timeouts_are_refused(bad):
    with pytest.raises(ValueError, match="compile_timeout"):
        GrammarCompiler(INFO, compile_timeout=bad)


def test_an_earlier_enclosing_deadline_holds():
    with compile_budget.within(0.001):
        with compile_budget.within(100):
            compile_budget.time.sleep(0.01)
            with pytest.raises(gxg.CompileTimeoutError, match="compile_timeout=0.001"):
                compile_budget.check("a stage")
    compile_budget.check("a stage")          # no deadline outside the blocks


# ----------------------------------------------------------------------------- size budgets


@pytest.mark.parametrize("budget,message", [
    ({"max_automaton_nodes": 5}, "more than the limit of 5"),
    ({"max_mask_cache_bytes": 1}, "max_mask_cache_bytes=1"),
])
def test_a_grammar_past_a_size_budget_is_a_grammar_error(budget, message):
    compiler = GrammarCompiler(INFO, mask_cache="eager", **budget)
    with pytest.raises(gxg.GrammarError, match=message):
        compiler.compile_json_schema(SMALL)
    assert GrammarCompiler(INFO).compile_json_schema(SMALL) is not None   # the defaults hold it


def masks_along(compiled, document: str) -> list:
    """The matcher's mask before each character of ``document`` (accepted one at a time)."""
    matcher = gxg.GrammarMatcher(compiled)
    masks = []
    for character in document:
        mask = gxg.allocate_token_bitmask(1, INFO.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        masks.append(mask)
        assert matcher.accept_string(character)
    return masks


def test_the_lazy_cache_keeps_within_its_bytes_budget_and_masks_stay_exact():
    """Lazy: entries past the budget are computed each time they are needed, not kept."""
    bounded = GrammarCompiler(INFO, max_mask_cache_bytes=1).compile_json_schema(SMALL)
    free = GrammarCompiler(INFO).compile_json_schema(SMALL)
    document = '{"a": 12}'
    for a, b in zip(masks_along(bounded, document), masks_along(free, document)):
        assert (a == b).all()
    assert bounded.mask_cache.computed_nodes().size == 0
    assert free.mask_cache.computed_nodes().size > 0


@pytest.mark.parametrize("name,bad", [("max_automaton_nodes", 0), ("max_automaton_nodes", None),
                                      ("max_mask_cache_bytes", -5),
                                      ("max_mask_cache_bytes", 1.5)])
def test_bad_size_budgets_are_refused(name, bad):
    with pytest.raises(ValueError, match=name):
        GrammarCompiler(INFO, **{name: bad})


def test_inside_yielding_a_check_gives_up_the_interpreter_lock_once_per_period(monkeypatch):
    sleeps = []
    monkeypatch.setattr(compile_budget.time, "sleep", lambda seconds: sleeps.append(seconds))
    compile_budget.check("outside")
    assert sleeps == []
    with compile_budget.yielding(period=0.0):
        compile_budget.check("a stage")
        compile_budget.check("a stage")
    assert sleeps == [0, 0]
    with compile_budget.yielding(period=3600.0):
        compile_budget.check("a stage")
    assert sleeps == [0, 0]
    compile_budget.check("outside again")
    assert sleeps == [0, 0]


def test_a_mask_entry_build_in_the_background_yields(monkeypatch):
    """The builder thread's work (GrammarBatch's lazy registration) passes such checks."""
    from gxg import entry_builder
    from grammar_zoo import zoo_world
    info, compiled = zoo_world(["json"], seed=1)
    sleeps = []
    monkeypatch.setattr(compile_budget.time, "sleep", lambda seconds: sleeps.append(seconds))
    monkeypatch.setattr(compile_budget, "yielding",
                        lambda period=0.0002, _real=compile_budget.yielding: _real(0.0))
    entries = entry_builder._build_entries(compiled["json"])
    assert entries.complete and sleeps
