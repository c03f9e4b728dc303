/* Data Coordinator planning: Karmarkar–Karp, the redistribution plan, its
 * alltoallv views (simulated ranks in one process), filters and the wire form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "distflow/batch.h"
#include "distflow/coordinator.h"

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void part_sums(const int64_t *w, int64_t n, int k, const int64_t *part, int64_t *sums,
                      int64_t *cnts)
{
    for (int p = 0; p < k; p++)
        sums[p] = cnts[p] = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(part[i] >= 0 && part[i] < k);
        sums[part[i]] += w[i];
        cnts[part[i]]++;
    }
}

static void test_kk_hand(void **state)
{
    (void)state;
    /* Largest differencing on {8,7,6,5,4}: 8-7 -> 1, 6-5 -> 1, then {4} with (8|7)
     * gives (11|8), then with (6|5) gives (16|14): parts {7,5,4} and {8,6}. */
    int64_t w[5] = {8, 7, 6, 5, 4}, part[5], s[2], c[2];
    assert_int_equal(df_kk_partition(w, 5, 2, false, part), DF_OK);
    int64_t want[5] = {1, 0, 1, 0, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(part[i], want[i]);
    part_sums(w, 5, 2, part, s, c);
    assert_int_equal(s[0], 16);
    assert_int_equal(s[1], 14);

    /* Equal size: sorted 1,2,3,4 -> states {2|1} and {4|3}; spread tie, heavier top
     * (4) first: {4}+{1}=5, {3}+{2}=5. */
    int64_t w2[4] = {1, 2, 3, 4}, p2[4], s2[2], c2[2];
    assert_int_equal(df_kk_partition(w2, 4, 2, true, p2), DF_OK);
    part_sums(w2, 4, 2, p2, s2, c2);
    assert_int_equal(s2[0], 5);
    assert_int_equal(s2[1], 5);
    assert_int_equal(c2[0], 2);
    assert_int_equal(c2[1], 2);
    assert_int_equal(p2[0], p2[3]);
    assert_int_equal(p2[1], p2[2]);

    /* Equal size 3 parts of 2: {10,1,1,1,1,10} -> each heavy item with a light one. */
    int64_t w3[6] = {10, 1, 1, 1, 1, 10}, p3[6], s3[3], c3[3];
    assert_int_equal(df_kk_partition(w3, 6, 3, true, p3), DF_OK);
    part_sums(w3, 6, 3, p3, s3, c3);
    assert_int_equal(s3[0], 11);
    assert_int_equal(s3[1], 11);
    assert_int_equal(s3[2], 2);
    for (int p = 0; p < 3; p++)
        assert_int_equal(c3[p], 2);

    /* Ties only: 4 equal items into 2 parts. */
    int64_t w4[4] = {3, 3, 3, 3}, p4[4], s4[2], c4[2];
    assert_int_equal(df_kk_partition(w4, 4, 2, false, p4), DF_OK);
    part_sums(w4, 4, 2, p4, s4, c4);
    assert_int_equal(s4[0], 6);
    assert_int_equal(s4[1], 6);

    /* k = 1, n < k, n = 0. */
    int64_t p5[3];
    assert_int_equal(df_kk_partition(w, 3, 1, true, p5), DF_OK);
    assert_int_equal(p5[0] + p5[1] + p5[2], 0);
    assert_int_equal(df_kk_partition(w, 2, 4, false, p5), DF_OK);
    assert_int_equal(p5[0], 0); /* 8 is the heaviest part */
    assert_int_equal(p5[1], 1);
    assert_int_equal(df_kk_partition(NULL, 0, 3, true, NULL), DF_OK);
}

