/*
 * distflow/dataset.h — RL / SFT datasets in the verl / siiRL schema, from JSON
 * lines or Parquet files, and the GSM8K converter that produces them.
 *
 * A file is JSON lines, one JSON object per line (blank lines skipped), or
 * Parquet (recognised by its "PAR1" magic, whatever its name): each row read as
 * the same object, top-level columns as members (docs/data.md gives the type
 * mapping and what is refused). The fields:
 *   prompt        list of {"role": str, "content": str} chat messages; a plain
 *                 string is taken as one user message
 *   data_source   str, selects the reward function (e.g. "openai/gsm8k")
 *   reward_model  {"style": str, "ground_truth": str | number}
 *   extra_info    object (kept as JSON text), optional
 *   ability       str, optional
 * This is the row layout verl's RLHFDataset reads from parquet (the
 * `prompt_key`, `data_source`, `reward_model.ground_truth`, `extra_info`
 * columns). Every record also keeps its whole JSON object, so any field can be
 * read by dotted path (df_dataset_field).
 *
 * Errors name the file and line: "train.jsonl:12:7: invalid JSON: ...",
 * "train.jsonl:3: missing \"prompt\"", "train.jsonl:5: reward_model.ground_truth
 * must be a string or number, got array"; in a Parquet file the 1-based row:
 * "train.parquet: row 3: missing \"prompt\"". Where a line number is returned
 * (df_dataset_source, the scan's callback), a Parquet file gives the row.
 *
 * Shards (the partitioned dataset of siiRL / DistFlow: each data-parallel rank
 * holds only its part; distflow shards the validation and evaluation rows, while
 * every rank holds the training rows for the dataloader's one global order). The
 * rows of all files, in order, are numbered 0, 1, ... (global row i = the i-th
 * non-blank line). Shard k of K keeps the rows with i % K == k: strided, so
 * consecutive rows spread evenly over the ranks. Lines of other shards are
 * only counted (newline scan), never parsed, so a malformed line fails only
 * the shard that holds it. Local row
 * positions [0, size) index the accessors below; df_dataset_global_index maps
 * them back to global row numbers. (A Parquet file is decoded whole by every
 * shard; its rows are then numbered and kept the same way.)
 */
#ifndef DISTFLOW_DATASET_H
#define DISTFLOW_DATASET_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_dataset df_dataset;

/** Loader options. Zero-initialised fields take the defaults in brackets. */
typedef struct df_dataset_opts {
    /** Dotted path of the prompt field (verl data.prompt_key) ["prompt"]. */
    const char *prompt_key;
    /**
     * When true, data_source and reward_model.ground_truth are optional (SFT
     * data, evaluation-only files); absent ones read as "". [false: RL data
     * must carry both, so a missing reward is reported at load time rather
     * than as an unknown data source mid-training]
     */
    bool reward_optional;
    /**
     * When true, rows need no prompt: prompt_key is not read, the message
     * accessors see an empty list (raw prompt "[]", 0 messages) and callers
     * read their own columns with df_dataset_field (multi-turn SFT's
     * data.multiturn.messages_key, whose messages carry tool calls and null
     * contents that the prompt check refuses). [false]
     */
    bool no_prompt;
    /**
     * Keep only shard `shard_index` of `shard_count` (global rows i with
     * i % shard_count == shard_index). [0 / 0: every row; count 1 is the same]
     * DF_EINVAL unless 0 <= shard_index < max(shard_count, 1).
     */
    int shard_index, shard_count;
    /**
     * When true, files holding no row at all (every shard's rows counted) are an error, DF_EINVAL
     * "<first file>: no rows": for a command whose result over no rows would mean nothing. [false]
     */
    bool need_rows;
    /**
     * The agent loop every row runs through: "single_turn_agent" or "tool_agent" (verl's names;
     * distflow's tool loop is multi_turn.enable). A row's `agent_name` (verl's agent-loop field),
     * where present and not null, must name it, else DF_EINVAL at the row ("agent_name
     * \"tool_agent\": ..."): distflow runs one loop per job and would otherwise ignore it.
     * [NULL: not checked]
     */
    const char *agent_loop;
} df_dataset_opts;

