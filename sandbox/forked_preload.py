"""Imported once by the fork server of `sandbox.forked`: every module of the plugin and the server, which import most
of theirs inside functions, so that each forked run finds them loaded."""

from __future__ import annotations

import importlib
import pkgutil

import kubectl_hami_place
import webhook

for package in (kubectl_hami_place, webhook):
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        importlib.import_module(module.name)