static void test_kk_errors(void **state)
{
    (void)state;
    int64_t w[3] = {1, -2, 3}, p[3];
    assert_int_equal(df_kk_partition(w, 3, 2, false, p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "negative"));
    w[1] = 2;
    assert_int_equal(df_kk_partition(w, 3, 2, true, p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "equal_size"));
    assert_int_equal(df_kk_partition(w, 3, 0, false, p), DF_EINVAL);
    assert_int_equal(df_kk_partition(w, -1, 2, false, p), DF_EINVAL);
    assert_int_equal(df_kk_partition(NULL, 3, 2, false, p), DF_EINVAL);
}

/* Greedy baseline: items in index order to the lightest non-full part. */
static void greedy(const int64_t *w, int64_t n, int k, int64_t *part)
{
    int64_t sums[64] = {0}, cnt[64] = {0};
    for (int64_t i = 0; i < n; i++) {
        int best = -1;
        for (int p = 0; p < k; p++)
            if (cnt[p] < n / k && (best < 0 || sums[p] < sums[best]))
                best = p;
        part[i] = best;
        sums[best] += w[i];
        cnt[best]++;
    }
}

static double ratio(const int64_t *s, int k)
{
    int64_t mx = s[0], mn = s[0];
    for (int p = 1; p < k; p++) {
        mx = s[p] > mx ? s[p] : mx;
        mn = s[p] < mn ? s[p] : mn;
    }
    return (double)mx / (double)mn;
}

static void test_kk_quality(void **state)
{
    (void)state;
    uint64_t seed = 7;
    double kk_worst = 1.0, gr_worst = 1.0;
    for (int trial = 0; trial < 50; trial++) {
        int k = 2 + (int)(lcg(&seed) % 7);
        int64_t n = k * (4 + (int64_t)(lcg(&seed) % 28));
        int64_t w[1024], pk[1024], pg[1024], sk[64], sg[64], c[64];
        for (int64_t i = 0; i < n; i++) /* long-tailed lengths like RL responses */
            w[i] = 16 + (int64_t)(lcg(&seed) % 64) * (int64_t)(1 + lcg(&seed) % 32);
        assert_int_equal(df_kk_partition(w, n, k, true, pk), DF_OK);
        greedy(w, n, k, pg);
        part_sums(w, n, k, pk, sk, c);
        for (int p = 0; p < k; p++)
            assert_int_equal(c[p], n / k);
        for (int p = 1; p < k; p++)
            assert_true(sk[p - 1] >= sk[p]); /* parts numbered heaviest first */
        part_sums(w, n, k, pg, sg, c);
        double rk = ratio(sk, k), rg = ratio(sg, k);
        kk_worst = rk > kk_worst ? rk : kk_worst;
        gr_worst = rg > gr_worst ? rg : gr_worst;
        assert_true(rk <= rg); /* ratios of integer sums: rounding to double is monotone */
    }
    print_message("kk worst max/min %.4f, greedy worst %.4f\n", kk_worst, gr_worst);
    assert_true(kk_worst < 1.10);
}

/* ---- plan ------------------------------------------------------------------ */

/* n_src ranks with per_rank samples each; GRPO groups of g consecutive global samples. */
static df_sample_info *make_infos(int n_src, int64_t per_rank, int g, uint64_t seed, char *uids)
{
    df_sample_info *v = malloc((size_t)(n_src * per_rank) * sizeof *v);
    for (int r = 0; r < n_src; r++)
        for (int64_t i = 0; i < per_rank; i++) {
            df_sample_info *s = &v[r * per_rank + i];
            int64_t gid = (r * per_rank + i) / g;
            memset(s, 0, sizeof *s);
            s->prompt_length = 10 + (int64_t)(gid % 5);
            s->response_length = 1 + (int64_t)(lcg(&seed) % 300);
            s->sum_tokens = s->prompt_length + s->response_length;
            snprintf(uids + 16 * (r * per_rank + i), 16, "u%lld", (long long)gid);
            s->uid = uids + 16 * (r * per_rank + i);
            s->group = -1;
            s->src_rank = r;
            s->src_index = i;
            s->score = NAN;
        }
    return v;
}

