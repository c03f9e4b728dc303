/*
 * Internal layout of df_tokenizer and helpers shared by the tokenizer files.
 *
 * The BPE model works on raw bytes: vocabulary strings are kept in their
 * byte-level form (GPT-2 bytes_to_unicode, "Ġ" = space) for lookups, saving
 * and token_to_id, and converted once to raw bytes for decoding. Merges are
 * stored as a hash map (left id, right id) -> (rank, merged id).
 */
#ifndef DF_TOK_INTERNAL_H
#define DF_TOK_INTERNAL_H

#include "distflow/jinja.h"
#include "distflow/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>

/* ---- hash maps (tok_maps.c) ---------------------------------------------- */

/** String -> int32 map; keys are copied into the map. */
typedef struct tok_strmap {
    char **keys;
    int32_t *klen;
    int32_t *vals;
    int64_t cap, n; /* cap is a power of two, kept at most half full */
} tok_strmap;

int tok_strmap_put(tok_strmap *m, const char *key, int64_t len, int32_t val);
/** Make room for n entries without rehashing. */
int tok_strmap_reserve(tok_strmap *m, int64_t n);
/** Value of key, or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, int64_t len);
void tok_strmap_free(tok_strmap *m);

/** (left, right) id pair -> (rank, merged id); one 16-byte slot per entry so that a
 *  lookup touches one cache line. */
typedef struct tok_pair_slot {
    uint64_t key; /* UINT64_MAX marks an empty slot */
    int32_t rank;
    int32_t merged;
} tok_pair_slot;

typedef struct tok_pairmap {
    tok_pair_slot *slots;
    int64_t cap, n;
} tok_pairmap;

/** Insert or overwrite (HF builds its merge map with collect(): the last duplicate wins). */
int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
/** Make room for n entries without rehashing. */
int tok_pairmap_reserve(tok_pairmap *m, int64_t n);
/** First probe of key k in a table of cap (a power of two >= 2) slots: Fibonacci hashing,
 *  the top bits of k * 2^64/phi, which depend on every bit of both ids. */
static inline int64_t tok_pair_home(uint64_t k, int64_t cap)
{
    return (int64_t)((k * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll((unsigned long long)cap)));
}

/** Slot of (a, b), or NULL. */
static inline const tok_pair_slot *tok_pairmap_find(const tok_pairmap *m, int32_t a, int32_t b)
{
    if (m->cap == 0)
        return NULL;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    int64_t mask = m->cap - 1, i = tok_pair_home(k, m->cap);
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == k)
            return &m->slots[i];
        i = (i + 1) & mask;
    }
    return NULL;
}
void tok_pairmap_free(tok_pairmap *m);

/* ---- byte-level alphabet (tok_maps.c) ------------------------------------ */

/** Code point that GPT-2's bytes_to_unicode assigns to byte b. */
uint32_t tok_byte_to_cp(uint8_t b);
/** Byte for code point cp under bytes_to_unicode, or -1 when cp is not in the alphabet. */
int tok_cp_to_byte(uint32_t cp);
/** Append the byte-level form of bytes [n] to a malloc'd string (UTF-8, NUL-terminated). */
char *tok_bytes_to_vocab(const char *bytes, int64_t n);
/** Raw bytes of a vocabulary string: each char through the alphabet; if any char is
 *  outside it, the string's own UTF-8 (the HF ByteLevel decoder's fallback). malloc'd. */
char *tok_vocab_to_bytes(const char *tok, int32_t *out_len);
/** s [n] with every occurrence of `from` (non-empty) replaced by `to`, left to right;
 *  malloc'd and NUL-terminated, its length in *out_n. NULL when out of memory (*out_n 0), or
 *  with *out_n -1 when the result would be longer than max bytes. */
char *tok_replace_all(const char *s, int64_t n, const char *from, const char *to, int64_t max, int64_t *out_n);
/** Byte offset of the first invalid UTF-8 sequence in s [n], or -1 when valid. */
int64_t tok_utf8_invalid_at(const char *s, int64_t n);

