/* Rollout correction: verl's importance-sampling weights and rejection sampling between the trainer's
 * recomputed log-probs and the rollout engine's, with their metrics and the batch normalisation
 * (include/distflow/algo.h, losses block; verl rollout_corr_helper.py at b178a3cd5). */
#include "distflow/algo.h"
#include "algo/algo_internal.h"
#include "algo/loss_internal.h"
#include "distflow/metrics.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHO "rollout correction"
#define RS_MAX ((int)(sizeof(((df_rollout_rs *)0)->opt) / sizeof(df_rollout_rs_opt)))

/* verl SUPPORTED_ROLLOUT_RS_OPTIONS */
static const struct {
    const char *name;
    int level, k;
} rs_options[] = {
    {"token_k1", DF_ROLLOUT_RS_TOKEN, 1},       {"token_k2", DF_ROLLOUT_RS_TOKEN, 2},
    {"token_k3", DF_ROLLOUT_RS_TOKEN, 3},       {"seq_sum_k1", DF_ROLLOUT_RS_SEQ_SUM, 1},
    {"seq_sum_k2", DF_ROLLOUT_RS_SEQ_SUM, 2},   {"seq_sum_k3", DF_ROLLOUT_RS_SEQ_SUM, 3},
    {"seq_mean_k1", DF_ROLLOUT_RS_SEQ_MEAN, 1}, {"seq_mean_k2", DF_ROLLOUT_RS_SEQ_MEAN, 2},
    {"seq_mean_k3", DF_ROLLOUT_RS_SEQ_MEAN, 3}, {"seq_max_k2", DF_ROLLOUT_RS_SEQ_MAX, 2},
    {"seq_max_k3", DF_ROLLOUT_RS_SEQ_MAX, 3},
};
#define RS_CHOICES                                                                                           \
    "token_k1, token_k2, token_k3, seq_sum_k1, seq_sum_k2, seq_sum_k3, seq_mean_k1, seq_mean_k2, "           \
    "seq_mean_k3, seq_max_k2, seq_max_k3"

/* ====================================================================== parsing */

int df_rollout_is_parse(const char *s, int *level)
{
    if (!level)
        return df_error(DF_EINVAL, "rollout_is: NULL output");
    if (!s)
        *level = DF_ROLLOUT_IS_OFF;
    else if (!strcmp(s, "token"))
        *level = DF_ROLLOUT_IS_TOKEN;
    else if (!strcmp(s, "sequence"))
        *level = DF_ROLLOUT_IS_SEQUENCE;
    else
        return df_error(DF_EINVAL, "rollout_is: unknown level '%s' (token, sequence or null)", s);
    return DF_OK;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t l = strlen(s);
    while (l && isspace((unsigned char)s[l - 1]))
        s[--l] = 0;
    return s;
}

/* The next comma-separated field of *p, cut in place and trimmed (possibly empty); NULL at the end. */
static char *next_field(char **p)
{
    if (!*p)
        return NULL;
    char *s = *p, *e = strchr(s, ',');
    if (e) {
        *e = 0;
        *p = e + 1;
    } else {
        *p = NULL;
    }
    return trim(s);
}

/* [b, e) holds one number (blanks around it allowed; strtod's syntax; NaN refused). */
static bool parse_num(const char *b, const char *e, double *v)
{
    char *end;
    double x = strtod(b, &end);
    if (end == b || end > e)
        return false;
    while (end < e && isspace((unsigned char)*end))
        end++;
    if (end != e || isnan(x))
        return false;
    *v = x;
    return true;
}