/* Every sample exactly once; destination counts within one (units) of each other. */
static void check_plan_cover(const df_redist_plan *p, const df_sample_info *v, int64_t n)
{
    assert_int_equal(p->n, n);
    assert_int_equal(p->dest_offsets[p->dest_dp_size], n);
    int *seen = calloc((size_t)(n ? n : 1), sizeof *seen);
    for (int64_t j = 0; j < p->n; j++) {
        int64_t hit = -1;
        for (int64_t i = 0; i < n; i++)
            if (v[i].src_rank == p->src_rank[j] && v[i].src_index == p->src_index[j])
                hit = i;
        assert_true(hit >= 0);
        seen[hit]++;
    }
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
}

static void test_plan_samples(void **state)
{
    (void)state;
    char uids[16 * 64];
    df_sample_info *v = make_infos(4, 16, 1, 11, uids);
    df_redist_plan *p = NULL;
    assert_int_equal(df_redistribution_plan(v, 64, 2, false, &p), DF_OK); /* DP 4 -> 2 */
    check_plan_cover(p, v, 64);
    assert_int_equal(p->src_size, 4);
    int64_t tot = 0;
    for (int d = 0; d < 2; d++) {
        assert_int_equal(p->dest_offsets[d + 1] - p->dest_offsets[d], 32);
        tot += p->dest_tokens[d];
        int64_t prev = INT64_MAX, sum = 0;
        for (int64_t j = p->dest_offsets[d]; j < p->dest_offsets[d + 1]; j++) {
            int64_t w = v[p->src_rank[j] * 16 + p->src_index[j]].sum_tokens;
            assert_true(w <= prev); /* longest first within a destination */
            prev = w;
            sum += w;
        }
        assert_int_equal(sum, p->dest_tokens[d]);
    }
    int64_t all = 0; /* every token lands somewhere, once */
    for (int i = 0; i < 64; i++)
        all += v[i].sum_tokens;
    assert_int_equal(tot, all);
    assert_true((double)p->dest_tokens[0] / (double)p->dest_tokens[1] < 1.02);
    df_redist_plan_free(p);

    /* 2 -> 4 with an uneven count: 30 samples -> 8, 8, 7, 7 in some order. */
    assert_int_equal(df_redistribution_plan(v, 30, 4, false, &p), DF_OK);
    check_plan_cover(p, v, 30);
    int c8 = 0, c7 = 0;
    for (int d = 0; d < 4; d++) {
        int64_t c = p->dest_offsets[d + 1] - p->dest_offsets[d];
        c8 += c == 8;
        c7 += c == 7;
    }
    assert_int_equal(c8, 2);
    assert_int_equal(c7, 2);
    df_redist_plan_free(p);

    /* Equal counts win over equal tokens: one sample of 1000 tokens and seven of 1 split 4 / 4
       (the best split by tokens alone, {1000} against the rest, would give one rank 1 sample). */
    for (int i = 0; i < 8; i++)
        v[i].sum_tokens = i == 3 ? 1000 : 1;
    assert_int_equal(df_redistribution_plan(v, 8, 2, false, &p), DF_OK);
    check_plan_cover(p, v, 8);
    for (int d = 0; d < 2; d++)
        assert_int_equal(p->dest_offsets[d + 1] - p->dest_offsets[d], 4);
    df_redist_plan_free(p);
    free(v);
}

