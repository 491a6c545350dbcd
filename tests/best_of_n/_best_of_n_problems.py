"""Random best-of-n problems shared by the best-of-n test modules."""

import numpy as np
from hypothesis import strategies as st

problems = st.integers(1, 8).flatmap(
    lambda v: st.tuples(
        st.lists(st.one_of(st.just(0.0), st.floats(1e-12, 1.0)), min_size=v, max_size=v).filter(
            lambda x: sum(x) > 0.1
        ),
        st.lists(st.integers(-3, 3), min_size=v, max_size=v),
    )
)


def normalise(ws):
    ref = np.array(ws)
    return ref / ref.sum()
