#!/usr/bin/python3
"""`attnlab experiment`: the --quick versions of the collapse experiments, as CI smoke tests.

Each experiment checks its own invariants and exits non-zero when one fails; this script runs
them, checks exit 0, the report files (report.json with the documented schema, report.html with
its sections and figures), re-checks the invariants from report.json's numbers (not exact
values), checks that --seed makes a run reproducible, and checks the bad inputs (an unknown
experiment, missing data) fail with one clear error line. collapse-training trains on a tiny
data directory made here with `attnlab prepare --text`.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def run(cli, args, expect_ok=True, needle=None):
    p = subprocess.run([cli] + args, capture_output=True, text=True, errors="replace")
    if (p.returncode == 0) != expect_ok:
        sys.exit(f"FAIL: attnlab {' '.join(args)} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                 f"{p.stderr[-3000:]}")
    if not expect_ok:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        if "error" not in last or (needle and needle not in p.stderr):
            sys.exit(f"FAIL: attnlab {' '.join(args)}: unclear error {p.stderr[-800:]!r}")
        print(f"ok (error) {last[:140]}")
    return p


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def load_report(out, name):
    for f in ("report.json", "report.html"):
        check(os.path.getsize(os.path.join(out, f)) > 0, f"{name}: {f} is missing or empty")
    rep = json.load(open(os.path.join(out, "report.json")))
    for key in ("experiment", "description", "quick", "seed", "threads", "seconds", "summary",
                "passed", "checks", "claims", "results"):
        check(key in rep, f"{name}: report.json lacks {key!r}")
    check(rep["experiment"] == name and rep["quick"] is True, f"{name}: wrong header {rep}")
    check(rep["passed"] and all(c["passed"] for c in rep["checks"]) and rep["checks"],
          f"{name}: failed checks {[c for c in rep['checks'] if not c['passed']]}")
    for c in rep["claims"]:
        check(set(c) == {"name", "source", "expected", "measured", "holds"}, f"bad claim {c}")
    html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    for needle in ('id="summary"', 'id="checks"', "<svg", rep["summary"][:40]):
        check(needle in html, f"{name}: report.html lacks {needle!r}")
    return rep, html


def depth_claim_rules(res):
    """collapse-depth: every claim -> its verdict recomputed from the relative residuals by the rule
    its `expected` text states (null: not measurable, never satisfies a bound)."""
    L = res["layers"]
    runs = {(r["variant"], r["init"], r["mask"]): r["depth"] for r in res["runs"]}
    rr = lambda v, init, mask, d: math.nan if (x := runs[(v, init, mask)]["relative_residual"][min(d, L)]) is None else x
    rules = {}
    for mask in ("causal", "bidirectional"):
        d24 = min(24, L)
        rules[f"pure attention reaches rank one fast ({mask})"] = rr("pure", "0.02", mask, 4) < 1e-4
        rules[f"skip, pre-LN and post-LN keep the tokens apart ({mask})"] = all(
            rr(v, "0.02", mask, d24) > 0.9 for v in ("skip", "pre_ln", "post_ln"))
        rules[f"1/sqrt(L) branch scaling prevents rank collapse ({mask})"] = (
            rr("skip_mlp", "1/sqrt(d)", mask, L) < 0.05 and rr("scaled", "1/sqrt(d)", mask, L) > 0.9)
    return rules


def training_claim_rules(res):
    """collapse-training: every claim -> its verdict recomputed by the rule its `expected` text
    states: final validation losses with the report's tie margin, depth metrics of the last
    checkpoint (index l + 1 = layer l)."""
    L, margin = res["layers"], res["loss_margin"]
    by = {r["variant"]: r for r in res["runs"]}
    final = lambda v: by[v]["checkpoints"][-1]["val_loss"]
    depth = lambda v, key: [math.nan if x is None else x for x in by[v]["checkpoints"][-1]["depth"][key]]
    mean_rr = lambda v: sum(depth(v, "relative_residual")[1:]) / L
    q = max(1, L // 4)
    ent = depth("pre_ln", "entropy")
    e_lo, e_hi = sum(ent[l + 1] for l in range(q)) / q, sum(ent[l + 1] for l in range(L - q, L)) / q
    rr, cos = depth("pre_ln", "relative_residual"), depth("pre_ln", "mean_cosine")
    rules = {
        "pre-LN trains a deep stack better than post-LN": final("pre_ln") < final("post_ln") - margin,
        "DeepNorm makes post-LN trainable at depth": final("deepnorm") < final("post_ln") - margin,
        "attention weights become uniform in deep layers": e_hi > e_lo,
        "token representations homogenise with depth": rr[L] < rr[1] and cos[L] > cos[1],
    }
    for remedy, base in (("post_ln_diversity", "post_ln"), ("post_ln_contrastive", "post_ln"),
                         ("diversity", "pre_ln"), ("contrastive", "pre_ln")):
        rules[by[remedy]["label"] + " lowers the loss and the collapse"] = (
            final(remedy) < final(base) - margin and mean_rr(remedy) > mean_rr(base))
    return rules


def collapse_depth(cli, d):
    out = os.path.join(d, "depth")
    p = run(cli, ["experiment", "collapse-depth", "--quick", "--seed", "3", "--out", out,
                  "--threads", "2"])
    check("[collapse-depth]" in p.stderr, "collapse-depth: no progress lines on stderr")
    rep, html = load_report(out, "collapse-depth")
    res = rep["results"]
    L = res["layers"]
    runs = {(r["variant"], r["init"], r["mask"]): r["depth"] for r in res["runs"]}
    variants = [v["id"] for v in res["variants"]]
    check(len(variants) == 9 and len(runs) == 9 * 2 * 2, f"expected 36 runs, got {len(runs)}")
    for key, m in runs.items():
        for col in ("relative_residual", "mean_cosine", "norm", "entropy", "head_cosine"):
            check(len(m[col]) == L + 1, f"{key}: {col} has {len(m[col])} depths, expected {L + 1}")
    for mask in ("causal", "bidirectional"):
        for init in ("0.02", "1/sqrt(d)"):
            rr = lambda v: runs[(v, init, mask)]["relative_residual"]
            # Invariants, re-checked from the numbers: pure attention collapses, skips keep
            # diversity, ReZero is the identity at init, normalised stacks stay finite.
            # At the deepest layer where pure attention's stream is measurable (null: it
            # underflowed fp32 or diverged; collapse_probe.h).
            dp = max(i for i, x in enumerate(rr("pure")) if x is not None)
            check(dp >= min(L, 12) and rr("pure")[dp] < 0.1 * rr("skip")[dp],
                  f"{mask} {init}: pure {rr('pure')[dp]} vs skip {rr('skip')[dp]} at layer {dp}")
            check(len(set(rr("rezero"))) == 1, f"{mask} {init}: ReZero is not the identity")
            for v in ("pre_ln", "post_ln", "deepnorm"):
                check(all(x is not None and math.isfinite(x) and 0 <= x <= 1.5 for x in rr(v)),
                      f"{mask} {init}: {v} has non-finite or out-of-range values {rr(v)}")
            check(rr("pure")[0] == rr("skip")[0], "the embedding differs between variants")
    check_claims("collapse-depth", rep, depth_claim_rules(res))
    bi = runs[("pure", "0.02", "bidirectional")]["relative_residual"]
    check(bi[4] is not None and bi[4] < 1e-3,
          f"bidirectional pure attention is not rank one by layer 4: {bi[4]}")
    for f in ("fig-rr-causal-002", "fig-rr-bidirectional-invsqrtd", 'id="causal"',
              'id="bidirectional"', 'id="claims"'):
        check(f in html, f"collapse-depth: report.html lacks {f!r}")
    print(f"ok: collapse-depth --quick ({rep['seconds']:.1f} s): {len(rep['checks'])} checks, "
          f"pure attention {runs[('pure', '0.02', 'causal')]['relative_residual'][4]:.2e} vs "
          f"skip {runs[('skip', '0.02', 'causal')]['relative_residual'][4]:.3f} at layer 4")
    # Deterministic under --seed.
    out2 = os.path.join(d, "depth2")
    run(cli, ["experiment", "collapse-depth", "--quick", "--seed", "3", "--out", out2,
              "--threads", "2"])
    rep2 = json.load(open(os.path.join(out2, "report.json")))
    check(rep2["results"] == rep["results"] and rep2["summary"] == rep["summary"],
          "collapse-depth is not reproducible under the same --seed")
    print("ok: collapse-depth is reproducible under --seed")


def make_data(cli, d):
    """A tiny corpus: 240 paragraphs of varied sentences (every 20th is validation)."""
    words = ("the jury said it did find that many of the laws are outmoded and the city "
             "should act on them before the end of the year while the mayor was away").split()
    paras = []
    for i in range(240):
        sent = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(60))
        paras.append(sent.capitalize() + ".")
    text = os.path.join(d, "corpus.txt")
    open(text, "w").write("\n\n".join(paras) + "\n")
    data = os.path.join(d, "data")
    run(cli, ["prepare", "--text", text, "--out", data])
    return data


def collapse_training(cli, d):
    data = make_data(cli, d)
    out = os.path.join(d, "training")
    p = run(cli, ["experiment", "collapse-training", "--quick", "--data", data, "--out", out,
                  "--threads", "2"])
    check("[collapse-training]" in p.stderr, "collapse-training: no progress lines on stderr")
    rep, html = load_report(out, "collapse-training")
    res = rep["results"]
    L = res["layers"]
    ids = [r["variant"] for r in res["runs"]]
    check(ids == ["post_ln", "pre_ln", "scaled", "deepnorm", "post_ln_diversity",
                  "post_ln_contrastive", "diversity", "contrastive"], f"unexpected variants {ids}")
    by = {r["variant"]: r for r in res["runs"]}
    for r in res["runs"]:
        check(len(r["train_loss"]) == res["steps"], f"{r['variant']}: train_loss has "
              f"{len(r['train_loss'])} entries, expected {res['steps']}")
        check(all(math.isfinite(x) for x in r["train_loss"]), f"{r['variant']}: non-finite loss")
        cps = r["checkpoints"]
        check(cps[0]["step"] == 0 and cps[-1]["step"] == res["steps"] and len(cps) >= 3,
              f"{r['variant']}: checkpoints at {[c['step'] for c in cps]}")
        for cp in cps:
            check(len(cp["depth"]["relative_residual"]) == L + 1, "wrong number of depths")
        check(cps[-1]["val_loss"] < cps[0]["val_loss"], f"{r['variant']}: did not learn")
    # The remedies move what they optimise, on both bases.
    end = lambda v, key: by[v]["checkpoints"][-1][key]
    for base, prefix in (("post_ln", "post_ln_"), ("pre_ln", "")):
        check(end(prefix + "diversity", "diversity") < end(base, "diversity"),
              f"the diversity penalty did not lower D on {base}")
        check(end(prefix + "contrastive", "contrastive") < end(base, "contrastive"),
              f"the contrastive loss did not lower I on {base}")
    check_claims("collapse-training", rep, training_claim_rules(res))
    for f in ("fig-train-loss", "fig-val-loss", "fig-rr-final", 'id="over-training"'):
        check(f in html, f"collapse-training: report.html lacks {f!r}")
    print(f"ok: collapse-training --quick ({rep['seconds']:.1f} s): {len(rep['checks'])} checks")


SINK_VARIANTS = ["baseline", "mask_first_key", "softmax1", "sink_logit", "sigmoid", "softpick", "output_gate", "output_gate_elementwise",
                 "key_bias", "sink_token", "sink_token_nobos", "pos_learned", "pos_none", "pos_every_layer",
                 "penalty_l2_w0.1", "penalty_l2_w1", "penalty_l2_w10", "penalty_l1_w1", "wd_0", "wd_1", "first_replace",
                 "first_drop", "init_small", "init_large"]


def sink_claim_rules(by, counts):
    """Every claim of the sinks experiment -> its verdict, recomputed from report.json's numbers by
    the rule the claim's `expected` text states (docs/EXPERIMENTS.md, sinks, "Claims")."""
    rate = lambda v: by[v]["sink_rate"]          # Sink_1^eps on token 0
    rate2 = lambda v: by[v]["sink_rate_key1"]    # the same on token 1
    eps = 0.3
    st = by["baseline"]["stream"]
    return {
        "masking the first token as a key removes the sink": rate2("mask_first_key") == 0,
        "softmax1 removes the need for a sink on token 0": rate("softmax1") == 0,
        "learned sink logit removes the need for a sink on token 0": rate("sink_logit") == 0,
        "output gate removes the need for a sink on token 0": rate("output_gate") == 0,
        "output gate, element-wise removes the need for a sink on token 0":
            rate("output_gate_elementwise") == 0,
        "sigmoid attention without normalisation has no sink": rate("sigmoid") == 0,
        "softpick attention has no sink (0% sink rate)": rate("softpick") == 0,
        "a learnable key with a zero value takes the sink over from the first token":
            rate("key_bias") == 0 and by["key_bias"]["key_bias_mass_max"] > eps,
        "a dedicated sink token takes the sink over from the first text token":
            by["sink_token"]["max_alpha1"] > eps and rate2("sink_token") == 0,
        "more weight decay, more sinks":
            rate("wd_0") <= rate("baseline") <= rate("wd_1") and rate("wd_0") < rate("wd_1"),
        "sinks emerge with every positional encoding":
            all(rate(v) > 0 for v in ("baseline", "pos_learned", "pos_none")),
        "first-token augmentation weakens the sink":
            rate("first_replace") < rate("baseline") and rate("first_drop") < rate("baseline"),
        "a penalty on the attention to token 0 removes the sink":
            rate("penalty_l2_w10") == 0 and
            by["baseline"]["max_alpha1"] >= by["penalty_l2_w0.1"]["max_alpha1"] >=
            by["penalty_l2_w1"]["max_alpha1"] >= by["penalty_l2_w10"]["max_alpha1"],
        "removing the sink with the penalty costs little loss":
            next((by[v]["val_loss"] <= 1.01 * by["baseline"]["val_loss"]
                  for v in ("penalty_l2_w0.1", "penalty_l2_w1", "penalty_l2_w10") if rate(v) == 0),
                 False),
        "with the sink penalised away, window-only streaming no longer needs token 0":
            by["penalty_l2_w10"]["stream"]["window_ppl"] <=
            1.05 * by["penalty_l2_w10"]["stream"]["dense_ppl"],
        "positions injected at every layer lessen the reliance on the first position":
            rate("pos_every_layer") < rate("pos_learned") and
            by["pos_every_layer"]["max_alpha1"] < by["pos_learned"]["max_alpha1"],
        "evicting the sink hurts window-only streaming; keeping token 0 restores it":
            st["window_ppl"] > 1.05 * st["dense_ppl"] and st["sink_ppl"] < st["window_ppl"],
        "a dedicated sink token needs 1 sink to match the vanilla model with 4":
            counts["sink_token_nobos"]["sinks"]["1"] <= 1.02 * counts["baseline"]["sinks"]["4"],
    }


