"""docs/PYTHON.md's ```python blocks, run in order in one namespace, so the page cannot rot:
the mission's experiment (last token's attention to token 0 per layer, then with key 0 masked),
the row-statistic hooks, the engine, the autograd op and the lab, with the asserts they hold."""
import os
import re

from conftest import SOURCE_DIR


def test_python_page_runs(tmp_path, capsys):
    with open(os.path.join(SOURCE_DIR, "docs", "PYTHON.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    assert len(blocks) >= 5
    os.chdir(tmp_path)  # the lab writes its reports under temporary directories anyway
    namespace = {"__name__": "docs_python"}
    for i, code in enumerate(blocks):
        exec(compile(code, "docs/PYTHON.md block %d" % (i + 1), "exec"), namespace)
    out = capsys.readouterr().out
    assert "layer 0: last token -> token 0" in out
    assert "with key 0 masked" in out
    assert "strongest first-token head" in out and "key 0 masked in every layer" in out


def test_readme_python_snippet_runs():
    """README.md's "From Python" block, run as written from the repository root."""
    import subprocess
    from conftest import BUILD_DIR
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        m = re.search(r"^## From Python\n.*?^```sh\n(.*?)^```", f.read(), re.S | re.M)
    assert m, "README.md has no sh block under '## From Python'"
    script = m.group(1).replace("PYTHONPATH=build/python",
                                "PYTHONPATH=" + os.path.join(BUILD_DIR, "python"))
    r = subprocess.run(["bash", "-euc", script], cwd=SOURCE_DIR, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("[") and float(lines[-1]) >= 0
