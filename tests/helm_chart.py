"""The Helm chart rendered as an install would render it (helm-python-sdk bundles the Helm
library: no helm binary needed), for the tests that check it and the tests that run what it
deploys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "sandboxes"
RELEASE, NAMESPACE = "rel", "sandboxes"


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's manifests for `values` (schema-checked), each with its template's `__path`."""
    import helm_python as helm
    import yaml

    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values)
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs = []
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            assert RELEASE in text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc["__path"] = path
                docs.append(doc)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
