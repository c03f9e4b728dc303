#!/usr/bin/env python3
"""Reference token counts / hashes for tests/test_tokenizer.c (not run by CI).

An encoder independent of src/tokenizer: tiktoken-style rank BPE in plain Python
over the original rank files (qwen.tiktoken, Llama-3's tokenizer.model), with the
pre-tokenizer regexes of data/tokenizers/SOURCES.md rewritten for Python's `re`
(\\p{L} / \\p{N} / \\s spelled out as explicit code point classes). It prints, for
GSM8K train (question then answer, line by line), the number of ids and their
FNV-1a 64 hash, which test_gsm8k_throughput_and_roundtrip asserts.

    python3 tests/golden/tokenizer_reference.py ../shared   # takes ~1 minute
"""
import base64
import json
import re
import sys
import unicodedata

WHITE_SPACE = {9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
WHITE_SPACE |= set(range(0x2000, 0x200B))


def char_class(pred):
    """Code point ranges where pred holds, as the inside of a regex [...] class."""
    out, start = [], None
    for cp in range(0x110000):
        ok = pred(cp)
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    esc = lambda c: "\\U%08x" % c
    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in out)


def category(cp):
    return "Cs" if 0xD800 <= cp <= 0xDFFF else unicodedata.category(chr(cp))


def pretokenizer(digits):
    L = char_class(lambda c: category(c).startswith("L"))
    N = char_class(lambda c: category(c).startswith("N"))
    S = char_class(lambda c: c in WHITE_SPACE)
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{L}{N}]?[{L}]+|[{N}]" + digits +
           r"| ?[^{S}{L}{N}]+[\r\n]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+")
    return re.compile(pat.replace("{L}", L).replace("{N}", N).replace("{S}", S))


def load_ranks(path):
    ranks = {}
    for line in open(path, "rb"):
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def rank_bpe(ranks, word):
    if word in ranks:
        return [ranks[word]]
    parts = [bytes([b]) for b in word]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return [ranks[p] for p in parts]
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
    texts = []
    for line in open(shared + "/data/gsm8k/train.jsonl"):
        j = json.loads(line)
        texts += [j["question"], j["answer"]]
    cases = [("qwen2.5", "qwen.tiktoken", "", True), ("llama3", "tokenizer.model", "{1,3}", False)]
    for name, rank_file, digits, nfc in cases:
        ranks = load_ranks("%s/data/tokenizers/%s/%s" % (shared, name, rank_file))
        rx, cache = pretokenizer(digits), {}
        h, n = 1469598103934665603, 0
        for text in texts:  # GSM8K holds no special-token strings
            text = unicodedata.normalize("NFC", text) if nfc else text
            for m in rx.finditer(text):
                w = m.group().encode()
                if w not in cache:
                    cache[w] = rank_bpe(ranks, w)
                for x in cache[w]:
                    h = ((h ^ x) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
                    n += 1
        print("%s: %d ids, fnv1a64 0x%016x" % (name, n, h))


if __name__ == "__main__":
    main()
