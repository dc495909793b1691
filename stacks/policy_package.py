"""The policy function's deployment package: a deterministic zip of policy/ (stdlib + boto3 from the runtime).

Same source, same bytes: entries sorted, fixed timestamps and permissions, no __pycache__ or editor files, so
the Lambda's source hash (and a preview) only changes when the code does.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
HANDLER = "policy.handler.lambda_handler"


def package_files(root: Path = POLICY_DIR) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts and not p.name.startswith("."))


def build_zip(root: Path = POLICY_DIR) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for path in package_files(root):
            info = zipfile.ZipInfo(f"policy/{path.relative_to(root).as_posix()}", date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, whatever machine builds it
            zf.writestr(info, path.read_bytes(), compresslevel=9)
    return buf.getvalue()


def source_code_hash(data: bytes) -> str:
    """base64(sha256), the form Lambda reports as CodeSha256."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()
