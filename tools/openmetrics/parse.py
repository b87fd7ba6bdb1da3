#!/usr/bin/python3
"""Parses an OpenMetrics exposition from standard input with the Prometheus project's own
Python client (its strict OpenMetrics parser) and prints one JSON object per metric family:
{"family", "type", "samples": [{"name", "labels", "value"}]}. Exits non-zero, with the parser's message,
on anything that is not valid OpenMetrics. Debian package: python3-prometheus-client."""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> int:
    text = sys.stdin.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as error:  # the parser raises ValueError and others
        print(f"not valid OpenMetrics: {error}", file=sys.stderr)
        return 1
    for family in families:
        print(json.dumps({
            "family": family.name,
            "type": family.type,
            "samples": [
                {"name": s.name, "labels": s.labels, "value": s.value}
                for s in family.samples
            ],
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
