"""Typed errors of the pure model: every parser raises only these, so callers catch one family.

Each message is one line that says what is wrong and where, ready to show to a user as is.
"""

from __future__ import annotations


class ModelError(ValueError):
    """Base of every error the core raises for bad input; a ValueError so generic handlers still catch it."""


class RegisterError(ModelError):
    """A node's card register (`hami.io/node-nvidia-register`) is missing or cannot be decoded."""


class AllocationError(ModelError):
    """A pod's allocation (`hami.io/vgpu-devices-allocated`) cannot be decoded."""


class CardRefError(ModelError):
    """A card reference (`gpu-N`, `gpu-N/P`, a UUID) is malformed or names no card of the node."""


class SelectorError(ModelError):
    """A label selector is malformed, empty where it must not be, or uses invalid keys or values."""


class RequestError(ModelError):
    """A container's GPU resources (`nvidia.com/gpu`, `gpumem`, ...) are not valid quantities."""


class PlacementError(ModelError):
    """A HamiPodPlacement object or spec is malformed or breaks a rule the schema cannot express."""


class ClusterInfoError(ModelError):
    """A cluster-info document (the webhook's `GET /api/v1/cluster-info` answer) is malformed."""


class MovesDocumentError(ModelError):
    """The controller's moves as a server answered them (`GET /api/v1/defrag/moves`) are malformed."""


def clip(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters, marked with "...": a long value quoted in a message cannot flood its line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
