"""The README's Python example runs as written, from the repository root."""

import contextlib
import io
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_example():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## From Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md's 'From Python' section has no python block"
    return match.group(1)


def test_the_readme_example_runs_and_prints_five_label_names():
    code = readme_example()
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    printed = eval(out.getvalue())  # the example prints a list of lists of names
    assert len(printed) == 1 and len(printed[0]) == 5
    assert all(isinstance(name, str) and "::" in name for name in printed[0]), printed
