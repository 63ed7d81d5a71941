"""The keyed work queue: one worker per key at a time, deadlines on its clock, per-key backoff, batches."""

from __future__ import annotations

import threading
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from webhook.workqueue import WorkQueue


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_twice_is_handed_out_once() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert queue.drain() == ["a", "b"]
    assert queue.drain() == []


def test_a_key_added_while_processed_is_handed_out_again_only_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    assert queue.get(timeout=0) is None, "a key was handed to a second worker while the first held it"
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_a_delayed_key_is_ready_at_its_deadline_and_the_earliest_deadline_wins() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add_after("a", 10)
    queue.add_after("a", 30)
    assert queue.waiting() == 1
    clock.now += 9.5
    assert queue.drain() == []
    queue.add_after("a", 20)
    clock.now += 0.5
    assert queue.drain() == ["a"]
    queue.done("a")
    clock.now += 100
    assert queue.drain() == [], "a deadline replaced by an earlier one handed the key out again"
    queue.add_after("b", 5)
    queue.add_after("b", 2)
    clock.now += 2
    assert queue.drain() == ["b"]


class SleepOnTheClock(threading.Condition):
    """A Condition whose timed wait records the seconds asked and moves the fake clock by them instead of sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert len(self.waits) < 10, f"woke again and again with no key due: {self.waits}"
        self.waits.append(timeout)
        assert timeout is not None, "a key waits for its deadline, yet get slept with none"
        self.clock.now += timeout
        return False


def test_a_blocked_get_sleeps_until_the_earliest_deadline_and_no_longer() -> None:
    """How long get sleeps, seen without timing it: the queue's Condition is swapped for one that records it."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue._changed = condition = SleepOnTheClock(clock)  # the sleep is observable only there
    queue.add_after("late", 30)
    queue.add_after("soon", 0.25)
    assert queue.get() == "soon"
    queue.done("soon")
    assert queue.get() == "late"
    assert condition.waits == [0.25, 29.75]


def test_a_key_asked_again_and_again_with_its_deadline_waits_once() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    for _ in range(50):
        queue.add_after("a", 3600)
    assert queue.waiting() == 1
    assert len(queue._deadlines) == 1, "each add_after with an unchanged deadline added a heap entry"
    for step in range(500):
        queue.add_after("b", 10_000 - step)
    assert len(queue._deadlines) <= 2 * queue.waiting() + 64, "the replaced deadlines piled up in the heap"


def test_rate_limited_adds_back_off_exponentially_up_to_the_cap_until_forgotten() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock, base_delay=1.0, max_delay=100.0)
    delays = []
    for _ in range(10):
        queue.add_rate_limited("a")
        waited = 0
        while not queue.drain():
            clock.now += 1
            waited += 1
        queue.done("a")
        delays.append(waited)
    assert delays == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100]
    assert queue.retries("a") == 10
    queue.forget("a")
    assert queue.retries("a") == 0
    queue.add_rate_limited("a")
    clock.now += 1
    assert queue.drain() == ["a"]


def test_many_failures_do_not_overflow_the_backoff() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock, max_delay=300)
    for _ in range(2000):
        queue.add_rate_limited("a")
    clock.now += 300
    assert queue.drain() == ["a"]


def test_a_batch_takes_every_ready_key_up_to_its_limit_and_holds_them() -> None:
    clock = FakeClock()
    queue: WorkQueue[int] = WorkQueue(clock)
    for key in range(5):
        queue.add(key)
    queue.add_after(9, 1)
    assert queue.drain(limit=3) == [0, 1, 2]
    clock.now += 1
    assert queue.drain() == [3, 4, 9]
    queue.add(0)
    assert queue.drain() == [], "a key held by the batch was handed out again"
    queue.done(0)
    assert queue.drain() == [0]


def test_a_blocked_get_wakes_for_a_key_added_by_another_thread() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get(timeout=30)))
    worker.start()
    queue.add("a")
    worker.join(30)
    assert got == ["a"]


def test_a_blocked_get_wakes_for_a_deadline_on_the_real_clock() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.01)
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()), daemon=True)
    worker.start()
    worker.join(30)
    queue.shut_down()
    assert got == ["a"], "a get with no timeout slept past the deadline of the key it waited for"


