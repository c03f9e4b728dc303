/*
 * distflow/reward.h — rule-based reward functions keyed by data_source, and the
 * reward managers selected by reward_model.reward_manager: "naive" (verl's
 * NaiveRewardManager) and "dapo" (verl's DAPORewardManager: naive scoring plus
 * DAPO's overlong penalty).
 *
 * A reward function has verl's compute_score(data_source, solution_str,
 * ground_truth, extra_info) shape. The built-in dispatch follows verl's
 * default_compute_score (verl/utils/reward_score/__init__.py, commit
 * b178a3cd56f58b2d502255daba591e92833930a7):
 *   "openai/gsm8k"                         gsm8k.py (df_reward_gsm8k_ex)
 *   "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
 *   "HuggingFaceH4/MATH-500"               math_reward.py (df_reward_math)
 *   "math_dapo", "math", "math_dapo_reasoning",
 *   and every name starting with "aime"    math_dapo.py (df_reward_math_dapo_ex)
 *   "synthetic/arithmetic"                 the synthetic task (distflow/synth.h)
 * A plugin adds its own with df_reward_register() (the C counterpart of verl's
 * custom_reward_function); the built-in checkers below are public so that a
 * plugin can call them.
 */
#ifndef DISTFLOW_REWARD_H
#define DISTFLOW_REWARD_H

#include "distflow/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Score one response. `solution_str` is the decoded response text, `extra_info`
 * the row's extra_info JSON text (may be NULL). Writes *score; returns 0 or a
 * DF_E* status (with df_error) when scoring itself failed.
 */
typedef int (*df_reward_fn)(const char *data_source, const char *solution_str,
                            const char *ground_truth, const char *extra_info, double *score);

#define DF_REWARD_NAME_MAX 128

/**
 * The keyword arguments verl's scorers take (custom_reward_function.reward_kwargs.*
 * in the config). Start from df_reward_kwargs_default().
 */
typedef struct df_reward_kwargs {
    const char *method;     /**< gsm8k: "strict" ("#### <number>") or "flexible" (the last number) */
    double format_score;    /**< gsm8k: score of a found but wrong answer [0.0] */
    double score;           /**< gsm8k: score of a correct answer [1.0] */
    bool last_match;        /**< gsm8k: current verl's reading — only the last 300 characters, the
                                 LAST "#### <number>" — instead of siiRL's first match anywhere */
    bool strict_box_verify; /**< math_dapo: compare the last \boxed{} of the last 100 characters
                                 with the raw ground truth instead of the "Answer:" line */
} df_reward_kwargs;

/** verl's defaults: method "strict", format_score 0.0, score 1.0, first match, no strict box. */
DF_API df_reward_kwargs df_reward_kwargs_default(void);

#define DF_REWARD_PRED_MAX 256

/**
 * A scorer's whole answer, verl's dict return {"score", "acc", "pred"}
 * (math_dapo.py; the built-ins all fill it).
 */
typedef struct df_reward_result {
    double score;                  /**< the reward */
    bool acc;                      /**< the answer is correct (verl's "acc") */
    char pred[DF_REWARD_PRED_MAX]; /**< the (normalised) prediction, "" when none; cut to fit */
    bool extra_pred;               /**< verl's scorer returns pred in its result (math_dapo's dict), so
                                        the reward managers keep it (reward_extra_info "pred") */
} df_reward_result;

/**
 * A scorer that takes keyword arguments (`kw` NULL: the defaults) and reports
 * acc and pred besides the score; the built-ins have this form.
 */
typedef int (*df_reward_kw_fn)(const char *data_source, const char *solution_str, const char *ground_truth,
                               const char *extra_info, const df_reward_kwargs *kw, df_reward_result *out);

/**
 * Register `fn` under `name` (a data_source value); it shadows a built-in or
 * replaces an earlier registration of that name. Not thread-safe: register
 * during start-up (plugin loading), before scoring starts. Errors: DF_EINVAL
 * (NULL / empty / overlong name, NULL fn), DF_ENOMEM.
 */
