/*
 * distflow/synth.h — the synthetic arithmetic task behind the embedded default
 * (`make demo`): multi-step integer word problems with worked solutions, in the
 * verl RL schema, with data_source "synthetic/arithmetic".
 *
 * A problem starts from s0 uniform in [1, max_operand] and applies k
 * operations, k uniform in [min_steps, max_steps]. Each operation is drawn
 * uniformly from the enabled ops that can be applied to the current value s
 * (equivalent to redrawing until one applies):
 *   '+'  x uniform in [1, min(max_operand, max_value - s)]; needs s + 1 <= max_value
 *   '-'  x uniform in [1, min(max_operand, s)];               needs s >= 1
 *   '*'  factor f uniform in {2, 3} with s * f <= max_value;  needs 2 s <= max_value
 * When none applies, '-' is used; if s is 0 it subtracts 0 (only reachable
 * with ops = "-").
 * Text:  "{Name} has {s0} {items}." + one sentence per op + "How many {items}
 *        does {Name} have now?", joined by single spaces, e.g. "Mia has 12
 *        apples. She buys 7 more. She gives away 5. She doubles her apples.
 *        How many apples does Mia have now?"
 * Solution: one line "{a} {op} {b} = {c}" per op, then "#### {answer}",
 *        joined by "\n": "12 + 7 = 19\n19 - 5 = 14\n14 * 2 = 28\n#### 28".
 * Row:   {"data_source": "synthetic/arithmetic", "prompt": [{"role": "user",
 *        "content": text}], "ability": "math", "reward_model": {"style": "rule",
 *        "ground_truth": "<answer>"}, "extra_info": {"split": split, "index": i,
 *        "answer": solution, "steps": k}}
 *
 * Determinism: problem i draws from df_rng_key(seed, i, 0, 0) alone, so the
 * same config gives byte-identical output, and the first m rows of n > m rows
 * equal the rows of a run with n = m. Use different seeds for train and test,
 * and `exclude` to keep a test set's problems out of the training set.
 *
 * Demonstration style (bare_answer_frac): instruction data mixes worked
 * solutions with bare answers. With probability bare_answer_frac (drawn from
 * df_rng_key(seed, i, 1, 0), so the problems themselves do not change) a row's
 * extra_info.answer is the conversational "The answer is {answer}." instead of
 * the worked solution. The scorer reads only "#### {answer}", so a model that
 * imitates bare answers scores 0 on those; RL with the scorer's reward can
 * learn to work the problem out (what `make demo` shows). With
 * bare_answer_frac_short >= 0 the problems with min_steps operations use that
 * probability instead (same draw), so the style depends on the problem's length.
 */
#ifndef DISTFLOW_SYNTH_H
#define DISTFLOW_SYNTH_H

#include "distflow/common.h"
#include "distflow/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DF_SYNTH_DATA_SOURCE "synthetic/arithmetic"
#define DF_SYNTH_MAX_STEPS 64

typedef struct df_synth_cfg {
    int min_steps;    /**< >= 1 [2] */
    int max_steps;    /**< in [min_steps, DF_SYNTH_MAX_STEPS] [3] */
    int max_operand;  /**< >= 1 [20] */
    int max_value;    /**< >= max_operand; no value ever exceeds it [99] */
    char ops[4];      /**< non-empty set of '+', '-', '*' without repeats ["+-*"] */
    uint64_t seed;    /**< [0] */
    const char *split; /**< written to extra_info.split; NULL -> "train" */
    double bare_answer_frac; /**< in [0, 1]: share of bare-answer demonstrations [0] */
    /** In [0, 1], or < 0: the share of bare answers among the problems with min_steps operations
     *  (the short ones, which look easy), where bare_answer_frac then covers the longer ones; < 0
     *  means bare_answer_frac for all. `make demo ALGO=grpo_tool` answers most one-operation
     *  problems without the calculator, which RL learns to call [-1] */
    double bare_answer_frac_short;
    /** Tool-use demonstrations (`make demo ALGO=grpo_tool`): each row also holds "messages", a
     *  multi-turn SFT conversation (data.multiturn.enable) in which the assistant calls the
     *  calculator tool with the problem's expression in a hermes <tool_call> block, the tool
     *  answers (df_tool_calculator's text) and the assistant ends with "#### {answer}"; a
     *  bare-answer row (bare_answer_frac) answers "#### {answer}" at once, without the tool [false] */
    bool tool;
    /** Problems whose text equals the first message of a row of this dataset are
     *  skipped (the row keeps its generator index in extra_info.index) [NULL] */
    const df_dataset *exclude;
} df_synth_cfg;

/** The defaults above. */
DF_API void df_synth_cfg_default(df_synth_cfg *cfg);

/** Check the knobs; DF_EINVAL naming the bad knob and its bounds. */
DF_API int df_synth_cfg_check(const df_synth_cfg *cfg);

/** One generated problem (malloc'd strings; free with df_synth_problem_free). */
typedef struct df_synth_problem {
    char *question; /**< the word problem */
    char *solution; /**< worked solution ending in "#### {answer}", or the bare
                         "The answer is {answer}." (see bare_answer_frac) */
    int64_t answer;
    int steps;
    char *expression; /**< the operations as one expression, e.g. "(12 + 7 - 5) * 2" */
    bool bare;        /**< a bare-answer demonstration (bare_answer_frac) */
} df_synth_problem;

/** Problem number `index` of the config. Errors: DF_EINVAL (bad knobs), DF_ENOMEM. */
DF_API int df_synth_problem_make(const df_synth_cfg *cfg, int64_t index, df_synth_problem *out);
DF_API void df_synth_problem_free(df_synth_problem *p);

/**
 * n rows as JSON lines (one object per line, '\n' after each) in a malloc'd
 * string: problems 0, 1, 2, ... minus those in cfg->exclude. DF_EINVAL when
 * the exclusion set leaves too few distinct problems (the knobs are too narrow).
 */
DF_API int df_synth_jsonl(const df_synth_cfg *cfg, int64_t n, char **text, size_t *len);

/** Write the rows of df_synth_jsonl to `path` atomically (temp file + rename). */
DF_API int df_synth_write(const df_synth_cfg *cfg, int64_t n, const char *path);

/** The rows of df_synth_jsonl as an in-memory dataset (named "synthetic:<split>"). */
DF_API int df_synth_dataset(const df_synth_cfg *cfg, int64_t n, df_dataset **out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_SYNTH_H */
