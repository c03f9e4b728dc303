/*
 * distflow/tokenizer.h — Hugging Face BPE tokenizers: byte-level (Qwen2 / 2.5,
 * Llama-3, GPT-2) and SentencePiece-style with byte fallback (Llama 2,
 * TinyLlama, Mistral v0.1, CodeLlama); chat templates; a small BPE trainer.
 *
 * Semantics follow the Rust `tokenizers` library (what transformers'
 * PreTrainedTokenizerFast calls): encode = split out added tokens (Aho-Corasick
 * leftmost-longest, tokenizers/src/tokenizer/added_vocabulary.rs) -> normalizer
 * -> pre-tokenizer -> BPE model (merge ranks, models/bpe/word.rs merge_all) ->
 * post-processor. Decode = the decoder chain over the token strings
 * (tokenizers/src/decoders/), joined.
 *
 * Supported tokenizer.json components (anything else is DF_EUNSUPPORTED):
 *   model          BPE (vocab + merges as "a b" or ["a","b"], ignore_merges,
 *                  unk_token, which must be in the vocab; byte_fallback and
 *                  fuse_unk, models/bpe/model.rs merge_word); dropout and
 *                  subword prefixes / suffixes are rejected.
 *                  With a ByteLevel pre-tokenizer the model works on bytes;
 *                  without one on UTF-8 chars: a char not in the vocabulary
 *                  becomes its "<0xHH>" tokens (byte_fallback) or <unk>.
 *   normalizer     null, NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace
 *                  (String or Regex pattern), Sequence of those.
 *   pre_tokenizer  null, Split (Regex or String pattern, PCRE2 in UTF + UCP
 *                  mode; behaviours Isolated / Removed / MergedWithPrevious /
 *                  MergedWithNext / Contiguous; invert), Metaspace
 *                  (replacement, prepend_scheme always / first / never, split),
 *                  ByteLevel (add_prefix_space; use_regex = GPT-2 regex; last),
 *                  Sequence.
 *   post_processor null, ByteLevel (no effect on ids), TemplateProcessing
 *                  (the "single" template: e.g. Llama's BOS), Sequence.
 *   decoder        ByteLevel, Replace (String pattern), ByteFallback, Fuse,
 *                  Strip, Metaspace, Sequence of those.
 * Llama 2's files (transformers' LlamaConverter) are: normalizer Prepend "▁" +
 * Replace " " -> "▁", no pre-tokenizer (legacy) or Metaspace with
 * prepend_scheme "first" (legacy = false), decoder Replace "▁" -> " ",
 * ByteFallback, Fuse, Strip one leading space.
 *
 * Thread safety: a loaded tokenizer is immutable; every const function may be
 * called from several threads at once. Functions taking a non-const pointer
 * (setters, free) must not race with anything else on the same tokenizer.
 *
 * Ids are int32_t (HF uses u32; no real vocabulary reaches 2^31). Lengths and
 * counts are int64_t. Every output buffer is malloc'd; the caller frees it.
 */
#ifndef DISTFLOW_TOKENIZER_H
#define DISTFLOW_TOKENIZER_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_tokenizer df_tokenizer;

/* ---- loading ------------------------------------------------------------ */

/**
 * Load a tokenizer from `path`, which is either
 *   - a tokenizer.json file, or a directory containing one, or
 *   - a directory with only vocab.json + merges.txt (GPT-2's slow layout):
 *     GPT-2 regex + ByteLevel, and `<|endoftext|>` as a special added token.
 * In the directory holding the files, tokenizer_config.json (when present)
 * supplies eos_token / pad_token / bos_token (a string or {"content": ...}),
 * added_tokens_decoder, chat_template and clean_up_tokenization_spaces,
 * chat_template.jinja (when present; UTF-8 text) replaces that chat_template
 * as transformers 4.47 and later read it (the file save_pretrained writes;
 * additional_chat_templates/ are not read), and
 * generation_config.json (when present) adds its eos_token_id (int or list)
 * to the eos ids, as verl does for stop tokens.
 * Defaults, which the config's keys override (a key set to null clears it):
 * the GPT-2 layout uses `<|endoftext|>` as bos and eos (transformers'
 * GPT2Tokenizer defaults); otherwise bos is the special token that the
 * TemplateProcessing post-processor puts first (if any) and eos / pad are
 * absent (-1). A special token named in the config must exist in the
 * vocabulary (transformers would silently add it; we report it instead).
 * When tokenizer_class is LlamaTokenizer, CodeLlamaTokenizer or GemmaTokenizer
 * (with or without "Fast"), add_bos_token (default true) and add_eos_token
 * (default false) replace the file's post-processor template, as those
 * transformers classes do (update_post_processor); DF_EINVAL when one is true
 * and its token is absent. With LlamaTokenizer, an add_prefix_space that is set
 * (which makes transformers rebuild the pipeline from tokenizer.model) is
 * accepted when tokenizer.json already has that pipeline and refused with
 * DF_EUNSUPPORTED otherwise. A directory with only a SentencePiece
 * tokenizer.model is refused with DF_ENOTFOUND and how to convert it.
 *
 * Errors: DF_ENOTFOUND (no tokenizer files at path), DF_EIO, DF_EINVAL (bad JSON
 * with the file:line:column from jansson, missing "model", a merge naming a token
 * not in the vocab, a bad id, a special token not in the vocab, ...),
 * DF_EUNSUPPORTED (model type, normalizer, pre-tokenizer, decoder, ... that this
 * implementation does not handle). Messages name the file and the key.
 */