def check_claims(name, rep, rules):
    """Each claim's `holds` equals its rule (claim name -> verdict recomputed from report.json's
    numbers); every claim has a rule and every rule a claim."""
    names = [c["name"] for c in rep["claims"]]
    check(sorted(names) == sorted(rules), f"{name}: claims {names} != the rules {sorted(rules)}")
    for c in rep["claims"]:
        check(isinstance(c["holds"], bool) and c["holds"] == rules[c["name"]],
              f"{name}: claim {c['name']!r} says holds={c['holds']}, its numbers say {rules[c['name']]}: "
              f"{c['measured']}")


def sinks(cli, d):
    """`experiment sinks --quick` on the Bigram-Backcopy task (no data needed)."""
    out = os.path.join(d, "sinks")
    p = run(cli, ["experiment", "sinks", "--quick", "--seed", "1", "--out", out, "--threads", "2"])
    check("[sinks]" in p.stderr, "sinks: no progress lines on stderr")
    rep, html = load_report(out, "sinks")
    res = rep["results"]
    L, H, T, eps = res["layers"], res["heads"], res["seq_len"], res["eps"]
    ids = [r["variant"] for r in res["runs"]]
    check(ids == SINK_VARIANTS, f"sinks: unexpected variants {ids}")
    by = {r["variant"]: r for r in res["runs"]}
    for r in res["runs"]:
        v = r["variant"]
        check(len(r["train_loss"]) == res["steps"] and all(math.isfinite(x) for x in r["train_loss"]),
              f"sinks {v}: train_loss has {len(r['train_loss'])} entries or non-finite values")
        check(r["val_loss"] < r["init_val_loss"] - 1.0, f"sinks {v}: did not learn "
              f"({r['init_val_loss']} -> {r['val_loss']})")
        check(len(r["alpha1"]) == L and all(len(l) == H for l in r["alpha1"]),
              f"sinks {v}: alpha1 is not [layers][heads]")
        flat = [a for l in r["alpha1"] for a in l]
        check(all(0 <= a <= 1 for a in flat), f"sinks {v}: alpha_1 outside [0, 1]")
        # Sink_1^eps is the share of heads above eps (Gu et al. 2024), recomputed here.
        check(abs(r["sink_rate"] - sum(a > eps for a in flat) / len(flat)) < 1e-12,
              f"sinks {v}: sink_rate disagrees with alpha1")
        # The claims below rest on sink_rate, sink_rate_key1 and max_alpha1: each must be the
        # summary of its [layer][head] matrix.
        flat2 = [a for l in r["alpha2"] for a in l]
        check(abs(r["sink_rate_key1"] - sum(a > eps for a in flat2) / len(flat2)) < 1e-12 and
              r["max_alpha1"] == max(flat), f"sinks {v}: sink_rate_key1 / max_alpha1 disagree with alpha2 / alpha1")
        steps = [e["step"] for e in r["emergence"]]
        check(steps == list(range(0, res["steps"] + 1, res["probe_every"])),
              f"sinks {v}: emergence probed at {steps}")
        check(r["massive_ratio_max"] is not None and r["massive_ratio_max"] >= 1,
              f"sinks {v}: massive ratio {r['massive_ratio_max']}")
        st = r["stream"]
        check(st["dense_ppl"] is not None and st["dense_ppl"] > 1, f"sinks {v}: dense ppl {st}")
        if v in ("pos_learned", "pos_every_layer"):  # learned absolute positions
            check(st["window_ppl"] is None and st["sink_ppl"] is None and st["note"],
                  f"sinks: learned positions should not stream with a rolling cache: {st}")
        else:
            check(st["window_ppl"] is not None and st["sink_ppl"] is not None,
                  f"sinks {v}: missing streaming numbers {st}")
    # Invariants re-checked from the numbers: the baseline prefers token 0 well above uniform
    # causal attention (alpha_1 = H_T / T), and masking the first key hides token 0 exactly.
    uniform = sum(1 / (t + 1) for t in range(T)) / T
    base = by["baseline"]
    check(base["max_alpha1"] > 2 * uniform, f"sinks: baseline max alpha_1 {base['max_alpha1']} "
          f"is not above 2x uniform {2 * uniform}")
    mask = by["mask_first_key"]
    check(mask["max_alpha1"] == 0 and mask["first_token_sensitivity"] == 0,
          f"sinks: mask_first_key sees token 0 ({mask['max_alpha1']}, {mask['first_token_sensitivity']})")
    check(base["first_token_sensitivity"] > 0, "sinks: the baseline ignores token 0")
    # The key bias's mass: [layers][heads] in [0, 1], its max the summary; absent elsewhere.
    kb = by["key_bias"]
    flat_kb = [a for l in kb["key_bias_mass"] for a in l]
    check(len(kb["key_bias_mass"]) == L and len(flat_kb) == L * H and
          all(0 <= a <= 1 for a in flat_kb) and kb["key_bias_mass_max"] == max(flat_kb),
          f"sinks: key_bias_mass {kb['key_bias_mass']} / max {kb['key_bias_mass_max']}")
    check(base["key_bias_mass"] == [] and base["key_bias_mass_max"] is None,
          "sinks: the baseline reports a key-bias mass")
    # Gate-weighted first-token mass: gated variants only, [layers][heads], each at most its
    # alpha_1 (a gate is in (0, 1)), the max and mean its summary.
    for v in ("output_gate", "output_gate_elementwise"):
        g, a = by[v]["gated_alpha1"], by[v]["alpha1"]
        flat_g = [x for l in g for x in l]
        check(len(g) == L and len(flat_g) == L * H and
              all(0 <= x <= y + 1e-12 for x, y in zip(flat_g, [y for l in a for y in l])) and
              by[v]["max_gated_alpha1"] == max(flat_g) and
              abs(by[v]["mean_gated_alpha1"] - sum(flat_g) / len(flat_g)) < 1e-12,
              f"sinks {v}: gated_alpha1 {g} against alpha1 {a}")
    check(base["gated_alpha1"] == [] and base["max_gated_alpha1"] is None,
          "sinks: the baseline reports a gated first-token mass")
    check(all(r["massive_abs_max"] is not None and r["massive_abs_max"] > 0 for r in res["runs"]),
          "sinks: massive_abs_max missing")
    # Streaming by the number of pinned tokens (Xiao et al. 2023, table 3): the baseline and the
    # two sink-token variants, S = 1 equal to the run's sink policy, and the claim's rule
    # (sink token without BOS, 1 sink <= 1.02x the baseline with 4) recomputed from the numbers.
    counts = res["sink_count_streaming"]
    check(res["sink_counts"] == [1, 2, 4], f"sinks: sink_counts {res['sink_counts']}")
    check(sorted(counts) == ["baseline", "sink_token", "sink_token_nobos"],
          f"sinks: sink_count_streaming variants {sorted(counts)}")
    for v, c in counts.items():
        check(sorted(c["sinks"]) == ["1", "2", "4"] and
              all(x is not None and math.isfinite(x) and x > 1 for x in c["sinks"].values()),
              f"sinks {v}: sink-count perplexities {c}")
        st = by[v]["stream"]
        check(c["sinks"]["1"] == st["sink_ppl"] and c["dense_ppl"] == st["dense_ppl"] and
              c["window_ppl"] == st["window_ppl"], f"sinks {v}: sink_count_streaming disagrees with stream")
    check_claims("sinks", rep, sink_claim_rules(by, counts))
    for f in ('id="variants"', 'id="emergence"', 'id="sink-count"', "fig-sink-bars", "fig-stream-bars",
              "fig-emergence", 'id="claims"'):
        check(f in html, f"sinks: report.html lacks {f!r}")
    p = run(cli, ["experiment", "--list"])
    check("sinks" in p.stdout, "--list does not list sinks")
    print(f"ok: sinks --quick ({rep['seconds']:.1f} s): {len(rep['checks'])} checks, baseline "
          f"Sink_1 {base['sink_rate']:.2f} max alpha_1 {base['max_alpha1']:.3f}, "
          f"{sum(c['holds'] for c in rep['claims'])}/{len(rep['claims'])} claims hold")


