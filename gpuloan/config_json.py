"""`--config-json FILE`: a stack's config as `pulumi config --show-secrets --json` prints it, for validating values
the stack file holds only encrypted (`secure:`) or that an imported Pulumi ESC environment supplies.

The dump maps each key to `{"value": "<string>", "secret": bool, "objectValue": <structured value>}`
(`objectValue` for structured keys). It holds plaintext secrets: gpuloan reads it and never writes or logs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ConfigJsonError(Exception):
    """The file is not a `pulumi config --json` dump; the message says why."""


def load(path: Path | str) -> dict[str, Any]:
    """The dump as a stack file's `config:` map ("gpuloan:budget" -> value)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as err:
        raise ConfigJsonError(f"--config-json {path}: {err.strerror}") from None
    except ValueError as err:
        raise ConfigJsonError(
            f"--config-json {path}: not JSON ({err.msg} at line {err.lineno}); write it with "
            "`pulumi config --show-secrets --json -s STACK`"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigJsonError(f"--config-json {path}: expected the object `pulumi config --json` prints")
    config: dict[str, Any] = {}
    for key, entry in doc.items():
        if not isinstance(entry, dict) or "value" not in entry and "objectValue" not in entry:
            raise ConfigJsonError(f'--config-json {path}: {key}: expected {{"value": ..., "secret": ...}}')
        if entry.get("secret") and "value" not in entry and "objectValue" not in entry:
            raise ConfigJsonError(f"--config-json {path}: {key} is a secret without its value: add --show-secrets")
        if entry.get("secret") and entry.get("value") == "[secret]":
            raise ConfigJsonError(
                f"--config-json {path}: {key} is shown as [secret]: run `pulumi config` with --show-secrets"
            )
        config[key] = entry["objectValue"] if entry.get("objectValue") is not None else entry["value"]
    return config
