"""A reward function for distflow in verl's form (custom_reward_function.path: this file).

GSM8K with a format score, the Python twin of examples/plugins/score_gsm8k_format.c:
1.0 for the right "#### <answer>", 0.1 for a well-formed but wrong one (the response learned the
format), 0.0 without one. The answer is the first "#### " followed by a number, with "," and "$"
dropped, as verl's gsm8k scorer reads it in strict mode.

    custom_reward_function:
      path: examples/rewards/gsm8k_format.py
      name: compute_score
      reward_kwargs: {format_score: 0.1}   # optional: the keys set here arrive as keyword arguments
"""
import re

_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, format_score=0.1, score=1.0):
    found = _ANSWER.search(solution_str)
    if found is None:
        return {"score": 0.0, "acc": False}
    answer = found.group(1).replace(",", "").replace("$", "")
    right = answer == ground_truth
    return {"score": score if right else format_score, "acc": right, "pred": answer}
