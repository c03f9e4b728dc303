/*
 * SRPO's pieces (include/distflow/srpo.h, src/algo/srpo_*.c) on hand-computed cases: the embodied
 * sampling filter (accuracy bounds in float32 as torch compares them, truncation, max_groups), sklearn's
 * StandardScaler and DBSCAN on fixed point sets worked out by hand, the progress reward of failures at
 * known distances (invalid embeddings, per-task groups, the all-noise and equal-distance cases), the
 * response mask and the reward's token; and, on the simulator, that a failure that got further
 * earns more than one that did nothing.
 */
#include "distflow/embodied.h"
#include "distflow/srpo.h"

#include "testutil.h"

/* 5 groups of 4: mean acc 0, 0.25, 0.5, 1, 0.75. */
static const float k_acc[20] = {0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0};

static void check_keep(const uint8_t *keep, const char *groups)
{
    for (int g = 0; g < 5; g++)
        for (int k = 0; k < 4; k++)
            assert_int_equal(keep[g * 4 + k], groups[g] == '1');
}

static void test_filter(void **state)
{
    (void)state;
    int64_t finish[20] = {0};
    for (int i = 0; i < 20; i++)
        finish[i] = 5;
    finish[9] = 10; /* group 2 has a sample that reached max_steps */
    uint8_t keep[20];
    int64_t rows = -1;
    df_embodied_filter_stats st;
    df_embodied_filter_opts o = {.filter_accuracy = true, .accuracy_lower_bound = 0.1, .accuracy_upper_bound = 0.9};
    assert_int_equal(df_embodied_filter(&o, k_acc, NULL, 5, 4, keep, &rows, &st), DF_OK);
    check_keep(keep, "01101"); /* 0.25, 0.5 and 0.75 lie in [0.1, 0.9] */
    assert_int_equal(rows, 12);
    assert_int_equal(st.out_of_bounds, 2);
    o.filter_truncated = true, o.max_steps = 10;
    assert_int_equal(df_embodied_filter(&o, k_acc, finish, 5, 4, keep, &rows, &st), DF_OK);
    check_keep(keep, "01001"); /* finish_step >= max_steps drops the whole group */
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.kept, 2);
    o.max_groups = 1;
    assert_int_equal(df_embodied_filter(&o, k_acc, finish, 5, 4, keep, &rows, &st), DF_OK);
    check_keep(keep, "01000"); /* the first group that passes */
    assert_int_equal(st.over_max_groups, 1);
    o = (df_embodied_filter_opts){0};
    assert_int_equal(df_embodied_filter(&o, k_acc, NULL, 5, 4, keep, &rows, NULL), DF_OK);
    check_keep(keep, "11111"); /* both filters off: everything passes */
    /* a bound of 0.1 is float32 0.100000001, which a group of 10 with one success (float32 0.1) meets
       from both sides as torch compares */
    float acc10[10] = {1};
    o = (df_embodied_filter_opts){.filter_accuracy = true, .accuracy_lower_bound = 0.1, .accuracy_upper_bound = 0.1};
    assert_int_equal(df_embodied_filter(&o, acc10, NULL, 1, 10, keep, &rows, NULL), DF_OK);
    assert_int_equal(rows, 10);
    o.filter_truncated = true, o.max_steps = 10;
    assert_int_equal(df_embodied_filter(&o, k_acc, NULL, 5, 4, keep, &rows, NULL), DF_EINVAL);
    o.filter_truncated = false, o.max_groups = -1;
    assert_int_equal(df_embodied_filter(&o, k_acc, NULL, 5, 4, keep, &rows, NULL), DF_EINVAL);
}

