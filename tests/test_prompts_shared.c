/*
 * The training prompts encoded with the work shared by the ranks (df_prompts_encode_shared): each
 * rank encodes a contiguous share of the rows and the shares are allgathered, so every rank must
 * end with exactly the cache one rank builds alone (ids and offsets, bit for bit), with shares
 * that are empty on some ranks too, in the multi-turn rendering as in the plain one; and a row that
 * fails to encode must fail every rank with that row's message, whichever rank encoded it.
 */
/* mpi-test: np 2 3 */
/* rounding-free (scripts/test-variants.sh skips it): tokenization only */
#include "distflow/agent.h"
#include "distflow/comm.h"
#include "distflow/dataset.h"
#include "util/fsutil.h"
#include "workers/common/prompts.h"
#include "workers/rollout/agent_loop.h"

#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define QWEN DF_SHARED_DIR "/data/tokenizers/qwen2.5"
#define CALC_TOOLS DF_SOURCE_DIR "/examples/gsm8k_multiturn/config/tool_config/calculator_tool_config.yaml"

static df_comm *world;
static df_tokenizer *tok;

static void same_cache(const df_prompt_cache *a, const df_prompt_cache *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->offsets, b->offsets, (size_t)(a->n + 1) * sizeof *a->offsets);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->offsets[a->n] * sizeof *a->tokens);
}

/* Shared over the world == encoded alone, for `rows` rows of ds (all when < 0). */
static void check_shared(df_dataset *ds, bool rerender, const char *tools)
{
    df_prompt_cache alone, shared;
    assert_int_equal(df_prompts_encode_shared(ds, tok, rerender, tools, NULL, &alone), DF_OK);
    assert_int_equal(df_prompts_encode_shared(ds, tok, rerender, tools, world, &shared), DF_OK);
    assert_true(alone.n == df_dataset_size(ds) && alone.offsets[alone.n] > 10 * alone.n);
    same_cache(&alone, &shared);
    df_prompt_cache_free(&alone);
    df_prompt_cache_free(&shared);
}

/* verl's GSM8K rows (a parquet file and JSON lines, 14 rows), plain and as the agent loop renders
   them with the calculator tool's schema; then one row, so that all but one rank encode nothing. */
static void test_same_as_one_rank(void **state)
{
    (void)state;
    const char *paths[] = {DF_SOURCE_DIR "/tests/fixtures/parquet/gsm8k_verl.parquet",
                           DF_SOURCE_DIR "/tests/fixtures/gsm8k_rows.jsonl"};
    df_dataset *ds = NULL;
    assert_int_equal(df_dataset_load(paths, 2, NULL, &ds), DF_OK);
    assert_int_equal(df_dataset_size(ds), 14);
    check_shared(ds, false, NULL);
    df_agent_config cfg = {0};
    assert_int_equal(df_agent_config_load(&cfg, CALC_TOOLS, NULL, NULL, NULL, NULL), DF_OK);
    check_shared(ds, true, cfg.tools_json);
    df_agent_config_clear(&cfg);
    assert_int_equal(df_dataset_head(ds, 1), 13);
    check_shared(ds, false, NULL);
    df_dataset_free(ds);
}

/* Rows 7 and 12 of 14 make the template raise: every rank fails with row 7's message (line 8). */
static void test_one_verdict(void **state)
{
    (void)state;
    char text[4096] = "";
    for (int i = 0; i < 14; i++) {
        size_t n = strlen(text);
        snprintf(text + n, sizeof text - n,
                 "{\"data_source\": \"s\", \"prompt\": \"%s %d\", \"reward_model\": {\"ground_truth\": \"1\"}}\n",
                 i == 7 || i == 12 ? "boom" : "row", i);
    }
    df_dataset *ds = NULL;
    assert_int_equal(df_dataset_load_buffer(text, strlen(text), "rows.jsonl", NULL, &ds), DF_OK);
    df_tokenizer *raising = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &raising), DF_OK);
    assert_int_equal(df_tokenizer_set_chat_template(raising, "{% for m in messages %}{% if 'boom' in m.content %}"
                                                             "{{ raise_exception('no boom') }}{% endif %}"
                                                             "{{ m.content }}{% endfor %}"),
                     DF_OK);
    df_prompt_cache pc;
    df_tokenizer *keep = tok;
    tok = raising;
    int rc = df_prompts_encode_shared(ds, tok, false, NULL, world, &pc);
    tok = keep;
    assert_int_equal(rc, DF_EINVAL);
    if (!strstr(df_last_error(), "rows.jsonl:8: encoding the prompt") || !strstr(df_last_error(), "no boom"))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
    assert_null(pc.offsets);
    df_tokenizer_free(raising);
    df_dataset_free(ds);
}

static int setup(void **state)
{
    (void)state;
    return df_comm_world(&world) || df_tokenizer_load(QWEN, &tok);
}

static int teardown(void **state)
{
    (void)state;
    df_tokenizer_free(tok);
    df_comm_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_one_rank),
        cmocka_unit_test(test_one_verdict),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