DF_API int df_reward_register(const char *name, df_reward_fn fn);

/**
 * The function registered under `name` (a name starting with "aime" that is
 * not registered itself: the built-in math_dapo scorer, as verl routes it).
 * DF_ENOTFOUND with a message naming `name` and listing the registered names
 * when there is none.
 */
DF_API int df_reward_lookup(const char *name, df_reward_fn *out);

/**
 * verl's default_compute_score through the registry: score `solution_str`
 * with the scorer of `data_source` (df_reward_lookup's choice). A built-in
 * gets `kw` (NULL: defaults) and fills all of *out; a registered
 * df_reward_fn is called without them and *out gets its score, acc = (score
 * == 1.0) and an empty pred. A plugin that wraps a built-in calls that
 * built-in directly (calling this for its own name would recurse).
 * Errors: df_reward_lookup's, the scorer's (e.g. DF_EINVAL for a bad method).
 */
DF_API int df_reward_compute(const char *data_source, const char *solution_str, const char *ground_truth,
                             const char *extra_info, const df_reward_kwargs *kw, df_reward_result *out);

/* ---- built-in scorers ------------------------------------------------------ */

/**
 * verl's gsm8k extract_solution(method="strict") as in verl <= 0.3 and siiRL
 * (siirl/utils/reward_score/gsm8k.py; re.search): the FIRST match of
 * `#### (\-?[0-9\.\,]+)` in the whole response, with ',' and '$' removed, goes
 * to out[cap]; false when there is no match or it does not fit in out (the
 * scorer itself needs no buffer and compares answers of any length).
 * Current verl (verl/utils/reward_score/gsm8k.py at commit
 * b178a3cd56f58b2d502255daba591e92833930a7, since verl PR #2568) reads only the
 * last 300 characters and takes the LAST match; the two agree whenever a
 * response's only "#### <number>" lies in its last 300 characters, the format
 * GSM8K training teaches (distflow keeps the first-match reading).
 */
DF_API bool df_reward_gsm8k_extract(const char *response, char *out, size_t cap);

/**
 * verl gsm8k compute_score(solution_str, ground_truth, method, format_score,
 * score) with kw's method / format_score / score (NULL: the defaults) and
 * kw->last_match choosing the reading:
 *  - strict, first match (default; siiRL, verl <= 0.4.0): the first
 *    "#### <number>" anywhere, ',' and '$' dropped;
 *  - strict, last_match (verl >= 0.5.0, PR #2568): the last one within the last
 *    300 characters (code points, Python's len);
 *  - flexible: the last number `-?[0-9.,]+` that is not "." (commas kept, as
 *    verl), in the whole text or, with last_match, in its last 300 characters.
 * No answer: score 0.0 (not format_score, as verl); an answer equal to
 * ground_truth as a string: kw->score, acc true; else kw->format_score.
 * out->pred is the extracted answer. Errors: DF_EINVAL for a method other
 * than strict / flexible, DF_ENOMEM.
 */
DF_API int df_reward_gsm8k_ex(const char *solution_str, const char *ground_truth, const df_reward_kwargs *kw,
                              df_reward_result *out);

/**
 * verl gsm8k compute_score(method="strict", format_score=0.0, score=1.0):
 * 1.0 when the extracted answer (df_reward_gsm8k_extract's, however long)
 * equals ground_truth as a string, else 0.0 (also 0.0 with no
 * "#### <number>" or a NULL ground_truth). df_reward_gsm8k_ex with NULL kw.
 */
DF_API int df_reward_gsm8k(const char *data_source, const char *solution_str,
                           const char *ground_truth, const char *extra_info, double *score);

