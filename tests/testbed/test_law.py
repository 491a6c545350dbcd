import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from klpolicy.testbed import sequence_law  # noqa: E402


def _brute(fn, prompt, T, eos, V):
    """Every completion's probability by one unbatched forward pass per token (float64)."""
    out = {}
    for seq in itertools.product(range(V), repeat=T):
        lp, comp = 0.0, []
        for v in seq:
            with torch.no_grad():
                logits = fn(torch.tensor([prompt + comp])).double()[0]
            lp += float(torch.log_softmax(logits, -1)[v])
            comp.append(v)
            if v in eos:
                break
        out[tuple(comp)] = lp
    return out


def _toy(V, seed):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(16, V, generator=g)

    def fn(ids):
        # depends on the whole prefix: a hash of the ids into a table of float32 logits
        h = (ids.long() * torch.arange(1, ids.shape[1] + 1)).sum(1) % 16
        return emb[h].float() * 3.0

    return fn


@pytest.mark.parametrize("T,eos", [(1, None), (2, None), (3, 2), (3, None)])
def test_matches_brute_force(T, eos):
    V = 4
    fn = _toy(V, T)
    law = sequence_law(fn, [1, 3], max_new_tokens=T, eos_token_id=eos)
    ref = _brute(fn, [1, 3], T, set() if eos is None else {eos}, V)
    assert set(law.completions) == set(ref)
    got = dict(zip(law.completions, law.logprobs, strict=True))
    for c, lp in ref.items():
        assert np.exp(got[c]) == pytest.approx(np.exp(lp), rel=1e-6)
    assert law.probs.sum() == pytest.approx(1.0, rel=1e-6)
    assert law.probs.dtype == np.float64


def test_transformers_model_matches_brute_force():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=5,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50.0)  # a law far from uniform

    def fn(ids):
        return model(input_ids=ids).logits[:, -1, :]

    law = sequence_law(model, [0, 1], max_new_tokens=2, eos_token_id=4)
    ref = _brute(fn, [0, 1], 2, {4}, 5)
    got = dict(zip(law.completions, law.probs, strict=True))
    assert set(got) == set(ref)
    for c, lp in ref.items():
        assert got[c] == pytest.approx(np.exp(lp), rel=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"prompt_ids": []}, "`prompt_ids`"), ({"max_new_tokens": 0}, "`max_new_tokens`")],
)
def test_bad_inputs(kwargs, match):
    args = {"prompt_ids": [0], "max_new_tokens": 1} | kwargs
    with pytest.raises(ValueError, match=match):
        sequence_law(lambda ids: torch.zeros(len(ids), 3), **args)
