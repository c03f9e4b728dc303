#!/usr/bin/env python3
"""Reference for tests/test_dataset.c (not run by CI).

Rebuilds the rows that verl's examples/data_preprocess/gsm8k.py produces from
the raw openai GSM8K JSON lines (same fields, same order, json.dumps defaults,
one object per line) and prints the FNV-1a 64-bit hash and the row count of
that text for each split. test_gsm8k_real_files compares df_gsm8k_convert's
output against these numbers, so the converter stays byte-identical to what
Python writes for verl's row dicts.

usage: python3 tests/golden/gsm8k_verl_reference.py [../shared/data/gsm8k]
"""
import json
import re
import sys

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def final_answer(answer):
    m = re.search(r"#### (\-?[0-9\.\,]+)", answer)
    return m.group(1).replace(",", "")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/gsm8k"
    for split in ("train", "test"):
        lines = []
        with open(f"{root}/{split}.jsonl", encoding="utf-8") as f:
            for idx, raw in enumerate(l for l in f if l.strip()):
                rec = json.loads(raw)
                row = {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": rec["question"] + " " + INSTRUCTION}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": final_answer(rec["answer"])},
                    "extra_info": {"split": split, "index": idx, "answer": rec["answer"],
                                   "question": rec["question"]},
                }
                lines.append(json.dumps(row) + "\n")
        text = "".join(lines).encode("utf-8")
        print(f"{split}: rows {len(lines)} bytes {len(text)} fnv1a64 0x{fnv1a64(text):016x}ULL")


if __name__ == "__main__":
    main()