/**
 * verl math_reward.py last_boxed_only_string + remove_boxed: the answer in
 * `s`'s last box, as [*answer, *answer + *len) inside `s`. When "\boxed "
 * (with a space) occurs at all, the text after its last occurrence up to the
 * next '$' (or the end); else the last "\boxed" (or, with none, "\fbox")
 * with its braces balanced. False with no box, unbalanced braces, or a box
 * that does not start "\boxed{" (\fbox{..}: verl's remove_boxed asserts
 * there and the response scores 0.0).
 */
DF_API bool df_reward_math_last_boxed(const char *s, const char **answer, size_t *len);

/**
 * verl math_reward.py strip_string (Hendrycks' MATH normalisation) of `s`
 * into *out (malloc'd, the caller frees): line breaks, "\!", "\\" -> "\",
 * tfrac / dfrac -> frac, \left / \right, degrees, "\$", units after
 * "\text{ ", percent signs, " ." -> " 0.", a leading ".", a "k = " prefix of
 * at most two characters, \sqrt3 -> \sqrt{3}, spaces, \frac12 ->
 * \frac{1}{2}, "0.5" -> \frac{1}{2}, "a/b" of integers -> \frac{a}{b}.
 * Errors: DF_EINVAL (*out NULL) where verl's Python raises (two "\text{ ",
 * or nothing after a "\sqrt" / "\frac"), DF_ENOMEM.
 */
DF_API int df_reward_math_strip(const char *s, char **out);

/**
 * verl math_reward.py is_equiv: *equiv = strip_string(a) == strip_string(b),
 * or a == b when strip_string raises for either (verl's except branch).
 * Errors: DF_ENOMEM only.
 */
DF_API int df_reward_math_is_equiv(const char *a, const char *b, bool *equiv);

/**
 * verl math_reward.py compute_score: 1.0 when the last box's answer
 * (df_reward_math_last_boxed) is_equiv ground_truth, else 0.0 (no box, or a
 * NULL ground_truth: 0.0). Errors: DF_ENOMEM.
 */
DF_API int df_reward_math(const char *data_source, const char *solution_str, const char *ground_truth,
                          const char *extra_info, double *score);

/**
 * verl math_dapo.py normalize_final_answer of `answer` into *out (malloc'd):
 * the text after its last '=', verl's SUBSTITUTIONS and REMOVED_EXPRESSIONS,
 * "$..$" / \text{} / \textbf{} / \overline{} / \boxed{} unwrapped,
 * \fracab -> \frac{a}{b}, \sqrta -> \sqrt{a}, '$' dropped, the commas of an
 * all-digit answer dropped, whitespace stripped. Errors: DF_ENOMEM.
 */
DF_API int df_reward_math_dapo_normalize(const char *answer, char **out);

/**
 * verl math_dapo.py compute_score on the last 300 characters of
 * `solution_str`: the last `(?i)Answer\s*:\s*([^\n]+)` match ("[INVALID]"
 * with none), normalised, against the normalised ground truth; with
 * kw->strict_box_verify, the last \boxed{} of the last 100 characters
 * against the raw ground truth (pred "" with no box). out->score is +1.0 when
 * they agree, else -1.0; out->acc says which; out->pred is the prediction.
 * Characters are code points; `\s` is Python's whitespace set; the case
 * folding of "Answer" is ASCII's. `kw` may be NULL. Errors: DF_ENOMEM.
 */
DF_API int df_reward_math_dapo_ex(const char *solution_str, const char *ground_truth, const df_reward_kwargs *kw,
                                  df_reward_result *out);

/** df_reward_math_dapo_ex with NULL kw, as a df_reward_fn (the score only: +1.0 / -1.0). */
DF_API int df_reward_math_dapo(const char *data_source, const char *solution_str, const char *ground_truth,
                               const char *extra_info, double *score);

/**
 * The synthetic task's scorer: the FIRST match of `#### (-?[0-9]+)` in the
 * whole response; 1.0 when it equals ground_truth as an integer ("007" == "7",
 * "-0" == "0"; any length), else 0.0.
 */
