/*
 * test_e2e_learn.c — the training reward rises on a learnable task, through
 * the DAG worker (`distflow train` in-process) for GRPO, PPO (GAE with a
 * critic), RLOO and REINFORCE++. The other end-to-end tests check that the
 * metrics exist and that weights moved; a flipped policy-gradient sign, zeroed
 * advantages or a skipped optimizer step pass them all. Here they fail.
 *
 * The task: the reward of a response is the share of digits among its
 * characters (testutil.h df_test_digit_share), on the tiny random model of
 * df_test_digits_inputs (BPE vocabulary 300, about 1.5% digits when sampling
 * at random). Raising a few output logits is all it takes, so 20 steps of 8
 * prompts x 4 responses of <= 8 tokens at lr 0.01 lift the mean reward from
 * about 0.02 to 0.3-0.6 (a second of CPU per algorithm).
 *
 * The check is a two-sample test, not a threshold read off one run. The
 * reward callback records every sample's score and prompt, so each step's
 * mean score m_s is a mean over its P prompts' group means (the N responses of
 * one prompt are correlated through it; different prompts are independent
 * draws), and Var(m_s) is estimated by the sample variance of those P group
 * means over P. With D = mean of m_s over the last K steps - over the first K
 * steps and SE^2 = the sum of those K + K variances / K^2, the test requires
 * D > Z SE. If the policy did not learn, every m_s has the same distribution
 * (the policy is fixed) and D / SE is a t statistic with >= K P - 1 = 39
 * degrees of freedom: D > 5 SE by chance has probability < 1e-5; a policy
 * moved the wrong way (a sign flip) makes D negative. Only the policy gradient
 * moves the policy here (entropy_coeff 0, no KL loss, no weight decay), so
 * with zeroed advantages the policy is exactly fixed.
 *
 * How much a correct implementation clears it (the trajectory differs across
 * CPUs by rounding, so the margin must hold for any of them): over trainer
 * seeds 1-11, model seeds 7, 8, 11, 12, oneDNN capped at AVX2 / AVX512_CORE /
 * SSE41 and our kernels at generic / avx2 (84 runs per algorithm), D / SE was
 * 17.7 to 43 and D 0.23 to 0.62; Z = 5 leaves a factor >= 3.5.
 * docs/testing.md ("Not rounding": statistical checks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "distflow/reward.h"

#include <jansson.h>
#include <math.h>

#define STEPS 20
#define P 8        /* prompts per step (data.train_batch_size) */
#define N 4        /* responses per prompt (rollout.n) */
#define B (P * N)  /* samples per step */
#define K 5        /* steps in each of the first and last blocks */
#define Z 5.0      /* standard errors the rise must exceed */
#define MAX_RESP 8 /* response tokens */

static char dir[256];

/* Every sample the reward manager scored, in call order: STEPS blocks of B, one per step (the
   reward node scores the whole step batch once on one rank; checked against critic/score/mean). */
static double rec_score[STEPS * B];
static int rec_prompt[STEPS * B]; /* the prompt's ground truth 3i + 1: one per prompt */
static int n_rec;

static int recorded_digit_share(const char *src, const char *s, const char *gt, const char *extra,
                                double *score)
{
    int rc = df_test_digit_share(src, s, gt, extra, score);
    if (n_rec < STEPS * B) {
        rec_score[n_rec] = *score;
        rec_prompt[n_rec] = atoi(gt);
    }
    n_rec++;
    return rc;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_learn_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 64, "test/digits", true);
    return df_reward_register("test/digits", recorded_digit_share);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

/* Step s's mean score (*mean) and the variance of that mean (*var): over its P prompts' group means. */
static void step_stats(const char *algo, int s, double *mean, double *var)
{
    int id[P], cnt[P] = {0}, ng = 0;
    double sum[P] = {0};
    for (int i = s * B; i < (s + 1) * B; i++) {
        int g = 0;
        while (g < ng && id[g] != rec_prompt[i])
            g++;
        if (g == ng) {
            if (ng == P)
                fail_msg("%s step %d: more than %d prompts", algo, s + 1, P);
            id[ng++] = rec_prompt[i];
        }
        sum[g] += rec_score[i];
        cnt[g]++;
    }
    double m = 0, v = 0;
    for (int g = 0; g < ng; g++) {
        if (cnt[g] != N) /* a step's prompts are distinct, each sampled N times */
            fail_msg("%s step %d: prompt %d has %d responses, not %d", algo, s + 1, id[g], cnt[g], N);
        m += sum[g] / N / ng;
    }
    for (int g = 0; g < ng; g++)
        v += (sum[g] / N - m) * (sum[g] / N - m) / (ng - 1);
    *mean = m;
    *var = v / ng;
}