DF_API int df_tokenizer_load(const char *path, df_tokenizer **out);

/** Free a tokenizer (NULL is a no-op). */
DF_API void df_tokenizer_free(df_tokenizer *t);

/* ---- encoding / decoding ------------------------------------------------ */

/**
 * Encode NUL-terminated UTF-8 `text` into token ids (HF `tokenizer.encode`).
 * `add_special_tokens` applies the post-processor template (Llama-3: prepends
 * `<|begin_of_text|>`; Qwen / GPT-2: nothing). Added / special tokens written
 * in the text (e.g. "<|im_end|>") are always recognised, as in HF.
 * On success *ids is malloc'd ([*n] int32 ids; never NULL, even when *n == 0).
 * Errors: DF_EINVAL for invalid UTF-8 (with the byte offset), DF_ENOMEM,
 * DF_EINTERNAL if PCRE2 fails.
 */
DF_API int df_tokenizer_encode(const df_tokenizer *t, const char *text, bool add_special_tokens,
                               int32_t **ids, int64_t *n);

/** df_tokenizer_encode() on `len` bytes of `text` (need not be NUL-terminated). */
DF_API int df_tokenizer_encode_n(const df_tokenizer *t, const char *text, int64_t len,
                                 bool add_special_tokens, int32_t **ids, int64_t *n);

/**
 * Decode ids [n] to malloc'd NUL-terminated UTF-8 text (HF `tokenizer.decode`):
 * the token strings (added tokens: their content; special ones dropped when
 * `skip_special_tokens`; ids that name no token, e.g. the padding rows of an
 * embedding larger than the vocabulary, skipped as in HF) through the decoder
 * chain, joined. ByteLevel: the tokens' bytes concatenated, then lossy UTF-8
 * (U+FFFD for each maximal invalid subpart, as Rust's from_utf8_lossy).
 * Llama 2: "▁" -> " ", runs of "<0xHH>" tokens -> their UTF-8 text (or one
 * U+FFFD per byte when invalid), one leading space stripped from the whole
 * text. A byte 0, which HF keeps as U+0000, becomes U+FFFD (it would end the
 * text here). When tokenizer_config.json sets clean_up_tokenization_spaces,
 * the transformers clean-up (" ." -> ".", " n't" -> "n't", ...) follows.
 * Errors: DF_ENOMEM.
 */
DF_API int df_tokenizer_decode(const df_tokenizer *t, const int32_t *ids, int64_t n,
                               bool skip_special_tokens, char **text);

/**
 * Raw bytes of one token, for streaming output: *bytes points into the
 * tokenizer (valid until df_tokenizer_free), *len bytes, not NUL-terminated and
 * possibly a partial UTF-8 sequence (a multi-byte character can span tokens).
 * They are the decoder's per-token steps alone (ByteLevel alphabet, Replace,
 * one "<0xHH>" byte, Metaspace's replacement -> " "), so for Llama 2 a text's
 * tokens give its leading space that df_tokenizer_decode strips.
 * Added tokens give their content. Returns DF_ENOTFOUND when `id` names no token.
 */
DF_API int df_tokenizer_token_bytes(const df_tokenizer *t, int32_t id, const char **bytes,
                                    int64_t *len);

/* ---- vocabulary ---------------------------------------------------------- */

/** Max id + 1, added tokens included (Qwen 2.5: 151665; Llama-3: 128256; GPT-2: 50257). */
DF_API int64_t df_tokenizer_vocab_size(const df_tokenizer *t);

