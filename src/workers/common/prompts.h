/*
 * prompts.h (internal) — RL prompts as the model sees them: every dataset
 * row's chat messages rendered through the tokenizer's chat template (with the
 * assistant generation prompt) and encoded without extra special tokens, as
 * verl's RLHFDataset does. Encoded once at load time and reused every epoch.
 */
#ifndef DF_WORKER_PROMPTS_H
#define DF_WORKER_PROMPTS_H

#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/dataset.h"
#include "distflow/tokenizer.h"

typedef struct df_prompt_cache {
    int64_t n;
    int64_t *offsets; /* [n + 1] */
    int32_t *tokens;  /* [offsets[n]] */
} df_prompt_cache;

/** Encode every row of `ds` (OpenMP across rows). */
int df_prompts_encode(const df_dataset *ds, const df_tokenizer *tok, df_prompt_cache *out);

/**
 * df_prompts_encode, or with `rerender` every row's raw_prompt as the multi-turn agent loop renders
 * it (df_prompts_encode_json with tools_json, NULL for none): data.max_prompt_length must measure
 * the prompt the model sees, whose system prompt lists the tools' JSON schemas (Qwen2.5's template;
 * verl's RLHFDataset measures with the tool schemas when its data.tool_config_path is set).
 * Errors: the template's or the tokenizer's, naming the row's file:line; DF_ENOMEM.
 */
int df_prompts_encode_rerendered(const df_dataset *ds, const df_tokenizer *tok, bool rerender,
                                 const char *tools_json, df_prompt_cache *out);

/**
 * df_prompts_encode_rerendered with the work shared by the ranks of `comm` (NULL or one rank: all
 * here): each encodes a contiguous share of the rows (rank r: [r n / W, (r + 1) n / W)) and the
 * shares are allgathered in rank order, so every rank ends with the whole cache, the same as one
 * rank's. Collective: every rank of comm calls it on the same rows. Every rank returns the same
 * verdict: the first failing row's error (each rank encodes that row again for the message), or a
 * lost collective's. Errors: as df_prompts_encode_rerendered; the comm's.
 */
int df_prompts_encode_shared(const df_dataset *ds, const df_tokenizer *tok, bool rerender, const char *tools_json,
                             df_comm *comm, df_prompt_cache *out);

/**
 * One prompt as the multi-turn agent loop feeds it to the model: messages_json (a JSON array of
 * messages) through the chat template with the generation prompt and tools_json (NULL: none),
 * encoded without extra special tokens. *ids is malloc'd, [*n]. Errors: the template's, DF_ENOMEM.
 */
int df_prompts_encode_json(const df_tokenizer *tok, const char *messages_json, const char *tools_json,
                           int32_t **ids, int64_t *n);

void df_prompt_cache_free(df_prompt_cache *c);

/**
 * Apply data.max_prompt_length: with `filter` rows whose prompt is longer are
 * dropped from both the dataset and the cache (*n_dropped says how many);
 * without it, truncation "left" / "right" / "middle" shortens them and
 * "error" fails naming the first such row (file:line).
 */
int df_prompts_limit(df_dataset *ds, df_prompt_cache *c, int64_t max_len, bool filter,
                     const char *truncation, int64_t *n_dropped);

typedef struct df_prompt_limits {
    int64_t max_len;           /* data.max_prompt_length */
    bool filter;               /* data.filter_overlong_prompts */
    const char *truncation;    /* data.truncation: error | left | right | middle */
    const char *rerendered_by; /* NULL, or the key under which the rollout renders each row's messages
                                  again (multi-turn): a cut prompt is then not what the model sees,
                                  so an overlong one is an error unless filtered */
} df_prompt_limits;

/** df_prompts_limit with the multi-turn case: truncation refused when lim->rerendered_by is set. */
int df_prompts_limit_ex(df_dataset *ds, df_prompt_cache *c, const df_prompt_limits *lim, int64_t *n_dropped);

/** Add the ragged `prompt_ids` column to `b` from the cache rows named by its `row` column (dataset positions). */
int df_prompts_attach(df_batch *b, const df_prompt_cache *c);

/**
 * Render one row's messages through the chat template; the result is
 * malloc'd. With add_generation_prompt the assistant turn is opened.
 */
int df_prompts_render(const df_dataset *ds, int64_t i, const df_tokenizer *tok,
                      bool add_generation_prompt, char **text);

#endif
