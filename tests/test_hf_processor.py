"""gxg.contrib.hf.LogitsProcessor with transformers' model.generate.

A tiny LlamaForCausalLM with random weights over the SmolLM2 tokenizer's 49k vocabulary generates
a batch of two rows, each under its own grammar (a regex and a JSON schema whose outputs are
short whatever the model prefers). The model is random, so only the grammar ends a row: every
row must stop with the stop token, and its text must be accepted by the reference recognizer,
the regex and the JSON schema. On the CPU both backends (host matchers, device-op batch) run;
the gpu test runs the CUDA path (GrammarBatch ops).
"""
from __future__ import annotations

import json
import re

import pytest
import torch

from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.testing import grammar_accepts
from gxg.tokenizer import TokenizerInfo
from gxg.vocabularies import missing_packages

if missing_packages("smollm2"):
    pytest.skip(f"needs {', '.join(missing_packages('smollm2'))}", allow_module_level=True)

transformers = pytest.importorskip("transformers")
jsonschema = pytest.importorskip("jsonschema")

from gxg.contrib.hf import LogitsProcessor  # noqa: E402  (needs transformers)

REGEX = "(yes|no)"
SCHEMA = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
          "required": ["colour"], "additionalProperties": False}
PROMPTS = [[1, 504, 2362, 30], [1, 7006, 314, 29]]  # two rows of the same length: no padding
MAX_NEW_TOKENS = 48  # far more than the grammars need (about 15 tokens at most)
STOP = 2  # <|im_end|>, SmolLM2's eos


@pytest.fixture(scope="module")
def tokenizer():
    from gxg.vocabularies import smollm2_tokenizer
    return smollm2_tokenizer()


def tiny_llama(vocab_size: int, device="cpu"):
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=STOP, pad_token_id=STOP)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device).eval()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer))


@pytest.fixture(scope="module")
def grammars(tokenizer, model):
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    assert info.stop_token_ids == [STOP]
    compiler = GrammarCompiler(info)
    # compact separators: a random model could otherwise wander through whitespace for long
    return [compiler.compile_regex(REGEX),
            compiler.compile_json_schema(SCHEMA, any_whitespace=False)]


def row_text(tokens, info) -> str:
    """The text of one generated row; it must have ended with the stop token."""
    tokens = tokens.tolist()
    assert STOP in tokens, f"the row did not end: {tokens}"
    return b"".join(info.decoded_vocab[t] for t in tokens[:tokens.index(STOP)]).decode("utf-8")


def generate_and_check(model, grammars, processor, do_sample):
    device = next(model.parameters()).device
    input_ids = torch.tensor(PROMPTS, device=device)
    torch.manual_seed(1)
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         logits_processor=[processor], do_sample=do_sample,
                         max_new_tokens=MAX_NEW_TOKENS, pad_token_id=STOP, eos_token_id=STOP)
    info = grammars[0].tokenizer_info
    texts = [row_text(row, info) for row in out[:, input_ids.shape[1]:].cpu()]
    for text, compiled in zip(texts, grammars):
        assert grammar_accepts(compiled.grammar, text), text
    assert re.fullmatch(REGEX, texts[0])
    jsonschema.validate(json.loads(texts[1]), SCHEMA)
    return texts


@pytest.mark.parametrize("backend", ["matcher", "batch"])
@pytest.mark.parametrize("do_sample", [False, True])
def test_generate_two_rows_two_grammars_cpu(model, grammars, backend, do_sample):
    generate_and_check(model, grammars, LogitsProcessor(grammars, backend=backend), do_sample)


def test_one_grammar_for_every_row(model, grammars):
    processor = LogitsProcessor(grammars[0])  # the regex for both rows
    input_ids = torch.tensor(PROMPTS)
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         logits_processor=[processor], do_sample=True,
                         max_new_tokens=MAX_NEW_TOKENS, pad_token_id=STOP, eos_token_id=STOP)
    for row in out[:, input_ids.shape[1]:]:
        assert re.fullmatch(REGEX, row_text(row, grammars[0].tokenizer_info))


def test_grammar_count_must_match_the_batch(model, grammars):
    input_ids = torch.tensor(PROMPTS)
    with pytest.raises(ValueError, match="num_beams"):
        model.generate(input_ids, attention_mask=torch.ones_like(input_ids), num_beams=2,
                       logits_processor=[LogitsProcessor(grammars)], max_new_tokens=4,
                       pad_token_id=STOP, eos_token_id=STOP)


@pytest.mark.parametrize("backend", ["matcher", "batch"])
def test_reordered_rows_are_refused(grammars, backend):
    processor = LogitsProcessor(grammars, backend=backend)
    vocab_size = grammars[0].tokenizer_info.vocab_size
    processor(torch.tensor([[1, 5], [1, 6]]), torch.zeros(2, vocab_size))
    with pytest.raises(ValueError, match="reordered"):  # as a beam search reorder would
        processor(torch.tensor([[1, 6, 7], [1, 5, 7]]), torch.zeros(2, vocab_size))


