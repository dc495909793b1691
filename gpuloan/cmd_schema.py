"""`gpuloan schema`: print the JSON Schema of the stack config (docs/config.schema.json is generated from it)."""

from __future__ import annotations

import json

from stacks import config


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the gpuloan: config namespace")
    p.set_defaults(func=run)


def stack_file_schema() -> dict:
    """Schema for a whole Pulumi.<env>.yaml: the gpuloan: keys typed, other namespaces (aws:, pulumi:) free."""
    inner = config.json_schema()
    defs = inner.pop("$defs", {})
    props = {f"gpuloan:{k}": v for k, v in inner["properties"].items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuloan stack file (Pulumi.<env>.yaml)",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": props,
                "required": [f"gpuloan:{k}" for k in inner.get("required", [])],
                # Unknown gpuloan: keys are errors (as in `gpuloan validate`); other namespaces are free.
                "propertyNames": {"anyOf": [{"not": {"pattern": "^gpuloan:"}}, {"enum": sorted(props)}]},
                "additionalProperties": True,
            },
            "environment": {},
            "secretsprovider": {"type": "string"},
            "encryptedkey": {"type": "string"},
        },
        "$defs": defs,
    }


def run(args) -> int:
    print(json.dumps(stack_file_schema(), indent=2, sort_keys=True))
    return 0