def test_a_get_with_a_timeout_under_a_second_waits_for_a_key_due_within_it() -> None:
    """The defrag worker waits a second at a time (WAKE_SECONDS): a get giving up at once would never hand it a key."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.01)
    assert queue.get(timeout=0.9) == "a"


def test_a_get_times_out_with_none() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 3600)
    assert queue.get(timeout=0.01) is None


def test_shut_down_hands_out_what_is_ready_then_none_and_wakes_a_blocked_get() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add_after("b", 3600)
    queue.shut_down()
    queue.add("c")
    assert queue.shutting_down()
    assert queue.get() == "a"
    assert queue.get() is None and queue.waiting() == 0
    idle: WorkQueue[str] = WorkQueue()
    got: list[str | None] = ["unset"]
    worker = threading.Thread(target=lambda: got.__setitem__(0, idle.get()))
    worker.start()
    idle.shut_down()
    worker.join(30)
    assert not worker.is_alive() and got == [None]


def test_workers_on_threads_never_hold_one_key_at_once_and_process_every_key_added() -> None:
    queue: WorkQueue[int] = WorkQueue()
    held: set[int] = set()
    twice: list[int] = []
    processed: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in held:
                    twice.append(key)
                held.add(key)
            threading.Event().wait(0.0005)
            with lock:
                held.discard(key)
                processed.append(key)
            queue.done(key)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for round_ in range(200):
        queue.add(round_ % 7)
    while len(queue) or queue._processing:
        threading.Event().wait(0.001)
    queue.shut_down()
    for worker in workers:
        worker.join(30)
    assert twice == []
    assert set(processed) == set(range(7))


KEYS = st.sampled_from(["a", "b", "c", ("ns", "d"), 5])


class QueueModel(RuleBasedStateMachine):
    """The queue against a model: a dirty set, the earliest deadline per key, the keys held, the failures."""

    @initialize()
    def start(self) -> None:
        self.clock = FakeClock()
        self.queue: WorkQueue[Hashable] = WorkQueue(self.clock, base_delay=0.5, max_delay=8.0)
        self.dirty: set[Hashable] = set()
        self.deadlines: dict[Hashable, float] = {}
        self.held: set[Hashable] = set()
        self.failures: dict[Hashable, int] = {}

    def _wait(self, key: Hashable, seconds: float) -> None:
        if seconds <= 0:
            self.dirty.add(key)
        else:
            at = self.clock.now + seconds
            self.deadlines[key] = min(self.deadlines.get(key, at), at)

    def _ready(self) -> set[Hashable]:
        for key, at in list(self.deadlines.items()):
            if at <= self.clock.now:
                del self.deadlines[key]
                self.dirty.add(key)
        return self.dirty - self.held

    @rule(key=KEYS)
    def add(self, key: Hashable) -> None:
        self.queue.add(key)
        self.dirty.add(key)

    @rule(key=KEYS, seconds=st.sampled_from([-1.0, 0.0, 0.25, 1.0, 3.0, 10.0]))
    def add_after(self, key: Hashable, seconds: float) -> None:
        self.queue.add_after(key, seconds)
        self._wait(key, seconds)

    @rule(key=KEYS)
    def add_rate_limited(self, key: Hashable) -> None:
        failures = self.failures.get(key, 0)
        self.failures[key] = failures + 1
        self.queue.add_rate_limited(key)
        self._wait(key, min(0.5 * 2**failures, 8.0))

    @rule(key=KEYS)
    def forget(self, key: Hashable) -> None:
        self.queue.forget(key)
        self.failures.pop(key, None)

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0, 4.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(limit=st.none() | st.integers(1, 3))
    def drain(self, limit: int | None) -> None:
        ready = self._ready()
        got = self.queue.drain(limit)
        assert len(got) == len(set(got)), "a batch held one key twice"
        assert not set(got) & self.held, "a key was handed out while held"
        assert set(got) <= ready, "a key was handed out before its deadline or without being added"
        assert len(got) == (len(ready) if limit is None else min(limit, len(ready)))
        self.held |= set(got)
        self.dirty -= set(got)

    @rule()
    def get(self) -> None:
        ready = self._ready()
        key = self.queue.get(timeout=0)
        if key is None:
            assert not ready
            return
        assert key in ready and key not in self.held
        self.held.add(key)
        self.dirty.discard(key)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.held, key=repr)))
        self.queue.done(key)
        self.held.discard(key)

    @invariant()
    def counts_agree(self) -> None:
        assert len(self.queue) == len(self._ready())
        assert self.queue.waiting() == len(self.deadlines)

    def teardown(self) -> None:
        """Every key added is handed out once the clock passes every deadline and the workers finish."""
        if not hasattr(self, "queue"):
            return
        for key in list(self.held):
            self.queue.done(key)
        self.held.clear()
        self.clock.now += 1e6
        owed = self._ready()
        handed: list[Hashable] = []
        while batch := self.queue.drain():
            handed.extend(batch)
            for key in batch:
                self.queue.done(key)
        assert sorted(handed, key=repr) == sorted(owed, key=repr)


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


@settings(deadline=None)
@given(st.lists(st.tuples(KEYS, st.floats(-1, 100, allow_nan=False)), max_size=30))
def test_no_key_is_handed_out_before_its_deadline(requests: list[tuple[Hashable, float]]) -> None:
    clock = FakeClock()
    queue: WorkQueue[Hashable] = WorkQueue(clock)
    earliest: dict[Hashable, float] = {}
    start = clock.now
    for key, seconds in requests:
        queue.add_after(key, seconds)
        earliest[key] = min(earliest.get(key, start + seconds), start + seconds)
    for step in [0.0, 0.5, 1.0, 5.0, 25.0, 50.0, 100.0]:
        clock.now = start + step
        for key in queue.drain():
            assert earliest[key] <= clock.now, f"{key!r} handed out at {clock.now}, its deadline {earliest[key]}"
            del earliest[key]
    assert earliest == {}, "a key was not handed out once its deadline passed"


@pytest.mark.parametrize("limit", [None, 1])
def test_a_batch_of_keys_done_with_none_added_leaves_the_queue_empty(limit: int | None) -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add("a")
    queue.add("b")
    while batch := queue.drain(limit):
        for key in batch:
            queue.done(key)
    assert len(queue) == 0 and not queue._processing


def test_keys_waiting_keep_their_deadlines_through_the_heaps_compaction() -> None:
    """A key moved earlier again and again compacts the heap: another key waiting then must still come at its time."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add_after("other", 500)
    for seconds in range(200, 100, -1):
        queue.add_after("moved", seconds)
    clock.now += 101
    assert queue.drain() == ["moved"]
    clock.now += 399
    assert queue.drain() == ["other"]
    assert queue.waiting() == 0
