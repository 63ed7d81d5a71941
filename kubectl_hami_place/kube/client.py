"""The connection to the API server, and the one place where client exceptions become typed `KubeError`s.

Every adapter call goes through `request`, which returns the response as the plain JSON dict the API server sent
(the shape the core parses), so no generated model class leaks past this package.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import ConfigNode, KubeConfigLoader

from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.yaml_doc import load_yaml
from kubectl_hami_place.kube.errors import (
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTypeMissing,
    KubeUnauthorized,
    KubeUnreachable,
    PathError,
)
from kubectl_hami_place.kube.list_body import READ_BYTES, decoded_body, item_batches

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# (connect, read) seconds: a CLI must answer promptly even when the server is gone.
# The connection type the server names when it hands one to the adapters; it imports no kubernetes module itself.
ApiClient = client.ApiClient
DEFAULT_TIMEOUT = (5.0, 30.0)
DEFAULT_KUBECONFIG = Path("~/.kube/config")
KUBECONFIG_SECTIONS = ("clusters", "contexts", "users")
# The key of each section's entry that holds its settings, as a mapping.
KUBECONFIG_BODIES = {"clusters": "cluster", "contexts": "context", "users": "user"}
# Control characters (C0, DEL, C1): none belongs in a token, and a line break inside one would end its header.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# libyaml's loader where PyYAML was built with it (its wheels are), else the pure-Python one, which reads the same.
KUBECONFIG_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Kube:
    """A connected API client plus what the user's context says: the default namespace and where the server is."""

    api: client.ApiClient
    namespace: str
    server: str
    context: str | None

    def core(self) -> client.CoreV1Api:
        """Pods, nodes, services, evictions."""
        return client.CoreV1Api(self.api)

    def apps(self) -> client.AppsV1Api:
        """Deployments, ReplicaSets, StatefulSets."""
        return client.AppsV1Api(self.api)

    def batch(self) -> client.BatchV1Api:
        """Jobs."""
        return client.BatchV1Api(self.api)

    def policy(self) -> client.PolicyV1Api:
        """PodDisruptionBudgets."""
        return client.PolicyV1Api(self.api)

    def custom(self) -> client.CustomObjectsApi:
        """HamiPodPlacements."""
        return client.CustomObjectsApi(self.api)

    def coordination(self) -> client.CoordinationV1Api:
        """Leases."""
        return client.CoordinationV1Api(self.api)


