"""HAMi's device config for the life of the server: read at start, then again every `--hami-config-reread` seconds
(one GET, or one LIST by name), so that a change of the ConfigMap, or a start while the API server could not be
asked, does not leave the start's config in force until a restart. A read that cannot ask the API server keeps the
config read before."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.kube.hami_config import HamiConfigInForce
from webhook.settings import DEFAULTS

log = logging.getLogger(__name__)


class FollowedHamiConfig:
    """The config in force, and `on_change` told of every new one (after the first, which `refresh` returns)."""

    def __init__(self, read: Callable[[], HamiConfigInForce], every: float = DEFAULTS.hami_config_reread) -> None:
        self._read = read
        self._every = every
        self.on_change: Callable[[HamiConfig], None] = lambda _config: None
        self.current: HamiConfigInForce | None = None

    def refresh(self) -> HamiConfig:
        """Read it again; a new config goes to `on_change`; one that could not be read leaves the last one seen."""
        found = self._read()
        current = self.current
        if current is not None and found.unreadable and not current.unreadable:
            log.warning("%s; keeping the config read from %s", found.notice, current.source or "HAMi's defaults")
            return current.config
        self.current = found
        if current is not None and (found.config, found.source) == (current.config, current.source):
            return found.config
        if found.notice:
            log.warning("%s", found.notice)
        else:
            log.info("HAMi's device config in force: %s", found.source)
        if current is not None:
            self.on_change(found.config)
        return found.config

    def run(self, stop: threading.Event) -> None:
        """Re-read every `every` seconds until stop is set; never raises."""
        while not stop.wait(self._every):
            try:
                self.refresh()
            except Exception:
                log.exception("re-reading HAMi's device config failed")