/* ---- the tokenizer ------------------------------------------------------- */

enum { TOK_F_ADDED = 1, TOK_F_SPECIAL = 2 };

typedef enum {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_PREPEND, /* text before a non-empty string (SentencePiece's "▁") */
    TOK_NORM_REPLACE  /* every match of a literal or regex by text */
} tok_norm_kind;

typedef struct tok_norm_step {
    tok_norm_kind kind;
    char *text;        /* Prepend: the prefix; Replace: the replacement */
    char *literal;     /* Replace {"String": ...}: the pattern */
    pcre2_code *re;    /* Replace {"Regex": ...}: the pattern */
} tok_norm_step;

typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend_scheme;

/* Decoder steps (tokenizers decoders/): each maps the list of token strings. */
typedef enum {
    TOK_DEC_BYTE_LEVEL,    /* alphabet chars -> bytes, all tokens fused, lossy UTF-8 */
    TOK_DEC_REPLACE,       /* a literal by text, in every token */
    TOK_DEC_BYTE_FALLBACK, /* runs of "<0xHH>" tokens -> their UTF-8 text, else U+FFFD per byte */
    TOK_DEC_FUSE,          /* all tokens -> one */
    TOK_DEC_STRIP,         /* up to `start` leading / `stop` trailing `cp` chars of every token */
    TOK_DEC_METASPACE      /* replacement -> ' '; dropped in the first token unless prepend never */
} tok_dec_kind;

typedef struct tok_dec_step {
    tok_dec_kind kind;
    char *from, *to;   /* Replace; Metaspace: from = the replacement char */
    uint32_t cp;       /* Strip */
    int64_t start, stop;
    bool prepend;      /* Metaspace: prepend_scheme is not "never" */
} tok_dec_step;

typedef enum {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS
} tok_split_behavior;

/** One pre-tokenizer step: a regex Split, Metaspace, or the final ByteLevel step. */
typedef struct tok_pre_step {
    bool byte_level;
    pcre2_code *re;          /* Split pattern, the GPT-2 regex when use_regex, Metaspace's
                                replacement when split */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space;   /* ByteLevel only */
    char *replacement;       /* Metaspace only (non-NULL marks the step) */
    tok_prepend_scheme prepend;
} tok_pre_step;

#define TOK_MAX_NORM 8
#define TOK_MAX_PRE 8
#define TOK_MAX_TEMPLATE 8
#define TOK_MAX_DEC 8

