"""Label selectors: the API's dict form, kubectl's `-l` syntax, matching, and overlap between placements."""

from __future__ import annotations

import pytest
from core_strategies import json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.errors import SelectorError
from kubectl_hami_place.core.selectors import (
    LabelSelector,
    Requirement,
    matches,
    may_overlap,
    parse_selector_string,
    require_nonempty_selector,
    selector_from_dict,
)


def sel(text: str) -> LabelSelector:
    """Shorthand for a `-l` selector."""
    return parse_selector_string(text)


def test_kubectl_syntax_from_the_brief() -> None:
    selector = sel("app=x,tier!=db,env in (a,b),!legacy,foo")
    assert selector.to_dict() == {
        "matchLabels": {"app": "x"},
        "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "env", "operator": "In", "values": ["a", "b"]},
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "foo", "operator": "Exists"},
        ],
    }


def test_double_equals_and_notin_and_spaces() -> None:
    selector = sel(" app == x , env notin ( a , b ) ")
    assert selector.labels == {"app": "x"}
    assert selector.match_expressions == (Requirement("env", "NotIn", ("a", "b")),)


def test_dict_and_string_forms_agree() -> None:
    selector = sel("app=x,env in (a,b),!legacy")
    assert selector_from_dict(selector.to_dict()) == selector
    assert parse_selector_string(str(selector)) == selector


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"app": "x", "env": "a", "foo": ""}, True),
        ({"app": "x", "env": "c", "foo": ""}, False),
        ({"app": "x", "env": "a", "foo": "", "tier": "db"}, False),
        ({"app": "x", "env": "a", "foo": "", "legacy": "1"}, False),
        ({"app": "x", "env": "a"}, False),
        ({"app": "y", "env": "a", "foo": ""}, False),
    ],
)
def test_matching(labels: dict[str, str], expected: bool) -> None:
    assert matches(sel("app=x,tier!=db,env in (a,b),!legacy,foo"), labels) is expected


def test_empty_selector_matches_everything_unless_the_caller_requires_one() -> None:
    assert matches(LabelSelector(), {"a": "b"})
    assert matches(LabelSelector(), None)
    with pytest.raises(SelectorError, match="would match every pod"):
        parse_selector_string("", require_nonempty=True)
    with pytest.raises(SelectorError, match="would match every pod"):
        selector_from_dict({"matchLabels": {}}, require_nonempty=True)
    assert require_nonempty_selector(sel("a=b")) == sel("a=b")


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("app=x", "app=y", False),
        ("app=x", "tier=y", True),
        ("app=x", "app=x,tier=db", True),
        ("app in (a,b)", "app in (c)", False),
        ("app in (a,b)", "app notin (a,b)", False),
        ("app in (a,b)", "app notin (a)", True),
        ("app", "!app", False),
        ("app=x", "!app", False),
        ("app notin (x)", "!app", True),
    ],
)
def test_overlap_is_false_only_when_provably_disjoint(a: str, b: str, overlap: bool) -> None:
    assert may_overlap(sel(a), sel(b)) is overlap
    assert may_overlap(sel(b), sel(a)) is overlap


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("app=x,", "empty term"),
        ("app in (a,b", "unclosed"),
        ("app)", "unmatched"),
        ("app>1", "is not key"),
        ("-bad=x", "label key '-bad'"),
        ("Example.com/x=y", "prefix must be a lowercase DNS subdomain"),
        ("app=" + "v" * 64, "at most 63 characters"),
        ("app=x,app=y", "would match no pod"),
        ("app in ()", None),
    ],
)
def test_bad_strings(text: str, fragment: str | None) -> None:
    result = outcome(lambda: parse_selector_string(text), SelectorError)
    if fragment is None:
        assert isinstance(result, LabelSelector)
    else:
        assert isinstance(result, SelectorError)
        assert fragment in str(result)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be an object"),
        ({"matchLabels": []}, "matchLabels must be an object"),
        ({"matchLabels": {"a": 1}}, "value must be a string"),
        ({"matchExpressions": [{"key": "a", "operator": "Has"}]}, "operator 'Has'"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "takes no values"),
        ({"matchLabel": {"a": "b"}}, "unknown field 'matchLabel'"),
    ],
)
def test_bad_dicts(data: object, fragment: str) -> None:
    with pytest.raises(SelectorError) as caught:
        selector_from_dict(data)
    assert fragment in str(caught.value)


