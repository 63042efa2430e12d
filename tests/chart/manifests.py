"""Render deploy/helm/openwop-host with a real Helm and validate what comes out (`make chart-test`).

- **Helm** is Helm's own Go SDK (v4) behind `helm-python-sdk` (the `chart` extra): `Chart.render` is
  what `helm template` does, schema check of the values included.
- **Kubernetes objects** are validated by `kubernetes-validate` against the API's schemas in strict
  mode (an unknown field fails), for the oldest Kubernetes the chart declares and the newest known.
- **HTTPRoute and ServiceMonitor** are custom resources: their schemas are the CRDs' own
  openAPIV3Schema as the npm packages `@kubernetes-models/gateway-api` (Gateway API v1.0.0 CRDs) and
  `@kubernetes-models/prometheus-operator` carry them (fetched by `npm pack` into
  .venv/chart-schemas by the Makefile). They are made strict here the way the API server's strict
  field validation treats a structural schema: a field not declared is refused.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "openwop-host"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SCHEMAS = Path(os.environ.get("OPENWOP_CHART_SCHEMAS") or ROOT / ".venv" / "chart-schemas")
RELEASE, NAMESPACE = "demo", "apps"

# (apiVersion, kind) -> (npm tarball name prefix, file inside it)
CRD_SOURCES = {
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): (
        "kubernetes-models-gateway-api-", "package/gateway.networking.k8s.io/v1/HTTPRoute.js"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "kubernetes-models-prometheus-operator-", "package/monitoring.coreos.com/v1/ServiceMonitor.js"),
}  # fmt: skip
_DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta#"


def values_of(path: Path | None) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text()) or {}) if path else {}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart renders (hooks included, as `helm template` prints them)."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    for template in sorted(rendered):
        objects.extend(doc for doc in yaml.safe_load_all(rendered[template]) if doc)
    return objects


def kubernetes_versions() -> list[str]:
    """The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest one known."""
    declared = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    oldest = re.search(r"(\d+\.\d+)", declared)
    assert oldest, declared
    return [oldest.group(1), kubernetes_validate.utils.latest_version()]


def validate(obj: dict[str, Any]) -> None:
    """Raise unless `obj` is valid against its schema, strictly."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in CRD_SOURCES:
        validator = crd_validator(*key)
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            raise AssertionError("; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors))
        return
    for version in kubernetes_versions():
        # SchemaNotFoundError (an unknown kind or apiVersion) propagates: nothing passes unchecked.
        kubernetes_validate.validate(obj, version, strict=True)


@cache
def _definitions() -> dict[str, Any]:
    version = kubernetes_validate.utils.latest_version()
    return kubernetes_validate.utils.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version
    )


def crd_schema_from_package(api_version: str, kind: str) -> dict[str, Any]:
    """The CRD's schema as the npm package holds it (a JSON object literal in its module)."""
    prefix, member = CRD_SOURCES[(api_version, kind)]
    tarballs = sorted(SCHEMAS.glob(f"{prefix}*.tgz"))
    if not tarballs:
        raise FileNotFoundError(f"no {prefix}*.tgz in {SCHEMAS}: `make chart-test` fetches it with npm pack")
    with tarfile.open(tarballs[-1]) as archive:
        source = archive.extractfile(member)
        assert source is not None, member
        text = source.read().decode()
    match = re.search(r"^const schema = (\{.*?^\});$", text, re.S | re.M)
    assert match, f"no schema literal in {member}"
    return json.loads(match.group(1))


def strict(schema: Any) -> Any:
    """OpenAPI v3 `nullable` as JSON Schema, ObjectMeta from the Kubernetes definitions, and every
    object with declared properties closed (additionalProperties false) unless it says otherwise."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) if key not in ("enum", "required") else value for key, value in schema.items()}
    if out.get("$ref") == _OBJECT_META_REF:
        out["$ref"] = f"{_DEFINITIONS_ID}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    if out.pop("nullable", False):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        elif "oneOf" in out:
            out["oneOf"] = [*out["oneOf"], {"type": "null"}]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    schema = strict(copy.deepcopy(crd_schema_from_package(api_version, kind)))
    registry: Registry = Resource.from_contents(_definitions()) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)