static void test_standard_scale(void **state)
{
    (void)state;
    /* column 0: 0, 1, 10 — mean 11/3, variance 546/27; column 1 constant: scale 1, all 0 — although its
       computed mean is 0.10000000000000002 and its variance 1.9e-34, within sklearn's rounding bound */
    double x[6] = {0, 0.1, 1, 0.1, 10, 0.1}, mean[2], scale[2];
    assert_int_equal(df_standard_scale(x, 3, 2, mean, scale), DF_OK);
    assert_near(mean[0], 11.0 / 3, 1e-15);
    assert_near(scale[0], sqrt(546.0 / 27), 1e-14);
    assert_near(scale[1], 1.0, 0);
    double want[6] = {-0.8153742483272112, 0, -0.5929994533288808, 0, 1.4083737016560922, 0};
    for (int i = 0; i < 6; i++)
        assert_near(x[i], want[i], 1e-14);
    double one[3] = {0.1, 0.1, 0.1};
    assert_int_equal(df_standard_scale(one, 3, 1, NULL, scale), DF_OK);
    assert_true(scale[0] == 1.0); /* not sqrt(1.9e-34), which would scale rounding noise to -1 */
}

static void labels_are(const int32_t *got, const int32_t *want, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
}

/*
 * DBSCAN by hand, eps 0.5 (distances <= eps are neighbours):
 *   i: 0 (5,5)  1 (0,0)  2 (10,0)  3 (0.4,0)  4 (5,5.5)  5 (0.8,0)
 *   neighbourhoods (self included): 0 {0,4} (|0-4| = 0.5 exactly), 1 {1,3}, 2 {2}, 3 {1,3,5}, 4 {0,4}, 5 {3,5}
 *   min_samples 2 (siiRL): every point but 2 is core; cluster 0 grows from point 0: {0,4}; cluster 1
 *   from point 1: {1,3,5}; point 2 is noise.
 *   min_samples 3: only point 3 is core; cluster 0 = {3} and its neighbours 1 and 5 (border points);
 *   0, 2 and 4 are noise.
 */
static void test_dbscan_by_hand(void **state)
{
    (void)state;
    const double x[12] = {5, 5, 0, 0, 10, 0, 0.4, 0, 5, 5.5, 0.8, 0};
    int32_t labels[7];
    int k = -1;
    assert_int_equal(df_dbscan(x, 6, 2, 0.5, 2, labels, &k), DF_OK);
    labels_are(labels, (const int32_t[]){0, 1, -1, 1, 0, 1}, 6);
    assert_int_equal(k, 2);
    assert_int_equal(df_dbscan(x, 6, 2, 0.5, 3, labels, &k), DF_OK);
    labels_are(labels, (const int32_t[]){-1, 0, -1, 0, -1, 0}, 6);
    assert_int_equal(k, 1);
    assert_int_equal(df_dbscan(x, 6, 2, 0.49, 2, labels, &k), DF_OK); /* 0.5 apart is no longer near */
    labels_are(labels, (const int32_t[]){-1, 0, -1, 0, -1, 0}, 6);
    /*
     * A border point between two clusters joins the first that reaches it (min_samples 4):
     *   0 c1 (1.2,0.1)  1 c2 (1.2,-0.1)  2 c3 (0.9,0)  3 b (0.45,0)  4 a1 (-0.3,0.1)  5 a2 (-0.3,-0.1)  6 a3 (0,0)
     *   c3's neighbours: c1, c2 (0.316), b (0.45), itself: 4 -> core; a3 likewise with a1, a2, b; b has
     *   a3, c3 and itself: 3 -> border; the rest have 3. Cluster 0 grows from c3 (index 2) and takes
     *   b; cluster 1 from a3 finds b taken. In the mirrored order b goes to the a-cluster.
     */
    const double y[14] = {1.2, 0.1, 1.2, -0.1, 0.9, 0, 0.45, 0, -0.3, 0.1, -0.3, -0.1, 0, 0};
    assert_int_equal(df_dbscan(y, 7, 2, 0.5, 4, labels, &k), DF_OK);
    labels_are(labels, (const int32_t[]){0, 0, 0, 0, 1, 1, 1}, 7);
    double z[14];
    for (int i = 0; i < 7; i++) /* reverse the order */
        z[2 * i] = y[2 * (6 - i)], z[2 * i + 1] = y[2 * (6 - i) + 1];
    assert_int_equal(df_dbscan(z, 7, 2, 0.5, 4, labels, &k), DF_OK);
    labels_are(labels, (const int32_t[]){0, 0, 0, 0, 1, 1, 1}, 7); /* a3 a2 a1 b | c3 c2 c1 */
    assert_int_equal(df_dbscan(x, 6, 2, -1, 2, labels, &k), DF_EINVAL);
}

