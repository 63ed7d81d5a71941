"""Generators the fuzz targets share: any JSON value, and values shaped like the real thing but wrong anywhere."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Deterministic (the same examples on every run, so CI is stable) and a few hundred examples per target.
FUZZ = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=16,
)


def either(valid: Any) -> st.SearchStrategy[Any]:
    """Mostly the valid value, otherwise any JSON value in its place."""
    return st.one_of(st.just(valid), st.just(valid), json_values)
