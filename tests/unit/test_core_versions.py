"""Which version a server's Deployment says, and when the plugin warns about the difference."""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.versions import ServerVersion, deployment_version, minor_of, skewed


def deployment(image: str, label: str | None = None, container: str = "webhook") -> dict[str, Any]:
    labels = {"app.kubernetes.io/version": label} if label else {}
    return {
        "metadata": {"namespace": "kube-system", "name": "gd-webhook", "labels": labels},
        "spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}},
    }


def test_a_minor_or_major_apart_is_skewed_a_patch_apart_is_not() -> None:
    assert minor_of("v1.2.3-rc.1") == (1, 2) and minor_of("latest") is None
    assert minor_of("v\u0661.2") is None, "an Arabic-Indic one is no digit of a version"
    assert not skewed("0.1.0", "0.1.7")
    assert skewed("0.1.0", "0.2.0") and skewed("0.1.0", "1.1.0")
    assert not skewed("0.1.0", "main")


def test_the_image_tag_wins_over_the_label_and_a_digest_falls_back_to_the_label() -> None:
    registry = "registry.local:5000/hami-place-webhook"
    assert deployment_version(deployment(f"{registry}:v0.3.1", "0.1.0")) == ServerVersion(
        "0.3.1", f"deployment kube-system/gd-webhook image {registry}:v0.3.1"
    )
    digest = f"{registry}@sha256:{'b' * 64}"
    assert deployment_version(deployment(digest, "0.1.0")) == ServerVersion(
        "0.1.0", "deployment kube-system/gd-webhook label app.kubernetes.io/version"
    )
    # A registry port is not a tag; a tag that is no version says nothing.
    assert deployment_version(deployment(registry)) is None
    assert deployment_version(deployment(f"{registry}:latest", "0.1.0")).version == "0.1.0"  # type: ignore[union-attr]
    assert deployment_version(deployment(f"{registry}:v0.3.1", container="sidecar")) is None
    assert deployment_version({"metadata": None, "spec": []}) is None


def test_the_webhook_container_is_found_beside_others_and_read_by_its_tag_alone() -> None:
    """A sidecar listed first, a pinned digest or a registry-less image must not hide the version the server runs."""
    digest = f"sha256:{'b' * 64}"
    found = {
        "sidecar first": [{"name": "proxy", "image": "envoy:v1.30.0"}, {"name": "webhook", "image": "hp:v0.3.1"}],
        "tag and digest": [{"name": "webhook", "image": f"docker.io/org/hp:v0.3.1@{digest}"}],
    }
    assert {
        why: deployment_version(
            {"metadata": {"namespace": "ns", "name": "gd"}, "spec": {"template": {"spec": {"containers": containers}}}}
        )
        for why, containers in found.items()
    } == {
        "sidecar first": ServerVersion("0.3.1", "deployment ns/gd image hp:v0.3.1"),
        "tag and digest": ServerVersion("0.3.1", f"deployment ns/gd image docker.io/org/hp:v0.3.1@{digest}"),
    }


def test_an_image_without_a_version_tag_falls_back_to_the_label_and_an_empty_label_says_nothing() -> None:
    """An untagged or image-less container (a controller may set its image) is no error; an empty label, no version."""
    label = ServerVersion("0.1.0", "deployment kube-system/gd-webhook label app.kubernetes.io/version")
    assert deployment_version(deployment("hami-place-webhook", "0.1.0")) == label
    image_less = deployment("", "0.1.0")
    del image_less["spec"]["template"]["spec"]["containers"][0]["image"]
    assert deployment_version(image_less) == label
    empty = deployment("hami-place-webhook")
    empty["metadata"]["labels"] = {"app.kubernetes.io/version": ""}
    assert deployment_version(empty) is None