/* One option's threshold spec (verl _parse_rollout_rs_thresholds). */
static int parse_spec(df_rollout_rs_opt *o, const char *spec)
{
    const char *end = spec + strlen(spec), *us = strchr(spec, '_');
    if (o->k == 1) {
        bool ok = us ? parse_num(spec, us, &o->lower) && parse_num(us + 1, end, &o->upper)
                     : parse_num(spec, end, &o->upper);
        if (!ok)
            return df_error(DF_EINVAL,
                            "rollout_rs_threshold: '%s' for option %s is not a number (k1 options take "
                            "\"lower_upper\" or \"upper\")",
                            spec, o->name);
        if (!us)
            o->lower = 1.0 / o->upper; /* verl: the reciprocal of a bare upper bound */
        if (!(o->lower > 0) || !(o->upper > 0))
            return df_error(DF_EINVAL,
                            "rollout_rs_threshold: the bounds for option %s must be positive, got '%s'",
                            o->name, spec);
        if (o->lower > o->upper)
            return df_error(
                DF_EINVAL,
                "rollout_rs_threshold: option %s's lower bound %g is above its upper bound %g ('%s'): "
                "every token would be rejected",
                o->name, o->lower, o->upper, spec);
        return DF_OK;
    }
    if (us)
        return df_error(DF_EINVAL,
                        "rollout_rs_threshold: option %s takes a single upper bound without '_', got '%s'",
                        o->name, spec);
    if (!parse_num(spec, end, &o->upper))
        return df_error(DF_EINVAL, "rollout_rs_threshold: '%s' for option %s is not a number", spec, o->name);
    if (!(o->upper > 0))
        return df_error(DF_EINVAL, "rollout_rs_threshold: the bound for option %s must be positive, got '%s'",
                        o->name, spec);
    o->lower = 0;
    return DF_OK;
}

static int parse_options(char *list, const char *rs, df_rollout_rs *out)
{
    char *p = list, *f;
    while ((f = next_field(&p))) {
        if (!*f)
            continue;
        int j = 0, nopt = (int)(sizeof rs_options / sizeof *rs_options);
        while (j < nopt && strcmp(f, rs_options[j].name))
            j++;
        if (j == nopt)
            return df_error(DF_EINVAL, "rollout_rs: unknown option '%s' (choose among " RS_CHOICES ")", f);
        bool seen = false;
        for (int i = 0; i < out->n; i++)
            seen |= !strcmp(out->opt[i].name, f);
        if (seen)
            continue; /* verl keeps a repeated option once */
        df_rollout_rs_opt *o = &out->opt[out->n++];
        snprintf(o->name, sizeof o->name, "%s", rs_options[j].name);
        o->level = rs_options[j].level;
        o->k = rs_options[j].k;
    }
    if (!out->n)
        return df_error(DF_EINVAL, "rollout_rs: no option in '%s' (choose among " RS_CHOICES ")", rs);
    return DF_OK;
}

