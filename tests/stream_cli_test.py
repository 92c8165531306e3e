#!/usr/bin/python3
"""`attnlab stream` and `attnlab generate` as a new user meets them (issue 21), on the embedded
default model (its context C read from data/default-model/config.json) and the bundled sample text:

  * nothing is silently ignored or cut short: generate with the dense cache refuses up front a
    request that does not fit the context (exit 2, naming the limit and --policy sink), --window
    with the dense policy and --window 0 are usage errors, --max-tokens follows docs/CLI.md;
  * --json prints one JSON document on stdout (generate: prompt and generated ids and text, the
    policy; stream: the per-policy numbers);
  * the --compare report's verdicts come from the numbers: with no eviction (a text shorter than
    the window) and with eviction where window and sink tie, nothing claims that window-only
    degrades; with a 16-token window, where the model does measurably worse without its first
    tokens, the report says so with the numbers; report.json holds them; the KV cache's tokens
    and bytes are measured per chunk (dense grows, window and sink stay flat).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

FAILURES = []
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "default-model",
                       "config.json")) as _f:
    C = int(json.load(_f)["context"])  # the default model's context
BANNED = ("degrade", "restores", "worse than sink")  # claims a tie must never make


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg.splitlines()[0][:200])


def run(cli, *args, code=0, needle=(), cwd=None):
    label = " ".join(args)[:120]
    try:
        p = subprocess.run([cli, *args], capture_output=True, text=True, errors="replace",
                           cwd=cwd, timeout=300)
    except subprocess.TimeoutExpired:
        fail(f"{label}: still running after 300 s")
        return subprocess.CompletedProcess(args, -1, "", "")
    if p.returncode != code:
        fail(f"{label}: exit {p.returncode}, expected {code}\n"
                        f"stdout: {p.stdout[-600:]}\nstderr: {p.stderr[-800:]}")
        return p
    if code and not p.stderr.strip():
        fail(f"{label}: exit {code} without a message on stderr")
    for n in ([needle] if isinstance(needle, str) else needle):
        if n not in p.stderr:
            fail(f"{label}: stderr does not mention {n!r}: {p.stderr.strip()[-400:]!r}")
    print(f"ok (exit {code}) {label}" + (f": {p.stderr.strip().splitlines()[-1][:140]}"
                                          if code and p.stderr.strip() else ""))
    return p


def expect(cond, msg):
    if not cond:
        fail(msg)


def load_json(p, label):
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        fail(f"{label}: stdout is not one JSON document ({e}): {p.stdout[:300]!r}")
        return None


def check_generate(cli, d):
    # The issue: 400 tokens with the default dense cache (context 256) stopped at 251 with exit 0.
    run(cli, "generate", "--prompt", "The jury said", "--max-tokens", str(C + 144), code=2,
        needle=[f"--max-tokens {C + 144}", f"context is {C}", f"at most {C - 5}", "--policy sink"])
    # What fits is generated in full (or stops at end-of-text, and says so).
    p = run(cli, "generate", "--prompt", "The jury said", "--max-tokens", str(C - 5),
            "--temperature", "0", "--json")
    j = load_json(p, f"generate {C - 5} --json")
    if j:
        expect(len(j["prompt_tokens"]) == 5, f"prompt tokens (BOS + 4): {j['prompt_tokens']}")
        expect(j["stop_reason"] in ("max-tokens", "end-of-text"), j["stop_reason"])
        if j["stop_reason"] == "max-tokens":
            expect(j["tokens_generated"] == C - 5 == len(j["generated_tokens"]),
                   f"generated {j['tokens_generated']} of {C - 5}")
        else:
            expect("stopped early" in p.stderr, f"no note on the early stop: {p.stderr!r}")
        expect(j["policy"] == "dense" and j["window"] is None and j["sinks"] is None,
               f"policy fields: {j['policy']} {j['window']} {j['sinks']}")
        expect(j["prompt"] == "The jury said", j["prompt"])
        expect(isinstance(j["generated_text"], str) and j["generated_text"], "no generated text")
    # The sink policy has no length limit; --window and --sinks apply to it.
    p = run(cli, "generate", "--prompt", "The jury said", "--policy", "sink", "--sinks", "2",
            "--window", "64", "--max-tokens", "300", "--json")
    j = load_json(p, "generate sink --json")
    if j:
        expect(j["policy"] == "sink" and j["window"] == 64 and j["sinks"] == 2, str(j)[:300])
        expect(j["cache_tokens"] <= 64, f"sink cache holds {j['cache_tokens']} > 64 tokens")
        if j["stop_reason"] == "max-tokens":
            expect(j["tokens_generated"] == 300, f"generated {j['tokens_generated']} of 300")
    # Human-readable mode: the text on stdout, the statistics on stderr.
    p = run(cli, "generate", "--prompt", "The jury said", "--max-tokens", "5", "--seed", "2")
    expect(p.stdout.startswith("The jury said"), p.stdout[:100])
    expect("tokens generated" in p.stderr, p.stderr)
    # Options that do not apply are refused, not ignored.
    run(cli, "generate", "--prompt", "x", "--window", "64", "--max-tokens", "5", code=2,
        needle="--window")
    run(cli, "generate", "--prompt", "x", "--policy", "window", "--sinks", "2", "--max-tokens",
        "5", code=2, needle="--sinks")
    run(cli, "generate", "--prompt", "x", "--policy", "sink", "--window", "0", code=2,
        needle="--window")
    run(cli, "generate", "--prompt", "x", "--policy", "recompute", code=2, needle="recompute")
    run(cli, "generate", "--prompt", "x", "--policy", "sink", "--kv-dtype", "bf16", code=2,
        needle="--kv-dtype")
    run(cli, "generate", "--prompt", "x", "--policy", "sink", "--window", str(C + 44), code=2,
        needle="exceeds the model's context")
    # --max-tokens N >= 1 (docs/CLI.md).
    run(cli, "generate", "--prompt", "x", "--max-tokens", "0", code=2, needle="--max-tokens")
    run(cli, "generate", "--prompt", "x", "--max-tokens", "-3", code=2, needle="--max-tokens")
    run(cli, "generate", "--prompt", "x", "--top-p", "7", code=2, needle="--top-p")
    # --text FILE is a file, --prompt STR literal text; not both.
    f = os.path.join(d, "prompt.txt")
    with open(f, "w") as fh:
        fh.write("The city of Atlanta")
    p = run(cli, "generate", "--text", f, "--max-tokens", "3", "--json")
    j = load_json(p, "generate --text --json")
    if j:
        expect(j["prompt"] == "The city of Atlanta" and j["prompt_file"] == f, str(j)[:200])
    run(cli, "generate", "--text", f, "--prompt", "x", code=2)
    run(cli, "generate", "--text", os.path.join(d, "missing.txt"), code=1, needle="missing.txt")
    # A prompt longer than the context cannot use the dense cache at all.
    run(cli, "generate", "--prompt", "the " * (C + 44), "--max-tokens", "1", code=2,
        needle=[f"context is {C}", "--policy sink"])


def check_stream_usage(cli, d):
    # --max-tokens 50 keeps the work small where a binary ignores the bad option.
    n = ["--max-tokens", "50"]
    run(cli, "stream", "--window", "0", *n, code=2, needle="--window")  # was: silently 256
    run(cli, "stream", "--policy", "window", "--window", "-4", *n, code=2, needle="--window")
    run(cli, "stream", "--policy", "dense", "--window", "64", *n, code=2, needle="--window")
    run(cli, "stream", "--policy", "window", "--sinks", "2", *n, code=2, needle="--sinks")
    run(cli, "stream", "--policy", "dense", "--rope-mode", "stored", *n, code=2,
        needle="--rope-mode")
    run(cli, "stream", "--compare", "--policy", "window", *n, "--out", os.path.join(d, "x"),
        code=2, needle="--compare")
    run(cli, "stream", "--max-tokens", "0", code=2, needle="--max-tokens")
    run(cli, "stream", "--max-tokens", "-5", code=2, needle="--max-tokens")
    run(cli, "stream", "--policy", "foo", *n, code=2, needle="unknown cache policy 'foo'")
    run(cli, "stream", "--policy", "sink", "--window", str(C + 44), *n, code=2,
        needle="exceeds the model's context")
    run(cli, "stream", "--text", os.path.join(d, "missing.txt"), code=1, needle="missing.txt")
    afile = os.path.join(d, "afile")
    open(afile, "w").write("x")
    run(cli, "stream", "--compare", "--max-tokens", "20", "--out", os.path.join(afile, "rep"),
        code=1, needle="--out")


def check_stream_json(cli, d):
    p = run(cli, "stream", "--policy", "sink", "--window", "32", "--max-tokens", "300",
            "--chunk", "100", "--json")
    j = load_json(p, "stream --json")
    if j:
        expect([r["policy"] for r in j["results"]] == ["sink"], str(j["results"])[:200])
        r = j["results"][0]
        expect(r["tokens"] == 300, f"scored {r['tokens']} tokens, not 300 (BOS first)")
        expect(r["eviction_from_token"] == 33, f"eviction from {r['eviction_from_token']}")
        expect(all(c["cache_tokens"] <= 32 for c in r["chunks"]), str(r["chunks"]))
        # What the cache keeps: the 4 pinned first tokens and the rest within the window.
        for c in r["chunks"]:
            expect(abs(c["kept_first"] * c["cache_tokens"] - 4) < 1e-9 and c["kept_older"] == 0
                   and abs(c["kept_first"] + c["kept_window"] - 1) < 1e-12, f"kept shares {c}")
        expect(j["window"] == 32 and j["sinks"] == 4 and j["context"] == C, str(j)[:300])
    expect("sink" in p.stderr and "done: 300 tokens" in p.stderr,
           f"progress should go to stderr under --json: {p.stderr[-300:]!r}")
    out = os.path.join(d, "single")
    p = run(cli, "stream", "--policy", "window", "--window", "64", "--max-tokens", "100",
            "--out", out)
    expect("done: 100 tokens" in p.stdout, p.stdout[-300:])
    js = json.load(open(os.path.join(out, "stream.json")))
    expect(js["results"][0]["policy"] == "window", str(js)[:200])


def check_gguf_policies(cli, d):
    """Every cache policy on a quantized GGUF file (issue 38: the Llama-family decoder with Q8_0
    weights, GPT-2's BPE embedded): with a window larger than the text nothing is evicted, so each
    policy's perplexity is the dense cache's; with a small window each evicts and stays within
    its budget, with and without pinned tokens."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import readme_commands_test
    model = os.path.join(d, "tiny.gguf")
    readme_commands_test.make_gguf(model)
    base = ["stream", "--model", model, "--max-tokens", "80", "--chunk", "20", "--json"]
    dense = load_json(run(cli, *base, "--policy", "dense"), "gguf dense")
    if not dense:
        return
    ppl, scored = dense["results"][0]["perplexity"], dense["results"][0]["tokens"]
    for policy in ("window", "sink", "h2o", "tova", "snapkv"):
        j = load_json(run(cli, *base, "--policy", policy, "--window", "128"), f"gguf {policy} 128")
        if j:
            got = j["results"][0]["perplexity"]
            expect(abs(got - ppl) <= 1e-6 * ppl,
                   f"gguf {policy}: no eviction, yet perplexity {got} != dense {ppl}")
        for sinks in ("0", "4"):
            if policy in ("window", "sink") and sinks == "4":
                continue  # sink pins 4 by default; window pins none
            args = ["--policy", policy, "--window", "16"] + \
                ([] if policy in ("window", "sink") else ["--sinks", sinks])
            j = load_json(run(cli, *base, *args), f"gguf {policy} 16 sinks {sinks}")
            if j:
                r = j["results"][0]
                expect(r["tokens"] == scored and 1 < r["perplexity"] < 1e9,
                       f"gguf {policy} sinks {sinks}: {r['tokens']} tokens, ppl {r['perplexity']}")
                expect(all(c["cache_tokens"] <= 16 for c in r["chunks"]),
                       f"gguf {policy} sinks {sinks}: cache over budget {r['chunks']}")


def compare(cli, d, name, *args):
    out = os.path.join(d, name)
    p = run(cli, "stream", "--compare", "--out", out, "--json", *args)
    doc = load_json(p, f"stream --compare {name}")
    if not os.path.exists(os.path.join(out, "report.json")):
        fail(f"stream --compare {name}: no report.json")
        return None, ""
    rep = json.load(open(os.path.join(out, "report.json")))
    html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    figs = ["fig-stream", "fig-stream-relative", "fig-cache-tokens", "fig-cache-bytes"]
    if "h2o" in rep["figures"].get("fig-kept", {}).get("at_end", {}) or \
            any(r["policy"] == "h2o" for r in rep["table"]["rows"]):
        figs.append("fig-kept")
        run_doc = json.load(open(os.path.join(out, "stream.json")))
        for r in run_doc["results"]:
            for c in r["chunks"]:
                shares = [c["kept_first"], c["kept_window"], c["kept_older"]]
                if r["policy"] == "recompute":
                    expect(shares == [None] * 3, f"{name}: recompute has kept shares {shares}")
                    continue
                expect(all(0 <= x <= 1 for x in shares) and abs(sum(shares) - 1) < 1e-9,
                       f"{name} {r['policy']}: kept shares {shares} do not sum to 1")
                if r["policy"] in ("window", "sink"):
                    expect(c["kept_older"] == 0, f"{name} {r['policy']}: keeps older tokens {c}")
    for fid in figs:
        expect(f'id="{fid}"' in html, f"{name}: report.html lacks figure {fid}")
        expect(fid in rep["figures"] and rep["figures"][fid]["caption"],
               f"{name}: report.json lacks the caption of {fid}")
    expect(doc is not None and doc["comparison"]["summary"] == rep["summary"],
           f"{name}: --json and report.json disagree")
    s = rep["summary"]
    expect(s.endswith("."), f"{name}: the summary does not end in a complete sentence: {s!r}")
    expect(";" not in s[-3:], f"{name}: dangling ';' in the summary: {s!r}")
    return rep, html


def captions(rep):
    return [rep["summary"], rep["table"]["caption"]] + \
        [f["caption"] for f in rep["figures"].values()] + \
        list(rep["comparison"]["sentences"].values())


def check_stream_reports(cli, d):
    # 1. A text shorter than the window: nothing is evicted, so nothing can differ.
    rep, html = compare(cli, d, "short", "--max-tokens", "100", "--chunk", "25")
    if rep is None:
        return
    c = rep["comparison"]
    expect(c["window_vs_sink"] is None and c["eviction_from_token"] is None, str(c)[:300])
    expect("No token was evicted" in c["sentences"]["window_vs_sink"], c["sentences"])
    for t in captions(rep):
        for b in BANNED:
            expect(b not in t, f"short text: {b!r} claimed: {t!r}")
    expect("keeping a few sink tokens restores it" not in html, "the old fixed caption is back")

    # 2. Eviction with a 256-token window on 600 tokens: where window and sink tie, as on the
    #    issue's GPL-3 (718.70 vs 718.49), the verdict must say so.
    rep, _ = compare(cli, d, "tie", "--max-tokens", "600", "--window", "256", "--chunk", "100")
    ws = rep["comparison"]["window_vs_sink"]
    expect(ws is not None and ws["from_token"] == 257, str(ws))
    if ws and abs(ws["relative"]) <= 0.01:
        expect(ws["verdict"] == "no measurable difference", str(ws))
        expect(rep["comparison"]["sentences"]["window_vs_sink"].startswith(
            "No measurable difference on this text"), rep["comparison"]["sentences"])
        for t in captions(rep):
            for b in BANNED:
                expect(b not in t, f"tie: {b!r} claimed: {t!r}")
    else:
        print(f"note: window and sink do not tie on this build ({ws}); tie checks skipped")

    # 3. A 16-token window: evicting the first tokens costs this model measurably.
    rep, _ = compare(cli, d, "small", "--max-tokens", "600", "--window", "16", "--chunk", "50")
    ws = rep["comparison"]["window_vs_sink"]
    expect(ws is not None and ws["verdict"] == "worse" and ws["relative"] > 0.05,
           f"window 16: window-only should be measurably worse than sink: {ws}")
    expect(rep["comparison"]["sentences"]["window_vs_sink"].startswith(
        "Window-only attention is"), rep["comparison"]["sentences"])
    # The caches, as measured: dense grows with the text, window and sink stay at 16 tokens.
    st = json.load(open(os.path.join(d, "small", "stream.json")))
    by = {r["policy"]: r for r in st["results"]}
    dense = by["dense"]["chunks"]
    expect([ch["cache_tokens"] for ch in dense] == [ch["end"] for ch in dense],
           f"dense cache tokens {[ch['cache_tokens'] for ch in dense]}")
    expect(dense[-1]["cache_bytes"] > dense[0]["cache_bytes"], "dense cache bytes did not grow")
    for pol in ("window", "sink"):
        ch = by[pol]["chunks"]
        expect(all(c["cache_tokens"] == min(16, c["end"]) for c in ch),
               f"{pol} cache tokens {[c['cache_tokens'] for c in ch]}")
        expect(len({c["cache_bytes"] for c in ch}) == 1, f"{pol} cache bytes not flat")
    mem = {m["policy"]: m for m in rep["comparison"]["memory"]}
    expect(mem["dense"]["grows"] and mem["window"]["flat"] and mem["sink"]["flat"], str(mem))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = os.path.abspath(ap.parse_args().attnlab)
    with tempfile.TemporaryDirectory() as d:
        for check in (check_generate, check_stream_usage, check_stream_json, check_stream_reports,
                      check_gguf_policies):
            try:
                check(cli, d)
            except Exception as e:  # a missing file or key: record it, run the other checks
                fail(f"{check.__name__}: {type(e).__name__}: {e}")
    if FAILURES:
        print("\n\n".join(FAILURES))
        sys.exit(1)
    print("all stream/generate checks passed")


if __name__ == "__main__":
    main()
