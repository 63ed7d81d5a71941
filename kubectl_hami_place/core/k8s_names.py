"""Kubernetes' name rules (DNS-1123), checked before any name read from a pod, a review or a Lease reaches an API
path: a name that breaks them cannot name a stored object, and may be a path in disguise (`../../api/v1/pods`)."""

from __future__ import annotations

import re
from typing import TypeGuard

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def is_object_name(name: object) -> TypeGuard[str]:
    """A DNS-1123 subdomain, as the API server requires of a pod's, a placement's or a Lease's name (and of a label
    key's prefix)."""
    return isinstance(name, str) and 0 < len(name) <= SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_generate_name(prefix: object) -> TypeGuard[str]:
    """A `generateName` the API server takes: a DNS-1123 subdomain once a trailing `-` is read as a letter (its
    `NameIsDNSSubdomain` with prefix)."""
    if not isinstance(prefix, str) or not prefix:
        return False
    return is_object_name(prefix[:-1] + "a" if prefix.endswith("-") else prefix)


def is_dns_label(name: object) -> TypeGuard[str]:
    """A DNS-1123 label, as the API server requires of a namespace's name and a resource's."""
    return isinstance(name, str) and 0 < len(name) <= LABEL_MAX and _DNS_LABEL.fullmatch(name) is not None


def is_namespace(name: object) -> TypeGuard[str]:
    """A namespace's name the API server takes."""
    return is_dns_label(name)


def is_namespaced_name(namespace: object, name: object) -> bool:
    """A namespace's name and an object name that together can name a namespaced object in an API path."""
    return is_namespace(namespace) and is_object_name(name)
