/* Unit tests for the multi-agent (MARFT) block of include/distflow/algo.h: gae_marft on a
 * hand-computed two-agent, two-turn case (arithmetic in comments), against siiRL's definition
 * computed independently (tests/golden/gen_gae_marft.py), its one-agent registered form against
 * gae, malformed episodes; share_reward_in_agent on hand cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "distflow/algo.h"
#include "distflow/algo_desc.h"

#include "golden/gae_marft.h"

/*
 * Two agents, gamma 1/2, lam 1 (gamma lam = 1/2). Episode "r" has two rows, passed last turn
 * first (row 0 is the episode's last turn); episode "s" one row, in which agent 1 says nothing.
 *   agent 0: row 0 two tokens V = (1/4, 1/2), R = (3, 1/2) (3 is off the last token: not read);
 *            row 1 one token V = 0, R = 2; row 2 one token V = 1/2, R = 1
 *   agent 1: row 0 one token V = 1/2, R = 1; row 1 one token V = 1, R = 0; row 2 empty
 * Episode r, k = 0 (row 0), g = 0:
 *   a1 t0: v_next = 0 (the end)        delta = 1 - 1/2 = 1/2              g = 1/2
 *   a0 t1: v_next = V1[0,0] = 1/2       delta = 1/2 + 1/4 - 1/2 = 1/4      g = 1/4 + 1/4 = 1/2
 *   a0 t0:                              delta = 1/2 V0[0,1] - 1/4 = 0      g = 1/4
 * k = 1 (row 1):
 *   a1 t0: v_next = V0[0,0] = 1/4       delta = 0 + 1/8 - 1 = -7/8         g = -7/8 + 1/8 = -3/4
 *   a0 t0: v_next = V1[1,0] = 1         delta = 2 + 1/2 - 0 = 5/2          g = 5/2 - 3/8 = 17/8
 * Episode s (row 2), g = 0 again:
 *   a0 t0: v_next = 0 (agent 1 empty)   delta = 1 + 0 - 1/2 = 1/2          g = 1/2
 * returns = g + V.
 */
static const int64_t hc_off0[] = {0, 2, 3, 4}, hc_off1[] = {0, 1, 2, 2};
static const float hc_r0[] = {3, 0.5f, 2, 1}, hc_v0[] = {0.25f, 0.5f, 0, 0.5f};
static const float hc_r1[] = {1, 0}, hc_v1[] = {0.5f, 1};
static const char *const hc_req[] = {"r", "r", "s"};
static const int64_t hc_len[] = {2, 2, 1};

static df_adv_marft_input hand_input(df_marft_agent_input *ag)
{
    ag[0] = (df_marft_agent_input){hc_off0, hc_r0, hc_v0};
    ag[1] = (df_marft_agent_input){hc_off1, hc_r1, hc_v1};
    return (df_adv_marft_input){.n = 3, .n_agents = 2, .agents = ag, .request_id = hc_req, .traj_len = hc_len,
                                .gamma = 0.5f, .lam = 1.0f};
}

static void test_hand_two_agents_two_turns(void **state)
{
    (void)state;
    df_marft_agent_input ag[2];
    df_adv_marft_input in = hand_input(ag);
    float a0[4], r0[4], a1[2], r1[2];
    float *adv[] = {a0, a1}, *ret[] = {r0, r1};
    in.defer_whiten = true; /* the chain itself: every value exact in binary */
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), 0);
    const float g0[] = {0.25f, 0.5f, 2.125f, 0.5f}, g1[] = {0.5f, -0.75f};
    const float ret0[] = {0.5f, 1.0f, 2.125f, 1.0f}, ret1[] = {1.0f, 0.25f};
    for (int t = 0; t < 4; t++) {
        assert_float_equal(a0[t], g0[t], 0);
        assert_float_equal(r0[t], ret0[t], 0);
    }
    for (int t = 0; t < 2; t++) {
        assert_float_equal(a1[t], g1[t], 0);
        assert_float_equal(r1[t], ret1[t], 0);
    }
    /* whitened per agent: agent 1's (1/2, -3/4) have mean -1/8, unbiased var 2 (5/8)^2 = 25/32,
       so +-(5/8) / sqrt(25/32 + 1e-8) = +-0.707106776 (1/sqrt 2, less 1e-8 / (2 var) of it) */
    in.defer_whiten = false;
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), 0);
    double w = 0.70710677, tol = df_tol_hand(5e-9 + w * 1e-8 / (2 * 25.0 / 32), w, 0, 1);
    assert_float_equal(a1[0], w, tol);
    assert_float_equal(a1[1], -w, tol);
    /* agent 0's (1/4, 1/2, 17/8, 1/2): mean 27/32, deviations -19/32, -11/32, 41/32, -11/32,
       ssd = (361 + 121 + 1681 + 121) / 1024 = 2284/1024, var = ssd / 3; o = dev / sqrt(var) */
    double var0 = 2284.0 / 1024 / 3;
    const double dev0[] = {-19.0 / 32, -11.0 / 32, 41.0 / 32, -11.0 / 32};
    for (int t = 0; t < 4; t++) {
        double o = dev0[t] / sqrt(var0 + 1e-8);
        assert_float_equal(a0[t], o, df_tol_hand(0, fabs(o), 0, 1 + fabs(o)));
    }
}

