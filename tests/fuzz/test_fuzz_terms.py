"""Fuzz targets: pod affinity terms shaped like the API's but wrong anywhere, read with and without the
namespaces' labels."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.pod_affinity import (
    PodTerm,
    counted_pods,
    picks_namespaces_by_labels,
    pod_terms,
    repelling_terms,
    resolved_terms,
)
from tests.fuzz.strategies import FUZZ, either, json_values

SELECTOR = {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}
terms = st.fixed_dictionaries(
    {},
    optional={
        "labelSelector": either({"matchLabels": {"app": "web"}}),
        "namespaceSelector": either(SELECTOR),
        "namespaces": either(["a", "b"]),
        "topologyKey": either("kubernetes.io/hostname"),
    },
)
namespace_labels = st.none() | st.just({"a": {"team": "a", "tier": "x"}, "c": {"team": "a"}, "d": {}})


@st.composite
def pod_specs(draw: st.DrawFn) -> Any:
    """A spec whose required terms are drawn, any JSON value now and then in place of a term, a list or a kind."""
    affinity = {
        kind: draw(either({"requiredDuringSchedulingIgnoredDuringExecution": draw(either(draw(st.lists(terms))))}))
        for kind in ("podAffinity", "podAntiAffinity")
    }
    return {"affinity": draw(either(affinity))}


@FUZZ
@given(pod_specs(), namespace_labels, json_values)
def test_terms_are_read_or_left_unread(spec: Any, labels: Any, noise: Any) -> None:
    """Every reader returns: a term is read, or left unread (pod_terms None), never an exception; what is read
    names its namespaces once the labels are known."""
    read = pod_terms(spec, "a", labels)
    assert read is None or all(isinstance(term, PodTerm) for term in read)
    counted_pods(spec, "a", labels)
    repels = repelling_terms(spec, "a")
    resolved = resolved_terms(repels, labels)
    if labels is not None:
        assert all(term.pick is None for term in resolved)
    picks_namespaces_by_labels(spec)
    pod_terms({"affinity": noise}, "a", labels)
    repelling_terms({"affinity": noise}, "a", labels)
