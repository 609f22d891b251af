#!/usr/bin/env python3
"""Unicode normalization by Python's unicodedata: the oracle gpu/unicode_norm
is checked against (tests/gpu/unicode_norm_test.cpp). Its tables come from
the same module (tools/gen-unicode-norm.py), its algorithm does not.

usage: unicode_norm_reference.py FORM TEXTS_JSON
       unicode_norm_reference.py --version
FORM is NFC, NFD, NFKC or NFKD (any case); TEXTS_JSON is a list of strings.
Prints the JSON list of their normalized forms, ASCII only (\\u escapes), or
with --version the Unicode version of unicodedata.
"""

import json
import sys
import unicodedata


def main():
    if sys.argv[1:] == ["--version"]:
        print(unicodedata.unidata_version)
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    form = sys.argv[1].upper()
    if form not in ("NFC", "NFD", "NFKC", "NFKD"):
        sys.exit(f"unknown form {sys.argv[1]!r}")
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = json.load(f)
    # The texts are well-formed UTF-8, so no lone surrogate reaches the output.
    # One write: json.dump would write a million small pieces.
    sys.stdout.write(json.dumps([unicodedata.normalize(form, t) for t in texts], ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
