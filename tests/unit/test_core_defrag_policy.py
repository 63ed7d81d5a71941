"""The DefragPolicy document: defaults, every field read, and one clear line for every mistake."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from kubectl_hami_place.core.defrag.policy import (
    MAX_COUNT,
    Budgets,
    DefragPolicy,
    KeepRoom,
    Mode,
    Namespaces,
    PolicyError,
    Rescue,
    WholeFreeCards,
    mode_of,
    parse_duration,
    parse_policy,
    read_mode,
    with_mode,
    with_threshold,
)
from webhook.metrics import DefragMetrics

HEAD = "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\n"


def test_an_empty_policy_is_the_defaults_in_dry_run() -> None:
    policy = parse_policy(HEAD)
    assert policy == DefragPolicy()
    assert policy.mode is Mode.dry_run
    assert policy.budgets.moves_per_run == 4 and policy.budgets.moves_per_hour == 12
    assert policy.budgets.cooldown == timedelta(hours=1)
    assert policy.rescue.pending_for == timedelta(seconds=60)
    assert policy.rescue.reserve_for == timedelta(seconds=60)
    assert policy.move_job_pods is False, "a Job's pods stay unless the operator says they may move"
    assert policy.priority_threshold is None, "no priority holds a pod unless the operator names one"
    assert policy.min_replicas == 0, "no replica count holds a pod unless the operator names one"
    assert policy.label_selector is None, "every pod may move unless the operator selects some"
    assert policy.min_pod_age == timedelta(0), "no age holds a pod unless the operator names one"
    assert parse_policy(HEAD + "minPodAge: null").min_pod_age == timedelta(0), "null: none, as not written"
    assert policy.node_selector is None, "every node unless the operator selects some"
    assert policy.ignore_pods_without_budget is False, "a pod no PodDisruptionBudget covers may move"
    assert policy.evict_local_storage is True, "a pod with an emptyDir (most GPU pods' /dev/shm) may move"
    assert policy.ignore_claim_pods is False, "a pod that mounts a PersistentVolumeClaim may move"
    assert parse_policy(HEAD + "nodeSelector: ''").node_selector is None, "empty: every node"


def test_every_field_is_read() -> None:
    policy = parse_policy(
        HEAD
        + """
mode: on
namespaces: {include: [team-*, ml], exclude: [team-b]}
rescue: {enabled: false, pendingFor: 2m, reserveFor: 0s}
keepRoom:
  enabled: true
  interval: 1h30m
  wholeFreeCards: {count: 2, type: A100}
  maxStrandedShare: 0.3
  window: "22:00-06:00"
  timeZone: Europe/Berlin
