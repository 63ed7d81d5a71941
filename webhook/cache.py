"""The one in-memory view of the cluster both listeners share: nodes, HAMi's pods and the placements."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes.client import ApiClient

from kubectl_hami_place.core.names import CLAIM_ANNOTATION
from kubectl_hami_place.kube.watch import Reflector, node_reflector, placement_reflector, pod_reflector


class ClusterCache:
    """Three list+watch reflectors, ready once each has completed a full list."""

    def __init__(self, api_client: ApiClient, scheduler_name: str) -> None:
        self.nodes = node_reflector(api_client)
        self.pods = pod_reflector(api_client, scheduler_name)
        self.placements = placement_reflector(api_client)
        self.changed = threading.Event()
        self._stop = threading.Event()
        for reflector in self.reflectors():
            reflector.add_listener(lambda _kind, _obj: self.changed.set())

    def reflectors(self) -> tuple[Reflector, ...]:
        """Nodes, pods, placements."""
        return (self.nodes, self.pods, self.placements)

    def start(self) -> None:
        """Start listing and watching in daemon threads."""
        for reflector in self.reflectors():
            thread = threading.Thread(
                target=reflector.run, args=(self._stop,), name=f"watch-{reflector.kind}", daemon=True
            )
            thread.start()

    def stop(self) -> None:
        """Stop the watches; their daemon threads end with the process, so shutdown never waits on a read."""
        self._stop.set()
        for reflector in self.reflectors():
            reflector.stop()

    def ready(self) -> bool:
        """True once every kind has been listed in full at least once."""
        return all(reflector.synced.is_set() for reflector in self.reflectors())

    def wait_ready(self, timeout: float) -> bool:
        """Block until ready or timeout; returns readiness."""
        return all(reflector.synced.wait(timeout) for reflector in self.reflectors())

    def last_sync_time(self) -> float | None:
        """The oldest of the three kinds' last sync (epoch seconds): the age of the least fresh part of the view."""
        stamps = [reflector.last_sync for reflector in self.reflectors()]
        if any(stamp is None for stamp in stamps):
            return None
        return min(stamp for stamp in stamps if stamp is not None)

    def nodes_by_name(self) -> dict[str, dict[str, Any]]:
        """Every node, by name."""
        return {str((node.get("metadata") or {}).get("name")): node for node in self.nodes.items()}

    def placements_in(self, namespace: str) -> list[dict[str, Any]]:
        """The placements of one namespace."""
        return [p for p in self.placements.items() if (p.get("metadata") or {}).get("namespace") == namespace]

    def pods_by_claim(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(namespace, claim token) -> the stored pod carrying that token; ties a claim to its pod."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for pod in self.pods.items():
            meta = pod.get("metadata") or {}
            token = (meta.get("annotations") or {}).get(CLAIM_ANNOTATION)
            if token:
                found[(str(meta.get("namespace") or ""), str(token))] = pod
        return found
