/*
 * hf_dir.h (internal) — a Hugging Face model directory as a unit: the model
 * (config.json + safetensors) and its tokenizer files.
 */
#ifndef DF_ENGINE_HF_DIR_H
#define DF_ENGINE_HF_DIR_H

#include "distflow/model.h"
#include "distflow/tokenizer.h"

/**
 * Load the model in `model_dir` (config.json with the overrides `ov` merged in: df_model_load_ex;
 * ov may be NULL) and the tokenizer in `tokenizer_path` (NULL: model_dir). Checks the tokenizer's ids fit the embedding; when the
 * tokenizer names no EOS (e.g. a bare Llama-3 tokenizer.json) the model's
 * eos_token_id is used for it. Either output may be NULL to skip loading it.
 */
int df_hf_dir_load(const char *model_dir, const char *tokenizer_path, const df_config_overrides *ov,
                   df_model **model, df_tokenizer **tok);

/**
 * Save `m` into `out_dir` in `dtype` and copy the tokenizer files found in
 * `tokenizer_dir` (tokenizer.json, tokenizer_config.json, vocab.json,
 * merges.txt, special_tokens_map.json, chat_template.jinja) next to it, so the directory loads in
 * transformers as it is; those files left in out_dir by an earlier save that tokenizer_dir lacks are
 * removed (they would be read with the new ones). tokenizer_dir may be NULL or equal to out_dir.
 * `chat_template` (NULL: the copied files' own) is written as out_dir/chat_template.jinja, which
 * transformers 4.47 and later (and df_tokenizer_load) read in place of tokenizer_config.json's: the
 * template a run rendered with (verl's custom_chat_template, saved by its tokenizer's
 * save_pretrained).
 */
int df_hf_dir_save(const df_model *m, df_dtype dtype, const char *tokenizer_dir, const char *chat_template,
                   const char *out_dir);

#endif
