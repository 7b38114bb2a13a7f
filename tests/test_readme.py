"""The README's programs run, and print what the README says they print.

Markers in the README (HTML comments, invisible on GitHub), each on the line
right before a fence:

* `<!-- runnable -->` before a ```python block: a complete program. The test
  writes it to a temp folder and runs it there with this interpreter (60 s at
  most), stdout and stderr together and unbuffered, as a terminal shows them;
  then runs it again in the same folder, as a reader who runs it twice would, and
  the second run must print the same.
* `<!-- output -->` before the next block after a runnable one: everything that
  program prints, compared line by line. Every runnable block has one.

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

README = Path(__file__).resolve().parent.parent / "README.md"
RUN_S = 60
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(runnable|output)\s*-->$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "runnable", "output" or None
    before: str  # the paragraph of prose just before the block (and its marker)


@dataclass(frozen=True)
class Program:
    block: Block
    output: Block | None


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
        found.append(Block(i + 1, opening[1], "\n".join(lines[i + 1:end]) + "\n",
                           marker[1] if marker else None,
                           " ".join(lines[start:above + 1]) if above >= 0 else ""))
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
    """Python blocks that are neither runnable nor said to be a fragment."""
    return [b for b in found if b.lang == "python" and b.marker != "runnable"
            and "fragment" not in b.before.lower()]


def run(code: str, where: Path) -> subprocess.CompletedProcess[str]:
    (where / "program.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONUNBUFFERED"] = "1"  # print() and the log lines in the order a terminal shows
    return subprocess.run([sys.executable, "program.py"], cwd=where, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_S,
                          check=False)


README_BLOCKS = blocks(README.read_text())
README_PROGRAMS = programs(README_BLOCKS)


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
"""


def test_the_markers_find_programs_outputs_and_unmarked_blocks() -> None:
    found = blocks(MADE_UP)
    assert [(b.line, b.lang, b.marker) for b in found] == [
        (6, "python", "runnable"), (13, "text", "output"), (19, "python", None),
        (25, "sh", None), (31, "python", None)]
    [program] = programs(found)
    assert program.block.code == 'print("hi")\n'
    assert program.output is not None and program.output.code == "hi\n"
    assert found[2].before == "A fragment of the program above:"
    assert [b.line for b in unmarked_python(found)] == [31]


def test_a_runnable_block_without_its_output_is_refused() -> None:
    with pytest.raises(ValueError, match="line 2: a runnable block needs an <!-- output"):
        programs(blocks('<!-- runnable -->\n```python\nprint(1)\n```\n'))
    with pytest.raises(ValueError, match="line 2: an output block must follow"):
        programs(blocks('<!-- output -->\n```text\n1\n```\n'))


# -- the README ---------------------------------------------------------------------------

def test_every_python_block_is_a_program_or_says_it_is_a_fragment() -> None:
    assert README_PROGRAMS, "the README has no runnable program: the markers were lost"
    assert [b.line for b in unmarked_python(README_BLOCKS)] == []


def test_the_readme_sql_is_portable() -> None:
    """Object SQL runs on PostgreSQL too one day: no SQLite-only upserts."""
    code = "".join(b.code for b in README_BLOCKS if b.lang == "python").upper()
    assert "INSERT OR " not in code and "REPLACE INTO" not in code


@pytest.mark.timeout(2 * RUN_S + 30)
@pytest.mark.parametrize("program", README_PROGRAMS,
                         ids=[f"README.md:{p.block.line}" for p in README_PROGRAMS])
def test_a_runnable_readme_program_prints_what_the_readme_shows_twice(
        program: Program, tmp_path: Path) -> None:
    """Run twice in one folder: a program must not depend on starting from nothing
    (the data a first run leaves behind is there for the second)."""
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