DF_API int df_reward_synthetic(const char *data_source, const char *solution_str,
                               const char *ground_truth, const char *extra_info, double *score);

/* ---- Python reward functions (verl's custom_reward_function as a .py file) -- */

/**
 * A reward function written in Python, as verl users write them: a `python3` child process
 * that imports the file and calls the function for the reward managers. Opaque; one per
 * process that scores (each MPI rank its own).
 */
typedef struct df_reward_python df_reward_python;

/** How the child calls the function: as one of verl's reward managers. */
typedef enum df_reward_py_mode {
    /** NaiveRewardManager: name(data_source=, solution_str=, ground_truth=, extra_info=, **kwargs)
        for each response in turn. */
    DF_REWARD_PY_NAIVE,
    /** BatchRewardManager: one call per batch, name(data_sources=, solution_strs=,
        ground_truths=, extra_infos=, **kwargs), returning a list. */
    DF_REWARD_PY_BATCH,
    /** PrimeRewardManager: name(data_source, solution_str, ground_truth, extra_info, **kwargs)
        (positional, as verl's prime calls it) for every response of a batch in a pool of
        `processes` forked workers (no more than the batch's responses); a call still running
        `timeout_s` seconds after the batch started, or one that raises, scores 0.0 and prints
        verl's "[Timeout] Task timeout: ..." / "[Error] Task failed: ..." line; the pool's workers
        are killed when the batch ends. A result is a number, or a sequence whose first item is
        the score; a dict is an error (prime reads none of its keys). */
    DF_REWARD_PY_PRIME,
} df_reward_py_mode;

/** df_reward_python_open's options; NULL there means {DF_REWARD_PY_NAIVE}. */
typedef struct df_reward_python_opts {
    df_reward_py_mode mode;
    int processes;    /**< PRIME: pool size, >= 1 (verl's num_processes, 64 by default) */
    double timeout_s; /**< PRIME: seconds a batch's calls may take, > 0 (verl: 300) */
} df_reward_python_opts;

/**
 * The options a reward manager (reward_model.reward_manager: NULL or "" = naive) calls a Python
 * function with: batch -> DF_REWARD_PY_BATCH, prime -> DF_REWARD_PY_PRIME with its pool read from
 * kwargs_json (reward_model.reward_kwargs, NULL = {}): "num_processes" (an integer in [1, 65536],
 * default 64 as verl's PrimeRewardManager) and "timeout" (seconds > 0, default 300, the value verl
 * fixes); any other manager -> DF_REWARD_PY_NAIVE, kwargs_json unread.
 * Errors (prime only): DF_EINVAL for kwargs_json not a JSON object, an unknown key or a value out
 * of range, naming it.
 */
DF_API int df_reward_python_opts_for(const char *manager, const char *kwargs_json, df_reward_python_opts *o);

/**
 * Start `python3` (found on PATH; the environment variable DF_PYTHON names another
 * interpreter), import the file `path` as verl's get_custom_reward_fn does (module name
 * "custom_module", PYTHONPATH as inherited) and look up the callable `name`. `kwargs_json`
 * (NULL: none) is a JSON object whose members are passed to every call as keyword arguments
 * (verl's custom_reward_function.reward_kwargs). `opts` (NULL: naive) says how the function is
 * called: df_reward_py_mode. The child prints to the inherited stdout / stderr; the requests
 * and results travel over a socket of their own.
 * Errors: DF_ENOTFOUND (no interpreter; the file cannot be read), DF_EINVAL (kwargs_json not a
 * JSON object; a prime pool of < 1 process or a timeout <= 0; the import raised, or `name` is
 * missing or not callable: the message quotes Python's), DF_EIO, DF_ENOMEM.
 */
DF_API int df_reward_python_open(const char *path, const char *name, const char *kwargs_json,
                                 const df_reward_python_opts *opts, df_reward_python **out);