/*
 * The progress reward by hand (dim 2; rows listed below). Task 7's successes (1,1), (2,1), (11,1)
 * standardise to -0.815, -0.593, 1.408 on column 0 (column 1 is constant: 0): the first two are 0.22
 * apart, a cluster whose centre is their raw mean (1.5, 1); (11,1) is noise. Its failures (1.5,4),
 * (1.5,2), (5.5,1) lie 3, 1 and 4 from that centre: normalised 2/3, 0, 1, rewards
 * 0.6 sigmoid(10 (0.5 - d)) = 0.0953215, 0.5959843, 0.0040157. Task 7's success with an all-zero
 * embedding gets 0 and joins no cluster (were it in, column 1 would vary and the centre move).
 * Task 3 has only a success (1.0), task 5 only failures (0). Task 9's successes (1,1) and (11,1)
 * standardise to -1 and 1, 2 apart: both noise, so the centre is their mean (6,1); its failures
 * (6,2) and (6,0) are both 1 away, a range under 1e-6, so both sit at d = 0.5: reward 0.3.
 */
static void test_progress_reward_by_hand(void **state)
{
    (void)state;
    const int64_t task[14] = {7, 7, 3, 7, 9, 7, 9, 7, 5, 7, 7, 5, 9, 9};
    const bool complete[14] = {1, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1};
    const float e[28] = {1, 1,    1.5f, 4, 2, 2,  2, 1,    1, 1,  1.5f, 2, 6, 2,
                         11, 1,   3, 3,    5.5f, 1, 0, 0,  4, 4,  6, 0,    11, 1};
    const float want[14] = {1, 0.0953215f, 1, 1, 1, 0.5959843f, 0.3f, 1, 0, 0.0040157f, 0, 0, 0.3f, 1};
    float reward[14];
    df_srpo_detail det[14];
    df_srpo_opts o = df_srpo_defaults();
    assert_int_equal(df_srpo_progress_reward(e, complete, task, 14, 2, &o, reward, det), DF_OK);
    for (int i = 0; i < 14; i++)
        assert_float_equal(reward[i], want[i], 1e-6);
    assert_near(det[1].distance, 3.0, 1e-12);
    assert_near(det[1].normalized, 2.0 / 3, 1e-12);
    assert_near(det[9].distance, 4.0, 1e-12);
    assert_near(det[6].normalized, 0.5, 0);
    assert_true(isnan(det[0].distance)); /* a success has no distance */
    assert_true(isnan(det[8].distance)); /* nor a failure of a task without successes */
    assert_int_equal(df_srpo_progress_reward(e, complete, task, 14, 0, &o, reward, det), DF_EINVAL);

    /* Two clusters: successes (1,1), (1.2,1), (20,1), (20.2,1) standardise to -1.010, -0.989, 0.989,
       1.010 on column 0: clusters {0,1} and {2,3}, centres (1.1,1) and (20.1,1). The failures (20.1,3),
       (1.1,2), (10.1,1) are 2, 1 and 9 from their nearest centre (the first from the second cluster):
       d = 1/8, 0, 1, rewards 0.6 sigmoid(3.75) = 0.5862136, 0.5959843, 0.0040157. */
    const float e2[14] = {1, 1, 1.2f, 1, 20, 1, 20.2f, 1, 20.1f, 3, 1.1f, 2, 10.1f, 1};
    const bool c2[7] = {1, 1, 1, 1, 0, 0, 0};
    const int64_t t2[7] = {0};
    assert_int_equal(df_srpo_progress_reward(e2, c2, t2, 7, 2, &o, reward, det), DF_OK);
    const float want2[7] = {1, 1, 1, 1, 0.5862136f, 0.5959843f, 0.0040157f};
    for (int i = 0; i < 7; i++)
        assert_float_equal(reward[i], want2[i], 1e-6);
    assert_near(det[4].distance, 2.0, 1e-5); /* float32 inputs */
}

