"""PURE: a Helm release's manifest without the objects a take-over took, and Helm's payload
written as Helm's Secret driver writes it (read back by shipway's own reader)."""

from __future__ import annotations

from shipway.backends.kubernetes.helm import decode_payload
from shipway.backends.kubernetes.helm_records import encode_payload, manifest_keys, without

MANIFEST = """---
# Source: demo/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-config
data:
  message: "---"
---
# Source: demo/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: shop
---
# Source: demo/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
"""


def test_a_manifest_lists_its_objects_by_key() -> None:
    assert manifest_keys(MANIFEST) == ["ConfigMap/shop-config", "Service/shop", "Deployment/shop"]


def test_the_taken_objects_leave_the_manifest_and_the_rest_stays_as_written() -> None:
    left = without(MANIFEST, {"Deployment/shop", "ConfigMap/shop-config"})
    assert manifest_keys(left) == ["Service/shop"]
    assert "# Source: demo/templates/service.yaml" in left
    assert without(MANIFEST, ["Deployment/shop", "Service/shop", "ConfigMap/shop-config"]) == ""


def test_a_record_is_written_as_helm_writes_it() -> None:
    doc = {"name": "shop", "version": 3, "info": {"status": "superseded"}, "manifest": MANIFEST}
    assert decode_payload(encode_payload(doc)) == doc
