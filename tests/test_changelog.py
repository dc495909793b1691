"""CHANGELOG.md keeps a dated entry per user-visible change (issue 34, item 5): every entry's title ends with the
date of the commit that added it, so a reader can match an entry to the code of that day."""

from __future__ import annotations

import re

from conftest import REPO


def test_every_changelog_entry_is_dated():
    titles = [line for line in (REPO / "CHANGELOG.md").read_text().splitlines() if line.startswith("### ")]
    undated = [t for t in titles if not re.search(r", \d{4}-\d{2}-\d{2}$", t)]
    assert titles and not undated, undated