/**
 * Load and concatenate JSON-lines and Parquet files (verl data.train_files is
 * a list; formats may be mixed), in order, keeping this shard's rows
 * (opts->shard_*). `opts` may be NULL (defaults: every row). Errors:
 * DF_ENOTFOUND (no such file), DF_EIO (cannot read a file), DF_EUNSUPPORTED (a
 * Parquet feature distflow does not read: INT96 timestamps, LZO pages, ...; the
 * message names the column), DF_EINVAL (bad JSON with line and column, a
 * corrupt Parquet file, missing prompt, wrong types, in a kept row; the message
 * names file:line or file: row N; or a bad shard), DF_ENOMEM. *out is
 * untouched on failure.
 */
DF_API int df_dataset_load(const char *const *paths, int n_paths, const df_dataset_opts *opts,
                           df_dataset **out);

/** Called by df_dataset_scan_values for each distinct value; non-zero stops the scan. */
typedef int (*df_dataset_value_fn)(void *user, const char *value, const char *file, int64_t line);

/**
 * The distinct string values of the field at dotted path `key` (e.g.
 * "data_source") over the first max_rows non-blank rows (< 0: every row) of
 * the files paths[n_paths] (JSON lines or Parquet), in order, without building a dataset:
 * fn(user, value, file, line) once per value, at the row where it first
 * appears. Rows where the field is absent or not a string are passed over
 * (df_dataset_load reports those). Errors: those of reading a file
 * (DF_ENOTFOUND, DF_EIO), a Parquet file's (DF_EINVAL, DF_EUNSUPPORTED),
 * DF_EINVAL (a line that is not a JSON object: file:line:column), DF_ENOMEM,
 * or fn's non-zero return.
 */
DF_API int df_dataset_scan_values(const char *const *paths, int n_paths, const char *key, int64_t max_rows,
                                  df_dataset_value_fn fn, void *user);

/**
 * Load a file's contents from memory (JSON lines or Parquet); `name` stands for the file name in messages and
 * in df_dataset_source. Same rules and errors as df_dataset_load.
 */
DF_API int df_dataset_load_buffer(const char *text, size_t len, const char *name,
                                  const df_dataset_opts *opts, df_dataset **out);

DF_API void df_dataset_free(df_dataset *ds);

/** Number of rows this dataset holds: its shard, after any df_dataset_filter / head. */
DF_API int64_t df_dataset_size(const df_dataset *ds);

/**
 * Number of rows in the files, over all shards (non-blank lines), fixed at
 * load time: neither filter nor head changes it.
 */
DF_API int64_t df_dataset_global_size(const df_dataset *ds);

/**
 * Global row number of local row i (its position over all files, all shards;
 * see the shard paragraph above), -1 when i is out of range. Increasing in i.
 * The dataloader's `index` column carries it.
 */
DF_API int64_t df_dataset_global_index(const df_dataset *ds, int64_t i);

/** The shard this dataset holds: *count >= 1 (1: every row), 0 <= *index < *count. Either may be NULL. */
DF_API void df_dataset_shard(const df_dataset *ds, int *index, int *count);

/*
 * Row accessors. `i` must be in [0, size); out of range they return NULL / -1.
 * Returned strings are owned by the dataset and live until it is freed or
 * filtered.
 */