budgets: {movesPerRun: 1, movesPerHour: 3, movesPerNode: 1, movesPerNamespace: 2, cooldown: 90}
maxMovesPerPlan: 5
moveJobPods: true
priorityThreshold: {value: 100000}
minReplicas: 2
labelSelector: {matchLabels: {tier: batch}, matchExpressions: [{key: team, operator: In, values: [a, b]}]}
minPodAge: 10m
nodeSelector: "pool=inference,gpu in (a100,h100)"
ignorePodsWithoutPDB: true
evictLocalStoragePods: false
ignorePvcPods: true
""",
        server_namespace="hami-place",
    )
    assert policy.mode is Mode.on
    assert policy.rescue.enabled is False and policy.rescue.pending_for == timedelta(minutes=2)
    assert policy.rescue.reserve_for == timedelta(0)
    room = policy.keep_room
    assert room.enabled and room.interval == timedelta(hours=1, minutes=30)
    assert (room.whole_free_cards.count, room.whole_free_cards.type, room.max_stranded_share) == (2, "A100", 0.3)
    assert room.window == (22 * 60, 6 * 60) and room.describe_window() == "between 22:00 and 06:00 Europe/Berlin"
    assert room.time_zone == "Europe/Berlin"
    assert policy.budgets.cooldown == timedelta(seconds=90) and policy.budgets.moves_per_namespace == 2
    assert policy.max_moves_per_plan == 5 and policy.move_job_pods is True
    assert policy.priority_threshold == 100000 and policy.min_replicas == 2
    assert str(policy.label_selector) == "tier=batch,team in (a,b)"
    assert policy.min_pod_age == timedelta(minutes=10)
    assert str(policy.node_selector) == "pool=inference,gpu in (a100,h100)"
    assert policy.ignore_pods_without_budget is True
    assert policy.evict_local_storage is False and policy.ignore_claim_pods is True


@pytest.mark.parametrize(
    ("body", "threshold"),
    [
        ("priorityThreshold: null", None),
        ("priorityThreshold: {}", None),
        ("priorityThreshold: {value: null}", None),
        ("priorityThreshold: {value: 0}", 0),
        ("priorityThreshold: {value: -2147483648}", -2147483648),
        ("priorityThreshold: {value: 2147483647}", 2147483647),
    ],
)
def test_a_priority_threshold_is_a_pod_prioritys_whole_number_or_none(body: str, threshold: int | None) -> None:
    assert parse_policy(HEAD + body).priority_threshold == threshold
    assert parse_policy(HEAD + body).priority_class == ""


def test_a_priority_threshold_by_name_leaves_its_value_to_the_server() -> None:
    """The descheduler's `{name: CLASS}`: the parse keeps the name (the server reads the class's value), and
    `with_threshold` sets the value read, checked as a written one is."""
    policy = parse_policy(HEAD + "priorityThreshold: {name: system-cluster-critical, value: null}")
    assert (policy.priority_class, policy.priority_threshold) == ("system-cluster-critical", None)
    assert parse_policy(HEAD + "priorityThreshold: {name: null}").priority_class == ""
    resolved = with_threshold(policy, 2000000000)
    assert (resolved.priority_class, resolved.priority_threshold) == ("system-cluster-critical", 2000000000)
    with pytest.raises(PolicyError, match="out of a pod priority's range"):
        with_threshold(policy, 2**31)


def test_namespaces_include_exclude_and_always_out() -> None:
    policy = parse_policy(
        HEAD + "namespaces: {include: ['team-*', kube-system, hami-place], exclude: [team-b]}", "hami-place"
    )
    allows = policy.namespaces.allows
    assert allows("team-a") and not allows("team-b") and not allows("default")
    assert not allows("kube-system") and not allows("hami-place")
    # The server's --exclude-namespace: the webhook never sees those pods, so a move there could never be pinned.
    policy = parse_policy(HEAD + "namespaces: {include: ['team-*']}", "hami-place", ("team-c", "kube-system"))
    assert not policy.namespaces.allows("team-c") and policy.namespaces.allows("team-a")
    assert policy.namespaces.always_out == ("kube-system", "hami-place", "team-c")


def test_json_is_read_too() -> None:
    text = '{"apiVersion": "scheduling.hami.placement.com/v1alpha1", "kind": "DefragPolicy", "mode": "off"}'
    assert parse_policy(text).mode is Mode.off


@pytest.mark.parametrize(
    ("body", "start", "hint"),
    [
        ("budgets: {movesPerHuor: 3}", "budgets.movesPerHuor: unknown field", "movesPerHour"),
        ("modes: on", "modes: unknown field", "mode"),
        ('"a\\nWarning  x": 1', "'a\\nWarning  x': unknown field", "mode"),
        ("budgets: {movesPerRun: -1}", "budgets.movesPerRun: -1 is negative", "write 0 or more"),
        ("budgets: {movesPerNode: two}", "budgets.movesPerNode: 'two' is not a whole number", "write a number"),
        ("budgets: {cooldown: 1 hour}", "budgets.cooldown: '1 hour' is not a duration", "1h30m"),
        ("budgets: {cooldown: -5m}", "budgets.cooldown: '-5m' is not a duration; durations are never negative", "60s"),
        ("budgets: {cooldown: \u0663m}", "budgets.cooldown: '\u0663m' is not a duration", "1h30m"),
        ("rescue: {pendingFor: -3}", "rescue.pendingFor: -3 is negative", "60s"),
        ("rescue: {reserveFor: 11m}", "rescue.reserveFor: 11m is longer than 10m", "0s (off) to 10m"),
        ("rescue: {reserveFor: -1}", "rescue.reserveFor: -1 is negative", "60s"),
        ("namespaces: {exclude: [team_a]}", "namespaces.exclude[0]: 'team_a' is not a namespace pattern", "team-*"),
        ("namespaces: {include: ['[a-']}", "namespaces.include[0]: '[a-' is not a namespace pattern", "wildcards"),
        ('namespaces: {include: ["team-a\\n"]}', "namespaces.include[0]: 'team-a\\n' is not a namespace", "team-*"),
        ("namespaces: team-a", "namespaces: expected a mapping", "include"),
        ("mode: sometimes", "mode: 'sometimes' is not a mode", "off, dry-run or on"),
        ("rescue: {enabled: yes please}", "rescue.enabled: 'yes please' is not true or false", "write true"),
        ("keepRoom: {maxStrandedShare: 1.5}", "keepRoom.maxStrandedShare: 1.5 is not a share", "from 0 to 1"),
        ("keepRoom: {interval: 0s}", "keepRoom.interval: 0s", "1s or more"),
        (
            "keepRoom: {window: '24:00-06:00'}",
            "keepRoom.window: '24:00-06:00' is not a window; write START-END in hours of keepRoom.timeZone, "
            "e.g. 22:00-06:00",
            'or "" for any time',
        ),
        ("keepRoom: {window: 2200}", "keepRoom.window: 2200 is not a window", "e.g. 22:00-06:00"),
        ("keepRoom: {window: '22:00'}", "keepRoom.window: '22:00' is not a window", "START-END"),
        ('keepRoom: {window: "22:00-06:00\\n"}', "keepRoom.window: '22:00-06:00\\n' is not a window", "START-END"),
        ("keepRoom: {window: '6:00-22:00'}", "keepRoom.window: '6:00-22:00' is not a window", "START-END"),
        ("keepRoom: {window: '06:00-06:00'}", "keepRoom.window: 06:00-06:00 starts where it ends", "22:00-06:00"),
        (
            "keepRoom: {timeZone: Mars/Olympus_Mons}",
            "keepRoom.timeZone: 'Mars/Olympus_Mons' is not a time zone; write an IANA name, e.g. Europe/Berlin,",
            "or UTC",
        ),
        ("keepRoom: {timeZone: Europe}", "keepRoom.timeZone: 'Europe' is not a time zone", "an IANA name"),
        ("keepRoom: {timeZone: ../../etc/passwd}", "keepRoom.timeZone: '../../etc/passwd' is not a", "IANA name"),
        ("keepRoom: {timeZone: /usr/share/zoneinfo/UTC}", "keepRoom.timeZone: '/usr/share/zoneinfo/UTC' is", "IANA"),
        ('keepRoom: {timeZone: "UTC\\n"}', "keepRoom.timeZone: 'UTC\\n' is not a time zone", "an IANA name"),
        ("keepRoom: {timeZone: 1}", "keepRoom.timeZone: 1 is not a time zone", "e.g. Europe/Berlin"),
        (f"keepRoom: {{timeZone: {'a' * 300}}}", f"keepRoom.timeZone: '{'a' * 76}... is not a time zone", "IANA"),
        ("maxMovesPerPlan: 0", "maxMovesPerPlan: 0 is below 1", "write 1 or more"),
        ("moveJobPods: sometimes", "moveJobPods: 'sometimes' is not true or false", "write true or false"),
        (
            "priorityThreshold: 100000",
            "priorityThreshold: 100000 goes under value",
            "write priorityThreshold: {value: 100000}",
        ),
        (
            "priorityThreshold: {name: high, value: 5}",
            "priorityThreshold: both name and value given",
            "write one of them, as the descheduler asks",
        ),
        (
            "priorityThreshold: {name: High_1}",
            "priorityThreshold.name: 'High_1' is not a PriorityClass's name",
            "lowercase letters, digits, '-' and '.', at most 253 characters",
        ),
        ("priorityThreshold: {name: 5}", "priorityThreshold.name: 5 is not a PriorityClass's name", "kubectl get"),
        ("priorityThreshold: {name: ../x}", "priorityThreshold.name: '../x' is not a PriorityClass's name", "'-'"),
        ("minReplicas: -1", "minReplicas: -1 is negative", "write 0 or more"),
        ("labelSelector: tier=batch", "labelSelector: a label selector must be an object, got str", "got str"),
        (
            "labelSelector: {matchLabel: {tier: batch}}",
            "labelSelector: label selector has unknown field 'matchLabel'",
            "use matchLabels and matchExpressions",
        ),
        (
            "labelSelector: {matchExpressions: [{key: tier, operator: Within, values: [a]}]}",
            "labelSelector: matchExpressions[0]: operator 'Within' is not one of",
            "In, NotIn, Exists, DoesNotExist",
        ),
        ("minReplicas: two", "minReplicas: 'two' is not a whole number", "write a number such as 0"),
        ("minPodAge: ten", "minPodAge: 'ten' is not a duration", "write e.g. 60s, 5m, 1h or 1h30m"),
        ("ignorePodsWithoutPDB: yes please", "ignorePodsWithoutPDB: 'yes please' is not true or false", "true"),
        ("evictLocalStoragePods: 0", "evictLocalStoragePods: 0 is not true or false", "write true or false"),
        ("ignorePvcPods: 'no'", "ignorePvcPods: 'no' is not true or false", "write true or false"),
        ("nodeSelector: {pool: a}", "nodeSelector: a label selector must be a string, got dict", "got dict"),
        ("nodeSelector: 'gpu in (a'", "nodeSelector: label selector 'gpu in (a' has an unclosed '('", "'('"),
        ("minPodAge: -5", "minPodAge: -5 is negative", "write a duration of 0s or more"),
        ("minPodAge: true", "minPodAge: True is not a duration", "write e.g. 60s, 5m or 1h"),
        ("priorityThreshold: {valeu: 5}", "priorityThreshold.valeu: unknown field", "the fields here are value, name"),
        ("priorityThreshold: high", "priorityThreshold: expected a mapping with value, name", "got str"),
        ("priorityThreshold: {value: high}", "priorityThreshold.value: 'high' is not a whole number", "e.g. 100000"),
        ("priorityThreshold: {value: true}", "priorityThreshold.value: True is not a whole number", "e.g. 100000"),
        ("priorityThreshold: {value: 1.5}", "priorityThreshold.value: 1.5 is not a whole number", "e.g. 100000"),
        (
            "priorityThreshold: {value: 2147483648}",
            "priorityThreshold.value: 2147483648 is out of a pod priority's range",
            "write -2147483648 to 2147483647",
        ),
        (
            "priorityThreshold: {value: -2147483649}",
            "priorityThreshold.value: -2147483649 is out of a pod priority's range",
            "write -2147483648 to 2147483647",
        ),
        ("budgets: {cooldown: .inf}", "budgets.cooldown: inf is longer than 720h", "at most 720h"),
        ("rescue: {pendingFor: .nan}", "rescue.pendingFor: nan is not a duration", "60s"),
        ("budgets: {cooldown: 70000000h}", "budgets.cooldown: '70000000h' is longer than 720h", "at most 720h"),
        ("keepRoom: {interval: 2592001}", "keepRoom.interval: 2592001 is longer than 720h", "at most 720h"),
        (f"budgets: {{cooldown: {'9' * 5000}}}", "policy: a number with more digits than can be read", "shorter"),
        (f"budgets: {{cooldown: '{'9' * 5000}s'}}", "budgets.cooldown: '999999999999999999999...'", "at most 720h"),
        ("budgets: " + "[" * 5000, "policy: nested deeper than a DefragPolicy ever is", "structure"),
    ],
)
def test_a_mistake_is_one_line_naming_the_field_and_the_fix(body: str, start: str, hint: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + body)
    message = str(caught.value)
    assert message.startswith(start), message
    assert hint in message and "\n" not in message


@pytest.mark.parametrize(
    "body",
    [
        "mode: {v}",
        "rescue: {pendingFor: {v}}",
        "rescue: {enabled: {v}}",
        "namespaces: {include: [{v}]}",
        "keepRoom: {maxStrandedShare: {v}}",
        "apiVersion: {v}",
    ],
)
def test_a_mistake_quotes_no_more_than_the_start_of_a_long_value(body: str) -> None:
    """A field of the ConfigMap may hold a megabyte; the line naming the mistake goes to the log and an Event."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + body.replace("{v}", "x" * 100_000))
    message = str(caught.value)
    assert "'xxxxxxxx" in message and len(message) < 250, message[:300]


