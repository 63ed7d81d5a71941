"""`hami-place-webhook check`: what `helm test` runs against an installed server (the chart's test Job).

It proves the two listeners answer as the API server and the plugin reach them: a dry-run AdmissionReview POSTed to
`/mutate` over TLS verified with the release's CA gets an allowed response for its own uid, and the API answers
`/readyz` (ready) and `/api/v1/version` (this image's version). One line per check; exit 0 when all pass, 1 when one
fails (its line says why).
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from kubectl_hami_place import __version__

TIMEOUT_SECONDS = 10
# The review's pod: no GPU and no placement, in a namespace no placement names, so nothing is pinned or claimed.
CHECK_NAMESPACE = "hami-place-check"


def review(uid: str) -> dict[str, Any]:
    """A dry-run pod CREATE review, as the API server sends it."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hami-place-check", "namespace": CHECK_NAMESPACE},
        "spec": {"containers": [{"name": "check", "image": "registry.invalid/check:1"}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": CHECK_NAMESPACE,
            "operation": "CREATE",
            "dryRun": True,
            "userInfo": {"username": "hami-place-check"},
            "object": pod,
        },
    }


def _context(ca_file: str | None, ca_data: str | None) -> ssl.SSLContext:
    """TLS verified against the release's CA (a file, or base64 PEM as certs.caBundle holds it)."""
    if ca_data:
        return ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())
    return ssl.create_default_context(cafile=ca_file)


def check_mutate(url: str, context: ssl.SSLContext) -> str:
    """'' when /mutate answers a dry-run review with an allowed response for its uid, else why not."""
    uid = f"hami-place-check-{secrets.token_hex(4)}"
    body = json.dumps(review(uid)).encode()
    call = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(call, timeout=TIMEOUT_SECONDS, context=context) as reply:
        response = _json_object(reply).get("response")
    if not isinstance(response, dict) or response.get("uid") != uid:
        return f"answered without a response for review {uid}"
    if response.get("allowed") is not True:
        return f"did not allow the review: {response.get('status')}"
    return ""


def check_api(url: str) -> str:
    """'' when the API is ready and serves this image's version, else why not."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/readyz", timeout=TIMEOUT_SECONDS) as reply:
        ready = _json_object(reply)
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/version", timeout=TIMEOUT_SECONDS) as reply:
        version = _json_object(reply).get("version")
    if version != __version__:
        return f"serves version {version!r}, this check is {__version__!r}: the release runs another image"
    return "" if ready.get("status") == "ready" else f"not ready: {ready.get('reason')}"


class Unexpected(Exception):
    """An answer this server never sends: another service answers at that URL."""


def _json_object(reply: Any) -> dict[str, Any]:
    """The JSON object an answer holds; `Unexpected`, quoting the answer, for anything else."""
    raw = reply.read()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        quoted = raw[:80].decode(errors="replace")
        raise Unexpected(f"answered {quoted!r}, not the JSON object this server sends: check the URL")
    return answer


def run(
    webhook_url: str | None, api_url: str, ca_file: str | None, ca_data: str | None, say: Callable[[str], None]
) -> int:
    """Each check, one line each; 0 when all passed."""
    checks: list[tuple[str, Callable[[], str]]] = []
    if webhook_url:
        checks.append((f"webhook {webhook_url}", lambda: check_mutate(webhook_url, _context(ca_file, ca_data))))
    checks.append((f"api {api_url}", lambda: check_api(api_url)))
    failed = 0
    for name, check in checks:
        try:
            problem = check()
        except urllib.error.HTTPError as exc:
            problem = f"answered HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
        except Unexpected as exc:
            problem = str(exc)
        except (OSError, ValueError, ssl.SSLError) as exc:
            problem = f"did not answer: {exc}"
        say(f"{name}: {'ok' if not problem else 'FAILED: ' + problem}")
        failed += bool(problem)
    return 1 if failed else 0
