#!/usr/bin/python3
"""The report layer in a real browser: `attnlab report-demo` rendered by headless Chromium.

Run by ctest as: /usr/bin/python3 report_chromium_test.py --attnlab <path to the CLI>
Exits non-zero on any failed check, and also (never a silent pass) if Chromium is missing:
scripts/setup.sh installs it (Debian package `chromium`). $ATTNLAB_CHROMIUM overrides the path.

What it checks, in order:
  1. The demo writes report.html, report.json and sink_map.csv, and a second run writes the same
     bytes (the footer's date is fixed with --date).
  2. The HTML as a file: no script, no external resource (only #fragment links and data: images),
     a Content-Security-Policy that forbids fetching anything; every inline <svg> is well-formed
     XML; every embedded PNG has valid chunk CRCs and a zlib stream that the real zlib inflates to
     the size its header promises; report.json names the same sections and figures as the page;
     the CSV reads back with Python's csv module.
  3. Chromium's DOM (--dump-dom): every expected section and figure id is there, no <script>
     element exists although the page shows text that looks like one, and invalid UTF-8 in the
     model text arrived as U+FFFD.
  4. Chromium's screenshot of the whole page (--screenshot), decoded here with zlib + numpy: the
     right size, not blank (many distinct colours, a large share of non-background pixels), and
     the colours that prove each kind of element was painted: the summary box, Okabe-Ito blue and
     orange (line and bar series), both ends of viridis (the heatmaps) and the grey of masked
     cells, which only the embedded PNG heatmap contains (so data: images were allowed and drawn).
This is the template for testing the reports of analyze, stream --compare, experiments, bench.
"""

import argparse
import base64
import csv
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

import numpy as np

SECTION_IDS = ["summary", "contents", "overview", "sink-map", "entropy", "attention-map",
               "cache-policies", "scatter", "tokens", "footer"]
FIGURE_IDS = ["fig-sink-map", "fig-entropy", "fig-sink-vs-length", "fig-attention-map",
              "fig-policies", "fig-scatter"]
DATE = "2025-01-01 00:00 UTC"
WINDOW = (1200, 5600)  # width, height: the whole demo page (about 5200 px tall)

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
        print("FAIL: " + message, flush=True)
    return cond


def die(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def find_chromium():
    override = os.environ.get("ATTNLAB_CHROMIUM")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        die("$ATTNLAB_CHROMIUM=%s is not an executable file" % override)
    for c in [shutil.which("chromium"), "/usr/bin/chromium"]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    die("Chromium not found (looked for `chromium` on PATH and /usr/bin/chromium). "
        "Run scripts/setup.sh, which installs the Debian package `chromium`; this test renders the "
        "HTML report in it and must not pass without it.")


def run_chromium(chromium, tmp, extra_args, url):
    """Runs headless Chromium with a fresh profile; returns stdout (bytes)."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--force-device-scale-factor=1", "--user-data-dir=" + profile] + extra_args + [url]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180)
    except subprocess.TimeoutExpired:
        die("Chromium did not finish within 180 s: " + " ".join(cmd))
    if r.returncode != 0:
        die("Chromium exited with %d: %s\n%s" % (r.returncode, " ".join(cmd),
                                                  r.stderr.decode(errors="replace")[-3000:]))
    return r.stdout


# ---------------------------------------------------------------------------------------------
# HTML inspection

class PageParser(html.parser.HTMLParser):
    """Collects ids, tag counts, link/image targets, meta tags and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.tags, self.urls, self.metas, self.text = [], {}, [], [], []
        self.sections, self.figures = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if "id" in a:
            self.ids.append(a["id"])
            if tag in ("section", "nav", "footer"):
                self.sections.append(a["id"])
            if tag == "figure":
                self.figures.append(a["id"])
        for name in ("href", "src", "xlink:href", "action", "data", "poster", "srcset"):
            if name in a and a[name] is not None:
                self.urls.append((tag, name, a[name]))
        if tag == "meta":
            self.metas.append(a)

    def handle_data(self, data):
        self.text.append(data)


def parse_page(text):
    p = PageParser()
    p.feed(text)
    p.close()
    p.text = "".join(p.text)
    return p


def top_level_svgs(text):
    """The outermost <svg>...</svg> substrings (plots nest <svg> viewports for clipping)."""
    out, depth, start = [], 0, 0
    for m in re.finditer(r"<svg\b|</svg>", text):
        if m.group(0) == "</svg>":
            depth -= 1
            if depth == 0:
                out.append(text[start:m.end()])
        else:
            if depth == 0:
                start = m.start()
            depth += 1
    return out


def check_png_bytes(png, where):
    """Signature, chunk CRCs (zlib.crc32), and IDAT inflating (real zlib) to the promised size."""
    if not check(png[:8] == b"\x89PNG\r\n\x1a\n", where + ": not a PNG signature"):
        return
    i, idat, ihdr = 8, b"", None
    while i < len(png):
        n, = struct.unpack(">I", png[i:i + 4])
        ctype, body = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        crc, = struct.unpack(">I", png[i + 8 + n:i + 12 + n])
        check(zlib.crc32(ctype + body) == crc, "%s: bad CRC in chunk %r" % (where, ctype))
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat += body
        i += 12 + n
    if not check(ihdr is not None, where + ": no IHDR"):
        return
    w, h, depth, color_type = ihdr[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    raw = zlib.decompress(idat)
    check(len(raw) == h * (1 + w * channels * depth // 8),
          "%s: IDAT inflates to %d bytes, expected %d" % (where, len(raw), h * (1 + w * channels)))
    return w, h


# ---------------------------------------------------------------------------------------------
# PNG decoding for the screenshot (8-bit RGB or RGBA, not interlaced; all five filter types)

def decode_png(data):
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "screenshot is not a PNG")
    i, idat, ihdr = 8, [], None
    while i < len(data):
        n, = struct.unpack(">I", data[i:i + 4])
        ctype, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat.append(body)
        i += 12 + n
    w, h, depth, color_type, _, _, interlace = ihdr
    if depth != 8 or color_type not in (2, 6) or interlace != 0:
        die("unsupported screenshot PNG format: depth %d, colour type %d, interlace %d"
            % (depth, color_type, interlace))
    bpp = 3 if color_type == 2 else 4
    stride = w * bpp
    raw = zlib.decompress(b"".join(idat))
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1)
        if f == 0:
            cur = line.copy()
        elif f == 1:  # Sub: a running sum per channel
            cur = (np.cumsum(line.reshape(w, bpp).astype(np.int64), axis=0) % 256)
            cur = cur.astype(np.uint8).reshape(-1)
        elif f == 2:  # Up
            cur = (line.astype(np.uint16) + prev).astype(np.uint8)
        else:  # Average, Paeth: sequential within the row
            cur, p = bytearray(line.tobytes()), prev.tobytes()
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                b = p[x]
                if f == 3:
                    cur[x] = (cur[x] + ((a + b) >> 1)) & 255
                else:
                    c = p[x - bpp] if x >= bpp else 0
                    q = a + b - c
                    pa, pb, pc = abs(q - a), abs(q - b), abs(q - c)
                    cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.frombuffer(bytes(cur), dtype=np.uint8)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)[:, :, :3]