/**
 * Id of `token` written in vocabulary form (byte-level characters, e.g.
 * "Ġworld" for " world", as HF `convert_tokens_to_ids`) or an added token's
 * content ("<|im_end|>"). -1 when absent.
 */
DF_API int32_t df_tokenizer_token_to_id(const df_tokenizer *t, const char *token);

/** Vocabulary form of `id` (HF `convert_ids_to_tokens`), NULL when absent. Owned by t. */
DF_API const char *df_tokenizer_id_to_token(const df_tokenizer *t, int32_t id);

/** True when `id` is an added token flagged "special" (skipped by skip_special_tokens). */
DF_API bool df_tokenizer_is_special(const df_tokenizer *t, int32_t id);

/** The first eos id (tokenizer_config's eos_token when set), -1 when none. */
DF_API int32_t df_tokenizer_eos_id(const df_tokenizer *t);

/** All eos ids (config eos first, then generation_config's); *n may be 0. Owned by t. */
DF_API const int32_t *df_tokenizer_eos_ids(const df_tokenizer *t, int *n);

/** True when `id` is one of the eos ids (a stop token for rollout). */
DF_API bool df_tokenizer_is_eos(const df_tokenizer *t, int32_t id);

/** pad id, -1 when absent. */
DF_API int32_t df_tokenizer_pad_id(const df_tokenizer *t);

/** bos id, -1 when absent. */
DF_API int32_t df_tokenizer_bos_id(const df_tokenizer *t);

/**
 * Replace the eos ids (e.g. from a model's generation_config). Every id must
 * name a token (DF_EINVAL otherwise). Not thread-safe with other calls on t.
 */
DF_API int df_tokenizer_set_eos_ids(df_tokenizer *t, const int32_t *ids, int n);

/* ---- chat template -------------------------------------------------------- */

typedef struct df_chat_message {
    const char *role;    /**< "system", "user", "assistant", ... */
    const char *content; /**< UTF-8 text */
} df_chat_message;

/**
 * Render `msgs` [n] with the tokenizer's chat template (HF
 * `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`):
 * each message becomes {"role", "content"} and the call is
 * df_tokenizer_apply_chat_template_json without tools or extra arguments.
 * On success *text is malloc'd (the caller frees it). The text contains
 * special-token strings (and the template's own bos, e.g. Llama-3's
 * `{{ bos_token }}`); encode it with add_special_tokens = false, as verl does.
 * Errors (*text NULL): DF_EINVAL (NULL role / content, invalid UTF-8, no
 * chat_template, a template that does not parse or fails to render —
 * `raise_exception` messages included), DF_ENOMEM.
 */
DF_API int df_tokenizer_apply_chat_template(const df_tokenizer *t, const df_chat_message *msgs,
                                            int n, bool add_generation_prompt, char **text);

/**
 * Render a whole conversation with the tokenizer's chat template, as
 * transformers' apply_chat_template(messages, tools=tools,
 * add_generation_prompt=..., **extra) does with tokenize=False.
 *   messages_json: a JSON array of message objects, each with a string "role"
 *     and whatever the template reads ("content" — a string or null —,
 *     "tool_calls": [{"type": "function", "function": {"name", "arguments"}}],
 *     "tool_call_id", "name", "reasoning_content", ...). NULL means [].
 *   tools_json: NULL (no `tools` variable: templates test `if tools`), or a
 *     JSON array of OpenAI function schemas.
 *   extra_json: NULL, or a JSON object of extra template variables
 *     (e.g. {"enable_thinking": false} for Qwen3, {"date_string": "26 Jul 2024"}
 *     for Llama 3.x); they override the defaults below and the tokenizer's
 *     df_tokenizer_set_chat_template_kwargs variables.
 * The template also sees bos_token, eos_token and pad_token (the token texts
 * of the tokenizer's bos / first eos / pad ids, absent when unset), and the
 * globals of distflow/jinja.h (raise_exception, strftime_now, namespace, range).
 * Errors (*text NULL): DF_EINVAL (malformed JSON, a message without a string
 * role, no chat_template, a template that does not parse — the message has its
 * line:column — or that fails while rendering), DF_ENOMEM.
 */
DF_API int df_tokenizer_apply_chat_template_json(const df_tokenizer *t, const char *messages_json,
                                                 const char *tools_json, bool add_generation_prompt,
                                                 const char *extra_json, char **text);