/** data_source of row i ("" when absent and reward_optional). */
DF_API const char *df_dataset_data_source(const df_dataset *ds, int64_t i);
/** reward_model.ground_truth of row i as text (numbers converted: 18 -> "18", 2.5 -> "2.5"). */
DF_API const char *df_dataset_ground_truth(const df_dataset *ds, int64_t i);
/** reward_model.style ("" when absent). */
DF_API const char *df_dataset_reward_style(const df_dataset *ds, int64_t i);
/** ability ("" when absent). */
DF_API const char *df_dataset_ability(const df_dataset *ds, int64_t i);
/** extra_info as compact JSON text ("{}" when absent or null). */
DF_API const char *df_dataset_extra_info(const df_dataset *ds, int64_t i);
/** The prompt's message list as compact JSON text: [{"role":...,"content":...}, ...]. */
DF_API const char *df_dataset_raw_prompt(const df_dataset *ds, int64_t i);
/** Number of chat messages in row i's prompt (>= 1; 0 when loaded with no_prompt), -1 when i is out of range. */
DF_API int df_dataset_num_messages(const df_dataset *ds, int64_t i);
/**
 * Message j of row i: *role and *content (either may be NULL) point into the
 * dataset; the worker copies them into the tokenizer's chat message array.
 * DF_EINVAL when i or j is out of range.
 */
DF_API int df_dataset_message(const df_dataset *ds, int64_t i, int j, const char **role,
                              const char **content);
/** File (as given to the loader) and 1-based line that row i came from; NULL when out of range. */
DF_API const char *df_dataset_source(const df_dataset *ds, int64_t i, int64_t *line);

/**
 * Any field of row i's JSON object by dotted path ("extra_info.answer",
 * "prompt.0.content": numeric segments index arrays), as malloc'd text in
 * *out: strings as-is, numbers in decimal, true / false, null -> "", objects
 * and arrays as compact JSON. Used for SFT's data.prompt_key / response_key.
 * Errors: DF_ENOTFOUND naming the path, file and line; DF_EINVAL for a bad i.
 */
DF_API int df_dataset_field(const df_dataset *ds, int64_t i, const char *path, char **out);

/**
 * Keep only rows with keep[i] true ([size] flags, e.g. prompt length after the
 * chat template <= data.max_prompt_length, verl's filter_overlong_prompts),
 * preserving order. Returns the number of rows dropped.
 */
DF_API int64_t df_dataset_filter(df_dataset *ds, const bool *keep);

/**
 * Keep only the rows whose global row number is < n (verl's
 * data.train_max_samples / val_max_samples: the first n rows of the files),
 * so the same n selects the same rows on every world size; on an unsharded,
 * unfiltered dataset these are the first n rows. n < 0 keeps everything.
 * Returns the number of rows dropped, or -1 when out of memory (with df_error
 * set).
 */
DF_API int64_t df_dataset_head(df_dataset *ds, int64_t n);

/* ---- GSM8K -------------------------------------------------------------- */

/** The instruction verl's examples/data_preprocess/gsm8k.py appends to each question. */
#define DF_GSM8K_INSTRUCTION "Let's think step by step and output the final answer after \"####\"."

/**
 * Convert raw openai/grade-school-math rows ({"question", "answer"}: the
 * original JSON lines, or Hugging Face's openai/gsm8k parquet files) to the
 * verl RL schema, exactly as verl's examples/data_preprocess/gsm8k.py:
 *   data_source "openai/gsm8k", ability "math",
 *   prompt [{"role": "user", "content": question + " " + DF_GSM8K_INSTRUCTION}],
 *   reward_model {"style": "rule", "ground_truth": the first `#### (-?[0-9.,]+)`
 *     match of the answer with commas removed (verl's extract_solution)},
 *   extra_info {"split": split, "index": i (0-based over non-blank lines),
 *     "answer": raw answer, "question": raw question}.
 * Keys are written in that order, one object per line, with Python json.dumps
 * separators (", " / ": ") and non-ASCII escaped as \uXXXX.
 * `split` NULL: the input file's base name without extension ("train").
 * The output is written atomically (temp file + rename): a failure leaves no
 * partial file. *n_rows (may be NULL) receives the number of rows written.
 * Errors: DF_ENOTFOUND (no input file), DF_EIO, a Parquet file's errors
 * (DF_EINVAL, DF_EUNSUPPORTED), DF_EINVAL naming in_path:line (bad JSON, missing / non-string
 * question or answer, an answer without "#### <number>"), DF_EINVAL for an input with no rows
 * or an output that is the input file.
 */
