/*
 * Fuzz target: a Hugging Face config.json through df_model_config_parse (the
 * text form of df_model_config_load, src/model/config_json.c), then what a load
 * does next with it: the overflow-checked parameter count, the tensor table, and
 * the config.json a save writes. Properties of an accepted file: the count
 * either succeeds or is refused with a message (sizes read from a file must never
 * overflow), a layout tiles its blob, and what a save writes parses back to the
 * same config.
 */
#include "fuzz.h"

#include "distflow/model.h"
#include "model/hf_io.h"

int df_fuzz_status;

/* Build the tensor table only for configs this small (a real load would too, after the count). */
#define LAYOUT_MAX_TENSORS 4096

static void check_layout(const df_model_config *c, int64_t total, int64_t n_tensors)
{
    df_param_desc *d = NULL;
    int n = 0;
    int64_t total2 = 0;
    DF_FUZZ_CHECK(df_model_layout(c, &d, &n, &total2) == DF_OK);
    DF_FUZZ_CHECK(n == n_tensors && total2 == total);
    int64_t end = 0;
    for (int i = 0; i < n; i++) {
        DF_FUZZ_CHECK(d[i].offset >= end && d[i].numel >= 0);
        end = d[i].offset + d[i].numel;
    }
    DF_FUZZ_CHECK(end <= total);
    free(d);
}

static bool same_config(const df_model_config *a, const df_model_config *b)
{
    bool same = !strcmp(a->model_type, b->model_type) && a->vocab_size == b->vocab_size &&
                a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
                a->num_hidden_layers == b->num_hidden_layers &&
                a->num_attention_heads == b->num_attention_heads &&
                a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim &&
                a->max_position_embeddings == b->max_position_embeddings &&
                a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
                a->initializer_range == b->initializer_range &&
                a->tie_word_embeddings == b->tie_word_embeddings &&
                a->attention_bias == b->attention_bias && a->bos_token_id == b->bos_token_id &&
                a->n_eos == b->n_eos && a->torch_dtype == b->torch_dtype &&
                a->num_labels == b->num_labels;
    for (int i = 0; same && i < a->n_eos; i++)
        same = a->eos_token_ids[i] == b->eos_token_ids[i];
    return same;
}

/* A saved model must reopen with the config it was saved with. */
static void check_round_trip(const df_model_config *c, const char *original)
{
    char *saved = NULL;
    int rc = df_model_config_to_json(c, original, &saved);
    if (rc) {
        fprintf(stderr, "config.json: %s\n", df_last_error());
        DF_FUZZ_CHECK(rc == DF_OK);
    }
    df_model_config back;
    rc = df_model_config_parse(saved, "saved config.json", &back);
    if (rc)
        fprintf(stderr, "saved config.json: %s\n", df_last_error());
    DF_FUZZ_CHECK(rc == DF_OK && same_config(c, &back));
    free(saved);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error(); /* a message left by the previous input must not count for this one */
    char *text = df_fuzz_cstr(data, size);
    df_model_config c;
    df_fuzz_status = df_model_config_parse(text, "config.json", &c);
    if (df_fuzz_status == DF_OK) {
        int64_t total = 0, n_tensors = 0;
        /* a load counts the parameters before allocating anything: a refusal there is the load's */
        int rc = df_fuzz_status = df_model_param_count(&c, &total, &n_tensors);
        DF_FUZZ_CHECK(rc == DF_OK ? total > 0 && n_tensors > 0 : df_last_error()[0] != '\0');
        if (rc == DF_OK && n_tensors <= LAYOUT_MAX_TENSORS)
            check_layout(&c, total, n_tensors);
        check_round_trip(&c, text);
    } else {
        DF_FUZZ_CHECK(df_last_error()[0] != '\0');
    }
    free(text);
    return 0;
}
