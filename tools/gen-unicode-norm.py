#!/usr/bin/env python3
"""Writes gpu/unicode_norm_data.inc, the tables gpu/unicode_norm.cpp
normalizes with, from Python's unicodedata (stdlib only):

  ccc_ranges       runs of code points with one non-zero canonical combining class
  canonical        cp -> its full canonical decomposition (NFD), Hangul excluded
  compatibility    cp -> its full compatibility decomposition (NFKD), where
                   that differs from the canonical one
  decomposition_pool  the code points both decomposition tables point into
  compositions     (first, second) -> primary composite, Hangul excluded
  *_stable_below   per form, the code point below which no text can change
                   (checked here, pair by pair, not assumed)

The output depends only on unicodedata.unidata_version; run it again with a
Python of the Unicode version wanted.

usage: tools/gen-unicode-norm.py [OUT]   (OUT: gpu/unicode_norm_data.inc)
"""

import os
import sys
import unicodedata

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3
SURROGATE_FIRST, SURROGATE_LAST = 0xD800, 0xDFFF

# The thresholds the normalizer's fast path was designed around; the
# generator refuses to write tables that would break them.
EXPECTED_STABLE_BELOW = {"NFC": 0x300, "NFD": 0xC0, "NFKC": 0xA0, "NFKD": 0xA0}


def code_points():
    """Every scalar value, Hangul syllables included."""
    for cp in range(0x110000):
        if not SURROGATE_FIRST <= cp <= SURROGATE_LAST:
            yield cp


def ccc_ranges():
    ranges = []
    for cp in code_points():
        ccc = unicodedata.combining(chr(cp))
        if ccc == 0:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == ccc:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, ccc])
    return ranges


class Pool:
    """Decompositions stored once: a new one is looked for in what is there."""

    def __init__(self):
        self.text = ""

    def add(self, seq):
        at = self.text.find(seq)
        if at < 0:
            at = len(self.text)
            self.text += seq
        assert at + len(seq) < 1 << 16 and len(seq) < 1 << 16
        return at, len(seq)


def decompositions(pool):
    canonical, compat = [], []
    for cp in code_points():
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        c = chr(cp)
        nfd = unicodedata.normalize("NFD", c)
        nfkd = unicodedata.normalize("NFKD", c)
        if nfd != c:
            canonical.append((cp, *pool.add(nfd)))
        if nfkd != nfd:
            compat.append((cp, *pool.add(nfkd)))
    return canonical, compat


def compositions():
    pairs = []
    for cp in code_points():
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) != 2 or unicodedata.normalize("NFC", chr(cp)) != chr(cp):
            continue
        # The normalizer composes only onto a starter and keeps the result
        # one (it never looks the composite's class up again).
        assert unicodedata.combining(chr(parts[0])) == 0, hex(cp)
        assert unicodedata.combining(chr(cp)) == 0, hex(cp)
        pairs.append((parts[0], parts[1], cp))
    pairs.sort()
    return pairs


def stable_below(form):
    """The least code point that alone changes under `form`, is a
    non-starter or decomposes to one first; then every pair of code points
    under it is checked to stay as it is, which (each one a stable starter)
    makes every text of them stable."""
    limit = next(cp for cp in code_points()
                 if unicodedata.normalize(form, chr(cp)) != chr(cp)
                 or unicodedata.combining(chr(cp)) != 0
                 or unicodedata.combining(unicodedata.normalize("NFD", chr(cp))[0]) != 0)
    for a in range(limit):
        for b in range(limit):
            s = chr(a) + chr(b)
            if unicodedata.normalize(form, s) != s:
                sys.exit(f"{form}: U+{a:04X} U+{b:04X} changes; no simple threshold")
    return limit


def wrapped(items, indent="  ", width=100):
    lines, line = [], indent
    for item in items:
        piece = item + ","
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def table(kind, name, rows):
    return f"constexpr {kind} {name}[] = {{\n{wrapped(rows)}\n}};\n"


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "unicode_norm_data.inc")
    version = unicodedata.unidata_version
    thresholds = {form: stable_below(form) for form in ("NFC", "NFD", "NFKC", "NFKD")}
    for form, want in EXPECTED_STABLE_BELOW.items():
        if thresholds[form] != want:
            sys.exit(f"{form} is stable below U+{thresholds[form]:04X}, not U+{want:04X}: "
                     "check the fast paths in gpu/unicode_norm.cpp")
    ccc = ccc_ranges()
    pool = Pool()
    canonical, compat = decompositions(pool)
    pairs = compositions()

    text = [
        "// Generated by tools/gen-unicode-norm.py from Python's unicodedata, Unicode",
        f"// {version}: do not edit. Regenerate with `python3 tools/gen-unicode-norm.py`.",
        "// Included by gpu/unicode_norm.cpp inside its anonymous namespace, after",
        "// the definitions of ccc_range, decomposition and composition.",
        f"// {len(ccc)} ccc ranges, {len(canonical)} canonical and {len(compat)} compatibility",
        f"// decompositions in a pool of {len(pool.text)} code points, {len(pairs)} compositions.",
        "",
        f'constexpr std::string_view unicode_version = "{version}";',
        "",
        "// Below these, no text changes under the form (each a starter that",
        "// stays, no two composing).",
    ]
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        text.append(f"constexpr std::uint32_t {form.lower()}_stable_below = 0x{thresholds[form]:04X};")
    text.append("")
    text.append("// {first, last, ccc}: the non-zero canonical combining classes, by code point.")
    text.append(table("ccc_range", "ccc_ranges", (f"{{0x{a:04X}, 0x{b:04X}, {c}}}" for a, b, c in ccc)))
    text.append("// {code point, offset, length} into decomposition_pool, by code point.")
    text.append(table("decomposition", "canonical_decompositions",
                      (f"{{0x{cp:04X}, {o}, {n}}}" for cp, o, n in canonical)))
    text.append(table("decomposition", "compatibility_decompositions",
                      (f"{{0x{cp:04X}, {o}, {n}}}" for cp, o, n in compat)))
    text.append(table("std::uint32_t", "decomposition_pool", (f"0x{ord(c):X}" for c in pool.text)))
    text.append("// {first, second, composite}: the primary composites, by (first, second).")
    text.append(table("composition", "compositions",
                      (f"{{0x{a:04X}, 0x{b:04X}, 0x{c:04X}}}" for a, b, c in pairs)))
    with open(out_path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(text))
    print(f"Unicode {version}: {len(ccc)} ccc ranges, {len(canonical)} canonical + {len(compat)} "
          f"compatibility decompositions, pool {len(pool.text)}, {len(pairs)} compositions; "
          + ", ".join(f"{k} stable below U+{v:04X}" for k, v in thresholds.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
