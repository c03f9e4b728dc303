#!/usr/bin/python3
"""Write the reward-model fixture for tests/test_reward_model.c.

A tiny random Qwen2ForSequenceClassification: gen_golden.py's plain-torch Qwen2 trunk
(transformers' modeling_qwen2.py, float64) with HF's sequence-classification head, a
Linear(hidden, num_labels=1, bias=False) named `score` on the final-normed hidden states,
read at each sequence's last token (transformers pools at the last non-padding token; verl's
RewardModelWorker._forward_micro_batch reads the last valid token of the attention mask, the
same row for an unpadded sequence). transformers itself is not installed here: the files are
written by this script in the layout transformers reads, not produced by it.

Outputs (not run by CI; rerun by hand with Debian's torch: /usr/bin/python3):
  tiny_qwen2_rm/config.json, tiny_qwen2_rm/model.safetensors   the weights (F32, no score.bias)
  tiny_qwen2_rm_expected.safetensors:
    batch.tokens [T], batch.seq_offsets [S+1]   four packed sequences
    batch.out_rows [S]                          the last row of each sequence
    batch.prompt_lens [S]                       a prompt / response split of each sequence, for
                                                the reward node's test (prompt ++ response)
    scores [S]                                  the reward at each sequence's last token
Integers are stored as F32 (exact below 2^24), as gen_golden.py does.
"""
import json
import math
import os

import torch

from gen_golden import CONFIG, HERE, final_hidden, init_params, st_write

LENGTHS = [9, 14, 5, 21]
PROMPT_LENS = [4, 6, 2, 10]


def main():
    c = dict(CONFIG)
    c["architectures"] = ["Qwen2ForSequenceClassification"]
    c["id2label"] = {"0": "LABEL_0"}
    c["label2id"] = {"LABEL_0": 0}
    c["pad_token_id"] = 0
    p = init_params(dict(CONFIG), seed=2025)
    del p["lm_head.weight"]
    H = c["hidden_size"]
    g = torch.Generator().manual_seed(77)
    p["score.weight"] = (torch.randn((1, H), generator=g) / math.sqrt(H)).float().double()
    offsets = [0]
    for n in LENGTHS:
        offsets.append(offsets[-1] + n)
    tokens = torch.randint(3, c["vocab_size"], (offsets[-1],), generator=g)
    rows = torch.tensor([o - 1 for o in offsets[1:]])
    with torch.no_grad():
        hid = final_hidden(c, p, tokens, offsets)
        scores = (hid[rows] @ p["score.weight"].T)[:, 0]

    d = os.path.join(HERE, "tiny_qwen2_rm")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    st_write(os.path.join(d, "model.safetensors"), p, {"format": "pt"})
    st_write(os.path.join(HERE, "tiny_qwen2_rm_expected.safetensors"), {
        "batch.tokens": tokens.double(),
        "batch.seq_offsets": torch.tensor(offsets).double(),
        "batch.out_rows": rows.double(),
        "batch.prompt_lens": torch.tensor(PROMPT_LENS).double(),
        "scores": scores,
    })
    print("scores", [round(float(s), 6) for s in scores])


if __name__ == "__main__":
    main()