/* Train `algo` (adv_estimator) for STEPS steps, `extra` appended to the YAML, and check the rise. */
static void learns(const char *algo, const char *extra)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: %d,\n"
             "       max_prompt_length: 128, max_response_length: %d}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: %d,\n"
             "          ppo_micro_batch_size_per_gpu: %d, entropy_coeff: 0.0, use_kl_loss: false}\n"
             "  rollout: {n: %d, log_prob_micro_batch_size_per_gpu: %d}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: %d}\n"
             "algorithm: {adv_estimator: %s, gamma: 1.0, lam: 0.95, use_kl_in_reward: false}\n"
             "trainer: {total_training_steps: %d, save_freq: -1, test_freq: -1, val_before_train: false,\n"
             "          logger: [], default_local_dir: %s/out_%s, seed: 1}\n"
             "%s",
             dir, P, MAX_RESP, dir, P, B, N, B, B, algo, STEPS, dir, algo, extra);
    n_rec = 0;
    df_test_fit(yaml, "learn.yaml");
    if (n_rec != STEPS * B)
        fail_msg("%s: %d samples scored, expected %d steps x %d", algo, n_rec, STEPS, B);

    char out[64];
    snprintf(out, sizeof out, "out_%s", algo);
    json_t *lines = df_test_metrics(dir, out, true);
    assert_int_equal(json_array_size(lines), STEPS);
    double m[STEPS], v[STEPS];
    for (int s = 0; s < STEPS; s++) {
        step_stats(algo, s, &m[s], &v[s]);
        /* the recorded block is the step's batch: its mean is the logged critic/score/mean up to the
           float rounding of each score in [0, 1] (u), double sums of B terms and the metric's %.10g */
        json_t *x = json_object_get(json_array_get(lines, s), "critic/score/mean");
        if (!json_is_number(x))
            fail_msg("%s step %d: critic/score/mean missing", algo, s + 1);
        double tol = DF_U32 + df_tol_gamma(2 * B, DF_U64) + 5e-10 * fabs(m[s]);
        if (!(fabs(json_number_value(x) - m[s]) <= tol))
            fail_msg("%s step %d: recorded mean score %.9g, critic/score/mean %.9g", algo, s + 1, m[s],
                     json_number_value(x));
    }
    json_decref(lines);

    double first = 0, last = 0, var = 0;
    for (int s = 0; s < K; s++) {
        first += m[s] / K;
        last += m[STEPS - K + s] / K;
        var += (v[s] + v[STEPS - K + s]) / (K * K);
    }
    double rise = last - first, se = sqrt(var);
    if (getenv("DF_TOL_DEBUG"))
        print_message("%s: mean score %.4f (steps 1-%d) -> %.4f (steps %d-%d): rise %.4f = %.1f SE\n", algo,
                      first, K, last, STEPS - K + 1, STEPS, rise, rise / se);
    if (!(rise > Z * se))
        fail_msg("%s: the mean reward did not rise: %.4f over steps 1-%d, %.4f over steps %d-%d (rise %.4f, "
                 "%.1f standard errors of %.4f; %.0f required)",
                 algo, first, K, last, STEPS - K + 1, STEPS, rise, rise / se, se, Z);
}

static void test_grpo(void **state)
{
    (void)state;
    learns("grpo", "");
}

/* PPO: GAE on a critic initialised from the actor's checkpoint with a fresh value head. */
static void test_ppo(void **state)
{
    (void)state;
    char critic[1024];
    snprintf(critic, sizeof critic,
             "critic: {model: {path: %s/model}, optim: {lr: 0.01, weight_decay: 0.0},\n"
             "         ppo_mini_batch_size: %d, ppo_micro_batch_size_per_gpu: %d}\n",
             dir, P, B);
    learns("gae", critic);
}

/* Two other advantage families: a leave-one-out group baseline, and REINFORCE++'s batch whitening. */
static void test_rloo(void **state)
{
    (void)state;
    learns("rloo", "");
}

static void test_reinforce_plus_plus(void **state)
{
    (void)state;
    learns("reinforce_plus_plus", "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grpo), cmocka_unit_test(test_ppo),
                                       cmocka_unit_test(test_rloo), cmocka_unit_test(test_reinforce_plus_plus)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
