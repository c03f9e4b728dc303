/*
 * chat_template.h (internal) — a run's chat template in place of the tokenizer's: `distflow sft`'s
 * data.chat_template and `train`'s actor_rollout_ref.model.custom_chat_template (verl's key).
 */
#ifndef DF_WORKER_CHAT_TEMPLATE_H
#define DF_WORKER_CHAT_TEMPLATE_H

#include "distflow/tokenizer.h"

/**
 * Replace tok's chat template with `value`: the template text itself when it contains "{{" or "{%",
 * else the path of a UTF-8 file holding it ("~" expanded; df_tokenizer_set_chat_template_file). NULL:
 * tok keeps its own. Errors (the file unreadable, not UTF-8, out of memory) are wrapped with `key`
 * and the value.
 */
int df_worker_chat_template(df_tokenizer *tok, const char *value, const char *key);

#endif