@pytest.mark.parametrize("backend", ["matcher", "batch"])
def test_a_token_the_mask_refused_is_reported(grammars, backend):
    """Another processor undoing the mask: the token sampled is not the grammar's. Reported
    at the next call with ``check_rows`` (the default), else by ``raise_on_errors``; a row
    whose token is allowed is not."""
    vocab_size = grammars[0].tokenizer_info.vocab_size
    allowed = [allowed_first_tokens(g, vocab_size) for g in grammars]
    first = [sorted(tokens) for tokens in allowed]
    refused = next(t for t in range(vocab_size) if t not in allowed[0])
    for check_rows in (True, False):
        processor = LogitsProcessor(grammars, backend=backend, check_rows=check_rows)
        processor(torch.tensor([[1], [1]]), torch.zeros(2, vocab_size))
        fine = torch.tensor([[1, first[0][0]], [1, first[1][0]]])
        processor(fine, torch.zeros(2, vocab_size))  # both allowed: no error
        processor.raise_on_errors()
        processor.reset()
        processor(torch.tensor([[1], [1]]), torch.zeros(2, vocab_size))
        step = torch.tensor([[1, refused], [1, first[1][0]]])
        if check_rows:
            with pytest.raises(RuntimeError, match="not allow"):
                processor(step, torch.zeros(2, vocab_size))
        else:
            if backend == "matcher":  # the matchers refuse at once
                with pytest.raises(RuntimeError, match="not allow"):
                    processor(step, torch.zeros(2, vocab_size))
                continue
            processor(step, torch.zeros(2, vocab_size))
            with pytest.raises(RuntimeError, match=r"rows \[0\]"):
                processor.raise_on_errors()


def test_a_processor_follows_one_generate_call(model, grammars):
    processor = LogitsProcessor(grammars)
    generate_and_check(model, grammars, processor, do_sample=False)
    with pytest.raises(ValueError, match="one generate call"):
        generate_and_check(model, grammars, processor, do_sample=False)
    processor.reset()
    generate_and_check(model, grammars, processor, do_sample=False)


def allowed_first_tokens(compiled, width):
    """The ids below ``width`` a fresh matcher allows."""
    matcher = GrammarMatcher(compiled)
    bitmask = allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return {t for t in range(min(width, compiled.tokenizer_info.vocab_size))
            if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}


@pytest.mark.parametrize("backend", ["matcher", "batch"])
@pytest.mark.parametrize("extra_columns", [-7, 0, 40])
def test_scores_narrower_or_wider_than_the_vocabulary(grammars, backend, extra_columns):
    """Ids past the grammar's vocabulary are never allowed; a narrower head is masked as far
    as it goes."""
    width = grammars[0].tokenizer_info.vocab_size + extra_columns
    scores = torch.zeros(2, width)
    LogitsProcessor(grammars, backend=backend)(torch.tensor(PROMPTS), scores)
    allowed = [set(torch.nonzero(row > float("-inf")).flatten().tolist()) for row in scores]
    assert allowed == [allowed_first_tokens(compiled, width) for compiled in grammars]
    assert all(allowed)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("do_sample", [False, True])
def test_generate_two_rows_two_grammars_cuda(tokenizer, grammars, do_sample):
    model = tiny_llama(len(tokenizer), device="cuda")
    processor = LogitsProcessor(grammars)  # CUDA scores: the GrammarBatch path
    generate_and_check(model, grammars, processor, do_sample)
    assert processor.active_backend == "batch"


OPEN_ENDED = {"type": "object",
              "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["tags"]}


@pytest.mark.parametrize("backend", ["matcher", "batch"])
@pytest.mark.parametrize("do_sample", [False, True])
def test_max_new_tokens_budget_ends_rows_complete(model, grammars, backend, do_sample):
    """An open-ended schema that a random model never closes by itself: with the processor's
    ``max_new_tokens`` (generate's own) every row is complete JSON within the budget, whether
    it reached the stop token or not, on both backends."""
    info = grammars[0].tokenizer_info
    compiled = GrammarCompiler(info).compile_json_schema(OPEN_ENDED, any_whitespace=False)
    input_ids = torch.tensor(PROMPTS)
    budget = 16
    torch.manual_seed(1)
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         logits_processor=[LogitsProcessor(compiled, backend=backend,
                                                           max_new_tokens=budget)],
                         do_sample=do_sample, max_new_tokens=budget, pad_token_id=STOP,
                         eos_token_id=STOP)
    for row in out[:, input_ids.shape[1]:].tolist():
        tokens = row[:row.index(STOP)] if STOP in row else row
        text = b"".join(info.decoded_vocab[t] for t in tokens).decode("utf-8")
        assert len(tokens) <= budget
        assert grammar_accepts(compiled.grammar, text), text
        jsonschema.validate(json.loads(text), OPEN_ENDED)
    without = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                             logits_processor=[LogitsProcessor(compiled, backend=backend)],
                             do_sample=False, max_new_tokens=budget, pad_token_id=STOP,
                             eos_token_id=STOP)
    # the same random model without the budget runs out of tokens mid-value (the test can fail)
    assert any(STOP not in row for row in without[:, input_ids.shape[1]:].tolist())
