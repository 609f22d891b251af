#!/usr/bin/env python3
"""An independent byte-level BPE encoder for Hugging Face's tokenizer.json,
written from the format's documentation: the oracle gpu/bpe_tokenizer is
checked against (tests/gpu/bpe_tokenizer_test.cpp).

It differs from the C++ on purpose where it can: Python's `regex` module
instead of PCRE2, added tokens found by one alternation per kind (those not
normalized in the raw text, then the normalized ones in the text normalized
by Python's unicodedata), and GPT-2's original merge loop (lowest-ranked
pair, every occurrence, again) instead of a heap.

usage: bpe_reference.py TOKENIZER_JSON TEXTS_JSON
TEXTS_JSON is a list of strings; prints a JSON list of id lists.
"""

import json
import sys
import unicodedata

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
          + list(range(0xAE, 0xFF + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()


def split(text, pattern, behavior, invert):
    segs = []
    prev = 0
    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        if m.start() > prev:
            segs.append([prev, m.start(), False])
        segs.append([m.start(), m.end(), True])
        prev = m.end()
    if prev < len(text):
        segs.append([prev, len(text), False])
    if invert:
        for s in segs:
            s[2] = not s[2]
    out = []
    if behavior == "Removed":
        out = [s for s in segs if not s[2]]
    elif behavior == "Isolated":
        out = segs
    elif behavior == "MergedWithPrevious":
        prev_match = False
        for s in segs:
            if s[2] and not prev_match and out:
                out[-1][1] = s[1]
            else:
                out.append(list(s))
            prev_match = s[2]
    elif behavior == "MergedWithNext":
        next_match = False
        for s in reversed(segs):
            if s[2] and not next_match and out:
                out[-1][0] = s[0]
            else:
                out.append(list(s))
            next_match = s[2]
        out.reverse()
    elif behavior == "Contiguous":
        prev_match = False
        for s in segs:
            if s[2] == prev_match and out:
                out[-1][1] = s[1]
            else:
                out.append(list(s))
            prev_match = s[2]
    else:
        raise ValueError(behavior)
    return [text[a:b] for a, b, _ in out if b > a]


def flatten_normalizers(step):
    if step is None:
        return []
    if step["type"] == "Sequence":
        return [f for n in step["normalizers"] for f in flatten_normalizers(n)]
    if step["type"] in ("NFC", "NFD", "NFKC", "NFKD"):
        return [step["type"]]
    raise ValueError(step["type"])


def added_alternation(tokens):
    """One regex finding these added tokens (longest first at a position):
    group 2k+1 the match with lstrip/rstrip, group 2k+2 the token itself."""
    parts = []
    for content in sorted(tokens, key=len, reverse=True):
        t = tokens[content]
        body = regex.escape(content)
        if t.get("single_word"):
            body = r"(?<![\w])" + body + r"(?![\w])"
        lead = r"\s*" if t.get("lstrip") else ""
        trail = r"\s*" if t.get("rstrip") else ""
        parts.append("(" + lead + "(" + body + ")" + trail + ")")
    return regex.compile("|".join(parts)) if parts else None


def flatten_steps(step):
    if step is None:
        return []
    if step["type"] == "Sequence":
        return [s for p in step["pretokenizers"] for s in flatten_steps(p)]
    return [step]


class Reference:
    def __init__(self, doc):
        model = doc["model"]
        self.vocab = model["vocab"]
        self.ranks = {}
        for k, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = k
        self.ignore_merges = model.get("ignore_merges", False)
        self.steps = flatten_steps(doc.get("pre_tokenizer"))
        self.normalizers = flatten_normalizers(doc.get("normalizer"))
        # Tokens not normalized match the raw text; normalized ones the text
        # normalized, by their content normalized.
        self.raw_added, self.norm_added = {}, {}
        for t in doc.get("added_tokens") or []:
            if t.get("normalized", not t.get("special", False)):
                self.norm_added[self.normalize(t["content"])] = t
            else:
                self.raw_added[t["content"]] = t
        self.prefix, self.suffix = [], []
        post = doc.get("post_processor")
        posts = [] if post is None else (post["processors"] if post["type"] == "Sequence" else [post])
        for p in posts:
            if p["type"] != "TemplateProcessing":
                continue
            after = False
            for item in p["single"]:
                if "Sequence" in item:
                    after = True
                    continue
                ids = p["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                (self.suffix if after else self.prefix).extend(ids)
        self.raw_re = added_alternation(self.raw_added)
        self.norm_re = added_alternation(self.norm_added)

    def normalize(self, text):
        for form in self.normalizers:
            text = unicodedata.normalize(form, text)
        return text

    def bpe(self, word):
        symbols = "".join(BYTE_CHAR[b] for b in word.encode("utf-8"))
        if self.ignore_merges and symbols in self.vocab:
            return [self.vocab[symbols]]
        parts = list(symbols)
        while len(parts) > 1:
            ranked = [(self.ranks.get((parts[i], parts[i + 1]), None), i) for i in range(len(parts) - 1)]
            ranked = [r for r in ranked if r[0] is not None]
            if not ranked:
                break
            best = min(ranked)[0]
            pair = next((parts[i], parts[i + 1]) for r, i in ranked if r == best)
            merged = []
            i = 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return [self.vocab[p] for p in parts]

    def pre_tokenize(self, text):
        if not text:
            return []  # no piece between two added tokens
        pieces = [text]
        for step in self.steps:
            out = []
            for p in pieces:
                if step["type"] == "Split":
                    pat = step["pattern"]
                    rx = regex.compile(pat["Regex"]) if "Regex" in pat else regex.compile(regex.escape(pat["String"]))
                    out.extend(split(p, rx, step.get("behavior", "Isolated"), step.get("invert", False)))
                elif step["type"] == "Digits":
                    rx = regex.compile(r"\p{N}" if step.get("individual_digits") else r"\p{N}+")
                    out.extend(split(p, rx, "Isolated", False))
                elif step["type"] == "ByteLevel":
                    if step.get("add_prefix_space") and not p.startswith(" "):
                        p = " " + p
                    if step.get("use_regex", True):
                        out.extend(split(p, regex.compile(GPT2_PATTERN), "Isolated", False))
                    else:
                        out.append(p)
                else:
                    raise ValueError(step["type"])
            pieces = out
        return pieces

    def encode_text(self, text):
        return [i for w in self.pre_tokenize(text) for i in self.bpe(w)]

    @staticmethod
    def split_added(text, rx, tokens, on_text, ids):
        pos = 0
        if rx is not None:
            for m in rx.finditer(text):
                on_text(text[pos:m.start()])
                content = next(g for g in m.groups()[1::2] if g is not None)
                ids.append(tokens[content]["id"])
                pos = m.end()
        on_text(text[pos:])

    def encode(self, text):
        ids = list(self.prefix)

        def normalized_piece(piece):
            self.split_added(self.normalize(piece), self.norm_re, self.norm_added,
                             lambda rest: ids.extend(self.encode_text(rest)), ids)

        self.split_added(text, self.raw_re, self.raw_added, normalized_piece, ids)
        return ids + self.suffix


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        ref = Reference(json.load(f))
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = json.load(f)
    json.dump([ref.encode(t) for t in texts], sys.stdout)


if __name__ == "__main__":
    main()
