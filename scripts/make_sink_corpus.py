#!/usr/bin/python3
"""The training mix of the default model's second stage (docs/DEFAULT_MODEL.md; issue 18).

More English text than the Brown corpus, from Debian packages, tokenised with the default model's
own BPE vocabulary (learnt from Brown), so the held-out Brown documents and their loss stay
comparable:

  brown        Brown's 475 training documents, twice (the validation text is Brown's)
  bible        the King James Bible (Debian bible-kjv + bible-kjv-text), one document per chapter,
               verse references stripped
  fortunes     Debian fortunes (fortunes-min + fortunes), fortunes grouped into ~2000-character
               documents
  python docs  every other .rst source of the Python 3.11 documentation (Debian python3.11-doc),
               one document per file, blank lines collapsed

usage: make_sink_corpus.py ATTNLAB BROWN_DATA_DIR OUT_DIR
  BROWN_DATA_DIR: `attnlab prepare --corpus brown --tokenizer bpe:4096` output (its tokenizer.json,
  train.tok and validation files); OUT_DIR gets train.tok (the mix) and Brown's validation files.
Writes OUT_DIR/mix.json with the token count of each part.
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np


def read_tokens(path):
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 32 or b[:8] != b"ATLTOKS1":
        sys.exit(f"{path}: not an attnlab token file")
    _, bpt, vocab, _, n = struct.unpack("<IIIIQ", b[8:32])
    if bpt != 2 or len(b) != 32 + 2 * n:
        sys.exit(f"{path}: expected 2-byte tokens and {32 + 2 * n} bytes")
    return np.frombuffer(b[32:], dtype=np.uint16), vocab


def bible_text():
    raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                         errors="replace", check=True).stdout
    chapters, order = {}, []
    for line in raw.splitlines():
        m = re.match(r"^(\S+?)(\d+):(\d+) (.*)$", line)
        if not m:
            if line.strip() and order:
                chapters[order[-1]][-1] += " " + line.strip()
            continue
        key = (m.group(1), m.group(2))
        if key not in chapters:
            chapters[key] = []
            order.append(key)
        chapters[key].append(m.group(4).strip())
    return [" ".join(chapters[k]) for k in order]


def fortunes_text():
    docs = []
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(f) or os.path.isdir(f):
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            items = [x.strip() for x in fh.read().split("\n%\n")]
        cur = ""
        for it in items:
            it = re.sub(r"\n\s*\n+", "\n", it)
            if not it:
                continue
            cur = (cur + "\n" + it) if cur else it
            if len(cur) > 2000:
                docs.append(cur)
                cur = ""
        if cur:
            docs.append(cur)
    return docs


def pydoc_text():
    docs = []
    for f in sorted(glob.glob("/usr/share/doc/python3.11/html/_sources/**/*.txt", recursive=True)):
        with open(f, encoding="utf-8", errors="replace") as fh:
            t = re.sub(r"\n\s*\n+", "\n", fh.read()).strip()
        if t:
            docs.append(t)
    return docs


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cli, brown, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    parts = {}
    for name, docs in (("bible", bible_text()), ("fortunes", fortunes_text()),
                       ("pydoc", pydoc_text())):
        src = os.path.join(out, name + ".txt")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs) + "\n")
        # Every 100th document goes to prepare's validation split, which the mix does not use.
        subprocess.run([cli, "prepare", "--text", src, "--tokenizer",
                        os.path.join(brown, "tokenizer.json"), "--val-every", "100",
                        "--out", os.path.join(out, name)], check=True, stdout=subprocess.DEVNULL)
        parts[name] = read_tokens(os.path.join(out, name, "train.tok"))[0]
    br, vocab = read_tokens(os.path.join(brown, "train.tok"))
    eot = int(br[-1])  # every document ends with the end-of-text token
    py = parts["pydoc"]
    ends = np.nonzero(py == eot)[0]
    starts = np.concatenate([[0], ends[:-1] + 1])
    py_half = np.concatenate([py[s:e + 1] for i, (s, e) in enumerate(zip(starts, ends))
                              if i % 2 == 0])
    mix = [("brown", br), ("brown (second copy)", br), ("bible", parts["bible"]),
           ("fortunes", parts["fortunes"]), ("python docs, every other file", py_half)]
    tokens = np.concatenate([p for _, p in mix]).astype(np.uint16)
    tmp = os.path.join(out, "train.tok.tmp")
    with open(tmp, "wb") as f:
        f.write(b"ATLTOKS1" + struct.pack("<IIIIQ", 1, 2, vocab, 0, len(tokens)))
        f.write(tokens.tobytes())
    os.replace(tmp, os.path.join(out, "train.tok"))
    for x in ("val.tok", "val.txt", "tokenizer.json", "corpus.json"):
        shutil.copy(os.path.join(brown, x), os.path.join(out, x))
    summary = {"total": int(len(tokens)), "parts": {n: int(len(p)) for n, p in mix}}
    with open(os.path.join(out, "mix.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for n, p in mix:
        print(f"{n}: {len(p)} tokens ({len(p) / len(tokens):.1%})")
    print(f"mix: {len(tokens)} tokens in {out}/train.tok")


if __name__ == "__main__":
    main()
