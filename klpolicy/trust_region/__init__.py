r"""Trust-region steps in closed form (both KL directions), and PPO's clipped step beside them.

A trust-region step maximises the expected advantage inside a KL ball around
the current policy. The two directions of the KL give two different steps:

* ``constraint="mirror"`` (the default):
  :math:`\max_\pi \mathbb{E}_\pi[A]` s.t. :math:`\mathrm{KL}(\pi\,\|\,\pi_{old}) \le \delta`.
  This is the KL-regularised problem with :math:`\pi_{old}` as the reference:
  the step is the exponential tilt :math:`\pi_{old}\,e^{A/\beta}/Z` with the
  multiplier :math:`\beta` whose optimum spends exactly :math:`\delta`
  (:func:`klpolicy.beta_for_kl`). Iterating it is mirror descent with the KL
  as Bregman divergence (Tomar et al. 2020).
* ``constraint="trpo"``: TRPO's own constraint (Schulman et al. 2015, eq. 12),
  :math:`\mathrm{KL}(\pi_{old}\,\|\,\pi) \le \delta`. Its exact tabular step is
  :math:`\pi(y) = \beta\,\pi_{old}(y) / (\lambda - A(y))`, with
  :math:`\lambda > \max A` fixed by normalisation and :math:`\beta` by the
  radius: the form of the k3-in-the-loss fixed point
  (:func:`klpolicy.estimators.fixed_point`), not the tilt.

PPO (Schulman et al. 2017) replaces the constraint by a clipped ratio;
:func:`ppo_clip_step` runs its exact (population) surrogate so the steps can be
compared at equal KL.

Importing this module does not import torch.
"""

from .steps import ppo_clip_step, trust_region_beta, trust_region_step

__all__ = ["ppo_clip_step", "trust_region_beta", "trust_region_step"]