static void test_plan_groups(void **state)
{
    (void)state;
    char uids[16 * 64];
    df_sample_info *v = make_infos(2, 32, 4, 5, uids); /* 16 groups of 4 across 2 ranks */
    df_redist_plan *p = NULL;
    assert_int_equal(df_redistribution_plan(v, 64, 4, true, &p), DF_OK); /* DP 2 -> 4 */
    check_plan_cover(p, v, 64);
    for (int d = 0; d < 4; d++) {
        int64_t lo = p->dest_offsets[d], hi = p->dest_offsets[d + 1];
        assert_int_equal(hi - lo, 16); /* 4 whole groups each */
        for (int64_t j = lo; j < hi; j += 4) { /* members contiguous, canonical order */
            const char *u = v[p->src_rank[j] * 32 + p->src_index[j]].uid;
            for (int t = 1; t < 4; t++) {
                assert_string_equal(v[p->src_rank[j + t] * 32 + p->src_index[j + t]].uid, u);
                assert_int_equal(p->src_index[j + t], p->src_index[j] + t);
            }
        }
    }
    df_redist_plan_free(p);

    /* Integer groups (the `index` column) when there is no uid; a group split across ranks. */
    for (int i = 0; i < 64; i++) {
        v[i].uid = NULL;
        v[i].group = (i + 2) / 4; /* group 8 spans rank 0 row 30-31 and rank 1 row 0-1 */
    }
    assert_int_equal(df_redistribution_plan(v, 64, 4, true, &p), DF_OK);
    check_plan_cover(p, v, 64);
    int found = 0;
    for (int64_t j = 0; j + 3 < p->n; j++)
        if (p->src_rank[j] == 0 && p->src_index[j] == 30) {
            assert_int_equal(p->src_index[j + 1], 31);
            assert_int_equal(p->src_rank[j + 2], 1);
            assert_int_equal(p->src_index[j + 2], 0);
            assert_int_equal(p->src_index[j + 3], 1);
            found = 1;
        }
    assert_true(found);
    df_redist_plan_free(p);
    free(v);
}

static void test_plan_deterministic(void **state)
{
    (void)state;
    char uids[16 * 48];
    df_sample_info *v = make_infos(3, 16, 4, 9, uids);
    df_sample_info *w = malloc(48 * sizeof *w);
    /* Gathered in another rank order (2, 0, 1) and reversed within each rank. */
    int order[3] = {2, 0, 1}, o = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 15; i >= 0; i--)
            w[o++] = v[order[r] * 16 + i];
    for (int kg = 0; kg < 2; kg++) {
        df_redist_plan *a = NULL, *b = NULL;
        assert_int_equal(df_redistribution_plan(v, 48, 4, kg, &a), DF_OK);
        assert_int_equal(df_redistribution_plan(w, 48, 4, kg, &b), DF_OK);
        assert_memory_equal(a->dest_offsets, b->dest_offsets, 5 * sizeof(int64_t));
        assert_memory_equal(a->src_rank, b->src_rank, 48 * sizeof(int32_t));
        assert_memory_equal(a->src_index, b->src_index, 48 * sizeof(int64_t));
        df_redist_plan_free(a);
        df_redist_plan_free(b);
    }
    free(w);
    free(v);
}

/* Simulated alltoallv: every source sends, every destination rebuilds its batch. */
static void simulate(int n_src, int64_t per_rank, int dest, bool groups)
{
    char uids[16 * 256];
    df_sample_info *v = make_infos(n_src, per_rank, 4, 3, uids);
    int64_t n = n_src * per_rank;
    df_redist_plan *p = NULL;
    assert_int_equal(df_redistribution_plan(v, n, dest, groups, &p), DF_OK);
    /* Payload of a row = its global id; buffers [src][dest] hold what src sends. */
    int64_t *sent[8][8], cnt[8][8];
    for (int s = 0; s < n_src; s++) {
        int64_t sc[8], *rows, nr, off = 0;
        assert_int_equal(df_redist_plan_send(p, s, sc, &rows, &nr), DF_OK);
        for (int d = 0; d < dest; d++) {
            cnt[s][d] = sc[d];
            sent[s][d] = malloc((size_t)(sc[d] ? sc[d] : 1) * sizeof(int64_t));
            for (int64_t j = 0; j < sc[d]; j++)
                sent[s][d][j] = s * per_rank + rows[off + j];
            off += sc[d];
        }
        assert_int_equal(off, nr);
        free(rows);
    }
    for (int d = 0; d < dest; d++) {
        int64_t rc[8], *perm, nr, recv[256], m = 0;
        assert_int_equal(df_redist_plan_recv(p, d, n_src, rc, &perm, &nr), DF_OK);
        for (int s = 0; s < n_src; s++) {
            assert_int_equal(rc[s], cnt[s][d]);
            for (int64_t j = 0; j < rc[s]; j++)
                recv[m++] = sent[s][d][j];
        }
        assert_int_equal(m, nr);
        for (int64_t j = 0; j < nr; j++) {
            int64_t e = p->dest_offsets[d] + j;
            assert_int_equal(recv[perm[j]], p->src_rank[e] * per_rank + p->src_index[e]);
        }
        free(perm);
    }
    for (int s = 0; s < n_src; s++)
        for (int d = 0; d < dest; d++)
            free(sent[s][d]);
    df_redist_plan_free(p);
    free(v);
}

