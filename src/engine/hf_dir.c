/* HF model directory: model + tokenizer (hf_dir.h). */
#include "engine/hf_dir.h"

#include "util/fsutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_pair(const df_model *m, df_tokenizer *t, const char *model_dir,
                      const char *tok_path)
{
    int64_t tv = df_tokenizer_vocab_size(t), mv = m->cfg.vocab_size;
    if (tv > mv)
        return df_error(DF_EINVAL,
                        "tokenizer %s has ids up to %lld but model %s has vocab_size %lld",
                        tok_path, (long long)(tv - 1), model_dir, (long long)mv);
    if (df_tokenizer_eos_id(t) < 0 && m->cfg.n_eos > 0) {
        int32_t ids[DF_MAX_EOS];
        for (int i = 0; i < m->cfg.n_eos; i++)
            ids[i] = (int32_t)m->cfg.eos_token_ids[i];
        return df_tokenizer_set_eos_ids(t, ids, m->cfg.n_eos);
    }
    return DF_OK;
}

int df_hf_dir_load(const char *model_dir, const char *tokenizer_path, const df_config_overrides *ov,
                   df_model **model, df_tokenizer **tok)
{
    const char *tp = tokenizer_path ? tokenizer_path : model_dir;
    df_model *m = NULL;
    df_tokenizer *t = NULL;
    int rc = df_model_load_ex(model_dir, ov, &m);
    if (!rc && tok)
        rc = df_tokenizer_load(tp, &t);
    if (!rc && t)
        rc = check_pair(m, t, model_dir, tp);
    if (rc) {
        df_model_free(m);
        df_tokenizer_free(t);
        return rc;
    }
    if (model)
        *model = m;
    else
        df_model_free(m);
    if (tok)
        *tok = t;
    return DF_OK;
}

static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json",
                                              "vocab.json", "merges.txt",
                                              "special_tokens_map.json", "chat_template.jinja"};

static int copy_tokenizer(const char *tokenizer_dir, const char *out_dir)
{
    int rc = DF_OK;
    /* a tokenizer file of an earlier save that this tokenizer lacks would be read with it (an old
       tokenizer.json wins over new vocab.json / merges.txt): removed */
    for (size_t i = 0; i < sizeof TOKENIZER_FILES / sizeof *TOKENIZER_FILES && !rc; i++) {
        char *src = df_path_join(tokenizer_dir, TOKENIZER_FILES[i]);
        char *dst = df_path_join(out_dir, TOKENIZER_FILES[i]);
        if (!src || !dst)
            rc = df_error(DF_ENOMEM, "out of memory");
        else if (df_file_exists(src))
            rc = df_copy_file(src, dst);
        else if (df_file_exists(dst) && unlink(dst))
            rc = df_error(DF_EIO, "%s: cannot remove a tokenizer file of an earlier save: %s", dst, strerror(errno));
        free(src);
        free(dst);
    }
    return rc;
}

static int write_template(const char *out_dir, const char *tmpl)
{
    char *p = df_path_join(out_dir, "chat_template.jinja");
    int rc = p ? df_write_file_atomic(p, tmpl, strlen(tmpl)) : df_error(DF_ENOMEM, "out of memory");
    free(p);
    return rc;
}

int df_hf_dir_save(const df_model *m, df_dtype dtype, const char *tokenizer_dir, const char *chat_template,
                   const char *out_dir)
{
    int rc = df_model_save(m, out_dir, dtype, 0);
    if (!rc && tokenizer_dir && strcmp(tokenizer_dir, out_dir))
        rc = copy_tokenizer(tokenizer_dir, out_dir);
    return rc || !chat_template ? rc : write_template(out_dir, chat_template);
}
