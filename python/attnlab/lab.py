"""The lab's commands from Python: each runs the same code as ``attnlab <command>`` in-process
and returns the same dict as its JSON report, with ``"html"`` set to the HTML report's path
where the command writes one (docs/PYTHON.md).

Keyword options are the command's flags: ``max_tokens=1500`` is ``--max-tokens 1500``, ``True``
is a bare flag, ``False``/``None`` leave it out, a list is comma-separated. Errors raise
ValueError with the CLI's message. Progress goes to stderr, as on the command line.
"""
import json
import os
import tempfile

from . import _attnlab


def _flags(options):
    args = []
    for key, val in options.items():
        if val is None or val is False:
            continue
        flag = "--" + key.replace("_", "-")
        if val is True:
            args.append(flag)
        elif isinstance(val, (list, tuple)):
            args += [flag, ",".join(str(v) for v in val)]
        else:
            args += [flag, str(val)]
    return args


def run(*args):
    """Runs ``attnlab ARGS...`` in-process and returns its stdout; ValueError on failure."""
    args = [str(a) for a in args]
    code, out, err = _attnlab.run_cli(args)
    if code != 0:
        raise ValueError(err or "attnlab %s failed with exit code %d" % (" ".join(args), code))
    return out


def _common(model, text, prompt):
    args = []
    if model is not None:
        args += ["--model", os.fspath(model)]
    if text is not None:
        args += ["--text", os.fspath(text)]
    if prompt is not None:
        args += ["--prompt", prompt]
    return args


def _out_dir(out, name):
    return os.fspath(out) if out is not None else tempfile.mkdtemp(prefix="attnlab-%s-" % name)


def _with_html(report, out):
    html = os.path.join(out, "report.html")
    if os.path.exists(html):
        report["html"] = html
    return report


def analyze(model=None, text=None, prompt=None, out=None, **options):
    """``attnlab analyze``: sinks and collapse per layer and head; report.json as a dict."""
    out = _out_dir(out, "analyze")
    run("analyze", *_common(model, text, prompt), "--out", out, *_flags(options))
    with open(os.path.join(out, "report.json")) as f:
        return _with_html(json.load(f), out)


def stream(model=None, text=None, prompt=None, out=None, compare=False, **options):
    """``attnlab stream``: rolling perplexity under a KV-cache policy (or every policy with
    compare=True, which also writes an HTML report)."""
    out = _out_dir(out, "stream")
    stdout = run("stream", *_common(model, text, prompt), "--out", out, "--json",
                 *(["--compare"] if compare else []), *_flags(options))
    return _with_html(json.loads(stdout), out)


def generate(prompt=None, model=None, text=None, **options):
    """``attnlab generate``: the prompt's and the generated tokens, ids and text."""
    stdout = run("generate", *_common(model, text, prompt), "--json", *_flags(options))
    return json.loads(stdout)


def experiment(name, quick=False, out=None, **options):
    """``attnlab experiment NAME``: the experiment's report.json as a dict (``quick=True`` is
    ``--quick``); the checks and claims are in it."""
    out = _out_dir(out, "experiment-" + str(name))
    run("experiment", name, "--out", out, *(["--quick"] if quick else []), *_flags(options))
    with open(os.path.join(out, "report.json")) as f:
        return _with_html(json.load(f), out)
