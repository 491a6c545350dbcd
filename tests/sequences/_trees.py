"""Helpers shared by the token-tree test modules."""

import numpy as np

# a small valid tree for the bad-input tables
TREE = [np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.2, 0.8]])]


def random_tree(rng, V, T, *, zeros=False):
    """Dirichlet conditionals; with ``zeros`` about a quarter of the entries are zero."""
    tree = []
    for t in range(T):
        c = rng.dirichlet(np.ones(V), size=(V,) * t)
        if zeros:
            cut = rng.random(c.shape) < 0.25
            cut[..., 0] &= False  # keep token 0 in every row's support
            c = np.where(cut, 0.0, c)
            c = c / c.sum(axis=-1, keepdims=True)
        tree.append(c)
    return tree