/**
 * Score n responses (the rows' data_source, decoded response, ground truth text and
 * extra_info JSON text; extra_info NULL or an entry NULL: Python None, else the parsed
 * object) with one request to the child. Each result is read as verl's reward managers read
 * it: a number (bool, int, float) is the score; a dict must hold "score", and its "acc"
 * (truthiness) and "pred" (str()) fill out[i].acc / .pred (extra_pred true); without "acc",
 * acc = (score == 1.0), as for a df_reward_fn. A score that is not finite is an error. The dict's
 * other keys with number values (verl's reward_extra_info) are kept for df_reward_python_extra:
 * each must be in every dict of the batch, be 1-50 characters of [A-Za-z0-9_.-] and not a
 * name the managers, the metrics or the dumps use themselves (reward, overlong_reward, overlong,
 * input, output, gts, step, index, data_source), its values finite; keys with other values
 * (text, lists, ...) are kept as JSON text for df_reward_python_extra_json. In PRIME mode a
 * result is read as verl's prime reads it (df_reward_py_mode), acc = (score == 1.0), and no
 * extra keys are kept.
 * Errors (out unspecified): DF_EINVAL (the function raised or returned something else: the
 * message names the row and quotes Python's traceback; batch mode: a list of the wrong
 * length), DF_EIO (the child died: its exit status or signal), DF_ENOMEM. After an error the
 * child keeps running, except after DF_EIO; every later call then fails with DF_EIO.
 */
DF_API int df_reward_python_score(df_reward_python *p, int64_t n, const char *const *data_source,
                                  const char *const *solution_str, const char *const *ground_truth,
                                  const char *const *extra_info, df_reward_result *out);

/**
 * The numeric extra keys of the last df_reward_python_score's results: *n_keys names and their
 * values, values[k * n + i] for key k and response i of that call's n (row-major [n_keys][n]).
 * Valid until the next call or df_reward_python_close; none after a failed call.
 */
DF_API void df_reward_python_extra(const df_reward_python *p, int *n_keys, const char *const **names,
                                   const double **values);

/**
 * The other extra keys of the last df_reward_python_score's results (values that are not numbers:
 * text, lists, objects, None; verl keeps them in reward_extra_info for its dumps): *n_keys names
 * and each value as JSON text (json.dumps; what JSON cannot hold as str()), texts[k * n + i].
 * The same rules as the numeric keys: in every result of the batch, a valid name, and a key is
 * numeric in every result or in none. Valid until the next call or df_reward_python_close.
 */
DF_API void df_reward_python_extra_json(const df_reward_python *p, int *n_keys, const char *const **names,
                                        const char *const **texts);

/** Whether `path` names a Python reward file (it ends in ".py"); false for NULL. */
DF_API bool df_reward_python_file(const char *path);

/** The mode df_reward_python_open was given (NULL: DF_REWARD_PY_NAIVE). */
DF_API df_reward_py_mode df_reward_python_mode(const df_reward_python *p);

/** End the child (EOF on its socket, then SIGKILL if it has not exited within 2 s) and free p. */
DF_API void df_reward_python_close(df_reward_python *p);

/* ---- naive reward manager -------------------------------------------------- */

/** Prefix of the columns that hold a Python reward function's extra keys (verl's
 *  reward_extra_info): "reward_extra/<key>", one value per row; F32 for a numeric key, STR (JSON
 *  text) for the others. */
#define DF_REWARD_EXTRA_PREFIX "reward_extra/"

/** The key of a column holding numeric extra values (an F32 column named DF_REWARD_EXTRA_PREFIX<key>:
 *  a pointer into its name), else NULL. */
DF_API const char *df_reward_extra_key(const df_column *col);

/** The key of a column holding other extra values as JSON text (a STR column named
 *  DF_REWARD_EXTRA_PREFIX<key>), else NULL. */
DF_API const char *df_reward_extra_json_key(const df_column *col);

