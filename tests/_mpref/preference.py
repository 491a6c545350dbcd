"""The finite-data DPO optimum: the policy that minimises a dataset's mean DPO loss."""

import mpmath as mp

from ..preference._mp_optima import derivatives, minimise


def finite_data_dpo_optimum(ref, counts, beta):
    """pi = ref e^{x / beta} / Z with x minimising sum_ij C_ij softplus(-(x_i - x_j)) (mpfs).

    Recipe (40 digits): ``counts[i, j]`` = C_ij, the times i was preferred to j (the
    diagonal ignored), taken exactly; the dataset's mean DPO loss in the scores x = beta g
    is minimised by the damped Newton of tests/preference/_mp_optima.py (``minimise``,
    from x = 0); then pi = ref e^{x / beta} / Z, exponentiated after subtracting the top
    logit.
    """
    n = len(ref)
    with mp.workdps(40):
        w = [
            [mp.mpf(int(counts[i, j])) if i != j else mp.mpf(0) for j in range(n)] for i in range(n)
        ]
        x = minimise(*derivatives("sigmoid", {}), w)
        logits = [mp.log(mp.mpf(float(ref[i]))) + x[i] / mp.mpf(beta) for i in range(n)]
        top = max(logits)
        z = mp.fsum(mp.exp(v - top) for v in logits)
        return [mp.exp(v - top) / z for v in logits]
