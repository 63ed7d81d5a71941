"""Reading HAMi's config from an API server that does not answer (a closed port, really refused): the defaults stand
in for the server's reads, and the scheduler Deployment is not asked for after the ConfigMap's read went unanswered,
which was a second timeout for every command and every re-read."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.kube import hami_config
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.errors import KubeUnreachable


@pytest.mark.parametrize("given", ["", "binpack"])
def test_an_unanswered_read_asks_nothing_more_and_keeps_the_policy_given(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "current-context: c\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    asked: list[str] = []
    monkeypatch.setattr(hami_config, "_policy", lambda *args: asked.append("deployment") or ("spread", ""))
    found = hami_config.read_hami_config(connect(str(kubeconfig)), "", given)
    assert isinstance(found.unanswered, KubeUnreachable) and found.unreadable and asked == []
    assert found.config == HAMI_DEFAULTS.with_policy(given or HAMI_DEFAULTS.gpu_scheduler_policy)
    assert found.notice.startswith("cannot read HAMi's device config (cannot reach the API server at https://")