label_keys = st.from_regex(
    r"([a-z0-9]{1,5}\.)?[a-z]{1,5}/?[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?", fullmatch=True
)
label_values = st.from_regex(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?", fullmatch=True)


@st.composite
def selectors(
    draw: st.DrawFn, keys: st.SearchStrategy[str] = label_keys, values: st.SearchStrategy[str] = label_values
) -> LabelSelector:
    """A valid selector in the dict form, normalised the way the parser normalises it."""
    labels = draw(st.dictionaries(keys, values, max_size=3))
    expressions = []
    for key in draw(st.lists(keys, max_size=3)):
        operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        chosen = draw(st.lists(values, min_size=1, max_size=3)) if operator in ("In", "NotIn") else []
        expressions.append({"key": key, "operator": operator, **({"values": chosen} if chosen else {})})
    return selector_from_dict({"matchLabels": labels, "matchExpressions": expressions})


@given(selectors())
def test_valid_selectors_round_trip_through_both_forms(selector: LabelSelector) -> None:
    assert selector_from_dict(selector.to_dict()) == selector
    if not any(r.operator in ("In", "NotIn") and "" in r.values for r in selector.match_expressions):
        assert parse_selector_string(str(selector)) == selector


SMALL_KEYS = st.sampled_from(["app", "tier", "env"])
SMALL_VALUES = st.sampled_from(["x", "y", ""])


@given(
    selectors(SMALL_KEYS, SMALL_VALUES),
    selectors(SMALL_KEYS, SMALL_VALUES),
    st.dictionaries(SMALL_KEYS, SMALL_VALUES, max_size=3),
)
def test_overlap_is_never_denied_when_some_labels_match_both(
    a: LabelSelector, b: LabelSelector, labels: dict[str, str]
) -> None:
    if matches(a, labels) and matches(b, labels):
        assert may_overlap(a, b)


@given(st.text(max_size=40))
def test_string_garbage_raises_only_selector_errors(text: str) -> None:
    result = outcome(lambda: parse_selector_string(text), SelectorError)
    assert isinstance(result, SelectorError | LabelSelector)


@given(json_values)
def test_dict_garbage_raises_only_selector_errors(data: object) -> None:
    result = outcome(lambda: selector_from_dict(data), SelectorError)
    assert isinstance(result, SelectorError | LabelSelector)


VALUE_RULE = "must be at most 63 characters of A-Z a-z 0-9 . _ -, starting and ending with a letter or digit"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a label selector must be an object, got list"),
        ({"matchExpressions": ["app"]}, "matchExpressions[0] must be an object with key, operator and values"),
        ({"matchExpressions": [{"key": 7, "operator": "In"}]}, "matchExpressions[0]: key must be a string"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Has"}]},
            "matchExpressions[0]: operator 'Has' is not one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "H" * 900_000}]},
            f"matchExpressions[0]: operator '{'H' * 76}... is not one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "a", "operator": "In", "values": "xy"}]},
            "matchExpressions[1]: values must be a list of strings",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            "matchExpressions[0]: values must be a list of strings",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            "label selector: a DoesNotExist takes no values",
        ),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["-x"]}]},
            f"label 'app': value '-x' {VALUE_RULE}",
        ),
        ({"matchLabels": "app=x"}, "matchLabels must be an object of label: value"),
        ({"matchExpressions": {"key": "app"}}, "matchExpressions must be a list"),
        ({"matchLabels": {"": "x"}}, "label selector: a label key must be a non-empty string"),
        (
            {"matchLabels": {"k" * 64: "x"}},
            f"label key '{'k' * 64}': the name must be 1-63 characters of A-Z a-z 0-9 . _ -, starting and ending "
            "with a letter or digit",
        ),
        ({"matchLabels": {"app": "v" * 64}}, f"label 'app': value '{'v' * 64}' {VALUE_RULE}"),
    ],
)
def test_a_bad_dict_selector_is_refused_with_one_line_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        selector_from_dict(data)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (7, "a label selector must be a string, got int"),
        ("a=b=c", f"label 'a': value 'b=c' {VALUE_RULE}"),
        (
            "app in ((a))",
            "label selector term 'app in ((a))' is not key, !key, key=value, key!=value, "
            "key in (a,b) or key notin (a,b)",
        ),
        ("app=" + "v" * 80 + "-", f"label 'app': value '{'v' * 77}...' {VALUE_RULE}"),
        ("app=" + "v" * 79 + "-", f"label 'app': value '{'v' * 79}-' {VALUE_RULE}"),
    ],
)
def test_a_bad_string_selector_is_refused_with_one_line_quoting_at_most_80_characters(
    text: object, message: str
) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector_string(text)
    assert str(caught.value) == message


def test_an_empty_selector_where_one_is_required_says_what_to_write() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector_string("", require_nonempty=True)
    assert str(caught.value) == "the pod selector is empty and would match every pod; give at least one label"


def test_a_label_key_name_and_value_of_63_characters_are_taken() -> None:
    """The API server's limit, and a placement's or a budget's selector may use all of it."""
    longest = {"matchLabels": {"example.com/" + "k" * 63: "v" * 63}}
    assert selector_from_dict(longest).to_dict() == longest