/**
 * Template variables that every render of `t` gets (the chat-template calls
 * above and every caller's), as verl passes data.apply_chat_template_kwargs
 * (e.g. {"enable_thinking": false} for Qwen3, {"reasoning_effort": "medium"}
 * for gpt-oss) to each apply_chat_template call: a JSON object, or NULL (or
 * {}) for none. They override bos_token / eos_token / pad_token, and a call's
 * extra_json overrides them key by key. Set it before renders start (a
 * tokenizer is read-only while renders run).
 * Errors (the previous variables kept): DF_EINVAL (not a JSON object; a key
 * that transformers' apply_chat_template takes as an argument of its own:
 * messages, conversation, tools, chat_template, add_generation_prompt,
 * continue_final_message, tokenize, padding, truncation, max_length,
 * return_tensors, return_dict, return_assistant_tokens_mask,
 * tokenizer_kwargs), DF_ENOMEM.
 */
DF_API int df_tokenizer_set_chat_template_kwargs(df_tokenizer *t, const char *kwargs_json);

/** The tokenizer's chat template (Jinja text), or NULL when it has none. */
DF_API const char *df_tokenizer_chat_template(const df_tokenizer *t);

/**
 * Replace the chat template with Jinja text `tmpl` (NULL: no template) and
 * parse it. A template that does not parse is accepted here (as transformers
 * loads it) and its syntax error is returned by the apply functions. Not
 * thread-safe with other calls on t. Errors: DF_ENOMEM.
 */
DF_API int df_tokenizer_set_chat_template(df_tokenizer *t, const char *tmpl);

/**
 * df_tokenizer_set_chat_template with the text of the file at `path` (a chat_template.jinja, as
 * transformers 4.47 and later save it). Errors: the read's (DF_EIO / DF_ENOTFOUND naming the path),
 * DF_EINVAL "<path>: not UTF-8 text (...)" or "<path>: a NUL byte at offset N", DF_ENOMEM.
 */
DF_API int df_tokenizer_set_chat_template_file(df_tokenizer *t, const char *path);

/* ---- BPE trainer and saving ----------------------------------------------- */

typedef struct df_bpe_train_options {
    /** Pre-tokenizer regex; NULL = Qwen 2.5's Split regex (single digits). */
    const char *pattern;
    /** Pairs seen fewer times than this are never merged; <= 0 means 2. */
    int64_t min_frequency;
    /** Default system message of the saved ChatML template; NULL = "You are a helpful assistant." */
    const char *system_message;
} df_bpe_train_options;

/**
 * Train a byte-level BPE tokenizer on texts [n_texts] (Sennrich et al. 2016,
 * "Neural Machine Translation of Rare Words with Subword Units", as HF
 * BpeTrainer with a ByteLevel alphabet): NFC-normalise, cut out occurrences of
 * the three special-token strings, pre-tokenise with the regex, start from
 * the 256 byte symbols (ids 0..255 in GPT-2 bytes_to_unicode order, "!" = 0),
 * then repeatedly merge the most frequent adjacent pair, never across
 * pre-tokens; ties go to the pair whose (left bytes, right bytes) is
 * lexicographically smallest, so the result is deterministic. Stops at
 * `vocab_size` (which counts the 256 bytes, the merges and the 3 special
 * tokens) or when no pair reaches min_frequency. The special tokens
 * `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` follow as added tokens; eos is
 * `<|im_end|>`, pad `<|endoftext|>`, no bos, and the chat template is ChatML
 * with the options' system message. `options` may be NULL.
 * Errors: DF_EINVAL (vocab_size < 259, bad regex, invalid UTF-8 text), DF_ENOMEM.
 */
DF_API int df_tokenizer_train_bpe(const char *const *texts, int64_t n_texts, int64_t vocab_size,
                                  const df_bpe_train_options *options, df_tokenizer **out);

/**
 * Write `dir`/tokenizer.json (HF tokenizers format: version, added_tokens,
 * normalizer, pre_tokenizer, post_processor, decoder, model BPE with vocab and
 * "a b" merges) and `dir`/tokenizer_config.json (eos / pad / bos tokens,
 * added_tokens_decoder, chat_template). `dir` is created if missing; each file
 * is written to a temporary name and renamed, so readers never see half a file.
 * Components of a loaded tokenizer are written back as they were read.
 * Errors: DF_EIO (with the path and errno text), DF_ENOMEM.
 */
DF_API int df_tokenizer_save(const df_tokenizer *t, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_TOKENIZER_H */