class CheckedApiClient(client.ApiClient):
    """The generated client, refusing a path parameter that is not one segment: a name never carries `/` and is
    never `.` or `..`, so a forged one cannot turn a GET of an object into a GET of another path."""

    def param_serialize(
        self, method: str, resource_path: str, path_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        for value in (path_params or {}).values():
            path_segment(value)
        return super().param_serialize(method, resource_path, path_params, *args, **kwargs)


def path_segment(value: object) -> str:
    """The value as one path segment, quoted; PathError when it carries `/`, is empty, or is `.` or `..`."""
    text = str(value)
    if not text or "/" in text or text in (".", "..") or not text.isascii():
        raise PathError(f"refused to put {text[:80]!r} in an API path: not a Kubernetes name")
    return quote(text, safe="")


def checked_path(path: str) -> str:
    """The path of a `by_path` call, refused when a segment steps up or in place (`..`, `.`) or is an encoded `/`."""
    segments = path.split("?", 1)[0].split("/")
    if any(segment in (".", "..") for segment in segments) or "%2f" in path.lower():
        raise PathError(f"refused the API path {path[:120]!r}: it is not a plain path")
    return path


# Query parameters by the Python names the generated API methods give them.
QUERY_NAMES = {
    "watch": "watch",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "limit": "limit",
    "_continue": "continue",
}


def by_path(
    api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str | None = None
) -> Callable[..., Any]:
    """One API call by its path, called as a generated API method is (query by Python name, _request_timeout; the
    urllib3 response, unread; `content_type` for a patch): through the client's REST layer, so its pool, credentials
    and any deadline set there, without the generated CoreV1Api, whose import costs ~22 MiB of RSS for the few core
    calls the webhook makes."""
    path = checked_path(path)

    def call(*, _preload_content: bool = False, _request_timeout: Any = None, **query: Any) -> Any:
        headers = {**api.default_headers, "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        for auth in api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        params = urlencode({QUERY_NAMES[key]: _query_value(value) for key, value in query.items()})
        url = f"{api.configuration.host}{path}" + (f"?{params}" if params else "")
        reply = api.rest_client.request(method, url, headers=headers, body=body, _request_timeout=_request_timeout)
        if not 200 <= reply.status <= 299:
            reply.read()
            raise ApiException.from_response(http_resp=reply, body=None, data=None)
        return reply.response

    return call


def _query_value(value: object) -> object:
    """Booleans as the API server's examples write them."""
    return ("true" if value else "false") if isinstance(value, bool) else value


def connect(kubeconfig: str | None = None, context: str | None = None, *, impersonate: str | None = None) -> Kube:
    """Loads the kubeconfig like kubectl (`--kubeconfig`, else `KUBECONFIG`, else ~/.kube/config), else in-cluster.

    `impersonate` acts as that user (kubectl's `--as`: the API server checks that we may impersonate, then
    authorizes every request as that user).
    """
    kube = _connect(kubeconfig, context)
    if impersonate:
        kube.api.set_default_header("Impersonate-User", impersonate)
    return kube


def _connect(kubeconfig: str | None, context: str | None) -> Kube:
    """The connection the kubeconfig (or the pod's service account) describes."""
    configuration = client.Configuration()
    configuration.retries = 1
    # An empty KUBECONFIG, --kubeconfig or --context is unset, as kubectl reads them (the client library took an
    # empty KUBECONFIG for its default file when it was imported).
    explicit = kubeconfig or os.environ.get("KUBECONFIG") or None
    default_file = DEFAULT_KUBECONFIG.expanduser()
    if not explicit and os.environ.get("KUBERNETES_SERVICE_HOST") and not _exists(default_file):
        return _connect_in_cluster(configuration)
    where = explicit or str(default_file)
    # Only KUBECONFIG is a list: kubectl reads `--kubeconfig a:b` as the one file `a:b`.
    documents = _documents(where, listed=explicit is not None and not kubeconfig)
    first = documents[0][0]
    sections, current = _merged(documents)
    selected = context or current
    if not isinstance(selected, str):
        raise KubeConfigError(
            f"cannot use kubeconfig {where}: it sets no current-context; name a context with --context"
            if selected is None
            else f"cannot use kubeconfig {where}: its current-context must be a context's name"
        )
    if selected not in sections["contexts"]:
        # The client library says "Expected object with name X in <file>/contexts list".
        raise KubeConfigError(
            f"cannot use kubeconfig {where}: it has no context {selected!r} (its contexts: "
            f"{_listed(sections['contexts'])})"
        )
    _check_context_names(where, selected, sections)
    merged = ConfigNode(first, {section: list(entries.values()) for section, entries in sections.items()}, first)
    try:
        loader = KubeConfigLoader(config_dict=merged, active_context=selected, config_base_path=None)
        chosen = loader.current_context
        cluster = chosen["context"]["cluster"]
        server = sections["clusters"][cluster].value["cluster"].get("server")
        if not server:
            # The client library leaves the host empty: "cannot reach the API server at : No host specified."
            raise KubeConfigError(
                f"cannot use kubeconfig {where}: its cluster {cluster!r} has no server; "
                "add `server: https://HOST:PORT` to it"
            )
        if not isinstance(server, str):
            raise KubeConfigError(
                f"cannot use kubeconfig {where}: its cluster {cluster!r} has a server that is not text; "
                "write it as `server: https://HOST:PORT`"
            )
        with _logged_failures() as failures:
            loader.load_and_set(configuration)
        if failures:
            # kubectl stops here too ("getting credentials: exec: ..."); going on would only say Unauthorized.
            raise KubeConfigError(
                f"cannot use kubeconfig {where}: its exec credential plugin failed: {_one_line(failures[-1])}"
            )
    except ConfigException as exc:
        raise KubeConfigError(f"cannot use kubeconfig {where}: {_one_line(str(exc))}") from exc
    except (OSError, ValueError) as exc:
        raise KubeConfigError(f"cannot read kubeconfig {where}: {_one_line(str(exc))}") from exc
    except (TypeError, AttributeError, KeyError) as exc:
        # The client indexes the document as a mapping of lists of mappings; anything else fails inside it.
        raise KubeConfigError(f"cannot read kubeconfig {where}: it is not a kubeconfig (a YAML mapping)") from exc
    user = chosen["context"].get("user")
    _trim_token(configuration, f"cannot use kubeconfig {where}: the token of its user {user!r}")
    namespace = chosen["context"].get("namespace") or "default"
    if not isinstance(namespace, str):
        raise KubeConfigError(f"cannot use kubeconfig {where}: its context's namespace {namespace!r} is not text")
    return Kube(api=CheckedApiClient(configuration), namespace=namespace, server=configuration.host, context=selected)


def _listed(entries: dict[str, ConfigNode]) -> str:
    """A kubeconfig section's names for an error line, each and all cut: a file may hold thousands."""
    return clip(", ".join(clip(name) for name in entries) or "none", 200)


def _check_context_names(where: str, selected: str, sections: dict[str, dict[str, ConfigNode]]) -> None:
    """The context's cluster and user are names, and its cluster is there: the client library printed a list's
    internal object for its name, or only that a cluster of that name was expected."""
    settings = sections["contexts"][selected].value.get("context")
    if not isinstance(settings, dict):
        return
    for key in ("cluster", "user"):
        if key in settings and not isinstance(settings[key], str):
            raise KubeConfigError(
                f"cannot use kubeconfig {where}: its context {selected!r} must give its {key} as a name, `{key}: NAME`"
            )
    cluster = settings.get("cluster")
    if cluster is not None and cluster not in sections["clusters"]:
        raise KubeConfigError(
            f"cannot use kubeconfig {where}: its context {selected!r} names cluster {clip(cluster)!r}, which it does "
            f"not have (its clusters: {_listed(sections['clusters'])})"
        )


def _exists(file: Path) -> bool:
    """Whether the file is there; a path that cannot be looked up (a name too long, a directory not searchable) is
    the user's to fix, in one line."""
    try:
        return file.exists()
    except OSError as exc:
        raise KubeConfigError(f"cannot read kubeconfig {file}: {exc.strerror or exc}") from exc


def _documents(where: str, *, listed: bool) -> list[tuple[str, Any]]:
    """Each file of `where` (a KUBECONFIG list skips a missing one, as kubectl does) as its path and its document,
    read once by libyaml (the client library's pure-Python parse took 2 s a pass on a 4 MB kubeconfig) and refused
    when its aliases expand it without bound: the client library printed such a document out whole and hung."""
    documents = []
    for path in filter(None, where.split(os.pathsep) if listed else [where]):
        file = os.path.expanduser(path)
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: it is not UTF-8 text") from exc
        try:
            documents.append((file, load_yaml(text, KUBECONFIG_LOADER)))
        except yaml.YAMLError as exc:
            # libyaml names the text it read, not the file.
            reason = _one_line(str(exc)).replace('"<unicode string>"', f'"{path}"')
            problem = reason if isinstance(exc, yaml.constructor.ConstructorError) else f"not YAML ({reason})"
            raise KubeConfigError(f"cannot read kubeconfig {path}: {problem}") from exc
        except RecursionError as exc:
            # The pure-Python loader recurses where libyaml stops at a nesting depth of its own.
            raise KubeConfigError(f"cannot read kubeconfig {path}: not YAML (nested too deep)") from exc
    if not documents:
        # The client library calls a missing file "Invalid kube-config file. No configuration found."
        raise KubeConfigError(f"cannot read kubeconfig {where}: no such file")
    return documents


def _merged(documents: list[tuple[str, Any]]) -> tuple[dict[str, dict[str, ConfigNode]], object]:
    """The files' clusters, contexts and users by name, and their current-context, as kubectl merges them: the first
    file to set one wins (the client library let the last current-context win: another cluster than kubectl's). Each
    entry keeps its file, for a relative certificate or token file, and is labelled by its name, not by its contents
    as the client library did, which put a user's token in an error."""
    sections: dict[str, dict[str, ConfigNode]] = {section: {} for section in KUBECONFIG_SECTIONS}
    current = None
    if all(document is None for _, document in documents):
        raise KubeConfigError(f"cannot read kubeconfig {documents[0][0]}: it is empty")
    for file, document in documents:
        if document is None:
            continue  # an empty file (or one of comments) in a KUBECONFIG list sets nothing, as kubectl reads it
        if not isinstance(document, dict):
            raise KubeConfigError(f"cannot read kubeconfig {file}: it is not a kubeconfig (a YAML mapping)")
        for section, entries in sections.items():
            listed = document.get(section) or []
            if not isinstance(listed, list) or not all(
                isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in listed
            ):
                raise KubeConfigError(f"cannot read kubeconfig {file}: its {section} must be a list of named mappings")
            body = KUBECONFIG_BODIES[section]
            for entry in listed:
                if entry.get(body) is not None and not isinstance(entry[body], dict):
                    # The client library indexed it as a mapping and failed inside, on no line of the file.
                    raise KubeConfigError(
                        f"cannot read kubeconfig {file}: its {body} {clip(entry['name'])!r} must hold a mapping "
                        f"under `{body}:`"
                    )
                if entry["name"] not in entries:
                    entries[entry["name"]] = ConfigNode(f"{file}/{section}[name={entry['name']}]", entry, file)
        current = current or document.get("current-context")
    return sections, current


def _trim_token(configuration: client.Configuration, whose: str) -> None:
    """Drops the whitespace around the bearer token, now and at each refresh, as kubectl does (`echo $TOKEN > file`
    ends it in a newline, which urllib3 refused as a header, printing the token); one it holds inside is refused,
    without the token."""
    refresh: Callable[[client.Configuration], None] | None = configuration.refresh_api_key_hook
    if refresh is not None:

        def trimmed(refreshing: client.Configuration) -> None:
            refresh(refreshing)
            _trim_token_once(refreshing, whose)

        configuration.refresh_api_key_hook = trimmed  # type: ignore[assignment]  # typed as its default, None
    _trim_token_once(configuration, whose)


def _trim_token_once(configuration: client.Configuration, whose: str) -> None:
    """The Authorization value the client library set, its credential stripped; KubeConfigError on a control
    character inside it."""
    value = configuration.api_key.get("BearerToken")
    if value is None:
        return
    scheme, _, credential = value.partition(" ")
    credential = credential.strip()
    if CONTROL_CHARACTER.search(credential):
        raise KubeConfigError(f"{whose} holds a control character; fix the token in the kubeconfig")
    configuration.api_key["BearerToken"] = f"{scheme} {credential}"


@contextmanager
def _logged_failures() -> Iterator[list[str]]:
    """The errors the client library logs while it loads a kubeconfig: a failed exec credential plugin is only logged
    (`logging.error`), never raised. Collected even where logging is silenced (the plugin's quiet_libraries)."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.module in ("kube_config", "exec_provider"):
                found.append(record.getMessage())

    root = logging.getLogger()
    level = root.level
    handler = Collect(logging.ERROR)
    root.addHandler(handler)
    root.setLevel(min(level, logging.ERROR))
    try:
        yield found
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _connect_in_cluster(configuration: client.Configuration) -> Kube:
    """Inside a pod: the service account's token and namespace."""
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise KubeConfigError(f"cannot use the in-cluster config: {_one_line(str(exc))}") from exc
    try:
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        namespace = "default"
    return Kube(api=CheckedApiClient(configuration), namespace=namespace, server=configuration.host, context=None)


def request(kube: Kube, call: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> dict[str, Any]:
    """Runs one API call and returns the server's JSON body as a dict; `what` says the action for error messages.

    `what` reads like "create hamipodplacements in namespace team-a" so that a 403 can say which permission is missing.
    """
    kwargs.setdefault("_request_timeout", DEFAULT_TIMEOUT)
    try:
        response = call(*args, _preload_content=False, **kwargs)
        data = response.data
    except ApiException as exc:
        raise translate_api_error(exc, kube, what) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise translate_connection_error(exc, kube) from exc
    if not data:
        return {}
    body = decoded_body(data, what)
    return body if isinstance(body, dict) else {"items": body}


def list_batches(
    kube: Kube,
    call: Callable[..., Any],
    *,
    what: str,
    decode: Callable[[bytes], list[dict[str, Any]]] | None = None,
    **kwargs: Any,
) -> Iterator[list[dict[str, Any]]]:
    """The items of one list call, a batch at a time as the body streams in: one request, one consistent snapshot,
    the API server encoding while earlier items are decoded (80 pages of 500 pods each waited a round trip), and
    never the whole list decoded at once; `decode` as for `item_batches`. Errors are `request`'s, raised where the
    next batch would be."""
    kwargs.setdefault("_request_timeout", DEFAULT_TIMEOUT)
    try:
        response = call(_preload_content=False, **kwargs)
        yield from item_batches(response.stream(READ_BYTES, decode_content=True), what, decode)
        response.release_conn()
    except ApiException as exc:
        raise translate_api_error(exc, kube, what) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise translate_connection_error(exc, kube) from exc


NOT_STATUS_CHARS = 200  # an error body that is no Status, such as a proxy's HTML page, is cut to one short line


def translate_connection_error(exc: Exception, kube: Kube) -> KubeUnreachable:
    """Names the server and the transport failure in words, not a urllib3 repr."""
    reason = getattr(exc, "reason", None) or exc
    text = str(reason).lower()
    if "refused" in text:
        why = "connection refused"
    elif "ssl" in text or "certificate" in text:
        why = "TLS handshake failed (" + _one_line(str(reason)).split(": ", 1)[-1][:160] + ")"
    elif "timed out" in text or "timeout" in text:
        why = "timed out"
    elif "name or service not known" in text or "nodename nor servname" in text or "resolution" in text:
        why = "cannot resolve the host name"
    elif "reset" in text or "aborted" in text or "remote end closed" in text:
        why = "the connection was dropped"
    else:
        why = _one_line(str(reason))[:200]
    return KubeUnreachable(f"cannot reach the API server at {kube.server}: {why}")


def api_error_message(exc: ApiException) -> str:
    """The `message` of the API server's Status body, else the HTTP reason."""
    status = _status_body(exc)
    message = status.get("message") if isinstance(status.get("message"), str) else None
    return _one_line(message or str(exc.reason or f"HTTP {exc.status}"))


def api_error_causes(exc: ApiException) -> list[str]:
    """The message of each cause in the Status body's `details.causes` (where a 429 of eviction names its budget)."""
    details = _status_body(exc).get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return []
    return [cause["message"] for cause in causes if isinstance(cause, dict) and isinstance(cause.get("message"), str)]


def translate_api_error(exc: ApiException, kube: Kube, what: str) -> KubeError:
    """Maps an HTTP status to the error family, keeping the server's status, reason and the action tried."""
    message = api_error_message(exc)
    status = _status_body(exc)
    reason = str(status.get("reason", "") or "")
    code = exc.status or 0
    family, cause = _family(code, status, message, server=kube.server, what=what)
    return family(cause, status=code, reason=reason, action=what)


def _family(code: int, status: dict[str, Any], message: str, *, server: str, what: str) -> tuple[type[KubeError], str]:
    """The error class of an HTTP status, and its cause in words."""
    if code == 401:
        return KubeUnauthorized, f"unauthorized by the API server at {server}: {message}"
    if code == 403:
        denied = _is_admission_denial(message)
        return (
            (KubeInvalid, f"refused by the API server: {message}")
            if denied
            else (KubeForbidden, f"forbidden: {message}")
        )
    if code == 404 and status.get("reason") == "NotFound" and _is_missing_resource_type(status):
        return KubeTypeMissing, f"cannot {what}: the API server does not serve this resource type"
    if code == 404:
        return KubeNotFound, f"not found: {message}"
    if code == 409:
        return KubeConflict, f"conflict: {message}"
    if code in (400, 422):
        return KubeInvalid, f"refused by the API server: {message}"
    if code == 429:
        return KubeServerError, f"the API server is throttling requests: {message}"
    if code == 0:
        return KubeServerError, f"cannot {what}: {message}"
    return KubeServerError, f"the API server failed to {what} (HTTP {code}): {message}"


def _status_body(exc: ApiException) -> dict[str, Any]:
    """Parses the Status body the API server puts in every error response; a body that is not JSON (a proxy's
    error page) is its message, cut to its first NOT_STATUS_CHARS characters."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {"message": _one_line(body)[:NOT_STATUS_CHARS]}
    return parsed if isinstance(parsed, dict) else {}


def _is_missing_resource_type(status: dict[str, Any]) -> bool:
    """A 404 whose Status names no object is the server saying the resource type is not served (a CRD missing)."""
    details = status.get("details") or {}
    return not details.get("name") or status.get("message") == "the server could not find the requested resource"


def _is_admission_denial(message: str) -> bool:
    """An admission webhook's or policy's denial comes back as 403 but is about the object, not RBAC."""
    return "admission webhook" in message or "denied the request" in message or "ValidatingAdmissionPolicy" in message


def _one_line(text: str) -> str:
    """Collapses a multi-line message into one line."""
    return " ".join(text.split())
