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
    """Mostly the valid value (what it draws, when it is a strategy), otherwise any JSON value in its place."""
    drawn = valid if isinstance(valid, st.SearchStrategy) else st.just(_plain(valid))
    return st.one_of(drawn, drawn, json_values)


def _plain(value: Any) -> Any:
    """The value, refused when a strategy hides inside it: `st.just` would hand out the strategy object itself, not a
    value it draws (a pod's volumes fuzzed as one object for months so)."""
    if isinstance(value, st.SearchStrategy):
        raise TypeError(f"a strategy inside a plain value: {value!r}; pass the strategy to either() itself")
    for part in value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ():
        _plain(part)
    return value