static void test_send_recv(void **state)
{
    (void)state;
    simulate(4, 16, 2, true);  /* DP 4 -> 2 */
    simulate(2, 32, 4, true);  /* DP 2 -> 4 */
    simulate(4, 16, 2, false);
    simulate(3, 20, 4, false); /* uneven: 60 samples into 4 */
    simulate(2, 8, 8, false);

    df_redist_plan *p = NULL;
    int64_t rc[2], sc[2], *rows, *perm, nr;
    assert_int_equal(df_redistribution_plan(NULL, 0, 2, true, &p), DF_OK); /* empty */
    assert_int_equal(p->n, 0);
    assert_int_equal(p->src_size, 0);
    assert_int_equal(df_redist_plan_send(p, 0, sc, &rows, &nr), DF_OK);
    assert_int_equal(nr, 0);
    assert_int_equal(sc[0] + sc[1], 0);
    free(rows);
    assert_int_equal(df_redist_plan_recv(p, 1, 2, rc, &perm, &nr), DF_OK);
    assert_int_equal(nr, 0);
    assert_int_equal(rc[0] + rc[1], 0);
    free(perm);
    assert_int_equal(df_redist_plan_recv(p, 2, 2, rc, &perm, &nr), DF_EINVAL);
    df_redist_plan_free(p);
}

static void test_plan_errors(void **state)
{
    (void)state;
    char uids[16 * 8];
    df_sample_info *v = make_infos(2, 4, 1, 1, uids);
    df_redist_plan *p = NULL;
    assert_int_equal(df_redistribution_plan(v, 8, 0, false, &p), DF_EINVAL);
    v[5].src_index = 2; /* rank 1 row 2 twice */
    assert_int_equal(df_redistribution_plan(v, 8, 2, false, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "row 2 of source rank 1"));
    v[5].src_index = 1;
    v[3].sum_tokens = -1;
    assert_int_equal(df_redistribution_plan(v, 8, 2, false, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "info 3"));
    v[3].sum_tokens = 1;
    assert_int_equal(df_redistribution_plan(v, 8, 2, false, &p), DF_OK);
    int64_t rc[1], *perm, nr;
    assert_int_equal(df_redist_plan_recv(p, 0, 1, rc, &perm, &nr), DF_EINVAL); /* 2 sources */
    df_redist_plan_free(p);
    free(v);
}

/* ---- infos from a batch, filters, wire form ------------------------------------ */

static bool keep_long(const df_sample_info *s, void *user)
{
    return s->sum_tokens >= *(int64_t *)user;
}

