"""The programs of the README and of the docs run, and print what the page says.

The pages are README.md and every docs/**/*.md. Markers (HTML comments, invisible
once rendered), each on the line right before a fence:

* `<!-- runnable -->` before a ```python block: a complete program. The test
  writes it to a temp folder and runs it there with this interpreter (60 s at
  most), stdout and stderr together and unbuffered, as a terminal shows them;
  then runs it again in the same folder, as a reader who runs it twice would, and
  the second run must print the same.
* `<!-- output -->` before the next block after a runnable one: everything that
  program prints, compared line by line. Every runnable block has one.
* `<!-- file: NAME -->` before a block: a file the reader saves as NAME (a module
  a runnable program of the same page imports, say). The test writes every file
  of a page into the folder before running that page's programs; a Python file
  must import cleanly, and files of one name say the same on every page.

Any other ```python block must say plainly, in the paragraph before it, that it
is a fragment. Shell blocks are commands for the reader and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUN_S = 60
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(runnable|output|file:\s*(\S+))\s*-->$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "runnable", "output", "file" or None
    before: str  # the paragraph of prose just before the block (and its marker)
    name: str | None = None  # a file block's file name


@dataclass(frozen=True)
class Program:
    block: Block
    output: Block | None


@dataclass(frozen=True)
class Page:
    path: str  # relative to the repository, e.g. "docs/executions.md"
    blocks: list[Block]

    @property
    def files(self) -> list[Block]:
        return [b for b in self.blocks if b.marker == "file"]


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, with its marker and the prose before it."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = i - 1
        marker = MARKER.match(lines[above].strip()) if above >= 0 else None
        if marker is not None:
            above -= 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        start = above
        while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith("```"):
            start -= 1
        kind = None if marker is None else "file" if marker[2] else marker[1]
        found.append(Block(i + 1, opening[1], "\n".join(lines[i + 1:end]) + "\n", kind,
                           " ".join(lines[start:above + 1]) if above >= 0 else "",
                           marker[2] if marker else None))
        i = end + 1
    return found


def programs(found: list[Block]) -> list[Program]:
    """The runnable blocks, each with its output block; raises on a marker out of place."""
    out: list[Program] = []
    for n, block in enumerate(found):
        if block.marker == "runnable":
            if block.lang != "python":
                raise ValueError(f"line {block.line}: only python blocks are runnable")
            after = found[n + 1] if n + 1 < len(found) else None
            if after is None or after.marker != "output":
                raise ValueError(f"line {block.line}: a runnable block needs an "
                                 "<!-- output --> block after it")
            out.append(Program(block, after))
        elif block.marker == "output" and (n == 0 or found[n - 1].marker != "runnable"):
            raise ValueError(f"line {block.line}: an output block must follow a runnable one")
    return out


def unmarked_python(found: list[Block]) -> list[Block]:
    """Python blocks that are neither runnable, nor a file, nor said to be a fragment."""
    return [b for b in found if b.lang == "python" and b.marker not in ("runnable", "file")
            and "fragment" not in b.before.lower()]


def run(code: str, where: Path) -> subprocess.CompletedProcess[str]:
    (where / "program.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONUNBUFFERED"] = "1"  # print() and the log lines in the order a terminal shows
    return subprocess.run([sys.executable, "program.py"], cwd=where, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_S,
                          check=False)


def page_paths() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


PAGES = [Page(str(p.relative_to(ROOT)), blocks(p.read_text(encoding="utf-8")))
         for p in page_paths()]
PROGRAMS = [(page, program) for page in PAGES for program in programs(page.blocks)]
FILES = [(page, block) for page in PAGES for block in page.files]


# -- the markers themselves ---------------------------------------------------------------

MADE_UP = """\
# A project

Intro.

<!-- runnable -->
```python
print("hi")
```

It prints:

<!-- output -->
```text
hi
```

A fragment of the program above:

```python
print("more")
```

Commands:

```sh
make demo
```

Something else:

```python
x = 1
```

Save this:

<!-- file: app.py -->
```python
X = 1
```
"""


def test_the_markers_find_programs_outputs_files_and_unmarked_blocks() -> None:
    found = blocks(MADE_UP)
    assert [(b.line, b.lang, b.marker) for b in found] == [
        (6, "python", "runnable"), (13, "text", "output"), (19, "python", None),
        (25, "sh", None), (31, "python", None), (38, "python", "file")]
    [program] = programs(found)
    assert program.block.code == 'print("hi")\n'
    assert program.output is not None and program.output.code == "hi\n"
    assert found[2].before == "A fragment of the program above:"
    assert [b.line for b in unmarked_python(found)] == [31]
    assert (found[5].name, found[5].code) == ("app.py", "X = 1\n")


def test_a_runnable_block_without_its_output_is_refused() -> None:
    with pytest.raises(ValueError, match="line 2: a runnable block needs an <!-- output"):
        programs(blocks('<!-- runnable -->\n```python\nprint(1)\n```\n'))
    with pytest.raises(ValueError, match="line 2: an output block must follow"):
        programs(blocks('<!-- output -->\n```text\n1\n```\n'))


# -- the pages ----------------------------------------------------------------------------

def test_the_readme_and_the_docs_have_programs() -> None:
    paths = {page.path for page, _ in PROGRAMS}
    assert "README.md" in paths, "the README has no runnable program: the markers were lost"
    assert any(p.startswith("docs/") for p in paths), "the docs have no runnable program"


def test_every_python_block_is_a_program_a_file_or_says_it_is_a_fragment() -> None:
    assert [f"{page.path}:{b.line}" for page in PAGES for b in unmarked_python(page.blocks)] \
        == []


def test_the_sql_shown_is_portable() -> None:
    """Object SQL runs on PostgreSQL too: no SQLite-only upserts."""
    code = "".join(b.code for page in PAGES for b in page.blocks if b.lang == "python").upper()
    assert "INSERT OR " not in code and "REPLACE INTO" not in code


def test_a_file_says_the_same_on_every_page() -> None:
    by_name: dict[str, set[str]] = {}
    for _, block in FILES:
        assert block.name is not None
        by_name.setdefault(block.name, set()).add(block.code)
    assert {name: len(codes) for name, codes in by_name.items() if len(codes) > 1} == {}


@pytest.mark.parametrize(("page", "block"), FILES,
                         ids=[f"{page.path}:{b.line}" for page, b in FILES])
def test_a_python_file_imports(page: Page, block: Block, tmp_path: Path) -> None:
    assert block.name is not None
    (tmp_path / block.name).write_text(block.code)
    if not block.name.endswith(".py"):
        return
    done = run(f"import {block.name.removesuffix('.py')}\n", tmp_path)
    assert done.returncode == 0, done.stdout
    assert done.stdout == ""


@pytest.mark.timeout(2 * RUN_S + 30)
@pytest.mark.parametrize(("page", "program"), PROGRAMS,
                         ids=[f"{page.path}:{p.block.line}" for page, p in PROGRAMS])
def test_a_runnable_program_prints_what_its_page_shows_twice(page: Page, program: Program,
                                                             tmp_path: Path) -> None:
    """Run twice in one folder: a program must not depend on starting from nothing
    (the data a first run leaves behind is there for the second)."""
    for block in page.files:
        assert block.name is not None
        (tmp_path / block.name).write_text(block.code)
    assert program.output is not None
    for attempt in ("first", "second"):
        try:
            done = run(program.block.code, tmp_path)
        except subprocess.TimeoutExpired as exc:
            printed = exc.output or b""  # bytes on POSIX, even in text mode
            if isinstance(printed, bytes):
                printed = printed.decode(errors="replace")
            pytest.fail(f"the {attempt} run did not end within {RUN_S} s; it printed:\n"
                        f"{printed}")
        assert done.returncode == 0, f"{attempt} run:\n{done.stdout}"
        assert done.stdout.splitlines() == program.output.code.splitlines(), f"{attempt} run"


# -- the site -----------------------------------------------------------------------------

def nav_pages(nav: list[object]) -> list[str]:
    """The page files of an mkdocs nav, in order."""
    found: list[str] = []
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            found += nav_pages(value) if isinstance(value, list) else [str(value)]
    return found


def test_every_docs_page_is_in_the_nav_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages
    assert len(set(listed)) == len(listed)


OP_ROW = re.compile(r"^\| `(\w+)` \| (operator|anyone) \| (.*?) \| .* \|$")


def documented_ops() -> dict[str, tuple[bool, list[str], list[str]]]:
    """The reference's ops table: op -> (operator only, required fields, optional ones)."""
    found: dict[str, tuple[bool, list[str], list[str]]] = {}
    for line in (DOCS / "reference.md").read_text(encoding="utf-8").splitlines():
        row = OP_ROW.match(line)
        if row is None:
            continue
        required, _, optional = row[3].partition("optional ")
        found[row[1]] = (row[2] == "operator", re.findall(r"`(\w+)`", required),
                         re.findall(r"`(\w+)`", optional))
    return found


def test_the_reference_lists_every_ops_message_with_its_fields() -> None:
    from alarmtop.server import wire
    assert documented_ops() == {
        op: (operator, [n for n, f in fields.items() if f.required],
             [n for n, f in fields.items() if not f.required])
        for op, (operator, fields) in wire.OPS.items()}