/* Bound on |computed - siiRL's| for one golden value: the float32 inputs' representation errors
 * (each input enters any g with a coefficient of at most 1 + gamma, products of gamma lam <= 1),
 * carried through whitening by (1 + max|o|^2 / (n - 1)) / std as test_adv.c's whiten_tol, the
 * 9 printed digits, siiRL's 1e-8 in the mean's denominator and the variance, one float rounding. */
static double golden_tol(double want, double s_inputs, double scale, double max_o, int64_t n)
{
    double cond = 2.0 * s_inputs * scale * (1 + (n > 1 ? max_o * max_o / (double)(n - 1) : 0));
    return df_tol_hand(5e-9 * (1 + fabs(want)) + 1e-8 * (1 + fabs(want) + max_o), fabs(want), cond,
                       s_inputs + fabs(want));
}

static void test_golden_siirl(void **state)
{
    (void)state;
    const int64_t *off[] = {gm_offsets_0, gm_offsets_1, gm_offsets_2};
    const float *rw[] = {gm_rewards_0, gm_rewards_1, gm_rewards_2}, *vl[] = {gm_values_0, gm_values_1, gm_values_2};
    const float *raw[] = {gm_raw_0, gm_raw_1, gm_raw_2}, *white[] = {gm_advantages_0, gm_advantages_1, gm_advantages_2};
    const float *rets[] = {gm_returns_0, gm_returns_1, gm_returns_2};
    const double stds[] = {gm_std_0, gm_std_1, gm_std_2};
    df_marft_agent_input ag[GM_AGENTS];
    float advb[GM_AGENTS][64], retb[GM_AGENTS][64], rawb[GM_AGENTS][64];
    float *adv[GM_AGENTS], *ret[GM_AGENTS], *rawp[GM_AGENTS];
    double s_inputs = 0; /* sum of |input| over every agent: each g reads at most these */
    for (int a = 0; a < GM_AGENTS; a++) {
        ag[a] = (df_marft_agent_input){off[a], rw[a], vl[a]};
        adv[a] = advb[a], ret[a] = retb[a], rawp[a] = rawb[a];
        assert_true(off[a][GM_ROWS] <= 64);
        for (int64_t t = 0; t < off[a][GM_ROWS]; t++)
            s_inputs += fabs(rw[a][t]) + 2 * fabs(vl[a][t]);
    }
    df_adv_marft_input in = {.n = GM_ROWS, .n_agents = GM_AGENTS, .agents = ag, .request_id = gm_request_id,
                             .traj_len = gm_traj_len, .gamma = GM_GAMMA, .lam = GM_LAM};
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), 0);
    in.defer_whiten = true;
    assert_int_equal(df_adv_gae_marft(&in, rawp, ret), 0);
    for (int a = 0; a < GM_AGENTS; a++) {
        const int64_t n = off[a][GM_ROWS];
        double max_o = 0;
        for (int64_t t = 0; t < n; t++)
            max_o = fmax(max_o, fabs(white[a][t]));
        for (int64_t t = 0; t < n; t++) {
            double tr = golden_tol(raw[a][t], s_inputs, 1, 0, 1);
            if (!(fabs(rawb[a][t] - raw[a][t]) <= tr && fabs(retb[a][t] - rets[a][t]) <= tr + 2 * DF_U32))
                fail_msg("agent %d token %lld: g %.9g ret %.9g, siiRL %.9g %.9g (tol %g)", a, (long long)t,
                         (double)rawb[a][t], (double)retb[a][t], (double)raw[a][t], (double)rets[a][t], tr);
            double tw = golden_tol(white[a][t], s_inputs, 1 / stds[a], max_o, n);
            if (!(fabs(advb[a][t] - white[a][t]) <= tw))
                fail_msg("agent %d token %lld: advantage %.9g, siiRL %.9g (tol %g)", a, (long long)t,
                         (double)advb[a][t], (double)white[a][t], tw);
        }
    }
}

