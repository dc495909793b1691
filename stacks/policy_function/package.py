"""The policy function's deployment package: a deterministic zip of policy/ (stdlib + boto3 from the runtime),
with the environment's policy settings as policy/settings.json.

Same source and settings, same bytes: entries sorted, fixed timestamps and permissions, no __pycache__ or editor
files, so the Lambda's source hash (and a preview) only changes when the code or the settings do.

Why the settings travel in the zip and not in an environment variable: Lambda caps a function's environment
variables at 4 KB in total, and the settings of about six pools exceed it (issue 12). A zip holds 50 MB; an SSM
parameter would hold 4 KB (standard) or 8 KB (advanced) and add a call and a permission to every cold start.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
HANDLER = "policy.handler.lambda_handler"
SETTINGS_ENTRY = "policy/settings.json"  # policy/handler.py SETTINGS_FILE reads it


def package_files(root: Path = POLICY_DIR) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts and not p.name.startswith("."))


def build_zip(root: Path = POLICY_DIR, settings_json: str | None = None) -> bytes:
    """The package; with `settings_json` (policy.model.Settings.to_json()) it also carries the settings."""
    entries = {f"policy/{path.relative_to(root).as_posix()}": path.read_bytes() for path in package_files(root)}
    if settings_json is not None:
        entries[SETTINGS_ENTRY] = settings_json.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, whatever machine builds it
            zf.writestr(info, entries[name], compresslevel=9)
    return buf.getvalue()


def source_code_hash(data: bytes) -> str:
    """base64(sha256), the form Lambda reports as CodeSha256."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()
