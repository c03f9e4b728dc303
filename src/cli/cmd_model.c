/* distflow init-model | score */
#include "cli/cli.h"

#include "distflow/model.h"
#include "distflow/tokenizer.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *INIT_USAGE =
    "--config config.json --tokenizer DIR --out DIR [--seed N] [--dtype float32|bfloat16|float16]\n\n"
    "Create a Hugging Face model directory with random weights (normal(0, initializer_range),\n"
    "as transformers initialises Qwen2 / Llama) for the architecture in config.json, and copy the\n"
    "tokenizer next to it. The tokenizer's ids must fit vocab_size; its EOS / BOS ids are written\n"
    "into config.json when the config names none.";

static int parse_dtype(const char *s, df_dtype *out)
{
    if (!s)
        return 0;
    if (!strcmp(s, "float32"))
        *out = DF_DTYPE_F32;
    else if (!strcmp(s, "bfloat16"))
        *out = DF_DTYPE_BF16;
    else if (!strcmp(s, "float16"))
        *out = DF_DTYPE_F16;
    else
        return df_error(DF_EINVAL, "--dtype must be float32, bfloat16 or float16, got '%s'", s);
    return 0;
}

int df_cmd_init_model(int argc, char **argv)
{
    const char *config = NULL, *tokdir = NULL, *out = NULL, *dtype_s = NULL;
    int64_t seed = 0;
    df_opt opts[] = {
        {"config", DF_OPT_PATH, &config, "HF config.json of the architecture (required)", false},
        {"tokenizer", DF_OPT_PATH, &tokdir, "tokenizer directory to pair with it (required)", false},
        {"out", DF_OPT_PATH, &out, "output model directory (required)", false},
        {"seed", DF_OPT_INT, &seed, "seed of the random init (default 0)", false},
        {"dtype", DF_OPT_STR, &dtype_s, "weights dtype (default: config's torch_dtype)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("init-model", INIT_USAGE, opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("init-model", opts)))
        return code;
    df_model_config cfg;
    df_tokenizer *tok = NULL;
    df_model *m = NULL;
    /* its files are copied into --out: a tokenizer.json path would load and leave --out without one */
    int rc = df_dir_exists(tokdir) ? df_model_config_load(config, &cfg)
                                   : df_error(DF_EINVAL, "--tokenizer %s: not a directory (its tokenizer.json, "
                                              "tokenizer_config.json, ... are copied into --out)", tokdir);
    df_dtype dtype = cfg.torch_dtype;
    if (!rc)
        rc = parse_dtype(dtype_s, &dtype);
    if (!rc)
        rc = df_tokenizer_load(tokdir, &tok);
    if (!rc && df_tokenizer_vocab_size(tok) > cfg.vocab_size)
        rc = df_error(DF_EINVAL, "%s: vocab_size %lld is smaller than the tokenizer's %lld tokens",
                      config, (long long)cfg.vocab_size, (long long)df_tokenizer_vocab_size(tok));
    if (!rc && cfg.n_eos == 0) {
        int n;
        const int32_t *eos = df_tokenizer_eos_ids(tok, &n);
        for (int i = 0; i < n && i < DF_MAX_EOS; i++)
            cfg.eos_token_ids[cfg.n_eos++] = eos[i];
    }
    if (!rc && cfg.bos_token_id < 0)
        cfg.bos_token_id = df_tokenizer_bos_id(tok);
    if (!rc && (rc = df_model_create(&cfg, &m)))
        df_error_wrap(rc, "%s", config);
    if (!rc)
        rc = df_model_init_random(m, (uint64_t)seed);
    if (!rc)
        rc = df_hf_dir_save(m, dtype, tokdir, NULL, out);
    if (!rc)
        fprintf(stderr, "distflow init-model: wrote %s (%lld parameters, %s)\n", out,
                (long long)m->n_params, cfg.model_type);
    df_model_free(m);
    df_tokenizer_free(tok);
    return rc ? df_cli_fail("init-model") : 0;
}

static const char *SCORE_USAGE =
    "--model DIR --prompt TEXT --response TEXT\n\n"
    "Print {\"prompt_ids\": [...], \"response_ids\": [...], \"log_probs\": [...]}: the log-probability\n"
    "(fp32, temperature 1) of each response token given everything before it. Prompt and response\n"
    "are encoded separately, without a chat template or special tokens.";

static void print_ids(const char *key, const int32_t *ids, int64_t n)
{
    printf("\"%s\": [", key);
    for (int64_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

/* Log-probs of response[0..nr) after prompt[0..np) (np >= 1). */
static int score(const df_model *m, const int32_t *p, int64_t np, const int32_t *r, int64_t nr,
                 float *logp)
{
    int64_t T = np + nr;
    int32_t *toks = malloc((size_t)T * sizeof *toks);
    int64_t *rows = malloc((size_t)(nr ? nr : 1) * sizeof *rows);
    df_acts *acts = NULL;
    int rc = toks && rows ? df_acts_create(&m->cfg, T, nr, &acts) : df_error(DF_ENOMEM, "out of memory");
    if (!rc) {
        memcpy(toks, p, (size_t)np * sizeof *toks);
        memcpy(toks + np, r, (size_t)nr * sizeof *toks);
        for (int64_t j = 0; j < nr; j++)
            rows[j] = np - 1 + j;
        int64_t offs[2] = {0, T};
        df_seq_batch sb = {.n_tokens = T, .tokens = toks, .n_seqs = 1, .seq_offsets = offs,
                           .n_out = nr, .out_rows = rows, .out_targets = r};
        rc = df_model_forward(m, acts, &sb, 1.0f, logp, NULL);
    }
    df_acts_free(acts);
    free(toks);
    free(rows);
    return rc;
}

int df_cmd_score(int argc, char **argv)
{
    const char *dir = NULL, *prompt = NULL, *response = NULL;
    df_opt opts[] = {
        {"model", DF_OPT_PATH, &dir, "HF model directory with its tokenizer (required)", false},
        {"prompt", DF_OPT_STR, &prompt, "prompt text (required)", false},
        {"response", DF_OPT_TEXT, &response, "response text (required; may be empty)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("score", SCORE_USAGE, opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("score", opts)))
        return code;
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    int32_t *p = NULL, *r = NULL;
    int64_t np = 0, nr = 0;
    float *logp = NULL;
    int rc = df_hf_dir_load(dir, NULL, NULL, &m, &tok);
    if (!rc)
        rc = df_tokenizer_encode(tok, prompt, false, &p, &np);
    if (!rc)
        rc = df_tokenizer_encode(tok, response, false, &r, &nr);
    if (!rc && np == 0)
        rc = df_error(DF_EINVAL, "the prompt encodes to no tokens; at least one is needed");
    if (!rc && np + nr > df_model_max_positions(&m->cfg)) /* no position past the model's range */
        rc = df_error(DF_EINVAL, "prompt (%lld tokens) + response (%lld tokens) exceed the model's "
                      "%s of %lld (%s/config.json)", (long long)np, (long long)nr,
                      df_model_max_positions_name(&m->cfg), (long long)df_model_max_positions(&m->cfg), dir);
    if (!rc && !(logp = malloc((size_t)(nr ? nr : 1) * sizeof *logp)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = score(m, p, np, r, nr, logp);
    for (int64_t j = 0; !rc && j < nr; j++) /* JSON has no NaN: a non-finite value is a broken model */
        if (!isfinite(logp[j]))
            rc = df_error(DF_EINVAL, "the log-probability of response token %lld is %g: the weights in %s are "
                          "not finite?", (long long)j, (double)logp[j], dir);
    if (!rc) {
        putchar('{');
        print_ids("prompt_ids", p, np);
        printf(", ");
        print_ids("response_ids", r, nr);
        printf(", \"log_probs\": [");
        for (int64_t j = 0; j < nr; j++)
            printf(j ? ", %.9g" : "%.9g", (double)logp[j]);
        printf("]}\n");
    }
    free(p);
    free(r);
    free(logp);
    df_model_free(m);
    df_tokenizer_free(tok);
    return rc ? df_cli_fail("score") : 0;
}