static void test_response_mask(void **state)
{
    (void)state;
    const int64_t finish[3] = {0, 3, 4};
    uint8_t mask[24];
    assert_int_equal(df_embodied_response_mask(finish, 3, 8, 2, mask), DF_OK);
    const uint8_t want[24] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_memory_equal(mask, want, sizeof want);
    assert_int_equal(df_embodied_reward_position(0, 2), -1);
    assert_int_equal(df_embodied_reward_position(3, 2), 5);
    assert_int_equal(df_embodied_reward_position(4, 7), 27);
    const int64_t bad[1] = {-1};
    assert_int_equal(df_embodied_response_mask(bad, 1, 8, 2, mask), DF_EINVAL);
}

/* On the simulator: among failures, one that carried the object most of the way earns more than one
   that stood still, with successes from the planner (the embedding as the SRPO reward's input). */
static void test_reward_orders_progress(void **state)
{
    (void)state;
    enum { N = 4, CHUNK = 4, MAX = 64 };
    df_embodied_vec_opts o = {.num_envs = N, .max_steps = MAX, .action_chunks_len = CHUNK};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_OK);
    int64_t task[N] = {2, 2, 2, 2}, trial[N] = {0, 1, 0, 1};
    int32_t plan[N][MAX * 2 + 2 * CHUNK * 2];
    int len[N];
    memset(plan, 0, sizeof plan); /* stay + keep past each plan */
    for (int i = 0; i < N; i++)
        assert_int_equal(df_grid_place_plan("{}", task[i], trial[i], plan[i], MAX, &len[i]), DF_OK);
    /* rows 0, 1 succeed; row 2 does its plan but the last action (no release); row 3 stands still */
    memset(plan[2] + (len[2] - 1) * 2, 0, (size_t)(MAX * 2 - (len[2] - 1) * 2) * sizeof(int32_t));
    memset(plan[3], 0, sizeof plan[3]);
    assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
    int32_t call[N * CHUNK * 2];
    for (int k = 0; k < MAX / CHUNK; k++) {
        for (int i = 0; i < N; i++)
            memcpy(call + i * CHUNK * 2, plan[i] + k * CHUNK * 2, CHUNK * 2 * sizeof *call);
        assert_int_equal(df_embodied_vec_step_chunk(v, call), DF_OK);
    }
    float emb[N * 24], reward[N];
    bool complete[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(df_embodied_vec_embedding(v, i, emb + i * 24), DF_OK);
        complete[i] = df_embodied_vec_episode(v, i)->complete;
    }
    assert_true(complete[0] && complete[1] && !complete[2] && !complete[3]);
    assert_int_equal(df_embodied_vec_episode(v, 3)->finish_step, MAX); /* truncated */
    df_srpo_opts so = df_srpo_defaults();
    assert_int_equal(df_srpo_progress_reward(emb, complete, task, N, 24, &so, reward, NULL), DF_OK);
    assert_float_equal(reward[0], 1.0f, 0);
    /* two failures: the nearer is at d = 0 (0.6 sigmoid(5)), the farther at d = 1 */
    assert_float_equal(reward[2], 0.5959843f, 1e-6);
    assert_float_equal(reward[3], 0.0040157f, 1e-6);
    df_embodied_vec_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_standard_scale),
        cmocka_unit_test(test_dbscan_by_hand),
        cmocka_unit_test(test_progress_reward_by_hand),
        cmocka_unit_test(test_response_mask),
        cmocka_unit_test(test_reward_orders_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