/**
 * DAPO's overlong reward shaping (reward_model.overlong_buffer.*; DAPO, Yu et
 * al. 2025, arXiv 2503.14476, eq. 13). Zero-initialised = disabled.
 */
typedef struct df_overlong_buffer_cfg {
    bool enable;           /**< add the penalty (reward_model.overlong_buffer.enable) */
    int64_t len;           /**< ramp length in tokens (overlong_buffer.len), >= 0 */
    double penalty_factor; /**< penalty at the end of the ramp (overlong_buffer.penalty_factor), >= 0 */
    bool log;              /**< keep per-sample overlong_reward / overlong (overlong_buffer.log) */
} df_overlong_buffer_cfg;

typedef struct df_reward_manager_cfg {
    /** Column whose value selects the reward function (verl data.reward_fn_key) ["data_source"]. */
    const char *reward_fn_key;
    /** When non-NULL, used for every row instead of the registry (verl custom_reward_function). */
    df_reward_fn compute_score;
    /** When non-NULL, scores every row with one request per batch (custom_reward_function.path a
        Python file); takes precedence over compute_score and the registry. */
    df_reward_python *python;
    /** Keyword arguments of the built-in scorers (custom_reward_function.reward_kwargs.*); NULL: defaults. */
    const df_reward_kwargs *kwargs;
    /** Reward manager (reward_model.reward_manager): "naive", "dapo", "batch" (naive scoring by a
        `python` opened in batch mode, verl's BatchRewardManager) or "prime" (by a `python` opened in
        prime mode, verl's PrimeRewardManager; without one, the built-in scorers or compute_score
        as naive); NULL / "" = "naive". `python`'s mode must be the manager's. */
    const char *manager;
    /** dapo: data.max_response_length, the length the overlong ramp ends at (tokens). */
    int64_t max_resp_len;
    /** dapo: the overlong penalty; ignored by naive. */
    df_overlong_buffer_cfg overlong_buffer;
} df_reward_manager_cfg;

/**
 * verl's NaiveRewardManager.__call__ over a batch with columns `response_ids`
 * (ragged), the reward_fn_key column (STR), `ground_truth` (STR) and optionally
 * `extra_info` (STR), plus the decoded responses [n] (decoding is the
 * caller's, so this module needs no tokenizer).
 *
 * Adds (or replaces) `token_level_scores` (TOK_F32, the lengths of
 * response_ids): zero except the row's score on its last response token, as
 * verl puts it at valid_response_length - 1. A zero-length response has no
 * token to carry its score: its row in token_level_scores stays empty, the
 * score is still reported in scores[i], and it is counted in *n_empty.
 * When a row's scorer sets extra_pred (math_dapo, whose verl scorer returns
 * a dict with "pred"), adds (or replaces) `pred` (STR): each row's
 * df_reward_result.pred where its scorer sets extra_pred, "" elsewhere, as
 * verl's reward_extra_info, and `pred_valid` (I64): 1 where the row's scorer
 * set extra_pred, 0 elsewhere (a batch mixing data sources: only those rows
 * have a prediction); the generation dumps show the valid ones and validation
 * votes with them (maj@N). Without such a row earlier `pred` / `pred_valid`
 * columns are dropped. With cfg->python, its numeric extra keys
 * (df_reward_python_extra) become F32 columns DF_REWARD_EXTRA_PREFIX<key>
 * and its others (df_reward_python_extra_json) STR columns of JSON text of
 * that name, replacing any earlier ones (dumps show both; validation
 * metrics the numeric ones).
 *
 * Rows are scored as df_reward_compute with cfg->kwargs (or by
 * cfg->compute_score, or all at once by cfg->python). Outputs (each may be NULL): scores[n] per-sample score,
 * acc[n] the scorer's acc as 1.0 / 0.0 (verl's "acc" of reward_extra_info;
 * for a df_reward_fn without one: 1.0 where the score equals 1.0),
 * *n_empty the number of zero-length responses.
 * `cfg` may be NULL (defaults).
 * On error the batch is left unchanged.
 * Errors: DF_ENOTFOUND (a missing column, or a data_source with no reward
 * function: the message names it and the row), DF_EINVAL (responses NULL, a
 * non-ragged response_ids), or the reward function's own status wrapped with
 * the row.
 */
