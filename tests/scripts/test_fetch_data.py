"""`make data` (scripts/fetch_data.py): the public traces, checked against pinned SHA-256 sums before anything is
written (README.md, "Data and prices")."""

from __future__ import annotations

import io
import tarfile

from conftest import SHARED_TRACES, requires_shared_traces

from scripts import fetch_data


@requires_shared_traces
def test_the_pinned_sums_are_those_of_the_traces_the_tests_read():
    assert fetch_data.traces_present(SHARED_TRACES / "itp")


def _archive(tmp_path, files: dict[str, bytes]):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "raw-traces.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


def test_an_archive_that_is_not_the_pinned_one_writes_nothing(tmp_path, capsys):
    bad = _archive(tmp_path, {name: b"job_id,submission_time,duration,num_gpu\n" for name in fetch_data.TRACE_SHA256})
    out = tmp_path / "data"
    assert fetch_data.main(["--shared-data", str(out), "--url", bad.as_uri()]) == fetch_data.EXIT_BAD_INPUT
    assert "raw-traces.tar.gz: SHA-256" in capsys.readouterr().err and not out.exists()


def test_no_network_says_where_to_put_the_files(tmp_path, capsys):
    out = tmp_path / "data"
    assert fetch_data.main(["--shared-data", str(out), "--url", (tmp_path / "nowhere").as_uri()]) == 1
    assert f"copy them into {out / 'traces' / 'itp'} by hand" in capsys.readouterr().err