def count_near(img, rgb, tol=8):
    d = np.abs(img.astype(np.int16) - np.array(rgb, dtype=np.int16)).max(axis=2)
    return int((d <= tol).sum())


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True, help="path to the attnlab CLI")
    ap.add_argument("--keep", help="copy the demo and screenshot to this directory")
    args = ap.parse_args()
    chromium = find_chromium()  # first: a missing browser fails before anything else

    with tempfile.TemporaryDirectory(prefix="attnlab-report-") as tmp:
        out = os.path.join(tmp, "demo")
        # 1. Demo files, twice.
        files = ["report.html", "report.json", "sink_map.csv"]
        contents = []
        for _ in range(2):
            r = subprocess.run([args.attnlab, "report-demo", "--out", out, "--date", DATE],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            if r.returncode != 0:
                die("attnlab report-demo failed (%d): %s" % (r.returncode, r.stderr.decode()))
            contents.append([open(os.path.join(out, f), "rb").read() for f in files])
        for f, a, b in zip(files, contents[0], contents[1]):
            check(a == b, "%s differs between two runs of the demo" % f)
        page_bytes = contents[0][0]

        # 2. The file itself.
        try:
            page_text = page_bytes.decode("utf-8")
        except UnicodeDecodeError as e:
            die("report.html is not valid UTF-8: %s" % e)
        page = parse_page(page_text)
        for tag in ("script", "link", "iframe", "object", "embed", "base", "img"):
            check(page.tags.get(tag, 0) == 0, "report.html contains <%s>" % tag)
        for tag, name, url in page.urls:
            ok = url.startswith("#") or url.startswith("data:image/png;base64,")
            check(ok, "external reference %s %s=%r" % (tag, name, url[:80]))
            if url.startswith("#"):
                check(url[1:] in page.ids, "link to a missing id %r" % url)
        no_ns = page_text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        check(not re.search(r"https?:|@import|url\(", no_ns), "report.html refers to a URL")
        csp = [m for m in page.metas
               if (m.get("http-equiv") or "").lower() == "content-security-policy"]
        check(len(csp) == 1 and "default-src 'none'" in csp[0].get("content", ""),
              "no Content-Security-Policy forbidding external resources")
        svgs = top_level_svgs(page_text)
        check(len(svgs) == len(FIGURE_IDS), "expected %d inline SVGs, found %d"
              % (len(FIGURE_IDS), len(svgs)))
        for k, svg in enumerate(svgs):
            try:
                ET.fromstring(svg)
            except ET.ParseError as e:
                check(False, "inline SVG #%d is not well-formed XML: %s" % (k, e))
        pngs = re.findall(r'href="data:image/png;base64,([A-Za-z0-9+/=]*)"', page_text)
        check(len(pngs) >= 1, "no embedded PNG heatmap")
        for k, b64 in enumerate(pngs):
            size = check_png_bytes(base64.b64decode(b64, validate=True), "embedded PNG #%d" % k)
            check(size == (256, 256), "embedded PNG #%d is %s, expected 256 x 256" % (k, size))
        outline = json.loads(contents[0][1])["report"]
        json_sections = [s["id"] for s in outline["sections"]]
        page_sections = [s for s in page.sections if s not in ("summary", "contents", "footer")]
        check(json_sections == page_sections,
              "report.json sections %s != page sections %s" % (json_sections, page.sections))
        json_figures = [f for s in outline["sections"] for f in s["figures"]]
        check(json_figures == page.figures, "report.json figures %s != page figures %s"
              % (json_figures, page.figures))
        rows = list(csv.reader(contents[0][2].decode("utf-8").splitlines()))
        check(rows[0] == ["layer", "head", "attention_on_token0"] and len(rows) == 145,
              "sink_map.csv: header %s, %d rows" % (rows[0], len(rows)))
        check(all(0 <= float(r[2]) <= 1 for r in rows[1:]), "sink_map.csv: values outside [0, 1]")

        # 3. Chromium's DOM.
        url = "file://" + os.path.join(out, "report.html")
        dom_text = run_chromium(chromium, tmp, ["--dump-dom"], url).decode("utf-8", "replace")
        dom = parse_page(dom_text)
        for sid in SECTION_IDS:
            check(sid in dom.sections, "section id %r missing from the DOM" % sid)
        for fid in FIGURE_IDS:
            check(fid in dom.figures, "figure id %r missing from the DOM" % fid)
        check(dom.tags.get("script", 0) == 0, "the DOM has a <script> element")
        check('<script>alert("not run")</script>' in dom.text,
              "the model text that looks like markup is not shown as text")
        check("\ufffd" in dom.text, "invalid UTF-8 did not arrive as U+FFFD")
        check(dom.tags.get("svg", 0) >= len(FIGURE_IDS), "the DOM has too few <svg> elements")
        check(dom.tags.get("image", 0) >= 1, "the DOM has no SVG <image> (the PNG heatmap)")

        # 4. The screenshot.
        shot = os.path.join(tmp, "report.png")
        run_chromium(chromium, tmp, ["--screenshot=" + shot,
                                     "--window-size=%d,%d" % WINDOW], url)
        if not os.path.exists(shot):
            die("Chromium wrote no screenshot")
        img = decode_png(open(shot, "rb").read())
        h, w = img.shape[:2]
        check((w, h) == WINDOW, "screenshot is %d x %d, expected %d x %d" % (w, h, *WINDOW))
        flat = img.reshape(-1, 3).astype(np.uint32)
        distinct = len(np.unique(flat[:, 0] << 16 | flat[:, 1] << 8 | flat[:, 2]))
        white = count_near(img, (255, 255, 255), 3)
        background = count_near(img, (0xf3, 0xf4, 0xf6), 3)
        ink = h * w - white - background
        print("screenshot: %d x %d, %d distinct colours, %.1f%% ink (neither white nor page grey)"
              % (w, h, distinct, 100.0 * ink / (h * w)))
        check(distinct >= 500, "screenshot looks blank: only %d distinct colours" % distinct)
        check(ink >= 0.05 * h * w, "screenshot looks blank: %.2f%% ink" % (100.0 * ink / (h * w)))
        # (name, colour, tolerance per channel, minimum pixels). The summary box's blue-white is
        # within 5 of the page's grey, hence its tolerance of 2.
        for name, rgb, tol, minimum in [
                ("summary box background #eef6fb", (0xee, 0xf6, 0xfb), 2, 20000),
                ("series blue #0072b2 (lines, bars, markers)", (0x00, 0x72, 0xb2), 8, 300),
                ("series orange #e69f00", (0xe6, 0x9f, 0x00), 8, 300),
                ("viridis dark end #440154 (heatmaps)", (0x44, 0x01, 0x54), 8, 300),
                ("missing-value grey #a0a0a0 (the PNG heatmap's masked cells)",
                 (0xa0, 0xa0, 0xa0), 4, 20000)]:
            n = count_near(img, rgb, tol)
            print("  %-62s %8d px" % (name, n))
            check(n >= minimum,
                  "screenshot: %s: %d pixels, expected at least %d" % (name, n, minimum))
        r, g, b = (img[:, :, k].astype(np.int16) for k in range(3))
        yellow = int(((r > 150) & (g > 190) & (b < 110)).sum())
        print("  %-62s %8d px" % ("viridis yellow-green top (sink cells, colour bars)", yellow))
        check(yellow >= 2000, "screenshot: only %d viridis yellow-green pixels" % yellow)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in files + ["report.png"]:
                shutil.copy(os.path.join(out if f != "report.png" else tmp, f), args.keep)

    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("ok: report rendered by %s; sections, figures, escaping and pixels as expected"
          % chromium)


if __name__ == "__main__":
    main()