@pytest.mark.parametrize(
    ("body", "where", "default"),
    [
        ("budgets: {movesPerRun: {n}}", "budgets.movesPerRun", 4),
        ("budgets: {movesPerHour: {n}}", "budgets.movesPerHour", 12),
        ("budgets: {movesPerNode: {n}}", "budgets.movesPerNode", 2),
        ("budgets: {movesPerNamespace: {n}}", "budgets.movesPerNamespace", 4),
        ("maxMovesPerPlan: {n}", "maxMovesPerPlan", 8),
        ("keepRoom: {wholeFreeCards: {count: {n}}}", "keepRoom.wholeFreeCards.count", 0),
    ],
)
def test_a_count_past_what_a_float_holds_exactly_is_refused_as_the_metrics_export_it(
    body: str, where: str, default: int
) -> None:
    """A budget of 401 digits was read, and the look at every Pending pod then raised OverflowError where the
    controller sets its budget metric: a policy read as valid, and no pod ever rescued."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + body.replace("{n}", "1" + "0" * 400))
    assert str(caught.value) == (f"{where}: 1{'0' * 76}... is more than {MAX_COUNT}; write a number such as {default}")
    largest = parse_policy(HEAD + body.replace("{n}", str(MAX_COUNT))).budgets
    metrics = DefragMetrics(CollectorRegistry())
    metrics.budget_left.labels("run").set(largest.moves_per_run)
    metrics.budget_left.labels("hour").set(largest.moves_per_hour)


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("apiVersion: v1\nkind: DefragPolicy", "apiVersion: 'v1' is not supported; write scheduling.hami"),
        ("apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: Policy", "kind: 'Policy' is not a policy kind"),
        ("- a\n- b", "policy: the document is not a mapping"),
        ("mode: [on", "policy: not YAML or JSON at line"),
    ],
)
def test_a_wrong_document_says_what_to_write(text: str, start: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    assert str(caught.value).startswith(start), caught.value
    assert "\n" not in str(caught.value)


@given(hours=st.integers(0, 48), minutes=st.integers(0, 59), seconds=st.integers(0, 59))
def test_a_duration_of_hours_minutes_and_seconds_is_their_sum(hours: int, minutes: int, seconds: int) -> None:
    cooldown = f"{hours}h{minutes}m{seconds}s"
    assert parse_duration(cooldown, "x") == timedelta(hours=hours, minutes=minutes, seconds=seconds)


def test_leading_zeros_are_no_digits_of_a_duration() -> None:
    assert parse_duration("0" * 5000 + "90s", "budgets.cooldown") == timedelta(seconds=90)


def test_the_longest_duration_is_read() -> None:
    """720h is the limit itself: a month's cooldown is a policy an operator may mean."""
    assert parse_policy(HEAD + "budgets: {cooldown: 720h}").budgets.cooldown == timedelta(days=30)


