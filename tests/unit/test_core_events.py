"""Events counted and rate limited as client-go's recorder does: the key, the count, the token bucket."""

from __future__ import annotations

from kubectl_hami_place.core.events import (
    SPAM_BURST,
    SPAM_QPS,
    Bucket,
    EventKey,
    InvolvedObject,
    Occurrence,
    Recent,
    Seen,
    observe,
    take_token,
)

POD = InvolvedObject("v1", "Pod", "team-a", "trainer-x", "uid-1")
PLACEMENT = InvolvedObject("scheduling.hami.placement.com/v1alpha1", "HamiPodPlacement", "team-a", "p", "uid-2")


def key(involved: InvolvedObject = PLACEMENT, reason: str = "EvictionBlocked", message: str = "budget") -> EventKey:
    return EventKey("hami-place-webhook", "host-0", involved, "Warning", reason, message)


def test_the_same_event_again_is_the_same_key_and_a_new_message_or_object_is_another() -> None:
    assert key() == key()
    assert key(message="other budget") != key()
    assert key(reason="EvictionFailed") != key()
    assert key(involved=POD) != key()


def test_the_rate_limit_is_per_source_and_object_whatever_the_reason_or_message() -> None:
    assert key(reason="EvictionAttempt", message="evicting pod v").spam_key == key().spam_key
    assert key(involved=POD).spam_key != key().spam_key


def test_a_first_occurrence_is_created_then_each_repeat_patches_its_count_keeping_the_first_time() -> None:
    first = observe(None, "2026-12-01T10:00:00Z")
    assert (first.patch, first.count, first.first_timestamp) == (False, 1, "2026-12-01T10:00:00Z")
    seen = Seen("p.1877", first.count, first.first_timestamp)
    again = observe(seen, "2026-12-01T10:00:05Z")
    assert again.patch and again.name == "p.1877"
    assert (again.count, again.first_timestamp, again.last_timestamp) == (
        2,
        "2026-12-01T10:00:00Z",
        "2026-12-01T10:00:05Z",
    )
    assert again.patch_body("budget") == {"count": 2, "lastTimestamp": "2026-12-01T10:00:05Z", "message": "budget"}


def test_a_repeat_before_the_first_was_named_is_created_again_with_its_count() -> None:
    """The create of the first failed or has not answered: nothing to patch, the count is still right."""
    again = observe(Seen("", 1, "2026-12-01T10:00:00Z"), "2026-12-01T10:00:05Z")
    assert not again.patch
    assert again.count == 2


def test_the_bucket_lets_a_burst_through_then_one_event_per_refill() -> None:
    bucket = None
    allowed = []
    for _ in range(SPAM_BURST + 3):
        ok, bucket = take_token(bucket, 100.0)
        allowed.append(ok)
    assert allowed == [True] * SPAM_BURST + [False] * 3
    assert bucket is not None
    ok, later = take_token(bucket, 100.0 + 0.5 / SPAM_QPS)
    assert not ok, "half a token is not a token"
    ok, later = take_token(later, 100.0 + 1.0 / SPAM_QPS)
    assert ok
    ok, _ = take_token(later, 100.0 + 1.0 / SPAM_QPS)
    assert not ok


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    ok, bucket = take_token(Bucket(0.0, 0.0), 1e9)
    assert ok and bucket.tokens == SPAM_BURST - 1


def test_the_cache_forgets_the_least_recently_used_key_past_its_size() -> None:
    recent: Recent[str, int] = Recent(size=2)
    recent.put("a", 1)
    recent.put("b", 2)
    assert recent.get("a") == 1
    recent.put("c", 3)
    assert (recent.get("a"), recent.get("b"), recent.get("c"), len(recent)) == (1, None, 3, 2)


def test_a_first_occurrence_is_stamped_first_and_last_at_once() -> None:
    """client-go writes a new Event with both timestamps set to when it happened; `kubectl get events` sorts by the
    last one."""
    assert observe(None, "2026-12-01T10:00:00Z") == Occurrence(
        count=1, first_timestamp="2026-12-01T10:00:00Z", last_timestamp="2026-12-01T10:00:00Z"
    )


def test_the_bucket_refills_for_the_time_passed_even_under_a_second() -> None:
    """Events come in bursts well under a second apart: each gap refills only its share of a token."""
    assert take_token(Bucket(0.0, 10.0), 10.5, qps=1.0) == (False, Bucket(0.5, 10.5))
    assert take_token(Bucket(0.5, 10.5), 11.0, qps=1.0) == (True, Bucket(0.0, 11.0))
