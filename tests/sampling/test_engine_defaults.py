"""sampler_law with an engine's defaults (issue 40, items 6 and 7), against transformers' own
processor list.

transformers 5.25.0 fills every setting ``generate`` is not given from
``GenerationConfig._get_default_generation_params`` (``top_k=50``), then builds its warpers in
``GenerationMixin._get_logits_processor``; these tests call both (transformers is installed
in the dev environment; the tests are skipped without it).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from klpolicy.sampling import ENGINE_DEFAULTS, sampler_law, sampler_tree

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import GenerationConfig  # noqa: E402
from transformers.generation.logits_process import TopKLogitsWarper  # noqa: E402
from transformers.generation.utils import GenerationMixin  # noqa: E402


def _generate_law(logits, **kwargs):
    """The law generate(do_sample=True, **kwargs) samples from on a model without a
    generation_config of its own: the config filled as _prepare_generation_config fills
    it (generation/utils.py lines 2111-2113), the warpers as _get_logits_processor builds
    them, then softmax (as _sample does)."""
    cfg = GenerationConfig(do_sample=True, **kwargs)
    cfg.update(**GenerationConfig._get_default_generation_params(), defaults_only=True)
    model = types.SimpleNamespace(config=types.SimpleNamespace(is_encoder_decoder=False))
    model._merge_criteria_processor_list = lambda d, c: (
        GenerationMixin._merge_criteria_processor_list(model, d, c)
    )
    procs = GenerationMixin._get_logits_processor(model, cfg, input_ids_seq_length=1)
    scores = torch.tensor(logits, dtype=torch.float64)
    ids = torch.zeros((scores.shape[0], 1), dtype=torch.long)
    for proc in procs:
        scores = proc(ids, scores)
    return torch.softmax(scores, dim=-1).numpy(), procs


SETTINGS = [
    {"temperature": 0.7},
    {},
    {"temperature": 1.3, "top_p": 0.8},
    {"top_k": 10, "temperature": 0.5},
    {"top_k": 0, "top_p": 0.9, "min_p": 0.05},
    {"top_k": 0, "temperature": 0.9},
    {"min_p": 0.1},
]


@pytest.mark.parametrize("kw", SETTINGS)
def test_defaults_give_generates_law_on_random_logits(kw):
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(16, 200)) * 2.5
    want, _ = _generate_law(logits, **kw)
    # the settings passed, transformers' defaults for the rest
    got = sampler_law(logits, defaults="transformers", **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert np.array_equal(got > 0, want > 0)
    # the same from a GenerationConfig read by attribute (its None entries filled)
    cfg = GenerationConfig(do_sample=True, **kw)
    np.testing.assert_array_equal(sampler_law(logits, defaults=cfg), got)
    # ... and from a mapping (a generation_config.json)
    np.testing.assert_array_equal(sampler_law(logits, defaults=dict(kw)), got)


def test_without_defaults_it_is_not_generates_law():
    """The point of item 6: the bare call keeps every token; generate keeps 50."""
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(4, 300))
    want, procs = _generate_law(logits, temperature=0.7)
    assert [type(p).__name__ for p in procs] == ["TemperatureLogitsWarper", "TopKLogitsWarper"]
    assert (np.count_nonzero(want, axis=-1) == 50).all()
    bare = sampler_law(logits, temperature=0.7)
    assert (np.count_nonzero(bare, axis=-1) == 300).all()
    # the mass generate never draws, which the bare law gives: about 0.4 here
    assert 0.2 < float(np.sum(np.where(want == 0, bare, 0.0), -1).min())
    assert dict(ENGINE_DEFAULTS["transformers"])["top_k"] == 50
    assert GenerationConfig._get_default_generation_params()["top_k"] == 50


def test_explicit_arguments_override_defaults():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=(3, 120))
    cfg = GenerationConfig(do_sample=True, top_k=10, temperature=0.5, top_p=0.9)
    got = sampler_law(logits, defaults=cfg, top_k=20, temperature=1.0)
    want, _ = _generate_law(logits, top_k=20, temperature=1.0, top_p=0.9)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # top_k=0 turns the default off; top_p=1 and min_p=0 too
    np.testing.assert_array_equal(
        sampler_law(logits, defaults=cfg, top_k=0, top_p=1.0), sampler_law(logits, temperature=0.5)
    )


def test_top_k_zero_is_off_as_in_transformers():
    """transformers 5.25.0 appends no TopKLogitsWarper for top_k == 0 (generation/utils.py
    line 1626); the warper itself refuses 0 (logits_process.py lines 611-612)."""
    _, procs = _generate_law(np.zeros((1, 5)), top_k=0)
    assert not any(isinstance(p, TopKLogitsWarper) for p in procs)
    with pytest.raises(ValueError, match="strictly positive"):
        TopKLogitsWarper(top_k=0)
    lg = np.log([0.5, 0.3, 0.2])
    np.testing.assert_array_equal(sampler_law(lg, top_k=0), sampler_law(lg))
    np.testing.assert_array_equal(sampler_law(lg, top_k=0, order="vllm"), sampler_law(lg))
    tree = [[0.6, 0.3, 0.1], [[0.7, 0.2, 0.1], [0.4, 0.4, 0.2], [0.5, 0.3, 0.2]]]
    res = sampler_tree(tree, top_k=0)
    assert res.policy_mass_outside == 0.0 and res.kl_policy_sampler < 1e-15


def test_defaults_in_the_tree_and_refusals():
    tree = [np.full(60, 1 / 60), np.full((60, 60), 1 / 60)]
    res = sampler_tree(tree, defaults="transformers", temperature=0.9)
    # uniform rows: top-k 50 keeps every tied token (ties with the 50th are kept)
    assert res.policy_mass_outside == 0.0 and res.kl_policy_sampler < 1e-15
    rng = np.random.default_rng(2)
    c0 = rng.dirichlet(np.ones(60))
    res = sampler_tree([c0], defaults="transformers")
    assert np.count_nonzero(res.conditionals[0]) == 50
    with pytest.raises(ValueError, match="`defaults` must be None, one of 'transformers'"):
        sampler_law([0.0, 1.0], defaults=object())
    with pytest.raises(
        ValueError, match=r"`defaults\['temperature'\]` must be a non-negative number"
    ):
        sampler_law([0.0, 1.0], defaults={"temperature": -1.0})
