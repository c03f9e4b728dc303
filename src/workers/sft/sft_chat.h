/*
 * Multi-turn SFT samples (verl's MultiTurnSFTDataset, data.multiturn.enable):
 * a conversation rendered through the chat template one message at a time,
 * tokenised, with a loss mask that is 1 on the assistant turns only.
 */
#ifndef DISTFLOW_SFT_CHAT_H
#define DISTFLOW_SFT_CHAT_H

#include "distflow/dataset.h"
#include "distflow/tokenizer.h"
#include "workers/common/prompts.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * What the per-message rendering strips or masks, found once per tokenizer as
 * verl's extract_system_prompt_and_generation does: with u = [{"role": "user",
 * "content": ""}], `system` is the tokens of render(u) minus its last
 * (len(render(u + u)) - len(render(u))) tokens (the template's default system
 * turn, e.g. Qwen2.5's "You are Qwen, ..." block; empty for templates without
 * one), and `gen` the tokens render(u, add_generation_prompt) has beyond
 * render(u) (e.g. "<|im_start|>assistant\n").
 */
typedef struct df_sft_chat_prefix {
    int32_t *system, *gen;
    int64_t n_system, n_gen;
} df_sft_chat_prefix;

/* The prefixes of `tok`'s chat template. Errors: DF_EINVAL (no chat template, a render that fails, a
   template whose two-turn render is shorter than its one-turn render), DF_ENOMEM. */
int df_sft_chat_prefix_init(const df_tokenizer *tok, df_sft_chat_prefix *out);
void df_sft_chat_prefix_free(df_sft_chat_prefix *p);

/*
 * Tokenise one conversation for SFT.
 *   messages_json: a JSON array of message objects, each with a "role" among
 *     system / user / assistant / tool (what the template reads besides:
 *     "content", "tool_calls", "reasoning_content", ...).
 *   tools_json: NULL or a JSON array of OpenAI function schemas, given to the
 *     first message's render only (as verl).
 *   enable_thinking: -1 (no such variable), 0 or 1 (the template variable
 *     "enable_thinking", e.g. Qwen3's).
 * Message i is rendered alone (add_generation_prompt false) and encoded
 * without special tokens; for i > 0 and a role other than system the first
 * n_system tokens (the template's default system turn) are dropped. The mask
 * is 1 on an assistant message's tokens after its first n_gen tokens (the
 * generation prompt): its content, tool calls and the end-of-turn tokens the
 * template writes after it (Qwen2.5: "<|im_end|>" and "\n"), 0 elsewhere.
 * The concatenation must equal the encoding of the whole conversation
 * rendered at once (verl's sanity check: templates that render a turn
 * differently in context, e.g. consecutive tool messages or Qwen3's
 * thinking tags, fail here) -- unless `mismatch` is non-NULL (verl's
 * data.ignore_input_ids_mismatch): then a difference is no error, *mismatch
 * tells whether there was one, and the turn-by-turn tokens are returned.
 * The tokenizer's chat-template kwargs (df_tokenizer_set_chat_template_kwargs)
 * apply to every render, enable_thinking over them.
 * On success *ids [*n] and *mask [*n] (0 / 1) are malloc'd.
 * Errors (message without the row's file:line, which the caller adds):
 * DF_EINVAL (not a list, empty, a message that is not an object or has a
 * bad role, no assistant message, a template raise, the mismatch above),
 * DF_ENOMEM.
 */
int df_sft_chat_encode(const df_tokenizer *tok, const df_sft_chat_prefix *pre, const char *messages_json,
                       const char *tools_json, int enable_thinking, bool *mismatch, int32_t **ids, uint8_t **mask,
                       int64_t *n);

/* The columns of a multi-turn row (data.multiturn.*), the length rules (data.max_length, truncation) and
   data.ignore_input_ids_mismatch. */
typedef struct df_sft_chat_keys {
    const char *messages_key, *tools_key, *enable_thinking_key;
    int64_t max_length;
    const char *truncation; /* "error" | "left" | "right" */
    bool ignore_input_ids_mismatch;
} df_sft_chat_keys;

/* Rows whose turn-by-turn tokens differ from the whole conversation's (kept, with
   ignore_input_ids_mismatch): how many, and the first one's index (-1: none). */
typedef struct df_sft_chat_stats {
    int64_t mismatched, first_mismatched;
} df_sft_chat_stats;

/*
 * Encode every row of `ds` (loaded with no_prompt) with df_sft_chat_encode and
 * the prefixes `pre` (df_sft_chat_prefix_init of `tok`, made before its
 * chat-template kwargs were set: verl extracts them without
 * data.apply_chat_template_kwargs, so that e.g. Qwen3's enable_thinking=false
 * generation prompt, which adds an empty think block, does not mask content):
 * the messages from column k->messages_key (a list), the tools from
 * k->tools_key (absent or null: none; a list, or a string holding one),
 * enable_thinking from k->enable_thinking_key (absent or null: unset; a
 * bool). A sequence longer than max_length is an error (truncation "error"),
 * or keeps its last (left) / first (right) max_length tokens, as verl. Each
 * row is then split where the mask first turns 1 (at least one token stays
 * in front): *prompt holds the tokens before, *response the rest, and
 * *mask [response->offsets[n]] the loss mask of the response tokens (1.0f /
 * 0.0f). Errors name the row's file:line and the key: those of
 * df_sft_chat_encode, a missing messages column, a tools value that is not
 * a list, an enable_thinking value that is not a bool, an over-long row
 * with truncation "error"; DF_ENOMEM. With k->ignore_input_ids_mismatch a
 * conversation whose turns differ from its whole render is kept (its
 * turn-by-turn tokens) and counted in *stats (may be NULL).
 */
int df_sft_chat_load(const df_dataset *ds, const df_tokenizer *tok, const df_sft_chat_prefix *pre,
                     const df_sft_chat_keys *k, df_prompt_cache *prompt, df_prompt_cache *response, float **mask,
                     df_sft_chat_stats *stats);

#endif
