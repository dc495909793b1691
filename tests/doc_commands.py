"""The shell commands shown in README.md and docs/: found in the fenced blocks, one command per entry.

A shell block is a fenced block whose language is bash, sh, shell or console. Inside it a command is a line, with
its backslash continuations and, for a `for`/`while` loop, every line up to its `done`; a `#` outside quotes
starts the comment, kept apart. Used by tests/test_docs_commands.py, which runs or classifies every command."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL_LANGS = {"bash", "sh", "shell", "console"}
# A fence at the start of a line, its info string (language), the body, the closing fence.
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
# A comment saying the command is expected to fail: `# exits 2` (anything else must exit 0).
EXITS = re.compile(r"\bexits (\d+)\b")


@dataclass(frozen=True)
class DocCommand:
    page: str  # the page, relative to the repository: README.md, docs/floor.md
    line: int  # the command's first line in the page (1-based)
    text: str  # the command as written, comment removed, lines of a loop joined by newlines
    comment: str  # the comment after it ("" if none)

    @property
    def expected_exit(self) -> int:
        found = EXITS.search(self.comment)
        return int(found.group(1)) if found else 0

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # the line of the opening fence
    lang: str
    body: str


def doc_pages(repo: Path) -> list[Path]:
    """README.md and every page under docs/ (docs/workloads/ holds manifests, not pages)."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def blocks(repo: Path) -> list[Block]:
    found = []
    for path in doc_pages(repo):
        text = path.read_text()
        for m in FENCE.finditer(text):
            found.append(
                Block(
                    str(path.relative_to(repo)),
                    text.count("\n", 0, m.start()) + 1,
                    m.group(1).strip().split(" ")[0],
                    m.group(2),
                )
            )
    return found


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment): a `#` that starts a word outside quotes starts the comment, as in bash."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\" and quote != "'":
            i += 2  # an escaped character, in double quotes or none
            continue
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
        i += 1
    return line.rstrip(), ""


def commands_of(body: str, page: str = "", first_line: int = 1) -> list[DocCommand]:
    """The commands of one shell block; `first_line` is the page line of the block's first body line."""
    found: list[DocCommand] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        text, comment = split_comment(lines[i].strip())
        start = i
        i += 1
        if not text:
            continue  # a blank or comment-only line
        parts = [text]
        if re.match(r"(for|while|until)\b", text) and not re.search(r"\bdone$", text):
            while i < len(lines):
                more, _ = split_comment(lines[i].strip())
                i += 1
                if more:
                    parts.append(more)
                if re.search(r"(^|;\s*)done$", more):
                    break
        while parts[-1].endswith("\\") and i < len(lines):
            more, more_comment = split_comment(lines[i].strip())
            parts.append(more)
            comment = comment or more_comment
            i += 1
        found.append(DocCommand(page, first_line + start, "\n".join(parts), comment))
    return found


def shell_commands(repo: Path) -> list[DocCommand]:
    return [cmd for b in blocks(repo) if b.lang in SHELL_LANGS for cmd in commands_of(b.body, b.page, b.line + 1)]
