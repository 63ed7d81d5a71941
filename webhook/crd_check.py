"""Whether the installed HamiPodPlacement CRD keeps what this server writes: read at start and every `every` seconds.

A CRD the chart did not install (`crds.install=false`) can be older than the server, and the API server then drops
the newer fields silently. A gap is logged when it appears or changes, and counted in
`hami_place_crd_fields_pruned` (NaN while the CRD could not be read), which the chart's PrometheusRule alerts on.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Gauge

from kubectl_hami_place.core.crd_schema import CRD_NAME, missing_fields
from kubectl_hami_place.kube.errors import KubeError

log = logging.getLogger(__name__)

CHECK_EVERY = 600.0


class CrdCheck:
    """Reads the CRD through `read`, sets `gauge` to the number of fields it would drop, says what changed."""

    def __init__(self, read: Callable[[], Mapping[str, Any]], gauge: Gauge, every: float = CHECK_EVERY) -> None:
        self._read = read
        self._gauge = gauge
        self._every = every
        self._said = ""
        gauge.set(math.nan)

    def check(self) -> list[str] | None:
        """The fields the installed CRD drops, None when it could not be read."""
        try:
            crd = self._read()
        except KubeError as error:
            self._gauge.set(math.nan)
            self._say(
                logging.WARNING,
                f"cannot check that the installed CRD {CRD_NAME} keeps what this server writes: {error}; "
                f"grant get on customresourcedefinitions/{CRD_NAME} (the chart's ClusterRole does)",
            )
            return None
        gaps = missing_fields(crd)
        self._gauge.set(len(gaps))
        if gaps:
            self._say(
                logging.WARNING,
                f"the installed CRD {CRD_NAME} drops {', '.join(gaps)}, which this server writes: the CRD is older "
                "than the server (applied apart from the chart, crds.install=false); apply this release's "
                "hamipodplacement-crd.yaml",
            )
        elif self._said:
            self._say(logging.INFO, f"the installed CRD {CRD_NAME} keeps every field this server writes")
        return gaps

    def run(self, stop: threading.Event) -> None:
        """Check now, then every `every` seconds until stop is set; never raises."""
        while True:
            try:
                self.check()
            except Exception:
                log.exception("checking the installed CRD %s failed", CRD_NAME)
            if stop.wait(self._every):
                return

    def _say(self, level: int, message: str) -> None:
        """Log the message once, until another one replaces it."""
        if message != self._said:
            log.log(level, "%s", message)
            self._said = message