def sinks_and_collapse(cli, d):
    """`experiment sinks-and-collapse --quick` (Bigram-Backcopy, no data needed)."""
    out = os.path.join(d, "sinks_collapse")
    args = ["experiment", "sinks-and-collapse", "--quick", "--seed", "1", "--threads", "2"]
    p = run(cli, args + ["--out", out])
    check("[sinks-and-collapse]" in p.stderr, "sinks-and-collapse: no progress lines on stderr")
    rep, html = load_report(out, "sinks-and-collapse")
    res = rep["results"]
    H, eps = res["heads"], res["eps"]
    by = {m["id"]: m for m in res["models"]}  # a model: the mean over its seeds' runs
    runs = {r["id"]: r for r in res["runs"]}
    check(len(by) == len(res["models"]) and len(runs) == len(res["runs"]) == len(by) * res["seeds"],
          "sinks-and-collapse: duplicate or missing runs")
    depth = [by[i] for i in res["depth_sweep"]]
    ctx = [by[i] for i in res["context_sweep"]]
    cmp = [by[i] for i in res["collapse_comparison"]]
    check([r["layers"] for r in depth] == res["depths"] and all(r["seq_len"] == res["depth_len"] for r in depth),
          f"sinks-and-collapse: depth sweep {[(r['layers'], r['seq_len']) for r in depth]}")
    check([r["seq_len"] for r in ctx] == res["lens"] and all(r["layers"] == res["len_depth"] for r in ctx),
          f"sinks-and-collapse: context sweep {[(r['layers'], r['seq_len']) for r in ctx]}")
    # The same training tokens for every context length: batch * T is constant.
    check(len({r["batch"] * r["seq_len"] for r in ctx}) == 1 and
          ctx[0]["batch"] * ctx[0]["seq_len"] == res["tokens_per_step"], "sinks-and-collapse: tokens differ")
    check([r["variant"] for r in cmp] == ["baseline", "mask_first_key", "softmax1", "sigmoid"] and
          all(r["layers"] == res["collapse_depth"] for r in cmp),
          f"sinks-and-collapse: collapse comparison {[r['id'] for r in cmp]}")
    for m in res["models"]:
        rs = [runs[i] for i in m["runs"]]
        check(len(rs) == res["seeds"] and all(r["model"] == m["id"] for r in rs), f"{m['id']}: runs {m['runs']}")
        for key in ("sink_rate", "mean_alpha1", "max_alpha1"):
            check(abs(m["sinks"][key] - sum(r["sinks"][key] for r in rs) / len(rs)) < 1e-9,
                  f"{m['id']}: {key} is not the mean over seeds")
    for r in res["runs"]:
        v = r["id"]
        check(len(r["train_loss"]) == res["steps"] and all(math.isfinite(x) for x in r["train_loss"]),
              f"sinks-and-collapse {v}: train_loss")
        check(r["val_loss"] < r["init_val_loss"] - 1.0, f"sinks-and-collapse {v}: did not learn")
        for key in ("sinks", "sinks_common"):
            a = r[key]["alpha1"]
            check(len(a) == r["layers"] and all(len(l) == H for l in a), f"{v}: {key} alpha1 shape")
            flat = [x for l in a for x in l]
            check(all(0 <= x <= 1 for x in flat), f"{v}: alpha_1 outside [0, 1]")
            check(abs(r[key]["sink_rate"] - sum(x > eps for x in flat) / len(flat)) < 1e-12,
                  f"{v}: {key} sink_rate disagrees with alpha1")
            check(abs(r[key]["max_alpha1"] - max(flat)) < 1e-12, f"{v}: {key} max_alpha1")
        T = r["seq_len"]
        check(abs(r["sinks"]["uniform_alpha1"] - sum(1 / (t + 1) for t in range(T)) / T) < 1e-12,
              f"{v}: uniform alpha_1")
    for r in cmp:
        v, L = r["id"], r["layers"]
        c, pt = r["collapse"], r["perturbation"]
        for col in ("relative_residual", "mean_cosine", "entropy"):
            check(len(c[col]) == L + 1, f"{v}: {col} has {len(c[col])} depths")
        check(all(x is not None and math.isfinite(x) for x in c["relative_residual"] + c["mean_cosine"]),
              f"{v}: non-finite collapse metrics")
        if r["variant"] != "sigmoid":
            check(all(x is not None and 0 <= x <= 1.1 for x in c["entropy"][1:]), f"{v}: entropy {c['entropy']}")
        # Causality and the embedding: replacing token p changes nothing before p, nothing
        # but position p in the embedding, and the later tokens at the last layer.
        check(pt["before_max"] == 0 and pt["embedding_max"] == 0 and pt["rel"][0] == 0 and pt["abs"][-1] > 0,
              f"{v}: perturbation {pt}")
    check(cmp[1]["sinks"]["max_alpha1"] == 0 and cmp[1]["sinks_common"]["max_alpha1"] == 0,
          "sinks-and-collapse: mask_first_key attends to token 0")
    base = cmp[0]
    check(base["sinks"]["max_alpha1"] > 2 * base["sinks"]["uniform_alpha1"],
          "sinks-and-collapse: the baseline does not prefer token 0")
    # The claims' verdicts, recomputed from the numbers.
    inc = lambda v: all(b >= a for a, b in zip(v, v[1:])) and v[-1] > v[0]
    claims = {c["name"]: c["holds"] for c in rep["claims"]}
    sk = lambda runs, k: [r["sinks"][k] for r in runs]
    check(claims["deeper models have stronger sinks"] ==
          (inc(sk(depth, "sink_rate")) and inc(sk(depth, "mean_alpha1"))), "depth claim disagrees")
    check(claims["longer training context strengthens sinks"] ==
          (inc(sk(ctx, "sink_rate")) and inc(sk(ctx, "mean_alpha1"))), "context claim disagrees")
    rel = lambda r: r["perturbation"]["rel"][-1]
    check(claims["models whose attention cannot form a first-token sink mix more"] ==
          all(rel(r) > rel(base) for r in cmp[1:]), "mixing claim disagrees")
    last = lambda r, k: r["collapse"][k][-1]
    check(claims["models whose attention cannot form a first-token sink are closer to collapse"] ==
          all(last(r, "relative_residual") < last(base, "relative_residual") and
              last(r, "mean_cosine") > last(base, "mean_cosine") for r in cmp[1:]), "collapse claim disagrees")
    for f in ('id="depth"', 'id="context"', 'id="collapse"', "fig-depth", "fig-context", "fig-rr",
              "fig-cosine", "fig-entropy", "fig-perturbation", 'id="claims"'):
        check(f in html, f"sinks-and-collapse: report.html lacks {f!r}")
    # Deterministic under --seed (timings aside).
    out2 = os.path.join(d, "sinks_collapse2")
    run(cli, args + ["--out", out2])
    rep2 = json.load(open(os.path.join(out2, "report.json")))
    strip = lambda res: [{k: x for k, x in r.items() if k != "seconds"} for r in res["runs"] + res["models"]]
    check(strip(rep2["results"]) == strip(res) and rep2["summary"] == rep["summary"],
          "sinks-and-collapse is not reproducible under the same --seed")
    print(f"ok: sinks-and-collapse --quick ({rep['seconds']:.1f} s, reproducible): {len(rep['checks'])} checks, "
          f"{sum(c['holds'] for c in rep['claims'])}/{len(rep['claims'])} claims hold")


