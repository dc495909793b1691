"""`make data`: download the public job traces the simulator, the benchmarks and the tests read, where the network
allows, and lay them out as they expect (README.md, "Data and prices"):

    <SHARED_DATA>/traces/itp/cluster01.csv ... cluster10.csv, LICENSE   (default SHARED_DATA: ../shared/data)

Origin: Microsoft's ITP GPU-cluster traces published with the ElasticFlow paper (ASPLOS '23), public repository
microsoft/elasticflow-traces at commit 277ed24d, file data/raw-traces.tar.gz, MIT licence. The archive and every file
taken from it are checked against the SHA-256 sums below before anything is written; a mismatch writes nothing.
Prices need no download: the package ships a dated snapshot (docs/prices.md). Stdlib only.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMIT = "277ed24d0e908c31a1c98145819e2e3853d8ac00"
ARCHIVE_URL = f"https://github.com/microsoft/elasticflow-traces/raw/{COMMIT}/data/raw-traces.tar.gz"
ARCHIVE_SHA256 = "67398e1a89245c50ae0881bf997e6cda0c95f9f47980af5bc56d67998965669f"
# What the tests and benchmarks were run on (../shared/data/traces/itp, identical to the archive's files).
TRACE_SHA256 = {
    "cluster01.csv": "27d707f576fce5637f9efec43f610da3d335f36e3c6fd4ded2f5bccfce05974a",
    "cluster02.csv": "7a5849e73aff9f9bc33f87c9bacadf8aab2f3a9e7bc5d70956f5cbf40126526c",
    "cluster03.csv": "282d765c5289ab0ba870f494dd2c67893f9d16d726fdc8a51f13b7412515dbf8",
    "cluster04.csv": "247850e4265f35749e98d15e82a67765301e81272334265f1fe60d65787892a9",
    "cluster05.csv": "1553359ddd673a0ffc531ca10e73ba729dbacbce905ce878dbb8499d2dbed0fb",
    "cluster06.csv": "52c0d9247d1de9b19a8bdafc25137daf6fa04f274ad3a2eb6dac51226ac2362e",
    "cluster07.csv": "d4f46f32e2965c2265b2675c070565a86e40bff45733c828c5767bc0b8c1b318",
    "cluster08.csv": "d60c20d0cd05ddf49fddffabbc784ba6177bbc1a762fc5cf8a0bc9056b084db8",
    "cluster09.csv": "da4047d6f09cc41709ff85937c82e31f6a6791c896d22e241ae9e1dc7f82bcfd",
    "cluster10.csv": "139abea485b52090f5950d0f28d82878169df408e36052ec5c7cd04a3f3fcfa7",
}
EXIT_OK, EXIT_NETWORK, EXIT_BAD_INPUT = 0, 1, 2


class DataError(Exception):
    """The download is not what the sums say (the message names the file), or cannot be read."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def traces_present(folder: Path) -> bool:
    return all(
        (folder / name).is_file() and _sha256((folder / name).read_bytes()) == digest
        for name, digest in TRACE_SHA256.items()
    )


def unpack(archive: bytes) -> dict[str, bytes]:
    """The files to write, every one checked; raises DataError on any mismatch (nothing is written then)."""
    if _sha256(archive) != ARCHIVE_SHA256:
        raise DataError(f"raw-traces.tar.gz: SHA-256 {_sha256(archive)[:16]}..., expected {ARCHIVE_SHA256[:16]}...")
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None and (name in TRACE_SHA256 or name == "LICENSE"):
                files[name] = extracted.read()
    for name, digest in TRACE_SHA256.items():
        if name not in files:
            raise DataError(f"raw-traces.tar.gz has no {name}")
        if _sha256(files[name]) != digest:
            raise DataError(f"{name}: SHA-256 {_sha256(files[name])[:16]}..., expected {digest[:16]}...")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 done (or already there), 1 no network or download "
        "failed, 2 a checksum mismatch. example: make data SHARED_DATA=../data",
    )
    parser.add_argument(
        "--shared-data",
        type=Path,
        default=REPO.parent / "shared" / "data",
        help="the folder to fill (default ../shared/data)",
    )
    parser.add_argument("--url", default=ARCHIVE_URL, help="where to read the archive (default: GitHub, pinned)")
    args = parser.parse_args(argv)
    folder = args.shared_data / "traces" / "itp"
    if traces_present(folder):
        print(f"{folder}: the ten ITP traces are there, checksums match")
        return EXIT_OK
    print(f"downloading {args.url} ...", file=sys.stderr)
    try:
        with urllib.request.urlopen(args.url, timeout=60) as answer:
            archive = answer.read()
    except (OSError, ValueError) as err:
        print(
            f"error: cannot download the traces ({err}); without network, copy them into {folder} by hand "
            '(README.md, "Data and prices")',
            file=sys.stderr,
        )
        return EXIT_NETWORK
    try:
        files = unpack(archive)
    except (DataError, tarfile.TarError) as err:
        print(f"error: {err}; nothing written", file=sys.stderr)
        return EXIT_BAD_INPUT
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(files.items()):
        (folder / name).write_bytes(data)
    print(f"{folder}: wrote {len(files)} files, checksums match")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
