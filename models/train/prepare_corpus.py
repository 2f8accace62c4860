#!/usr/bin/python3
"""Extracts the King James Bible from Debian's bible-kjv package as plain text.

The package stores the text compressed (/usr/lib/bible.data); its own `bible`
program is the only decoder, so we ask it for every verse with pretty-printing
off (`-f`), which gives one "Ref text" line per verse.

Output (deterministic, byte-identical on every run):
  train.txt  valid.txt   one verse per line, no references; chapters separated
                         by one blank line; file ends with a newline.
  corpus.json            counts and sha256 of both files.

Held-out split: chapters are numbered 0..1188 in canonical order (Genesis 1 ..
Revelation 22); chapter i goes to valid.txt when i % 20 == 19, i.e. every 20th
chapter (59 chapters, ~5% of the text). Whole chapters, never random lines, so
no verse of a held-out chapter leaks into training.

Licence: the KJV text is in the public domain (translation of 1611; see
/usr/share/doc/bible-kjv-text/copyright). The retrieval software is "unrestricted
use" (Chip Chapin, 1989) and GPL-2+ for the Debian additions; we ship only text
derived from the public-domain translation.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

VALID_EVERY = 20
EXPECTED_VERSES = 31102
EXPECTED_CHAPTERS = 1189
REF_RE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def read_verses(bible_bin, data_dir):
    """Returns [(book, chapter, verse, text)] in canonical order."""
    # -p pins the data directory: `bible` otherwise looks in the current
    # directory first, which would make the output depend on where we run.
    proc = subprocess.run(
        [bible_bin, "-f", "-p", data_dir, "gen1:1-rev22:21"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        check=False)
    if proc.returncode != 0:
        raise SystemExit("prepare_corpus: `%s` failed (%d): %s (is Debian's bible-kjv installed?)"
                         % (bible_bin, proc.returncode, proc.stderr.decode(errors="replace")))
    verses = []
    for n, raw in enumerate(proc.stdout.decode("ascii").splitlines(), 1):
        m = REF_RE.match(raw)
        if not m:
            raise SystemExit("prepare_corpus: line %d of bible output is not 'Ref text': %r" % (n, raw[:80]))
        # Three verses carry a stray double or trailing space; collapse so the
        # text has exactly one space between words.
        text = " ".join(m.group(4).split())
        verses.append((m.group(1), int(m.group(2)), int(m.group(3)), text))
    return verses


def group_chapters(verses):
    chapters = []
    key = None
    for book, chap, _, text in verses:
        if (book, chap) != key:
            chapters.append([])
            key = (book, chap)
        chapters[-1].append(text)
    return chapters


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="work directory for train.txt / valid.txt")
    ap.add_argument("--bible", default="/usr/bin/bible", help="path of bible-kjv's `bible` program")
    ap.add_argument("--data-dir", default="/usr/lib", help="directory holding bible.data")
    ap.add_argument("--max-chapters", type=int, default=0,
                    help="keep only the first N chapters (tiny slices for tests); 0 = all")
    args = ap.parse_args()

    verses = read_verses(args.bible, args.data_dir)
    chapters = group_chapters(verses)
    if len(verses) != EXPECTED_VERSES or len(chapters) != EXPECTED_CHAPTERS:
        raise SystemExit("prepare_corpus: expected %d verses in %d chapters, got %d in %d"
                         % (EXPECTED_VERSES, EXPECTED_CHAPTERS, len(verses), len(chapters)))
    if args.max_chapters > 0:
        chapters = chapters[:args.max_chapters]

    train, valid = [], []
    for i, chap in enumerate(chapters):
        (valid if i % VALID_EVERY == VALID_EVERY - 1 else train).append("\n".join(chap))
    if not train or not valid:
        raise SystemExit("prepare_corpus: --max-chapters %d leaves no validation chapter (need >= %d)"
                         % (args.max_chapters, VALID_EVERY))

    os.makedirs(args.out, exist_ok=True)
    meta = {"source": "Debian bible-kjv-text (/usr/lib/bible.data), King James Version, public domain",
            "split": "chapter i (0-based, canonical order) is held out when i %% %d == %d" % (VALID_EVERY, VALID_EVERY - 1)}
    for name, blocks in (("train", train), ("valid", valid)):
        path = os.path.join(args.out, name + ".txt")
        text = "\n\n".join(blocks) + "\n"
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        meta[name] = {"file": name + ".txt", "chapters": len(blocks), "bytes": len(text.encode()),
                      "sha256": sha256(path)}
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    total = meta["train"]["bytes"] + meta["valid"]["bytes"]
    print("prepare_corpus: %d train chapters (%d bytes), %d valid chapters (%d bytes, %.2f%%)"
          % (len(train), meta["train"]["bytes"], len(valid), meta["valid"]["bytes"],
             100.0 * meta["valid"]["bytes"] / total))


if __name__ == "__main__":
    sys.exit(main())
