"""Which hami-place webhook Service the plugin asks first: `defrag status -n NS` asks the server of NS before any
other install's."""

from __future__ import annotations

from kubectl_hami_place.kube.cluster_reads import WebhookService, asked_order


def test_the_services_of_the_preferred_namespace_are_asked_first_the_rest_as_listed() -> None:
    listed = [
        WebhookService("default", "a-webhook", "8083"),
        WebhookService("ml", "b-webhook", "8083"),
        WebhookService("kube-system", "c-webhook", "8083"),
        WebhookService("ml", "d-webhook", "8083"),
    ]
    assert [s.name for s in asked_order(listed, "ml")] == ["b-webhook", "d-webhook", "a-webhook", "c-webhook"]
    assert asked_order(listed, None) == listed
    assert asked_order(listed, "other") == listed
