/*
 * prompts.h (internal) — RL prompts as the model sees them: every dataset
 * row's chat messages rendered through the tokenizer's chat template (with the
 * assistant generation prompt) and encoded without extra special tokens, as
 * verl's RLHFDataset does. Encoded once at load time and reused every epoch.
 */
#ifndef DF_WORKER_PROMPTS_H
#define DF_WORKER_PROMPTS_H

#include "distflow/batch.h"
#include "distflow/dataset.h"
#include "distflow/tokenizer.h"

typedef struct df_prompt_cache {
    int64_t n;
    int64_t *offsets; /* [n + 1] */
    int32_t *tokens;  /* [offsets[n]] */
} df_prompt_cache;

/** Encode every row of `ds` (OpenMP across rows). */
int df_prompts_encode(const df_dataset *ds, const df_tokenizer *tok, df_prompt_cache *out);
void df_prompt_cache_free(df_prompt_cache *c);

/**
 * Apply data.max_prompt_length: with `filter` rows whose prompt is longer are
 * dropped from both the dataset and the cache (*n_dropped says how many);
 * without it, truncation "left" / "right" / "middle" shortens them and
 * "error" fails naming the first such row (file:line).
 */
int df_prompts_limit(df_dataset *ds, df_prompt_cache *c, int64_t max_len, bool filter,
                     const char *truncation, int64_t *n_dropped);

/** Add the ragged `prompt_ids` column to `b` from the cache rows named by its `row` column (dataset positions). */
int df_prompts_attach(df_batch *b, const df_prompt_cache *c);

/**
 * Render one row's messages through the chat template; the result is
 * malloc'd. With add_generation_prompt the assistant turn is opened.
 */
int df_prompts_render(const df_dataset *ds, int64_t i, const df_tokenizer *tok,
                      bool add_generation_prompt, char **text);

#endif
