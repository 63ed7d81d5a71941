"""Leader election on a `coordination.k8s.io` Lease: exactly one replica acts at a time.

The Kubernetes client's own `leaderelection` is not used: it sends no request timeout (a renewal that hangs keeps
the old leader acting past its deadline), reads the shared default configuration instead of ours, measures time by
the wall clock, and runs once, never standing again after a loss.

Here each attempt is one bounded read and one write guarded by the Lease's resourceVersion (optimistic
concurrency: of two replicas that write on the same version, one gets 409). A follower takes the Lease over only
once its record (holder, renewTime, resourceVersion) has not changed for `lease_duration` on the follower's own
monotonic clock. A leader counts itself the leader only until `renew_deadline` after the start of its last
successful write, `renew_deadline` < `lease_duration`, so it stops acting before any other replica can start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubectl_hami_place.kube.client import Kube, by_path, request
from kubectl_hami_place.kube.errors import KubeConflict, KubeError, KubeNotFound

log = logging.getLogger(__name__)

LEASE_DURATION_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10.0
RETRY_SECONDS = 2.0
# One read or write of the Lease, at most; under half the renew deadline, so a hung request leaves time to try again.
REQUEST_SECONDS = 4.0


@dataclass(frozen=True)
class LeaseTimes:
    """How long a Lease holds, until when its holder counts itself the leader, and how often it is tried."""

    lease_duration: int = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry: float = RETRY_SECONDS

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration")

    @classmethod
    def lasting(cls, lease_duration: int) -> LeaseTimes:
        """A lease of that many seconds, its renew deadline and retry in the defaults' proportions (15 s, 10 s, 2 s)."""
        scale = lease_duration / LEASE_DURATION_SECONDS
        return cls(lease_duration, RENEW_DEADLINE_SECONDS * scale, RETRY_SECONDS * scale)

    @property
    def request(self) -> float:
        """The timeout of one read or write of the Lease."""
        return min(REQUEST_SECONDS, self.renew_deadline / 2)


class Elector:
    """Stands for the Lease `namespace/name` as `identity` until `stop`; `leading()` says whether to act now. Each
    write of the Lease carries `annotations()` as they are then (the holder's word on its state; the Lease's own
    annotations are replaced)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        times: LeaseTimes = LeaseTimes(),
        on_change: Callable[[bool], None] | None = None,
        annotations: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.times = times
        self.on_change = on_change
        self.annotations = annotations
        self.holder = ""
        self._valid_until = 0.0
        self._was_leading = False
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._lock = threading.Lock()

    def leading(self) -> bool:
        """Whether this replica may act now: it renewed the Lease within the renew deadline."""
        with self._lock:
            return time.monotonic() < self._valid_until

    def run(self, stop: threading.Event) -> None:
        """Tries to take or renew the Lease every `retry` until `stop`; steps down (releasing the Lease) then."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                renewed = self._attempt(started)
            except KubeError as error:
                log.warning("leader lease %s/%s: %s", self.namespace, self.name, error)
                renewed = False
            except Exception:
                # Anything else (a Lease of an unexpected shape) must not end the thread: leadership would lapse.
                log.exception("leader lease %s/%s: the attempt failed", self.namespace, self.name)
                renewed = False
            if renewed:
                with self._lock:
                    self._valid_until = started + self.times.renew_deadline
            self._tell()
            stop.wait(max(0.0, self.times.retry - (time.monotonic() - started)))
        self._step_down()

    def _tell(self) -> None:
        """Calls `on_change` when leadership began or ended (the deadline passing counts as the end)."""
        now = self.leading()
        if now != self._was_leading:
            self._was_leading = now
            log.info("leader lease %s/%s: %s", self.namespace, self.name, "leading" if now else "not leading")
            if self.on_change is not None:
                self.on_change(now)

    def _attempt(self, started: float) -> bool:
        """One try: create the Lease, renew ours, or take over one whose holder stopped renewing."""
        try:
            lease = self._get()
        except KubeNotFound:
            self._write("POST", self._body(None, transitions=0, acquired=True))
            self.holder = self.identity
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""), str(lease["metadata"].get("resourceVersion", "")))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        self.holder = holder
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            return self._update(lease, transitions, acquired=False)
        duration = int(spec.get("leaseDurationSeconds") or self.times.lease_duration)
        if holder and started - self._observed_at < duration:
            return False
        return self._update(lease, transitions + 1, acquired=True)

    def _update(self, lease: dict[str, Any], transitions: int, *, acquired: bool) -> bool:
        """Writes our record over `lease`; False when another writer changed it first (409)."""
        try:
            self._write("PUT", self._body(lease, transitions=transitions, acquired=acquired))
        except KubeConflict:
            return False
        self.holder = self.identity
        return True

    def _body(self, lease: dict[str, Any] | None, *, transitions: int, acquired: bool) -> dict[str, Any]:
        """The Lease with this replica as holder, renewed now (the resourceVersion read guards the write)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = dict((lease or {}).get("spec") or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.times.lease_duration,
            renewTime=now,
            leaseTransitions=transitions,
        )
        if acquired or not spec.get("acquireTime"):
            spec["acquireTime"] = now
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        said = dict(self.annotations()) if self.annotations is not None else {}
        if said:
            metadata["annotations"] = said
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _step_down(self) -> None:
        """At shutdown: give the Lease up at once (holder emptied), so another replica need not wait it out."""
        with self._lock:
            was = time.monotonic() < self._valid_until
            self._valid_until = 0.0
        self._tell()
        if not was:
            return
        try:
            lease = self._get()
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(lease, transitions=int(lease["spec"].get("leaseTransitions") or 0), acquired=False)
                body["spec"]["holderIdentity"] = ""
                body["spec"]["leaseDurationSeconds"] = 1
                self._write("PUT", body)
        except KubeError as error:
            log.warning("leader lease %s/%s not released: %s", self.namespace, self.name, error)

    def _path(self, named: bool) -> str:
        """The Lease's (or the collection's) path."""
        base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases"
        return f"{base}/{quote(self.name, safe='')}" if named else base

    def _get(self) -> dict[str, Any]:
        """The Lease as stored; `KubeNotFound` when there is none."""
        call = by_path(self.kube.api, "GET", self._path(True))
        return request(
            self.kube, call, what=f"get leases in namespace {self.namespace}", _request_timeout=self.times.request
        )

    def _write(self, method: str, body: dict[str, Any]) -> None:
        """Creates (POST) or replaces (PUT, guarded by resourceVersion) the Lease."""
        verb = "create" if method == "POST" else "update"
        call = by_path(self.kube.api, method, self._path(method == "PUT"), body)
        request(
            self.kube, call, what=f"{verb} leases in namespace {self.namespace}", _request_timeout=self.times.request
        )
