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


def _brute_sampled(fn, prompt, T, eos, V, sampling):
    """As _brute, each row's law being sampler_law's (independently of sequence_law)."""
    from klpolicy.sampling import sampler_law

    out = {}
    for seq in itertools.product(range(V), repeat=T):
        p, comp = 1.0, []
        for v in seq:
            with torch.no_grad():
                logits = fn(torch.tensor([prompt + comp])).double()[0].numpy()
            p *= float(sampler_law(logits, **sampling)[v])
            comp.append(v)
            if v in eos:
                break
        out[tuple(comp)] = p
    return out


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0.7}, {"top_k": 2}, {"top_p": 0.8, "temperature": 1.3}, {"min_p": 0.2}],
)
def test_sampling_law_matches_row_by_row(sampling):
    V, T, eos = 4, 3, 2
    fn = _toy(V, 5)
    law = sequence_law(fn, [1], max_new_tokens=T, eos_token_id=eos, sampling=sampling)
    want = _brute_sampled(fn, [1], T, {eos}, V, sampling)
    got = dict(zip(law.completions, law.probs, strict=True))
    assert set(got) == set(want)
    for c, p in want.items():
        assert got[c] == pytest.approx(p, rel=1e-12, abs=1e-300)
    assert law.probs.sum() == pytest.approx(1.0, rel=1e-12)
    if "temperature" not in sampling:  # truncation leaves completions it never draws
        assert np.isneginf(law.logprobs).any()


def test_transformers_defaults_differ_from_plain_temperature():
    V = 60  # more tokens than generate's default top_k = 50
    fn = _toy(V, 1)
    plain = sequence_law(fn, [1], max_new_tokens=1, sampling={"temperature": 0.7})
    gen = sequence_law(
        fn, [1], max_new_tokens=1, sampling={"defaults": "transformers", "temperature": 0.7}
    )
    assert (gen.probs == 0).sum() == V - 50 and (plain.probs > 0).all()


def test_conditionals_are_the_same_law():
    from klpolicy.sequences import joint

    V, T, eos = 4, 3, 2
    law = sequence_law(_toy(V, 3), [1, 3], max_new_tokens=T, eos_token_id=eos)
    cond = law.conditionals()
    assert [c.shape for c in cond] == [(V,) * (t + 1) for t in range(T)]
    J = joint(cond)
    for c, p in zip(law.completions, law.probs, strict=True):
        assert J[tuple(c) + (eos,) * (T - len(c))] == pytest.approx(p, rel=1e-12)
    assert J.sum() == pytest.approx(1.0, rel=1e-12)
    # after EOS the completion stays finished
    np.testing.assert_array_equal(cond[1][eos], np.eye(V)[eos])


def test_bad_sampling_is_refused_by_name():
    fn = lambda ids: torch.zeros(len(ids), 3)  # noqa: E731
    with pytest.raises(ValueError, match="`sampling` must be a mapping"):
        sequence_law(fn, [0], max_new_tokens=1, sampling=0.7)
    with pytest.raises(ValueError, match="`top_k`"):
        sequence_law(fn, [0], max_new_tokens=1, sampling={"top_k": -1})
    with pytest.raises(TypeError, match="temprature"):
        sequence_law(fn, [0], max_new_tokens=1, sampling={"temprature": 0.7})
