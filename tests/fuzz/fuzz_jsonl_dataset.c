/*
 * Fuzz target: JSON-lines dataset rows (verl's RLHFDataset schema) through
 * df_dataset_load_buffer (src/data/dataset.c, jsonl.c), the loader of
 * data.train_files / val_files, under three option sets: RL rows (reward
 * required), SFT rows (reward optional) and shard 1 of 3. The buffer is passed
 * without a terminating NUL, so a read past a line shows in ASan.
 * Properties of an accepted file: every row has >= 1 message, its accessors
 * answer, its source line is within the file, and global indices increase.
 */
#include "fuzz.h"

#include "distflow/dataset.h"

int df_fuzz_status;

static void check_rows(df_dataset *ds, size_t size)
{
    int64_t n = df_dataset_size(ds), prev = -1;
    DF_FUZZ_CHECK(n >= 0 && n <= df_dataset_global_size(ds));
    for (int64_t i = 0; i < n; i++) {
        int m = df_dataset_num_messages(ds, i);
        DF_FUZZ_CHECK(m >= 1);
        for (int j = 0; j < m; j++) {
            const char *role, *content;
            DF_FUZZ_CHECK(df_dataset_message(ds, i, j, &role, &content) == DF_OK && role && content);
        }
        DF_FUZZ_CHECK(df_dataset_data_source(ds, i) && df_dataset_ground_truth(ds, i) &&
                      df_dataset_reward_style(ds, i) && df_dataset_ability(ds, i) &&
                      df_dataset_extra_info(ds, i) && df_dataset_raw_prompt(ds, i));
        int64_t line = 0;
        DF_FUZZ_CHECK(df_dataset_source(ds, i, &line) && line >= 1 && (size_t)line <= size);
        int64_t g = df_dataset_global_index(ds, i);
        DF_FUZZ_CHECK(g > prev);
        prev = g;
        char *text = NULL;
        int rc = df_dataset_field(ds, i, "prompt.0.content", &text);
        DF_FUZZ_CHECK(rc == DF_OK || rc == DF_ENOTFOUND);
        free(text);
        text = NULL;
        rc = df_dataset_field(ds, i, "extra_info.answer", &text);
        DF_FUZZ_CHECK(rc == DF_OK || rc == DF_ENOTFOUND);
        free(text);
    }
    DF_FUZZ_CHECK(df_dataset_message(ds, n, 0, NULL, NULL) == DF_EINVAL);
    /* head keeps the global rows below its bound, whichever shard holds them */
    int64_t bound = df_dataset_global_size(ds) / 2, kept = 0;
    for (int64_t i = 0; i < n; i++)
        kept += df_dataset_global_index(ds, i) < bound;
    DF_FUZZ_CHECK(df_dataset_head(ds, bound) == n - kept && df_dataset_size(ds) == kept);
}

static int load(const uint8_t *data, size_t size, const df_dataset_opts *o)
{
    df_clear_error();
    df_dataset *ds = NULL;
    int rc = df_dataset_load_buffer((const char *)data, size, "train.jsonl", o, &ds);
    if (rc == DF_OK) {
        check_rows(ds, size);
        df_dataset_free(ds);
    } else {
        DF_FUZZ_CHECK(ds == NULL && df_last_error()[0] != '\0');
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_dataset_opts rl = {0}, sft = {.reward_optional = true};
    df_dataset_opts shard = {.reward_optional = true, .shard_index = 1, .shard_count = 3};
    (void)load(data, size, &shard);
    int rc_sft = load(data, size, &sft);
    df_fuzz_status = load(data, size, &rl); /* last: its message is the one left */
    /* RL rows are SFT rows with a reward: what RL accepts, SFT accepts too */
    DF_FUZZ_CHECK(df_fuzz_status != DF_OK || rc_sft == DF_OK);
    return 0;
}