static int parse_thresholds(char *list, const char *threshold, df_rollout_rs *out)
{
    char *spec[RS_MAX], *p = list, *f;
    int ns = 0;
    while ((f = next_field(&p)))
        if (*f) {
            if (ns < RS_MAX)
                spec[ns] = f;
            ns++;
        }
    if (!ns)
        return df_error(DF_EINVAL, "rollout_rs_threshold: no threshold in '%s'", threshold);
    if (ns != 1 && ns != out->n)
        return df_error(
            DF_EINVAL,
            "rollout_rs_threshold: %d thresholds for %d rollout_rs options: give one shared by all "
            "options or exactly one per option",
            ns, out->n);
    for (int i = 0; i < out->n; i++) {
        int rc = parse_spec(&out->opt[i], spec[ns == 1 ? 0 : i]);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_rollout_rs_parse(const char *rs, const char *threshold, df_rollout_rs *out)
{
    if (!out)
        return df_error(DF_EINVAL, "rollout_rs: NULL output");
    memset(out, 0, sizeof *out);
    if (!rs || !*rs)
        return DF_OK;
    char *list = strdup(rs);
    if (!list)
        return df_error(DF_ENOMEM, "rollout_rs: out of memory");
    int rc = parse_options(list, rs, out);
    free(list);
    if (!rc && !threshold)
        rc = df_error(DF_EINVAL, "rollout_rs_threshold must be set with rollout_rs ('%s')", rs);
    if (!rc) {
        char *tl = strdup(threshold);
        rc = tl ? parse_thresholds(tl, threshold, out) : df_error(DF_ENOMEM, "rollout_rs: out of memory");
        free(tl);
    }
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ====================================================================== the correction */

/* verl_F.masked_mean of a sum over `count` elements: sum / (count + 1e-8). */
static double vmean(double sum, double count)
{
    return sum / (count + 1e-8);
}

/* max / min that keep a NaN, as torch's reductions */
static double nmax(double a, double b)
{
    return b > a || isnan(b) ? b : a;
}
static double nmin(double a, double b)
{
    return b < a || isnan(b) ? b : a;
}

/* verl's divergence estimators of a clamped log-ratio c: k1 = -c, k2 = c^2 / 2, k3 = e^c - 1 - c. */
static double kstat(int k, double c)
{
    return k == 1 ? -c : k == 2 ? 0.5 * c * c : exp(c) - 1.0 - c;
}

/* One rejection option's bounds and running statistics over the shard. */
typedef struct {
    const df_rollout_rs_opt *o;
    double lw, hi; /* keep k1: lw <= s <= hi (log bounds); k2 / k3: s <= hi (lw = 0: the std clamp) */
    double seq;    /* the current response's statistic (its masked mean for token options) */
    bool cur_rej;  /* the current response has a model token this option rejects */
    double sum, zsum, zsq, max, min; /* over model tokens: s, z = clamp(s, lw, hi), z^2 */
    int64_t high, low, rej, seq_rej;
    double *u; /* [S] the valid responses' statistics (with metrics) */
} rs_acc;

/* The importance weights' running statistics (before truncation). */
typedef struct {
    double thr, lo;
    double psum, qsum, qsq, pmax, pmin, lmax, lmin;
    int64_t high, low;
    double *v; /* [S] the valid responses' masked mean weights (with metrics) */
} is_acc;

static bool rs_keep(const rs_acc *r, double s)
{
    return r->o->k == 1 ? s >= r->lw && s <= r->hi : s <= r->hi;
}

static int check_rs(const df_rollout_rs *rs)
{
    if (rs->n < 0 || rs->n > RS_MAX)
        return df_error(DF_EINVAL, WHO ": %d rollout_rs options (0 to %d)", rs->n, RS_MAX);
    for (int i = 0; i < rs->n; i++) {
        const df_rollout_rs_opt *o = &rs->opt[i];
        bool ok = o->level >= DF_ROLLOUT_RS_TOKEN && o->level <= DF_ROLLOUT_RS_SEQ_MAX && o->k >= 1 &&
                  o->k <= 3 && !(o->level == DF_ROLLOUT_RS_SEQ_MAX && o->k == 1) && o->upper > 0 &&
                  (o->k != 1 || (o->lower > 0 && o->lower <= o->upper));
        if (!ok)
            return df_error(DF_EINVAL,
                            WHO
                            ": rollout_rs option %d ('%.16s') is malformed (level %d, k %d, bounds %g, %g)",
                            i, o->name, o->level, o->k, o->lower, o->upper);
    }
    return DF_OK;
}

static int check_input(const df_rollout_corr_cfg *cfg, int64_t n, const int64_t *offsets, const float *old,
                       const float *ro, const float *w, const int32_t *mask_out)
{
    if (!cfg)
        return df_error(DF_EINVAL, WHO ": NULL settings");
    int rc = df_algo_check_offsets(WHO, n, offsets);
    if (rc)
        return rc;
    const bool tokens = offsets[n] > 0;
    if (tokens && (!old || !ro))
        return df_error(DF_EINVAL, WHO ": NULL log-prob array");
    if (cfg->is_level < DF_ROLLOUT_IS_OFF || cfg->is_level > DF_ROLLOUT_IS_SEQUENCE)
        return df_error(DF_EINVAL, WHO ": unknown rollout_is level %d", cfg->is_level);
    if (cfg->is_level != DF_ROLLOUT_IS_OFF) {
        if (!(cfg->is_threshold > 0) || !isfinite(cfg->is_threshold))
            return df_error(DF_EINVAL, WHO ": rollout_is_threshold must be a finite value > 0, got %g",
                            cfg->is_threshold);
        if (tokens && !w)
            return df_error(DF_EINVAL, WHO ": rollout_is is on but the weight array is NULL");
    }
    if (cfg->rs && cfg->rs->n) {
        if ((rc = check_rs(cfg->rs)))
            return rc;
        if (tokens && !mask_out)
            return df_error(DF_EINVAL, WHO ": rollout_rs is on but the output mask is NULL");
    }
    return DF_OK;
}

/* ---- metrics ---- */

typedef struct {
    df_metrics *m;
    int rc;
} recorder;

static void put(recorder *r, const char *a, const char *b, const char *c, double v)
{
    char name[128];
    snprintf(name, sizeof name, "rollout_corr/%s%s%s", a, b, c);
    if (!r->rc)
        r->rc = df_metrics_set(r->m, name, v);
}

/* Mean, unbiased standard deviation (torch .std(); 0 for one value), max, min and max |x - center|
 * of S >= 1 values. */
typedef struct {
    double mean, std, max, min, dev;
} seq_stats;

static seq_stats seq_stats_of(const double *x, int64_t S, double center)
{
    seq_stats s = {.max = -INFINITY, .min = INFINITY, .dev = -INFINITY};
    double sum = 0;
    for (int64_t i = 0; i < S; i++) {
        sum += x[i];
        s.max = nmax(s.max, x[i]);
        s.min = nmin(s.min, x[i]);
        s.dev = nmax(s.dev, fabs(x[i] - center));
    }
    s.mean = sum / (double)S;
    double ss = 0;
    for (int64_t i = 0; i < S; i++)
        ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.std = S > 1 ? sqrt(ss / (double)(S - 1)) : 0.0;
    return s;
}

static double frac_above(const double *x, int64_t S, double t)
{
    int64_t c = 0;
    for (int64_t i = 0; i < S; i++)
        c += x[i] > t;
    return (double)c / (double)S;
}

static double frac_below(const double *x, int64_t S, double t)
{
    int64_t c = 0;
    for (int64_t i = 0; i < S; i++)
        c += x[i] < t;
    return (double)c / (double)S;
}

/* sqrt(max(0, masked mean of z^2 - (masked mean of z)^2)) over T > 1 model tokens, else 0 */
static double pop_std(double zsum, double zsq, int64_t T)
{
    if (T <= 1)
        return 0.0;
    double mz = vmean(zsum, (double)T);
    return sqrt(fmax(vmean(zsq, (double)T) - mz * mz, 0.0));
}

static void record_is(recorder *r, const is_acc *a, int level, int64_t T, int64_t S)
{
    const double t = (double)T;
    put(r, "rollout_is_mean", "", "", vmean(a->psum, t));
    if (level == DF_ROLLOUT_IS_TOKEN) {
        put(r, "rollout_is_max", "", "", a->pmax);
        put(r, "rollout_is_min", "", "", a->pmin);
        put(r, "rollout_is_ratio_fraction_high", "", "", vmean((double)a->high, t));
        put(r, "rollout_is_ratio_fraction_low", "", "", vmean((double)a->low, t));
    } else { /* in log space: the sums' maximum clamped to the safety bound, the minimum not (verl) */
        put(r, "rollout_is_max", "", "", exp(fmin(a->lmax, DF_LOSS_LOG_RATIO_CLAMP)));
        put(r, "rollout_is_min", "", "", exp(a->lmin));
        put(r, "rollout_is_ratio_fraction_high", "", "", (double)a->high / (double)S);
        put(r, "rollout_is_ratio_fraction_low", "", "", (double)a->low / (double)S);
    }
    put(r, "rollout_is_std", "", "", pop_std(a->qsum, a->qsq, T));
    const double mq = vmean(a->qsum, t), d = mq + 1e-8;
    put(r, "rollout_is_eff_sample_size", "", "", 1.0 / vmean(a->qsq / (d * d), t));
    const seq_stats s = seq_stats_of(a->v, S, 1.0);
    put(r, "rollout_is_seq_mean", "", "", s.mean);
    put(r, "rollout_is_seq_std", "", "", s.std);
    put(r, "rollout_is_seq_max", "", "", s.max);
    put(r, "rollout_is_seq_min", "", "", s.min);
    put(r, "rollout_is_seq_max_deviation", "", "", s.dev);
    put(r, "rollout_is_seq_fraction_high", "", "", frac_above(a->v, S, a->thr));
    put(r, "rollout_is_seq_fraction_low", "", "", frac_below(a->v, S, a->lo));
}

static void record_rs(recorder *r, const rs_acc *a, int64_t T, int64_t S)
{
    const char *o = a->o->name;
    const double t = (double)T;
    const bool k1 = a->o->k == 1, token = a->o->level == DF_ROLLOUT_RS_TOKEN;
    const seq_stats s = seq_stats_of(a->u, S, 0.0);
    put(r, "rollout_rs_", o, "_mean", vmean(a->sum, t));
    put(r, "rollout_rs_", o, "_max", token ? a->max : s.max);
    put(r, "rollout_rs_", o, "_min", token ? a->min : s.min);
    put(r, "rollout_rs_", o, "_fraction_high",
        token ? vmean((double)a->high, t) : frac_above(a->u, S, a->hi));
    put(r, "rollout_rs_", o, "_fraction_low",
        !k1     ? 0.0
        : token ? vmean((double)a->low, t)
                : frac_below(a->u, S, a->lw));
    put(r, "rollout_rs_", o, "_std", pop_std(a->zsum, a->zsq, T));
    put(r, "rollout_rs_", o, "_seq_mean", s.mean);
    put(r, "rollout_rs_", o, "_seq_std", s.std);
    put(r, "rollout_rs_", o, "_seq_max", s.max);
    put(r, "rollout_rs_", o, "_seq_min", s.min);
    put(r, "rollout_rs_", o, "_seq_max_deviation", s.dev);
    put(r, "rollout_rs_", o, "_seq_fraction_high", frac_above(a->u, S, a->hi));
    if (k1)
        put(r, "rollout_rs_", o, "_seq_fraction_low", frac_below(a->u, S, a->lw));
    put(r, "rollout_rs_", o, "_masked_fraction", vmean((double)a->rej, t));
    put(r, "rollout_rs_", o, "_seq_masked_fraction", (double)a->seq_rej / (double)S);
}

/* ---- the pass over the shard ---- */

int df_rollout_correction(const df_rollout_corr_cfg *cfg, int64_t n, const int64_t *offsets,
                          const int32_t *mask_in, const float *old_log_probs, const float *rollout_log_probs,
                          float *w, int32_t *mask_out, double norm[2], df_metrics *m)
{
    int rc = check_input(cfg, n, offsets, old_log_probs, rollout_log_probs, w, mask_out);
    if (rc)
        return rc;
    const int level = cfg->is_level, nrs = cfg->rs ? cfg->rs->n : 0;
    const bool is_on = level != DF_ROLLOUT_IS_OFF;
    double *scratch = NULL;
    if (m && n > 0 && (is_on || nrs)) {
        scratch = malloc((size_t)(1 + nrs) * (size_t)n * sizeof *scratch);
        if (!scratch)
            return df_error(DF_ENOMEM, WHO ": out of memory for %lld responses", (long long)n);
    }
    is_acc ia = {.thr = cfg->is_threshold,
                 .pmax = -INFINITY,
                 .pmin = INFINITY,
                 .lmax = -INFINITY,
                 .lmin = INFINITY,
                 .v = scratch};
    ia.lo = is_on ? 1.0 / ia.thr : 0.0;
    const double log_thr = is_on ? log(ia.thr) : 0.0, log_lo = is_on ? log(ia.lo) : 0.0;
    rs_acc ra[RS_MAX];
    for (int j = 0; j < nrs; j++) {
        const df_rollout_rs_opt *o = &cfg->rs->opt[j];
        ra[j] = (rs_acc){.o = o,
                         .max = -INFINITY,
                         .min = INFINITY,
                         .u = scratch ? scratch + (size_t)(j + 1) * (size_t)n : NULL};
        ra[j].lw = o->k == 1 ? log(o->lower) : 0.0;
        ra[j].hi = o->k == 1 ? log(o->upper) : o->upper;
    }
    int64_t T = 0, S = 0, rej_all = 0, seq_rej_all = 0;
    double nsum = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t a = offsets[i], b = offsets[i + 1];
        /* pass 1, reading mask_in before mask_out (possibly the same array) is written: the
           response's model tokens, its log-ratio sum and the sums / maxima of k1..k3 */
        int64_t k = 0;
        double lsum = 0, ksum[4] = {0}, kmax[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        for (int64_t t = a; t < b; t++) {
            if (mask_in && !mask_in[t])
                continue;
            const double lr = (double)old_log_probs[t] - (double)rollout_log_probs[t], c = df_loss_clamp(lr);
            k++;
            lsum += lr;
            for (int kk = 1; nrs && kk <= 3; kk++) {
                const double s = kstat(kk, c);
                ksum[kk] += s;
                kmax[kk] = nmax(kmax[kk], s);
            }
        }
        const double seq_p = exp(df_loss_clamp(lsum)); /* the sequence weight before truncation */
        const float seq_w = (float)fmin(seq_p, ia.thr);
        for (int j = 0; j < nrs; j++) {
            const int kk = ra[j].o->k;
            ra[j].seq = ra[j].o->level == DF_ROLLOUT_RS_SEQ_SUM   ? ksum[kk]
                        : ra[j].o->level == DF_ROLLOUT_RS_SEQ_MAX ? (k ? kmax[kk] : 0.0)
                                                                  : vmean(ksum[kk], (double)k);
            ra[j].cur_rej = false;
        }
        /* pass 2: weights, keep decisions, token statistics */
        bool any_rej = false;
        double psum_i = 0;
        for (int64_t t = a; t < b; t++) {
            const bool model = !mask_in || mask_in[t];
            const double lr = (double)old_log_probs[t] - (double)rollout_log_probs[t], c = df_loss_clamp(lr);
            if (is_on) {
                if (!model) {
                    w[t] = 0.0f;
                } else {
                    const double p = level == DF_ROLLOUT_IS_TOKEN ? exp(c) : seq_p;
                    const double q = fmin(fmax(p, ia.lo), ia.thr);
                    w[t] = level == DF_ROLLOUT_IS_TOKEN ? (float)fmin(p, ia.thr) : seq_w;
                    if (level == DF_ROLLOUT_IS_TOKEN)
                        nsum += (double)w[t];
                    psum_i += p;
                    ia.psum += p;
                    ia.qsum += q;
                    ia.qsq += q * q;
                    if (level == DF_ROLLOUT_IS_TOKEN) { /* the sequence level counts responses */
                        ia.pmax = nmax(ia.pmax, p);
                        ia.pmin = nmin(ia.pmin, p);
                        ia.high += p > ia.thr;
                        ia.low += p < ia.lo;
                    }
                }
            }
            if (!nrs) {
                if (mask_out)
                    mask_out[t] = model;
                continue;
            }
            bool keep_all = true;
            for (int j = 0; j < nrs; j++) {
                rs_acc *r = &ra[j];
                const double s = r->o->level == DF_ROLLOUT_RS_TOKEN ? kstat(r->o->k, c) : r->seq;
                const bool keep = rs_keep(r, s);
                keep_all = keep_all && keep;
                if (!model)
                    continue;
                const double z = fmin(fmax(s, r->lw), r->hi);
                r->sum += s;
                r->zsum += z;
                r->zsq += z * z;
                r->max = nmax(r->max, s);
                r->min = nmin(r->min, s);
                r->high += s > r->hi;
                r->low += s < r->lw;
                r->rej += !keep;
                r->cur_rej = r->cur_rej || !keep;
            }
            if (model && !keep_all) {
                rej_all++;
                any_rej = true;
            }
            mask_out[t] = model && keep_all;
        }
        if (!k)
            continue; /* no model token: in no per-sequence statistic */
        T += k;
        if (is_on) {
            if (level == DF_ROLLOUT_IS_SEQUENCE) {
                nsum += (double)seq_w;
                ia.lmax = nmax(ia.lmax, lsum);
                ia.lmin = nmin(ia.lmin, lsum);
                ia.high += lsum > log_thr;
                ia.low += lsum < log_lo;
            }
            if (ia.v)
                ia.v[S] = vmean(psum_i, (double)k);
        }
        for (int j = 0; j < nrs; j++) {
            ra[j].seq_rej += ra[j].cur_rej;
            if (ra[j].u)
                ra[j].u[S] = ra[j].seq;
        }
        seq_rej_all += any_rej;
        S++;
    }
    if (is_on && norm) {
        norm[0] += nsum;
        norm[1] += (double)(level == DF_ROLLOUT_IS_TOKEN ? T : S);
    }
    if (m && T > 0) {
        recorder r = {m, DF_OK};
        if (is_on)
            record_is(&r, &ia, level, T, S);
        for (int j = 0; j < nrs; j++)
            record_rs(&r, &ra[j], T, S);
        if (nrs) {
            put(&r, "rollout_rs_masked_fraction", "", "", vmean((double)rej_all, (double)T));
            put(&r, "rollout_rs_seq_masked_fraction", "", "", (double)seq_rej_all / (double)S);
        }
        rc = r.rc;
    }
    free(scratch);
    return rc;
}

int df_rollout_is_normalize(int64_t n, const int64_t *offsets, const int32_t *mask, const double sums[2],
                            float *w, df_metrics *m)
{
    int rc = df_algo_check_offsets("rollout IS normalisation", n, offsets);
    if (rc)
        return rc;
    if (!sums)
        return df_error(DF_EINVAL, "rollout IS normalisation: NULL sums");
    if (offsets[n] > 0 && !w)
        return df_error(DF_EINVAL, "rollout IS normalisation: NULL weight array");
    const double mean = sums[1] > 0 ? sums[0] / sums[1] : NAN; /* verl: 0 / 0 with no model token */
    const bool apply = mean > 1e-8;
    if (apply)
        for (int64_t t = 0; t < offsets[n]; t++)
            if (!mask || mask[t])
                w[t] = (float)((double)w[t] / mean);
    return m ? df_metrics_set(m, "rollout_corr/rollout_is_batch_norm_factor", apply ? mean : 1.0) : DF_OK;
}
