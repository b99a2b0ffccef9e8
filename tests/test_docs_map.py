"""The project's own documents stand alone: docs/internals.md maps every module of the runner, and no
code or document cites a design document that is not in this repository."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO

RUNNER = REPO / "runner" / "aiperf_runner"


def _runner_modules() -> list[str]:
    """Every module of the runner as a path under aiperf_runner/ (package inits left out)."""
    return sorted(str(p.relative_to(RUNNER)) for p in RUNNER.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def test_internals_maps_every_module() -> None:
    text = (REPO / "docs" / "internals.md").read_text()
    missing = []
    for module in _runner_modules():
        folder, _, name = module.rpartition("/")
        # Listed either by its path or, inside the block of its package, by its file name.
        if module not in text and not re.search(rf"(?m)^\s+{re.escape(name)}\s", _package_block(text, folder)):
            missing.append(module)
    assert not missing, f"docs/internals.md does not map: {missing}"


def _package_block(text: str, folder: str) -> str:
    """The lines of the module map under the line that names `folder/` (empty: the top level)."""
    lines = text.splitlines()
    if not folder:
        return "\n".join(lines)
    head = folder.split("/")[-1] + "/"
    for i, line in enumerate(lines):
        if line.strip().startswith(head):
            indent = len(line) - len(line.lstrip())
            block = []
            for follow in lines[i + 1:]:
                if follow.strip() and len(follow) - len(follow.lstrip()) <= indent:
                    break
                block.append(follow)
            return "\n".join(block)
    return ""


def test_no_document_outside_the_repository_is_cited() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    # Spelt in pieces, so that this file is checked like every other and does not match itself.
    design, shared = "DES" + "IGN", ".." + "/shared"
    pattern = re.compile(rf"{design}(\.md)? section|{re.escape(shared)}|shared/({design}|recipes/|reference/)")
    cited = [f for f in tracked if f.endswith((".py", ".md", ".html", ".toml", ".sh"))
             and pattern.search((REPO / f).read_text(errors="replace"))]
    assert not cited, f"these cite a document outside the repository: {cited}"