DF_API int df_reward_naive(const df_reward_manager_cfg *cfg, df_batch *b,
                           const char *const *responses, float *scores, float *acc,
                           int64_t *n_empty);

/* ---- DAPO reward manager and manager selection ----------------------------- */

/**
 * DAPO's overlong penalty for one response of `valid_len` tokens, as verl's
 * DAPORewardManager.__call__ (verl/workers/reward_manager/dapo.py, commit
 * 003364bc724da7d6efb63834fa1c496e1a55c888):
 *   expected_len = max_resp_len - ob->len
 *   exceed_len   = valid_len - expected_len
 *   penalty      = min(-exceed_len / ob->len * ob->penalty_factor, 0)
 * so 0 up to expected_len, then a linear ramp down to -penalty_factor at
 * max_resp_len (and below that past it, as verl). Returns 0.0 when `ob` is
 * NULL or not enabled. ob->len == 0 (verl divides by zero) is defined as the
 * ramp's limit, a step: -penalty_factor when valid_len >= max_resp_len, else 0.
 */
DF_API double df_reward_overlong_penalty(const df_overlong_buffer_cfg *ob, int64_t max_resp_len,
                                         int64_t valid_len);

/**
 * verl's DAPORewardManager.__call__: df_reward_naive's scoring, then, with
 * cfg->overlong_buffer.enable, each row's df_reward_overlong_penalty (length =
 * its response_ids row; max_resp_len = cfg->max_resp_len) added to the reward
 * on its last token of `token_level_scores`. As in verl the penalty changes
 * the reward only: scores[i] keeps the scorer's score and acc[i] is
 * the scorer's acc (verl keeps the scorer's "score" / "acc" in its extra
 * info). overlong_reward[n] (may be NULL) receives each row's penalty (0.0
 * when disabled); a zero-length response has no token to carry it.
 * Other outputs, `cfg` NULL and errors as df_reward_naive; also DF_EINVAL when
 * the buffer is enabled with max_resp_len < 1, a negative len or
 * penalty_factor (see df_reward_manager_check).
 */
DF_API int df_reward_dapo(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                          float *scores, float *acc, float *overlong_reward, int64_t *n_empty);

/**
 * Check `cfg` before scoring: the manager name is known ("naive", "dapo", "batch", "embodied"; NULL
 * or "" mean "naive") — else DF_ENOTFOUND with a message naming it and listing
 * the known ones — and, for dapo with the buffer enabled, max_resp_len >= 1,
 * overlong_buffer.len >= 0 and penalty_factor >= 0 (DF_EINVAL). NULL cfg: 0.
 */
DF_API int df_reward_manager_check(const df_reward_manager_cfg *cfg);

/**
 * Run the manager cfg->manager selects: df_reward_naive (naive, batch, prime) or df_reward_dapo
 * (same arguments; overlong_reward[n], may be NULL, is all 0.0 but for dapo).
 * Errors: those of df_reward_manager_check; DF_EINVAL when "batch" comes without cfg->python,
 * or cfg->python was opened in another mode than the manager's (batch: DF_REWARD_PY_BATCH,
 * prime: DF_REWARD_PY_PRIME, the others: DF_REWARD_PY_NAIVE); DF_EUNSUPPORTED for "embodied";
 * then the manager's.
 */
DF_API int df_reward_manager_run(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                                 float *scores, float *acc, float *overlong_reward, int64_t *n_empty);

/** True when cfg selects dapo with overlong_buffer.enable and .log: the caller keeps overlong columns. */
DF_API bool df_reward_manager_logs_overlong(const df_reward_manager_cfg *cfg);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_REWARD_H */
