"""Every example of docs/guides/testing.md runs in the suite.

Each fenced code block of the guide (Python, and the text of a failure)
appears verbatim in a file of ``tests/userproject/``, the small user
project whose tests ``tests/e2e/test_userproject.py`` runs: the guide's
examples are that project's code and tests, so an example that stops
working fails there, and one edited here without the project fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "testing.md"
USERPROJECT = ROOT / "tests" / "userproject"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def code_blocks(page: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block, its text ending with its last newline."""
    return [(match[1], match[2]) for match in FENCE.finditer(page)]


def project_files() -> dict[str, str]:
    return {
        str(path.relative_to(USERPROJECT)): path.read_text()
        for path in sorted(USERPROJECT.rglob("*"))
        if path.suffix in {".py", ".txt"} and "__pycache__" not in path.parts
    }


def test_the_block_reader_reads_blocks() -> None:
    page = "Text\n\n```python\nx = 1\n\ny = 2\n```\n\n```\nplain\n```\n"
    assert code_blocks(page) == [("python", "x = 1\n\ny = 2\n"), ("", "plain\n")]


def test_every_code_block_of_the_testing_guide_is_a_file_of_the_user_project() -> None:
    blocks = code_blocks(GUIDE.read_text())
    files = project_files()
    assert len(blocks) >= 6, "the guide's examples were not found: has its format changed?"
    missing = [
        f"```{language}\n{text}```"
        for language, text in blocks
        if not any(text in content for content in files.values())
    ]
    assert not missing, (
        "These blocks of docs/guides/testing.md appear in no file of tests/userproject/, "
        "which the suite runs (tests/e2e/test_userproject.py): put each in the project's "
        "code or tests (an expected output in a .txt file that a test compares), "
        "or fix it to match:\n\n" + "\n\n".join(missing)
    )