DF_API int df_gsm8k_convert(const char *in_path, const char *out_path, const char *split,
                            int64_t *n_rows);

/** The system prompt of df_gsm8k_convert_tool's rows (the role of verl's gsm8k_multiturn_w_tool.py's). */
#define DF_GSM8K_TOOL_SYSTEM                                                                            \
    "You are a math expert. Solve the question step by step, reasoning before any tool call. After "   \
    "solving it, call the `calc_gsm8k_reward` tool with your answer at least once before you give the " \
    "final answer, and refine the answer if needed. Write the final answer as `#### <answer>`."

/**
 * df_gsm8k_convert for multi-turn GRPO with the GSM8K tool and interaction, as verl's
 * examples/data_preprocess/gsm8k_multiturn_w_tool.py lays rows out: the prompt starts with a
 * {"role": "system", "content": DF_GSM8K_TOOL_SYSTEM} message (the user message is the same), and
 * extra_info also holds "need_tools_kwargs": true, "tools_kwargs": {"calc_gsm8k_reward":
 * {"create_kwargs": {"ground_truth": <gt>}}} and "interaction_kwargs": {"query": question,
 * "ground_truth": <gt>} (the agent loop hands them to the tool's create and the interaction's start).
 * Errors: as df_gsm8k_convert.
 */
DF_API int df_gsm8k_convert_tool(const char *in_path, const char *out_path, const char *split, int64_t *n_rows);

/**
 * verl's extract_solution for GSM8K reference answers: the number after the
 * first "#### " (pattern `#### (-?[0-9.,]+)`), commas removed, into out[cap].
 * Returns false when there is no match or it does not fit.
 */
DF_API bool df_gsm8k_extract_answer(const char *answer, char *out, size_t cap);

/* ---- MATH --------------------------------------------------------------- */

/** The instruction verl's examples/data_preprocess/math_dataset.py appends to each problem. */
#define DF_MATH_INSTRUCTION "Let's think step by step and output the final answer within \\boxed{}."

/** df_math_convert's default data_source: the MATH-500 set ../shared/data/math500 holds. */
#define DF_MATH_DATA_SOURCE "HuggingFaceH4/MATH-500"

/**
 * Convert raw MATH rows, JSON lines or Parquet ({"problem", "solution", ...}: MATH-500's
 * {"problem", "solution", "answer", "subject", "level", "unique_id"} or
 * MATH-lighteval's {"problem", "solution", "level", "type"}) to the verl RL
 * schema as verl's examples/data_preprocess/math_dataset.py:
 *   data_source `data_source` (NULL / "": DF_MATH_DATA_SOURCE; verl's script
 *     writes "DigitalLearningGmbH/MATH-lighteval"; both score with the MATH
 *     scorer), ability "math",
 *   prompt [{"role": "user", "content": problem + " " + DF_MATH_INSTRUCTION}],
 *   reward_model {"style": "rule", "ground_truth": the solution's last
 *     \boxed{} answer (verl's extract_solution, df_reward_math_last_boxed), or
 *     the row's "answer" when the solution has none},
 *   extra_info {"split", "index" (0-based over non-blank lines), "question"
 *     (the raw problem), "answer" (the raw solution), and the row's
 *     "subject", "type", "level", "unique_id" where present}.
 * Output format, `split`, the atomic write and *n_rows as df_gsm8k_convert.
 * Errors: DF_ENOTFOUND (no input file), DF_EIO, DF_EUNSUPPORTED (Parquet),
 * DF_EINVAL naming in_path:line (bad JSON, a missing / non-string problem or
 * solution, no boxed answer and no "answer"), DF_EINVAL for an input with no
 * rows or an output that is the input file.
 */
DF_API int df_math_convert(const char *in_path, const char *out_path, const char *split,
                           const char *data_source, int64_t *n_rows);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_DATASET_H */