typedef struct tok_added {
    int32_t id;
    char *content;    /* as written in the file */
    char *match;      /* what is searched: content, normalised when `normalized` */
    int64_t match_len;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

struct df_tokenizer {
    /* id tables, [n_ids] each; NULL entries are gaps */
    int64_t n_ids;
    char **tok_str;     /* vocabulary form (added tokens: content) */
    char **tok_bytes;   /* raw bytes for decoding */
    int32_t *tok_blen;
    uint8_t *flags;     /* TOK_F_* */

    /* BPE model */
    tok_strmap vocab;   /* model vocabulary, vocabulary form -> id */
    int64_t n_model;    /* entries in the model vocabulary */
    int32_t *merges;    /* [n_merges][2] left, right ids in rank order */
    int64_t n_merges;
    tok_pairmap pairs;
    int32_t byte_id[256]; /* id of each single byte (byte-level models), -1 when missing */
    bool ignore_merges;
    int32_t unk_id;
    /* char-level models (no ByteLevel pre-tokenizer: SentencePiece BPE): words start as
     * UTF-8 chars; a char not in the vocabulary becomes its "<0xHH>" byte tokens
     * (byte_fallback) or <unk>, consecutive unknowns fused into one (fuse_unk) */
    bool char_level, byte_fallback, fuse_unk;
    int32_t fallback_id[256]; /* id of "<0xHH>", -1 when missing */

    /* added tokens, and a first-byte filter for each matching pass */
    tok_added *added;
    int n_added;
    tok_strmap added_map; /* content -> id */
    bool first_raw[256], first_norm[256];
    bool any_norm_added;

    /* pipeline */
    tok_norm_step norm[TOK_MAX_NORM];
    int n_norm;
    tok_pre_step pre[TOK_MAX_PRE];
    int n_pre;
    tok_dec_step dec[TOK_MAX_DEC]; /* none (no pipeline parsed): bytes as ByteLevel gives them */
    int n_dec;
    int32_t post_prefix[TOK_MAX_TEMPLATE], post_suffix[TOK_MAX_TEMPLATE];
    int n_post_prefix, n_post_suffix;

    /* JSON of the pipeline components, written back by df_tokenizer_save */
    json_t *j_normalizer, *j_pre_tokenizer, *j_post_processor, *j_decoder, *j_config;

    /* special ids and chat template */
    int32_t *eos_ids;
    int n_eos;
    int32_t pad_id, bos_id;
    bool clean_up_spaces;
    char *chat_template;
    df_jinja_template *chat_jinja; /* the parsed template; NULL when absent or it does not parse */
    char *chat_error;              /* why it does not parse */
    json_t *chat_kwargs;           /* variables of every render (set_chat_template_kwargs); NULL: none */
};

/* tok_load.c */
df_tokenizer *tok_new(void);
/** Size the id tables for ids < n (keeps existing entries). */
int tok_reserve_ids(df_tokenizer *t, int64_t n);
/** Fill the model from vocab entries and merges (both in vocabulary form). `src` names the
 *  file for messages. */
int tok_build_model(df_tokenizer *t, const char *const *vocab_str, const int32_t *vocab_id,
                    int64_t n_vocab, const char *const *merge_l, const char *const *merge_r,
                    int64_t n_merges, const char *src);
/** Register an added token (the id may also be in the model vocabulary). */
int tok_add_token(df_tokenizer *t, const tok_added *a, const char *src);
/** Compile a regex in UTF + UCP mode, JIT when possible. */
int tok_compile_regex(const char *pattern, bool literal, pcre2_code **out, const char *src);
/** Parse tokenizer.json components into t (used by load). */
int tok_parse_pipeline(df_tokenizer *t, json_t *root, const char *src);
/** Load a JSON object file; errors carry jansson's file:line:column. NULL with *rc set on error. */
json_t *tok_load_json(const char *path, int *rc);
/** Recompute first-byte filters and normalised match strings of added tokens. */
int tok_refresh_added(df_tokenizer *t);

/* tok_decode.c */
/** Raw bytes of one model token in vocabulary form: the decoder's per-token steps (ByteLevel
 *  alphabet, Replace, a "<0xHH>" byte, Metaspace's replacement); malloc'd, NUL-terminated.
 *  NULL when out of memory, or with *out_len -1 when the bytes would exceed INT32_MAX. */
char *tok_piece_bytes(const df_tokenizer *t, const char *piece, int32_t *out_len);

/* tok_config.c */
int tok_load_config(df_tokenizer *t, const char *dir, bool gpt2_layout);
/** Apply a parsed tokenizer_config.json object (kept in t->j_config for saving). */
int tok_apply_config(df_tokenizer *t, json_t *cfg, const char *src);
int tok_token_id_any(const df_tokenizer *t, const char *s);
/** Free the parsed chat template and its parse error (tok_chat.c). */
void tok_chat_free(df_tokenizer *t);

/* tok_encode.c */
/** Apply t's normalizers to s [n]; *out malloc'd (NULL with *out_n = n when unchanged). */
int tok_normalize(const df_tokenizer *t, const char *s, int64_t n, char **out, int64_t *out_n);

/* tok_train.c / tok_save.c */
extern const char *const tok_qwen2_pattern;
extern const char *const tok_gpt2_pattern;

#endif /* DF_TOK_INTERNAL_H */