def heads(cli, d):
    """`experiment heads --quick`: head importance and pruning (Michel et al. 2019) on the
    default model (2 + 2 short windows of data/sample.txt), or a tiny random-init model when the
    checkout has no default model."""
    out = os.path.join(d, "heads")
    p = run(cli, ["experiment", "heads", "--quick", "--seed", "1", "--out", out, "--threads", "2"])
    check("[heads]" in p.stderr, "heads: no progress lines on stderr")
    rep, html = load_report(out, "heads")
    res = rep["results"]
    for fig in ("fig-pruning", "fig-importance", "fig-similarity"):
        check(f'id="{fig}"' in html, f"heads: report.html lacks {fig}")
    check(res["model_kind"] in ("default", "random-init"), f"heads: model_kind {res['model_kind']}")
    L, H = res["layers"], res["heads"]
    n = L * H
    imp, norm = res["importance"], res["importance_normalized"]
    check(len(imp) == L and all(len(r) == H for r in imp), "heads: importance is not [layers][heads]")
    check(all(x is not None and x >= 0 for r in imp for x in r), "heads: negative or missing importance")
    for l in range(L):  # Michel et al.'s per-layer l2 normalisation, recomputed
        s = math.sqrt(sum(x * x for x in imp[l]))
        check(all(abs(norm[l][h] - imp[l][h] / s) < 1e-9 for h in range(H)),
              f"heads: layer {l} normalised importance disagrees with importance")
    order = res["importance_order"]
    flat = [norm[i // H][i % H] for i in order]
    check(sorted(order) == list(range(n)) and flat == sorted(flat),
          "heads: importance_order is not the heads sorted by normalised importance")
    ks = res["k"]
    check(ks[0] == 0 and ks[-1] == n and ks == sorted(set(ks)) and res["k20"] in ks and res["k40"] in ks,
          f"heads: bad k grid {ks}")
    curves = [res["loss_importance"]] + res["loss_random"]
    raw = res["loss_raw_importance"]
    check(len(raw) == len(ks) and raw[0] == res["base_loss"] and raw[-1] == curves[0][-1],
          "heads: the raw-importance curve does not start at the unpruned loss / end at all-pruned")
    check(len(res["loss_random"]) >= 2 and all(len(c) == len(ks) for c in curves),
          "heads: pruning curves do not match the k grid")
    check(all(c[0] == res["base_loss"] for c in curves), "heads: k = 0 is not the unpruned model")
    check(all(math.isfinite(c[-1]) and c[-1] == curves[0][-1] for c in curves),
          "heads: pruning every head depends on the order or is not finite")
    mean = [sum(c[i] for c in res["loss_random"]) / len(res["loss_random"]) for i in range(len(ks))]
    check(all(abs(a - b) < 1e-9 for a, b in zip(mean, res["loss_random_mean"])), "heads: random mean")
    base = res["base_loss"]
    d20 = curves[0][ks.index(res["k20"])] - base
    d40 = curves[0][ks.index(res["k40"])] - base
    check(abs(d20 - res["delta20"]) < 1e-12 and abs(d40 - res["delta40"]) < 1e-12, "heads: deltas")
    claims = {c["name"]: c for c in rep["claims"]}
    check(claims["20% of heads can be pruned with little loss"]["holds"] == (d20 < res["threshold_nats"]),
          "heads: the 20% claim's verdict disagrees with the numbers")
    check(claims["40% of heads can be pruned with little loss"]["holds"] == (d40 < res["threshold_nats"]),
          "heads: the 40% claim's verdict disagrees with the numbers")
    inner = [i for i, k in enumerate(ks) if 0 < k < n]
    wins = sum(curves[0][i] < mean[i] for i in inner)
    area = sum(curves[0][i] - mean[i] for i in inner)
    check(claims["importance order beats random order"]["holds"] == (4 * wins >= 3 * len(inner) and area < 0),
          "heads: the importance-vs-random claim's verdict disagrees with the numbers")
    sim = res["similarity"]
    check(len(sim["jsd_mean_per_layer"]) == L and
          all(0 <= x <= 1 for x in sim["jsd_mean_per_layer"] + sim["cka_mean_per_layer"]),
          "heads: per-layer JS distance / CKA outside [0, 1]")
    p2 = run(cli, ["experiment", "heads", "--quick", "--seed", "1", "--out", out + "2", "--threads", "2"])
    rep2 = json.load(open(os.path.join(out + "2", "report.json")))
    check(rep2["results"] == res and rep2["summary"] == rep["summary"], "heads: not reproducible")
    print(f"ok: heads --quick ({rep['seconds']:.1f} s, {res['model_kind']} model): "
          f"{len(rep['checks'])} checks, {d20:+.4f} / {d40:+.4f} nats at 20% / 40% pruned")


def interventions(cli, d):
    """`experiment interventions --quick`: BOS removal and massive-activation ablation; every
    verdict recomputed from report.json, and the ablated entries are really the massive ones."""
    out = os.path.join(d, "interventions")
    p = run(cli, ["experiment", "interventions", "--quick", "--seed", "1", "--out", out,
                  "--threads", "2"])
    check("[interventions]" in p.stderr, "interventions: no progress lines on stderr")
    rep, html = load_report(out, "interventions")
    res = rep["results"]
    check(rep["passed"], f"interventions: a check failed {rep['checks']}")
    loss, zero, mean = res["loss"], res["loss_zero_ablation"], res["loss_mean_ablation"]
    check(all(isinstance(x, float) and math.isfinite(x) for x in (loss, zero, mean)),
          "interventions: non-finite losses")
    mas = res["massive"]
    check(mas["entries"] > 0 and 0 <= mas["entries_at_position_0"] <= mas["entries"],
          f"interventions: bad massive entries {mas}")
    check(0 <= mas["layer"] < 64 and mas["ratio_to_layer_mean"] > 1, f"interventions: {mas}")
    claims = {c["name"]: c["holds"] for c in rep["claims"]}
    dz, dm = zero - loss, mean - loss
    rules = {"zeroing the massive activation breaks the model; its mean does not":
             dz >= 0.1 and abs(dm) <= 0.1 * dz}
    if res["bos"] >= 0:
        rules["removing the BOS at inference hurts a model trained with it"] = \
            res["loss_without_bos"] > loss
    check(claims == rules, f"interventions: claims {claims} disagree with the numbers {rules}")
    check("BOS removed" in html or res["bos"] < 0, "interventions: report.html lacks the BOS row")
    print(f"ok: interventions --quick ({rep['seconds']:.1f} s): no BOS "
          f"{(res['loss_without_bos'] or loss) - loss:+.4f}, zero {dz:+.4f}, mean {dm:+.4f}")


def kv_eviction_claim_rules(res):
    """The claims' verdicts recomputed from report.json's numbers."""
    rec, text = res["recall"], res["text"]
    acc = {p["id"]: p["accuracy"] for p in rec["policies"]}
    ppl = {p["id"]: p["perplexity"] for p in text["policies"]}
    full, pts = rec["full_cache"], rec["match_points"]
    labels = {p["id"]: p["label"] for p in rec["policies"]}
    rules = {
        "H2O keeps the full cache's recall with a small budget": acc["h2o"][0] >= full - pts,
        "SnapKV keeps the full cache's recall with a small budget": acc["snapkv"][0] >= full - pts,
        "TOVA beats the window at equal budget":
            all(t < w for t, w in zip(ppl["tova"], ppl["window"])) and
            all(t >= w for t, w in zip(acc["tova"][:-1], acc["window"][:-1])),
    }
    nll = {p["id"]: p["token_nll_smallest_budget"] for p in text["policies"]}
    w0 = text["budgets"][0]
    for base, pinned in (("window", "sink"), ("h2o", "h2o+sinks"), ("tova", "tova+sinks"),
                         ("snapkv", "snapkv+sinks")):
        d = [a - b for a, b in zip(nll[pinned][w0:], nll[base][w0:])]
        mean = sum(d) / len(d)
        se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))
        rules["pinning the first tokens helps " + labels[base]] = mean < -2 * se
    return rules