static void test_infos_filter_serde(void **state)
{
    (void)state;
    df_batch *b = df_batch_new(3);
    int64_t po[4] = {0, 2, 3, 6}, ro[4] = {0, 1, 4, 4}, idx[3] = {7, 7, 9};
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    float score[3] = {1.0f, 0.0f, 0.5f};
    const char *uid[3] = {"a", "a", "bb"};
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, tok), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, tok), DF_OK);
    assert_int_equal(df_batch_set_i64(b, "index", idx), DF_OK);
    assert_int_equal(df_batch_set_f32(b, "score", score), DF_OK);
    assert_int_equal(df_batch_set_str(b, "uid", uid), DF_OK);
    df_sample_info *v = NULL;
    assert_int_equal(df_batch_sample_infos(b, 3, &v), DF_OK);
    assert_int_equal(v[1].prompt_length, 1);
    assert_int_equal(v[1].response_length, 3);
    assert_int_equal(v[1].sum_tokens, 4);
    assert_int_equal(v[2].sum_tokens, 3);
    assert_int_equal(v[2].group, 9);
    assert_true(v[0].score == 1.0);
    assert_int_equal(v[2].src_rank, 3);
    assert_int_equal(v[2].src_index, 2);
    assert_string_equal(v[2].uid, "bb");
    assert_int_equal(df_batch_sample_infos(b, -1, &v), DF_EINVAL);

    /* Wire form round trip (one uid absent). */
    v[1].uid = NULL;
    uint8_t *buf;
    size_t len;
    assert_int_equal(df_sample_infos_serialize(v, 3, &buf, &len), DF_OK);
    assert_int_equal(len, 24 + 3 * 56 + 3);
    df_sample_info *w;
    int64_t n;
    assert_int_equal(df_sample_infos_deserialize(buf, len, &w, &n), DF_OK);
    assert_int_equal(n, 3);
    assert_string_equal(w[0].uid, "a");
    assert_null(w[1].uid);
    assert_string_equal(w[2].uid, "bb");
    assert_int_equal(w[1].sum_tokens, 4);
    assert_int_equal(w[2].group, 9);
    assert_true(w[2].score == 0.5);
    assert_int_equal(w[2].src_rank, 3);
    assert_int_equal(w[2].src_index, 2);
    free(w);
    /* Malformed: truncated, trailing byte, bad magic, bad count, NUL in uid. */
    assert_int_equal(df_sample_infos_deserialize(buf, len - 1, &w, &n), DF_EINVAL);
    uint8_t *big = malloc(len + 1);
    memcpy(big, buf, len);
    big[len] = 'x';
    assert_int_equal(df_sample_infos_deserialize(big, len + 1, &w, &n), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "uid bytes"));
    free(big);
    buf[0] = 'X';
    assert_int_equal(df_sample_infos_deserialize(buf, len, &w, &n), DF_EINVAL);
    buf[0] = 'D';
    buf[16] = 200;
    assert_int_equal(df_sample_infos_deserialize(buf, len, &w, &n), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "byte 16"));
    buf[16] = 3;
    buf[len - 1] = 0;
    assert_int_equal(df_sample_infos_deserialize(buf, len, &w, &n), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "NUL"));
    assert_int_equal(df_sample_infos_deserialize(buf, 10, &w, &n), DF_EINVAL);
    free(buf);

    /* Filter plugin: keep sum_tokens >= 4, order kept; NULL keeps everything. */
    int64_t kept, min = 4;
    assert_int_equal(df_sample_infos_filter(v, 3, keep_long, &min, &kept), DF_OK);
    assert_int_equal(kept, 1);
    assert_int_equal(v[0].src_index, 1);
    assert_int_equal(df_sample_infos_filter(v, 1, NULL, NULL, &kept), DF_OK);
    assert_int_equal(kept, 1);
    assert_int_equal(df_sample_infos_filter(v, -1, NULL, NULL, &kept), DF_EINVAL);
    free(v);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kk_hand),
        cmocka_unit_test(test_kk_errors),
        cmocka_unit_test(test_kk_quality),
        cmocka_unit_test(test_plan_samples),
        cmocka_unit_test(test_plan_groups),
        cmocka_unit_test(test_plan_deterministic),
        cmocka_unit_test(test_send_recv),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_infos_filter_serde),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
