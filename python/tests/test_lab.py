"""attnlab.analyze / stream / generate / experiment return the CLI's JSON reports as dicts.

Each is compared with the same command run as a separate `attnlab` process (the CLI this build
made): the same report, field by field, except the run's own timings and paths."""
import json
import os
import subprocess

import numpy as np
import pytest

import attnlab

VOLATILE = {"seconds", "peak_rss_bytes", "decode_tokens_per_s", "prefill_seconds", "tokens_per_s",
            "html", "report", "report_json", "out", "wall_seconds", "path", "files"}


def strip(x):
    """The report without timings and paths (which differ between two runs)."""
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in VOLATILE and "seconds" not in k
                and "per_s" not in k and "rss" not in k}
    if isinstance(x, list):
        return [strip(v) for v in x]
    if isinstance(x, str) and "tokens/s" in x:
        return "(a sentence with a speed)"
    return x


def cli(attnlab_bin, *args):
    r = subprocess.run([attnlab_bin, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_analyze_is_the_cli_report(attnlab_bin, tmp_path):
    rep = attnlab.analyze(max_tokens=256, out=tmp_path / "py")
    cli(attnlab_bin, "analyze", "--max-tokens", 256, "--out", tmp_path / "cli")
    with open(tmp_path / "cli" / "report.json") as f:
        want = json.load(f)
    assert rep["format"] == "attnlab-analysis"
    assert rep["html"] == str(tmp_path / "py" / "report.html") and os.path.exists(rep["html"])
    assert strip(rep) == strip(want)


def test_stream_compare_and_generate(attnlab_bin, tmp_path):
    rep = attnlab.stream(compare=True, max_tokens=300, window=64, sinks=4, out=tmp_path / "s")
    want = json.loads(cli(attnlab_bin, "stream", "--compare", "--max-tokens", 300, "--window", 64,
                          "--sinks", 4, "--out", tmp_path / "s2", "--json"))
    assert strip(rep) == strip(want)
    assert os.path.exists(rep["html"])
    gen = attnlab.generate("The jury said", max_tokens=8, temperature=0)
    want = json.loads(cli(attnlab_bin, "generate", "--prompt", "The jury said", "--max-tokens", 8,
                          "--temperature", 0, "--json"))
    assert strip(gen) == strip(want)
    assert len(gen["generated_tokens"]) == 8


def test_experiment_quick(tmp_path):
    rep = attnlab.experiment("scaling", quick=True, out=tmp_path / "e")
    assert os.path.exists(rep["html"])
    with open(tmp_path / "e" / "report.json") as f:
        assert strip(rep) == strip(json.load(f))


def test_errors_raise_with_the_cli_message(tmp_path):
    with pytest.raises(ValueError, match=r"attnlab analyze: error: .*no-such-model"):
        attnlab.analyze(model=tmp_path / "no-such-model")
    with pytest.raises(ValueError, match="usage error"):
        attnlab.analyze(max_tokens="many")
    with pytest.raises(ValueError, match="unknown experiment|usage error"):
        attnlab.experiment("no-such-experiment")
    with pytest.raises(ValueError, match="unknown command"):
        attnlab.run("analyse")
    # The interpreter and the package keep working.
    assert attnlab.generate("A", max_tokens=2, temperature=0)["max_tokens"] == 2
