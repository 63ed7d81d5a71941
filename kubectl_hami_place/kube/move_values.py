"""The values a move hands back (what was checked, who replaces the pod, what was rolled back) apart from the calls
that make them, so the CLI names them without loading the Kubernetes client at startup."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubectl_hami_place.core.check import CardCheck
    from kubectl_hami_place.core.pin_check import Workload
    from kubectl_hami_place.core.selectors import LabelSelector
    from kubectl_hami_place.kube.errors import KubeError

ACK_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Replacement:
    """Who recreates the evicted pod: the selector its replacement matches, the template it is made from."""

    selector: LabelSelector
    source: str
    template: dict[str, Any]
    controlled: bool = True


@dataclass(frozen=True)
class Checked:
    """A placement that passed every check: the object to create, the card checks, the pod placed, and the warnings."""

    namespace: str
    obj: dict[str, Any]
    node: str
    checks: tuple[CardCheck, ...]
    workload: Workload
    evict: str | None
    warnings: tuple[str, ...]


class Stage(StrEnum):
    """The step of a pin-then-evict after which the placement was deleted again."""

    acknowledgement = "acknowledgement"
    eviction = "eviction"


@dataclass(frozen=True)
class RolledBack:
    """The placement deleted again after `stage` failed; `error` when the delete itself failed."""

    namespace: str
    name: str
    stage: Stage
    error: KubeError | None = None