def kv_eviction(cli, d):
    """`experiment kv-eviction --quick`: recall's MQAR model through every cache policy and
    budget, and the text's perplexity; invariants and every verdict recomputed from report.json."""
    out = os.path.join(d, "kv-eviction")
    p = run(cli, ["experiment", "kv-eviction", "--quick", "--seed", "1", "--out", out, "--threads", "2"])
    check("[kv-eviction]" in p.stderr, "kv-eviction: no progress lines on stderr")
    rep, html = load_report(out, "kv-eviction")
    res = rep["results"]
    check(rep["passed"], f"kv-eviction: a check failed {rep['checks']}")
    for fig in ("fig-recall", "fig-perplexity", "fig-kept-window", "fig-kept-h2o", "fig-kept-snapkv"):
        check(f'id="{fig}"' in html, f"kv-eviction: report.html lacks {fig}")
    rec, text, kept = res["recall"], res["text"], res["kept_map"]
    ids = [p["id"] for p in rec["policies"]]
    check(ids == ["window", "sink", "h2o", "h2o+sinks", "tova", "tova+sinks", "snapkv", "snapkv+sinks"],
          f"kv-eviction: policies {ids}")
    check(rec["budgets"][-1] == rec["sequence"] == 1 + 3 * rec["pairs"] and
          rec["prompt"] == 1 + 2 * rec["pairs"], f"kv-eviction: MQAR sizes {rec}")
    for pol in rec["policies"]:
        check(len(pol["accuracy"]) == len(rec["budgets"]) and
              all(0 <= a <= 1 for a in pol["accuracy"]), f"kv-eviction: accuracy {pol}")
        check(abs(pol["accuracy"][-1] - rec["full_cache"]) * rec["queries"] <=
              max(2, 0.005 * rec["queries"]) + 1e-9,
              f"kv-eviction: {pol['id']} at the whole sequence differs from the full cache")
    for pol in text["policies"]:
        nll = pol["token_nll_smallest_budget"]
        check(len(nll) > text["budgets"][0], f"kv-eviction: {pol['id']} token losses")
        check(abs(math.exp(sum(nll) / len(nll)) - pol["perplexity"][0]) < 1e-6 * pol["perplexity"][0],
              f"kv-eviction: {pol['id']} perplexity is not exp(mean token loss)")
        rel = [p / r - 1 for p, r in zip(pol["perplexity"], text["recompute"])]
        check(all(abs(a - b) < 1e-9 for a, b in zip(rel, pol["relative_to_recompute"])),
              f"kv-eviction: {pol['id']} relative perplexity disagrees")
    check(kept["budget"] in text["budgets"], "kv-eviction: kept map budget")
    for pol in kept["policies"]:
        check(len(pol["rows"]) > 0 and all(len(r) == 64 for r in pol["rows"]),
              f"kv-eviction: kept map of {pol['id']}")
        last = [v for v in pol["rows"][-1] if v is not None]
        check(all(0 <= v <= 1 for v in last), f"kv-eviction: kept shares outside [0, 1] {pol['id']}")
    win = next(p for p in kept["policies"] if p["id"] == "window")["rows"][-1]
    bins = [i for i, v in enumerate(win) if v is not None and v > 0]
    check(bins == list(range(bins[0], bins[-1] + 1)) and win[bins[-1]] is not None,
          "kv-eviction: the window does not keep one contiguous run at the end")
    claims = {c["name"]: c["holds"] for c in rep["claims"]}
    rules = kv_eviction_claim_rules(res)
    check(claims == rules, f"kv-eviction: claims {claims} disagree with the numbers {rules}")
    print(f"ok: kv-eviction --quick ({rep['seconds']:.1f} s): full cache {rec['full_cache']:.3f}, "
          f"recall at {rec['budgets'][0]} keys " +
          ", ".join(f"{p['id']} {p['accuracy'][0]:.2f}" for p in rec["policies"]))