/* One agent, one-turn episodes, rewards on the last token only: gae_marft is gae. */
static void test_single_is_gae_on_outcome_rewards(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3, 3, 5};
    const float r[] = {0, 0, 1.5f, 0, -1}, v[] = {0.1f, -0.4f, 0.7f, 0.3f, 0.2f};
    df_adv_input in = {.n = 3, .offsets = off, .token_level_rewards = r, .values = v, .gamma = 0.9f, .lam = 0.7f};
    float a1[5], r1[5], a2[5], r2[5];
    assert_int_equal(df_adv_gae(&in, a1, r1), 0);
    df_adv_estimator_fn fn = NULL;
    assert_int_equal(df_adv_estimator_lookup("gae_marft", &fn), 0);
    assert_int_equal(fn(&in, a2, r2), 0);
    for (int t = 0; t < 5; t++) { /* the same terms in the same order */
        assert_float_equal(a2[t], a1[t], 0);
        assert_float_equal(r2[t], r1[t], 0);
    }
    /* a reward off the last token: gae reads it, gae_marft does not */
    const float rk[] = {2, 0, 1.5f, 0, -1};
    in.token_level_rewards = rk;
    in.defer_whiten = true;
    assert_int_equal(fn(&in, a2, r2), 0);
    assert_int_equal(df_adv_gae(&in, a1, r1), 0);
    assert_true(a1[0] != a2[0]);
    /* the descriptor: a critic and agent groups, whitening */
    const df_adv_estimator_desc *d = df_adv_estimator_find("gae_marft");
    assert_non_null(d);
    assert_int_equal(d->needs, DF_ADV_NEEDS_VALUES | DF_ADV_NEEDS_AGENTS);
    assert_true(df_adv_estimator_whitens("gae_marft"));
    const int32_t mask[] = {1, 1, 0, 1, 1};
    in.response_mask = mask;
    assert_int_equal(fn(&in, a2, r2), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "sample 0, token 2 is not the model's"));
}

static void expect_episode_error(const char *const *req, const int64_t *len, const char *msg)
{
    df_marft_agent_input ag[2];
    df_adv_marft_input in = hand_input(ag);
    in.request_id = req, in.traj_len = len;
    float a0[4], r0[4], a1[2], r1[2];
    float *adv[] = {a0, a1}, *ret[] = {r0, r1};
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), DF_EINVAL);
    if (!strstr(df_last_error(), msg))
        fail_msg("'%s' lacks '%s'", df_last_error(), msg);
}

static void test_bad_episodes(void **state)
{
    (void)state;
    expect_episode_error((const char *const[]){"r", "s", "r"}, (const int64_t[]){1, 1, 1},
                         "request 'r': rows 2 and before are not contiguous");
    expect_episode_error((const char *const[]){"r", "r", "s"}, (const int64_t[]){1, 1, 1},
                         "request 'r': rows 1 and before are not contiguous, or more than its traj_len");
    expect_episode_error((const char *const[]){"r", "r", "s"}, (const int64_t[]){2, 2, 2},
                         "request 's' (row 2): traj_len 2, but 1 rows from there");
    expect_episode_error((const char *const[]){"r", "s", "s"}, (const int64_t[]){2, 2, 2},
                         "request 'r' (row 0, traj_len 2): row 1 is request 's'");
    expect_episode_error((const char *const[]){"r", "r", NULL}, hc_len, "request_id of row 2 is NULL");
    df_marft_agent_input ag[2];
    df_adv_marft_input in = hand_input(ag);
    float a0[4], r0[4], a1[2], r1[2];
    float *adv[] = {a0, a1}, *ret[] = {r0, r1};
    in.gamma = 1.5f;
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), DF_EINVAL);
    in = hand_input(ag);
    const float bad[] = {1, NAN};
    ag[1].values = bad;
    assert_int_equal(df_adv_gae_marft(&in, adv, ret), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "agent 1: row 1, token 0: reward 0, value nan"));
}

/* Three agents; agent 2 (the last) scored, agents 0 and 1 without rewards of their own. */
static void test_share_reward(void **state)
{
    (void)state;
    const int64_t o0[] = {0, 2, 2}, o1[] = {0, 1, 3}, o2[] = {0, 2, 3};
    const int64_t *off[] = {o0, o1, o2};
    float r0[2] = {7, 7}, r1[3] = {7, 7, 7}, r2[3] = {0.25f, 1, -1}; /* row 0 scores 1.25, row 1 -1 */
    float *rw[] = {r0, r1, r2};
    bool own[] = {false, false, true};
    assert_int_equal(df_marft_share_reward(2, 3, off, rw, own, true), 0);
    /* agent 1: its last token of each row gets agent 2's score; agent 0 then agent 1's (the same);
       agent 0's row 1 is empty: nothing */
    const float w1[] = {1.25f, 0, -1}, w0[] = {0, 1.25f};
    for (int t = 0; t < 3; t++)
        assert_float_equal(r1[t], w1[t], 0);
    for (int t = 0; t < 2; t++)
        assert_float_equal(r0[t], w0[t], 0);
    assert_float_equal(r2[0], 0.25f, 0); /* the scored agent keeps its own */
    /* not shared: zeros; an agent with its own rewards keeps them */
    float q0[2] = {7, 7}, q1[3] = {5, 6, 7};
    float *rq[] = {q0, q1, r2};
    own[1] = true;
    assert_int_equal(df_marft_share_reward(2, 3, off, rq, own, false), 0);
    assert_float_equal(q0[0], 0, 0);
    assert_float_equal(q0[1], 0, 0);
    assert_float_equal(q1[2], 7, 0);
    own[2] = false;
    assert_int_equal(df_marft_share_reward(2, 3, off, rq, own, true), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "the last agent (group 2) has no reward of its own"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_two_agents_two_turns),
        cmocka_unit_test(test_golden_siirl),
        cmocka_unit_test(test_single_is_gae_on_outcome_rewards),
        cmocka_unit_test(test_bad_episodes),
        cmocka_unit_test(test_share_reward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
