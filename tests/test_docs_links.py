"""Every relative link in the project's Markdown points at a file that exists, and every
`#anchor` at a heading of its target (GitHub's heading slugs), so the docs stay navigable as
sections are renamed."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("models/*/README.md"),
     *ROOT.glob("apps/*/README.md")]
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The heading anchors of `path`, a duplicate heading numbered as GitHub does; read once."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def test_slug_follows_github_rules() -> None:
    assert slug("Stage 36 (2026-12-06, shipped): the mean") == (
        "stage-36-2026-12-06-shipped-the-mean"
    )
    assert slug("The model with a blunder check (SearchGuidedPlayer)") == (
        "the-model-with-a-blunder-check-searchguidedplayer"
    )


def test_prose_lines_skip_code_blocks() -> None:
    text = "# Title\n```\n# not a heading\n```\n## Real"
    assert prose_lines(text) == ["# Title", "## Real"]


def broken_links(doc: Path) -> list[str]:
    """The relative links of `doc` whose file or heading does not exist."""
    broken = []
    for line in prose_lines(doc.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            path = (doc.parent / file_part).resolve() if file_part else doc
            if not path.exists():
                broken.append(f"{target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{target}: no such heading")
    return broken


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n## Part two (draft)\n## Part two (draft)\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n[ok](other.md#part-two-draft) [dup](other.md#part-two-draft-1) [self](#doc)\n"
        "[web](https://example.com/x#y)\n[gone](missing.md) [bad](other.md#part-three)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(doc) == ["missing.md: no such file", "other.md#part-three: no such heading"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def _documented_modules() -> list[str]:
    """The project's modules the docs tell a reader to run as ``python -m MODULE``."""
    modules = set()
    for doc in DOCS:
        for name in re.findall(r"python -m ([A-Za-z_][\w.]*)", doc.read_text(encoding="utf-8")):
            if name.split(".")[0] in ("decision", "apps", "benchmarks"):
                modules.add(name)
    return sorted(modules)


@pytest.mark.parametrize("module", _documented_modules())
def test_every_documented_python_m_command_has_an_entry_point(module: str) -> None:
    """``python -m apps.contracts.contractnli`` lost its ``__main__`` guard in a tidy-up and
    then did nothing at all (no CSV, status 0), as docs/contracts.md still told readers to run
    it. Checked without importing: the module runs something when run as a script."""
    path = ROOT.joinpath(*module.split("."))
    source = path / "__main__.py" if path.is_dir() else path.with_suffix(".py")
    assert source.is_file(), f"{module}: no such module"
    assert path.is_dir() or 'if __name__ == "__main__":' in source.read_text(encoding="utf-8")