def manipulate_steered(res, sub):
    clean = sub["clean"]["attention_on_target"]
    return any(x["optimised"]["attention_on_target"] - clean >= res["claim_moved"] and
               x["optimised"]["kl"] <= res["claim_kl"] for x in sub["budgets"])


def manipulate_claim_rules(res):
    """The claims' verdicts recomputed from report.json's numbers."""
    s = res["subjects"][0]
    clean, kl = s["clean"]["attention_on_target"], res["claim_kl"]
    control = all(x["random"]["attention_on_target"] - clean <
                  (x["optimised"]["attention_on_target"] - clean) / 3 for x in s["budgets"])
    imp = {x["pattern"]: x for x in s["imposed"]}
    converse = imp["all on the target key"]["kl"] <= kl and imp["each row permuted"]["kl"] <= kl
    rules = {
        "a small input change moves a head's attention without changing the predictions":
            manipulate_steered(res, s),
        "the steering is targeted: a random change of the same norm moves far less": control,
        "imposing a different attention distribution on the head barely changes the predictions":
            converse}
    if len(res["subjects"]) > 1:
        rules["a sink head's attention can be moved freely: it is dormant"] = \
            manipulate_steered(res, res["subjects"][1])
    return rules


def check_manipulate_report(out, name, given=None):
    rep, html = load_report(out, "manipulate")
    res = rep["results"]
    check(rep["passed"], f"{name}: a check failed {rep['checks']}")
    for fig in ("fig-moved-vs-kl", "fig-imposed"):
        check(f'id="{fig}"' in html, f"{name}: report.html lacks {fig}")
    heads, subs = res["heads"], res["subjects"]
    s0 = subs[0]
    if given is None:  # the most focused head among those with alpha_1 < 0.3
        pool = [h for h in heads if h["alpha_1"] < res["sink_alpha"]] or heads
        best = max(pool, key=lambda h: h["focus"])
        check(s0["role"] == "most focused non-sink head" and
              (s0["layer"], s0["head"]) == (best["layer"], best["head"]),
              f"{name}: chose layer {s0['layer']} head {s0['head']}, expected {best}")
    else:
        check(s0["role"] == "given" and (s0["layer"], s0["head"]) == given,
              f"{name}: the given head was not used")
    sink = max(heads, key=lambda h: h["alpha_1"])
    want_sink = sink["alpha_1"] >= res["sink_alpha"] and \
        (sink["layer"], sink["head"]) != (s0["layer"], s0["head"])
    check(len(subs) == 1 + want_sink, f"{name}: {len(subs)} subjects, the sink head expected: {want_sink}")
    if want_sink:
        check(subs[1]["role"] == "strongest sink head" and
              (subs[1]["layer"], subs[1]["head"]) == (sink["layer"], sink["head"]),
              f"{name}: the comparison head is not the strongest sink head")
    check(res["target_key"] == res["positions"] // 2, f"{name}: target key")
    for s in subs:
        clean = s["clean"]
        check(clean["kl"] == 0 and clean["top1_agreement"] == 1,
              f"{name}: the clean run differs from itself")
        for x in s["budgets"]:
            check(x["relative_norm"] <= x["budget"] * (1 + 1e-4), f"{name}: over budget {x}")
            o = x["optimised"]
            check(o["objective"] <= clean["objective"] + 1e-12, f"{name}: the optimiser went uphill {x}")
            j = -o["attention_on_target"] + res["kl_weight"] * max(0.0, o["kl"] - res["claim_kl"])
            check(abs(j - o["objective"]) < 1e-9,
                  f"{name}: objective {o} is not -share + w max(0, KL - bound)")
            check(all(0 <= v[k] <= 1 for v in (o, x["random"])
                      for k in ("attention_on_target", "top1_agreement")),
                  f"{name}: shares outside [0, 1] {x}")
        objs = [x["optimised"]["objective"] for x in s["budgets"]]
        check(all(b <= a + 1e-12 for a, b in zip(objs, objs[1:])),
              f"{name}: a larger budget (started from the smaller one's result) ended worse {objs}")
        imp = {x["pattern"]: x for x in s["imposed"]}
        check(abs(imp["all on the target key"]["attention_on_target"] - 1) < 1e-5,
              f"{name}: imposed mass")
        check(imp["unchanged (explicit path)"]["kl"] < 1e-6,
              f"{name}: the explicit path changed the output")
    claims = {c["name"]: c["holds"] for c in rep["claims"]}
    rules = manipulate_claim_rules(res)
    check(claims == rules, f"{name}: claims {claims} disagree with the numbers {rules}")
    return rep, res


def manipulate(cli, d):
    """`experiment manipulate --quick`: on the default model (or the random-init fallback), and
    with --layer/--head on a Llama-family layout (RoPE, RMSNorm, SwiGLU, GQA, no biases) trained
    here for a few steps; every verdict recomputed from report.json."""
    out = os.path.join(d, "manipulate")
    p = run(cli, ["experiment", "manipulate", "--quick", "--seed", "1", "--out", out, "--threads", "2"])
    check("[manipulate]" in p.stderr, "manipulate: no progress lines on stderr")
    rep, res = check_manipulate_report(out, "manipulate")
    p2 = run(cli, ["experiment", "manipulate", "--quick", "--seed", "1", "--out", out + "2",
                   "--threads", "2"])
    rep2 = json.load(open(os.path.join(out + "2", "report.json")))
    check(rep2["results"] == res, "manipulate: not reproducible")
    s0 = res["subjects"][0]
    b = s0["budgets"][-1]
    print(f"ok: manipulate --quick ({rep['seconds']:.1f} s, {res['model_kind']} model, layer "
          f"{s0['layer']} head {s0['head']}): share {s0['clean']['attention_on_target']:.3f} -> "
          f"{b['optimised']['attention_on_target']:.3f} at KL {b['optimised']['kl']:.4f}; "
          f"{len(res['subjects'])} heads")

    data = os.path.join(d, "data") if os.path.isdir(os.path.join(d, "data")) else make_data(cli, d)
    cfg = os.path.join(d, "llama.json")
    json.dump({"model": {"position": "rope", "rope_layout": "gptj", "norm_type": "rmsnorm",
                         "mlp_activation": "swiglu", "bias": False, "n_kv_head": 2}}, open(cfg, "w"))
    ck = os.path.join(d, "llama-ck")
    run(cli, ["train", "--data", data, "--out", ck, "--config", cfg, "--layers", "2", "--d-model", "32",
              "--heads", "4", "--context", "96", "--steps", "30", "--batch", "4", "--warmup", "5",
              "--eval-every", "30", "--log-every", "30", "--checkpoint-every", "30", "--threads", "2"])
    out = os.path.join(d, "manipulate-llama")
    run(cli, ["experiment", "manipulate", "--quick", "--data", ck, "--layer", "1", "--head", "3",
              "--out", out, "--threads", "2"])
    rep, res = check_manipulate_report(out, "manipulate (llama layout)", given=(1, 3))
    check(res["model_kind"] == "checkpoint", "manipulate (llama layout): not the trained checkpoint")
    run(cli, ["experiment", "manipulate", "--quick", "--data", ck, "--layer", "2", "--head", "0",
              "--out", os.path.join(d, "m-bad")], expect_ok=False, needle="not a head of this model")
    run(cli, ["experiment", "heads", "--quick", "--layer", "0", "--head", "0",
              "--out", os.path.join(d, "h-bad")], expect_ok=False, needle="--layer and --head")
    print(f"ok: manipulate --quick on a Llama-family layout ({rep['seconds']:.1f} s)")


def bad_inputs(cli, d):
    run(cli, ["experiment", "no-such-experiment", "--quick", "--out", os.path.join(d, "x")],
        expect_ok=False, needle="no-such-experiment")
    run(cli, ["experiment", "collapse-training", "--quick", "--data", os.path.join(d, "none"),
              "--out", os.path.join(d, "y")], expect_ok=False, needle="none")
    p = run(cli, ["experiment", "--list"])
    check("collapse-depth" in p.stdout and "collapse-training" in p.stdout,
          "--list does not list the experiments")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", default=os.environ.get("ATTNLAB_BIN"),
                    required="ATTNLAB_BIN" not in os.environ, help="the attnlab binary (default: $ATTNLAB_BIN)")
    cli = ap.parse_args().attnlab
    with tempfile.TemporaryDirectory() as d:
        bad_inputs(cli, d)
        collapse_depth(cli, d)
        collapse_training(cli, d)
        sinks(cli, d)
        heads(cli, d)
        interventions(cli, d)
        sinks_and_collapse(cli, d)
        manipulate(cli, d)
        kv_eviction(cli, d)
    print("all experiment checks passed")


if __name__ == "__main__":
    main()
