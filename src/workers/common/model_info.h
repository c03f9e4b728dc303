/* model_info.h (internal) — the console's description of a model and its tokenizer (train and sft banners). */
#ifndef DF_WORKER_MODEL_INFO_H
#define DF_WORKER_MODEL_INFO_H

#include "distflow/lora.h"
#include "distflow/model.h"
#include "distflow/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

/**
 * Two lines into f: `model: <dir>: <Architecture>, <N> parameters (layers, hidden, attention and KV
 * heads, head_dim, vocab, tied embeddings, q/k/v bias)`, then the dtypes (the files' torch_dtype;
 * float32 weights, gradients and AdamW moments, and their 16 bytes a parameter); then, when tok is
 * not NULL, `tokenizer: <tok_dir> (<V> tokens)`. `bf16`: the matmuls run in mixed precision. `lora` (may be NULL):
 * the adapters trained instead of the weights, described on a line of their own.
 */
void df_print_model_info(FILE *f, const char *dir, const df_model *m, bool bf16, const df_lora *lora,
                         const char *tok_dir, const df_tokenizer *tok);

#endif