def test_with_mode_flips_only_the_mode() -> None:
    text = HEAD + "mode: on\nbudgets: {movesPerRun: 1}\nrescue: {pendingFor: 2m, reserveFor: 5m}\n"
    paused = with_mode(text, Mode.off)
    assert mode_of(paused) is Mode.off
    assert parse_policy(paused) == DefragPolicy(
        mode=Mode.off, budgets=parse_policy(text).budgets, rescue=parse_policy(text).rescue
    )
    assert parse_policy(with_mode(paused, "dry-run")).mode is Mode.dry_run


def test_with_mode_keeps_a_field_a_parse_refuses() -> None:
    """Pausing must work on a policy the controller could not read: the rest is kept as written."""
    paused = with_mode(HEAD + "budgets: {movesPerHuor: 3}\n", Mode.off)
    assert "movesPerHuor: 3" in paused and mode_of(paused) is Mode.off


def test_a_bare_on_or_off_means_the_mode_not_a_boolean() -> None:
    assert parse_policy(HEAD + "mode: off").mode is Mode.off
    assert parse_policy(HEAD + "mode: on").mode is Mode.on
    assert "mode: 'off'" in with_mode(HEAD, "off")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "modes: on",
            "modes: unknown field; the fields here are apiVersion, kind, mode, namespaces, rescue, keepRoom, budgets, "
            "maxMovesPerPlan, moveJobPods, priorityThreshold, minReplicas, labelSelector, minPodAge, nodeSelector, "
            "ignorePodsWithoutPDB, evictLocalStoragePods, ignorePvcPods",
        ),
        (
            "x" * 60 + ": 1",
            "x" * 60 + ": unknown field; the fields here are apiVersion, kind, mode, namespaces, rescue, keepRoom, "
            "budgets, maxMovesPerPlan, moveJobPods, priorityThreshold, minReplicas, labelSelector, minPodAge, "
            "nodeSelector, ignorePodsWithoutPDB, evictLocalStoragePods, ignorePvcPods",
        ),
        (
            "x" * 61 + ": 1",
            f"'{'x' * 60}': unknown field; the fields here are apiVersion, kind, mode, namespaces, rescue, keepRoom, "
            "budgets, maxMovesPerPlan, moveJobPods, priorityThreshold, minReplicas, labelSelector, minPodAge, "
            "nodeSelector, ignorePodsWithoutPDB, evictLocalStoragePods, ignorePvcPods",
        ),
        (
            "rescue: {pendingfor: 1m}",
            "rescue.pendingfor: unknown field; the fields here are enabled, pendingFor, reserveFor",
        ),
        ("rescue: 5", "rescue: expected a mapping with enabled, pendingFor, reserveFor; got int"),
        ("rescue: {pendingFor: true}", "rescue.pendingFor: True is not a duration; write e.g. 60s, 5m or 1h"),
        (
            "rescue: {reserveFor: 11m}",
            "rescue.reserveFor: 11m is longer than 10m, the longest a room is kept; write 0s (off) to 10m, e.g. 60s",
        ),
        (
            "budgets: {cooldown: 1 hour}",
            "budgets.cooldown: '1 hour' is not a duration; write e.g. 60s, 5m, 1h or 1h30m",
        ),
        (
            "budgets: {cooldown: " + "9" * 23 + "s}",
            f"budgets.cooldown: '{'9' * 23}s' is longer than 720h; write a duration of at most 720h",
        ),
        (
            "budgets: {cooldown: " + "9" * 24 + "s}",
            f"budgets.cooldown: '{'9' * 21}...' is longer than 720h; write a duration of at most 720h",
        ),
        ("namespaces: team-a", "namespaces: expected a mapping with include, exclude; got str"),
        (
            "namespaces: {include: team-a}",
            "namespaces.include: expected a list of namespace patterns, e.g. [team-*]; got str",
        ),
        (
            "namespaces: {exclude: [team_a]}",
            "namespaces.exclude[0]: 'team_a' is not a namespace pattern; write a namespace name (lowercase letters, "
            "digits, -) with * ? or [a-z] wildcards, e.g. team-*",
        ),
        (
            f"namespaces: {{include: [{'a' * 64}]}}",
            f"namespaces.include[0]: '{'a' * 64}' is not a namespace pattern; write a namespace name "
            "(lowercase letters, digits, -) with * ? or [a-z] wildcards, e.g. team-*",
        ),
        (
            "keepRoom: 5",
            "keepRoom: expected a mapping with enabled, interval, wholeFreeCards, maxStrandedShare, window, timeZone; "
            "got int",
        ),
        ("keepRoom: {enabled: yes please}", "keepRoom.enabled: 'yes please' is not true or false; write true or false"),
        ("keepRoom: {wholeFreeCards: 2}", "keepRoom.wholeFreeCards: expected a mapping with count, type; got int"),
        (
            "keepRoom: {wholeFreeCards: {type: 5}}",
            "keepRoom.wholeFreeCards.type: 5 is not text; write part of a card type, e.g. A100",
        ),
        (
            'keepRoom: {wholeFreeCards: {type: "A100\\e[2J"}}',
            "keepRoom.wholeFreeCards.type: 'A100\\x1b[2J' is no card type; write part of one in at most 128 printable "
            "characters, e.g. A100",
        ),
        (
            f"keepRoom: {{wholeFreeCards: {{type: {'A' * 129}}}}}",
            f"keepRoom.wholeFreeCards.type: '{'A' * 76}... is no card type; write part of one in at most 128 "
            "printable characters, e.g. A100",
        ),
        ("mode: " + "x" * 78, f"mode: '{'x' * 78}' is not a mode; write off, dry-run or on"),
        (
            "mode: on: off",
            "policy: not YAML or JSON at line 3 (mapping values are not allowed here); fix the document's syntax",
        ),
        ("mode: \x07", "policy: not YAML or JSON (unreadable); fix the document's syntax"),
    ],
)
def test_a_mistake_reads_exactly_so(body: str, message: str) -> None:
    """The line the log and the ConfigMap's Event show, word for word: the field, what is wrong, what to write."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + body)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("body", "policy"),
    [
        ("rescue: {reserveFor: 10m}", DefragPolicy(rescue=Rescue(reserve_for=timedelta(minutes=10)))),
        (
            "rescue: {reserveFor: 0, pendingFor: 0.5}",
            DefragPolicy(rescue=Rescue(pending_for=timedelta(seconds=0.5), reserve_for=timedelta(0))),
        ),
        ("budgets: {cooldown: 2592000s}", DefragPolicy(budgets=Budgets(cooldown=timedelta(days=30)))),
        ("keepRoom: {interval: 1s}", DefragPolicy(keep_room=KeepRoom(interval=timedelta(seconds=1)))),
        ("keepRoom: {maxStrandedShare: 0}", DefragPolicy(keep_room=KeepRoom(max_stranded_share=0.0))),
        ("keepRoom: {maxStrandedShare: 1}", DefragPolicy(keep_room=KeepRoom(max_stranded_share=1.0))),
        ("keepRoom: {maxStrandedShare: null}", DefragPolicy(keep_room=KeepRoom(max_stranded_share=None))),
        ("keepRoom: {window: '00:00-23:59'}", DefragPolicy(keep_room=KeepRoom(window=(0, 23 * 60 + 59)))),
        ("keepRoom: {window: ''}", DefragPolicy()),
        ("keepRoom: {window: null}", DefragPolicy()),
        ("keepRoom: {timeZone: ''}", DefragPolicy()),
        ("keepRoom: {timeZone: null}", DefragPolicy()),
        ("keepRoom: {timeZone: UTC}", DefragPolicy()),
        (
            "keepRoom: {timeZone: America/Argentina/Buenos_Aires}",
            DefragPolicy(keep_room=KeepRoom(time_zone="America/Argentina/Buenos_Aires")),
        ),
        ("keepRoom: {timeZone: Etc/GMT+5}", DefragPolicy(keep_room=KeepRoom(time_zone="Etc/GMT+5"))),
        (
            "keepRoom: {wholeFreeCards: {count: 1, type: null}}",
            DefragPolicy(keep_room=KeepRoom(whole_free_cards=WholeFreeCards(1, ""))),
        ),
        (f"namespaces: {{include: [{'a' * 63}]}}", DefragPolicy(namespaces=Namespaces(include=("a" * 63,)))),
    ],
)
def test_a_value_at_its_limit_is_read(body: str, policy: DefragPolicy) -> None:
    """The edges are part of the range: 0 and 1 are shares, 10m a reserve, 1s an interval, 63 characters a name."""
    assert parse_policy(HEAD + body) == policy


@pytest.mark.parametrize(
    ("window", "at", "closed"),
    [
        (None, "12:30:45", timedelta(0)),
        ((22 * 60, 6 * 60), "23:00:00", timedelta(0)),
        ((22 * 60, 6 * 60), "22:00:00", timedelta(0)),
        ((22 * 60, 6 * 60), "22:00:30", timedelta(0)),
        ((22 * 60, 6 * 60), "05:59:30", timedelta(0)),
        ((22 * 60, 6 * 60), "06:00:00", timedelta(hours=16)),
        ((22 * 60, 6 * 60), "12:30:45", timedelta(hours=9, minutes=29, seconds=15)),
        ((22 * 60, 6 * 60), "21:59:59.5", timedelta(seconds=0.5)),
        ((60, 5 * 60), "00:30:00", timedelta(minutes=30)),
        ((60, 5 * 60), "03:00:00", timedelta(0)),
        ((60, 5 * 60), "01:00:30", timedelta(0)),
        ((60, 5 * 60), "05:00:00", timedelta(hours=20)),
    ],
)
def test_keep_room_waits_for_its_window_to_open(window: tuple[int, int] | None, at: str, closed: timedelta) -> None:
    """A window that wraps midnight is open from its start until its end the next day; at its end it is closed."""
    now = datetime.fromisoformat(f"2026-12-07T{at}").replace(tzinfo=UTC)
    assert KeepRoom(window=window).closed_for(now) == closed


@pytest.mark.parametrize(
    ("window", "at", "closed"),
    [
        # Berlin is UTC+2 in summer and UTC+1 in winter: the window's hours are Berlin's in both.
        ((22 * 60, 6 * 60), "2026-07-01T12:00:00", timedelta(hours=8)),
        ((22 * 60, 6 * 60), "2026-01-15T12:00:00", timedelta(hours=9)),
        ((22 * 60, 6 * 60), "2026-07-01T21:30:00", timedelta(0)),
        ((22 * 60, 6 * 60), "2026-07-01T03:30:00", timedelta(0)),
        ((22 * 60, 6 * 60), "2026-07-01T04:00:00", timedelta(hours=16)),
        ((22 * 60, 6 * 60), "2026-07-01T19:59:30", timedelta(seconds=30)),
        # 25 October 2026, 01:00 UTC: Berlin's clocks go back from 03:00 to 02:00, and 02:20 comes twice.
        ((140, 160), "2026-10-25T00:10:00", timedelta(minutes=10)),
        ((140, 160), "2026-10-25T00:30:00", timedelta(0)),
        ((140, 160), "2026-10-25T00:50:00", timedelta(minutes=30)),
        ((140, 160), "2026-10-25T01:10:00", timedelta(minutes=10)),
        ((140, 160), "2026-10-25T01:40:00", timedelta(hours=23, minutes=40)),
        ((140, 160), "2026-10-25T01:30:00", timedelta(0)),
        # 29 March 2026, 01:00 UTC: they go forward from 02:00 to 03:00, and 02:30 never comes that night.
        ((150, 180), "2026-03-28T23:30:00", timedelta(hours=2)),
        ((150, 180), "2026-03-29T00:10:00", timedelta(minutes=80)),
        ((150, 180), "2026-03-29T00:30:00", timedelta(hours=1)),
        ((150, 180), "2026-03-29T01:30:00", timedelta(hours=23)),
    ],
)
def test_keep_room_waits_for_its_window_in_its_time_zone(window: tuple[int, int], at: str, closed: timedelta) -> None:
    """Operators keep moves to their own quiet hours, which follow their clocks through daylight saving time. A window
    that closed on the first pass of the repeated hour (02:50 summer time) opens on the second (02:20 winter time). A
    start the clocks skip is looked at again as if they had not (01:30 UTC, 03:30 in Berlin), and that night
    skipped."""
    now = datetime.fromisoformat(at).replace(tzinfo=UTC)
    assert KeepRoom(window=window, time_zone="Europe/Berlin").closed_for(now) == closed


def test_a_policy_without_a_mode_is_read_as_dry_run_by_pause_and_resume() -> None:
    assert mode_of(HEAD) is Mode.dry_run
    assert mode_of(HEAD + "mode: sometimes") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("apiVersion: v9\nmode: sometimes\nbogus: 1\n", "mode: 'sometimes' is not a mode; write off, dry-run or on"),
        ("mode: [on\n", "policy: not YAML or JSON at line 2 (expected ',' or ']', but got '<stream end>')"),
    ],
)
def test_the_mode_is_read_alone_and_what_keeps_it_unread_is_named_not_another_field(text: str, problem: str) -> None:
    """pause and resume say why the mode cannot be read: the policy's other mistakes do not stop them."""
    with pytest.raises(PolicyError) as raised:
        read_mode(text)
    assert str(raised.value).startswith(problem), str(raised.value)
    assert read_mode("apiVersion: v9\nmode: on\nbogus: 1\n") is Mode.on


def test_with_mode_refuses_a_mode_that_is_none_naming_the_mode_field() -> None:
    with pytest.raises(PolicyError) as caught:
        with_mode(HEAD, "sometimes")
    assert str(caught.value) == "mode: 'sometimes' is not a mode; write off, dry-run or on"


def test_with_mode_keeps_the_fields_in_the_order_written() -> None:
    """Pausing rewrites the operator's ConfigMap: a diff of it should show the mode and nothing else."""
    text = HEAD + "mode: on\nbudgets: {movesPerRun: 1}\nnamespaces: {include: [a]}\n"
    assert with_mode(text, Mode.off) == (
        HEAD + "mode: 'off'\nbudgets:\n  movesPerRun: 1\nnamespaces:\n  include:\n  - a\n"
    )
