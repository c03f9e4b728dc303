/*
 * test_reward_model_dist.c — a GRPO step scored by a reward model (reward_model.enable) on
 * several ranks gives every response the score the one-rank run gives it.
 *
 * mpi-test: np 2
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 *
 * Each rank runs the reward node on its own shard (the reward model loaded on every rank);
 * the first rollout decodes from the same initial weights with each prompt's sampling stream
 * keyed by its dataset row, so the two runs hold the same responses (see test_dist_train.c for
 * why a rounding-flipped token is out of reach here). Their scores, from micro-batches packed
 * differently, agree within twice one forward's float32 bound (tests/testbounds.h
 * tb_head_chain over the longest sequence), compared response by response, matched by dataset
 * row and text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testgolden.h"
#include "testutil.h"

#include "distflow/comm.h"
#include "engine/hf_dir.h"
#include "testbounds.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static df_comm *world;
static char dir[256];

#define PROMPTS 8
#define N 4
#define MAX_PROMPT 128
#define MAX_RESPONSE 8

static void train(df_comm *comm, const char *out)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/train.jsonl], train_batch_size: %d,\n"
             "       shuffle: false, max_prompt_length: %d, max_response_length: %d}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: %d, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: %d, log_prob_micro_batch_size_per_gpu: 8}\n"
             "reward_model: {enable: true, model: {path: %s/rm, input_tokenizer: null}, "
             "micro_batch_size_per_gpu: 3}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, test_freq: -1, val_before_train: false, logger: [],\n"
             "          default_local_dir: %s/%s, rollout_data_dir: %s/%s/rollouts}\n",
             dir, dir, PROMPTS, MAX_PROMPT, MAX_RESPONSE, dir, PROMPTS, N, dir, dir, out, dir, out);
    if (df_test_run(comm, df_test_config(yaml, "rm_dist.yaml", NULL, 0)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

typedef struct {
    int64_t index;
    char *output;
    double score;
} row;

static int by_row(const void *a, const void *b)
{
    const row *x = a, *y = b;
    return x->index != y->index ? (x->index < y->index ? -1 : 1) : strcmp(x->output, y->output);
}

/* Step 1's dumped rows of dir/<out>/rollouts (one file per data-parallel rank), sorted. */
static int read_rows(const char *out, row *rows, int cap)
{
    json_t *all = df_test_rollout_dumps(dir, out, 1, NULL);
    int n = (int)json_array_size(all);
    assert_true(n <= cap);
    for (int i = 0; i < n; i++) {
        const json_t *o = json_array_get(all, (size_t)i);
        rows[i] = (row){json_integer_value(json_object_get(o, "index")),
                        strdup(json_string_value(json_object_get(o, "output"))),
                        json_number_value(json_object_get(o, "score"))};
    }
    json_decref(all);
    qsort(rows, (size_t)n, sizeof *rows, by_row);
    return n;
}

static void test_scores_match_one_rank(void **state)
{
    (void)state;
    train(world, "dist");
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    row ref[64], got[64];
    int n = read_rows("ref", ref, 64);
    assert_int_equal(n, PROMPTS * N);
    assert_int_equal(read_rows("dist", got, 64), n);
    float a[64], b[64];
    for (int i = 0; i < n; i++) {
        assert_int_equal(got[i].index, ref[i].index);
        assert_string_equal(got[i].output, ref[i].output);
        a[i] = (float)got[i].score, b[i] = (float)ref[i].score;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/rm", dir);
    df_model *rm;
    assert_int_equal(df_model_load(p, &rm), 0);
    const double tol = 2 * df_golden_tol(tb_head_chain(&rm->cfg, MAX_PROMPT + MAX_RESPONSE));
    double e = df_golden_rel_err(a, b, n);
    print_message("%d ranks: %d scores, rel err %.2e against one rank, bound %.2e\n", df_comm_size(world), n,
                  e, tol);
    assert_true(e <= tol);
    /* ... and the comparison can fail: two responses' scores exchanged */
    int i = 0;
    while (i + 1 < n && fabs(b[i] - b[i + 1]) < 1e-3)
        i++;
    assert_true(i + 1 < n);
    float t = a[i];
    a[i] = a[i + 1], a[i + 1] = t;
    assert_true(df_golden_rel_err(a, b, n) > tol);
    for (int k = 0; k < n; k++)
        free(ref[k].output), free(got[k].output);
    df_model_free(rm);
}

/* Inputs and the reward model (the actor's trunk with a random head) on rank 0, the directory
   broadcast, then the one-rank reference run. */
static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || !df_test_size_ok(df_comm_size(world)))
        return -1;
    if (df_comm_rank(world) == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_rmdist_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", PROMPTS, "openai/gsm8k", true);
        char md[300], rd[300];
        snprintf(md, sizeof md, "%s/model", dir);
        snprintf(rd, sizeof rd, "%s/rm", dir);
        df_model *m;
        if (df_hf_dir_load(md, NULL, NULL, &m, NULL) || df_model_to_value_model(&m, 9))
            return -1;
        m->w.score_weight[0] += 3.0f;
        int rc = df_hf_dir_save(m, DF_DTYPE_F32, md, NULL, rd);
        df_model_free(m);
        if (rc)
            return -1;
    }
    if (df_comm_broadcast(world, dir, sizeof dir, 0))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(world, df_comm_rank(world), 0, &self))
        return -1;
    if (df_comm_rank(world) == 0)
        train(self, "ref");
    df_comm_free(self);
    return df_comm_barrier(world);
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    if (df_comm_rank(world) == 0)
        df_test_remove_tree(dir);
    df_comm_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_match_one_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
