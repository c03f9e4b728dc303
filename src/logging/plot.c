/* A run's metrics drawn with PLplot, one PNG per panel (logging/plot.h). */
#include "logging/plot.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CURVES 32 /* per PNG; a wildcard matching more draws the first ones */

/* The standard panels: verl / siiRL metric names (RL) and verl's SFT trainer's (train/, val/).
   "prefix*" takes every metric with that prefix, in file order. */
typedef struct {
    const char *file, *title, *ylabel;
    const char *keys[8];
} panel;

static const panel panels[] = {
    {"score", "Score (sequence reward before KL)", "score",
     {"critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean", "critic/acc/mean"}},
    {"response_length", "Response length", "tokens",
     {"response_length/mean", "response_length/max", "response_length/min", "prompt_length/mean"}},
    {"clip_ratio", "Clipped fractions", "fraction",
     {"response_length/clip_ratio", "prompt_length/clip_ratio", "actor/pg_clipfrac", "actor/pg_clipfrac_lower",
      "critic/vf_clipfrac"}},
    {"losses", "Losses", "loss",
     {"actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "critic/vf_loss", "train/loss", "val/loss"}},
    {"kl", "KL divergence", "KL",
     {"actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty", "critic/kl", "rollout_corr/kl"}},
    {"entropy", "Policy entropy", "nats / token", {"actor/entropy"}},
    {"grad_norm", "Gradient norm (before clipping)", "L2 norm",
     {"actor/grad_norm", "critic/grad_norm", "train/grad_norm"}},
    {"lr", "Learning rate", "lr", {"actor/lr", "critic/lr", "train/lr"}},
    {"throughput", "Throughput", "tokens / s (per rank)", {"perf/throughput", "train/tokens_per_second"}},
    {"timing", "Time per stage", "seconds", {"timing_s/*"}},
    {"validation", "Validation", "score", {"val-core/*"}},
};
#define N_PANELS (sizeof panels / sizeof *panels)

/* The table's series that `pat` names (exactly, or by prefix when it ends in '*'), appended to
   sel[*n < MAX_CURVES] unless already there. */
static void select_series(const df_metrics_table *t, const char *pat, const df_series **sel, int *n)
{
    size_t len = strlen(pat);
    bool prefix = len > 0 && pat[len - 1] == '*';
    for (int i = 0; i < t->n && *n < MAX_CURVES; i++) {
        const df_series *s = &t->s[i];
        if (prefix ? strncmp(s->key, pat, len - 1) : strcmp(s->key, pat))
            continue;
        bool dup = false;
        for (int k = 0; k < *n; k++)
            dup |= sel[k] == s;
        if (!dup && s->n > 0)
            sel[(*n)++] = s;
    }
}

/* "actor/pg_loss" -> "actor_pg_loss", a trailing "*" -> "all"; into out[cap]. */
static void file_stem(const char *key, char *out, size_t cap)
{
    size_t j = 0;
    for (const char *c = key; *c && j + 4 < cap; c++) {
        if (*c == '*') {
            memcpy(out + j, "all", 3);
            j += 3;
        } else
            out[j++] = *c == '/' || *c == ' ' ? '_' : *c;
    }
    out[j] = 0;
}

#ifdef DF_HAVE_PLPLOT

#include <plplot.h>
#include <setjmp.h>

bool df_plot_available(void) { return true; }

/* PLplot ends the process on a fatal error (plexit) after calling the exit handler: while a PNG
   is drawn the handler jumps back to draw_png instead, which reports the message. */
static jmp_buf pl_jmp;
static bool pl_armed;
static char pl_msg[512];

static int on_plexit(PLCHAR_VECTOR msg)
{
    snprintf(pl_msg, sizeof pl_msg, "%s", msg ? msg : "");
    if (pl_armed) {
        pl_armed = false;
        longjmp(pl_jmp, 1);
    }
    return 1;
}

/* The pngcairo driver is a plug-in of its own Debian package: ask before plsdev, which would exit. */
static int check_driver(void)
{
    const char *menu[128], *dev[128];
    const char **pm = menu, **pd = dev;
    int n = 128;
    plgDevs(&pm, &pd, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(dev[i], "pngcairo"))
            return DF_OK;
    return df_error(DF_EUNSUPPORTED, "PLplot has no pngcairo device here: install plplot-driver-cairo");
}

/* White background, black axes, light grey grid; curves in 10 distinct hues (then dashed). */
static void set_colours(void)
{
    static const PLINT r[14] = {255, 0, 210, 31, 255, 44, 214, 148, 140, 227, 127, 188, 23, 70};
    static const PLINT g[14] = {255, 0, 210, 119, 127, 160, 39, 103, 86, 119, 127, 189, 190, 70};
    static const PLINT b[14] = {255, 0, 210, 180, 14, 44, 40, 189, 75, 194, 127, 34, 207, 200};
    plscmap0((PLINT *)r, (PLINT *)g, (PLINT *)b, 14);
}
enum { COL_FG = 1, COL_GRID = 2, COL_FIRST = 3, N_HUES = 11 };
#define LEGEND_CHR 0.8   /* legend text, in PLplot's default character height */
#define LEGEND_LINE 0.05 /* the sample line's length, a fraction of the page width */

/* The data's range, padded so that a flat curve or a single point still gets an axis. */
static void ranges(const df_series *const *sel, int n, double *x0, double *x1, double *y0, double *y1)
{
    *x0 = *y0 = 1e300, *x1 = *y1 = -1e300;
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < sel[k]->n; i++) {
            double x = sel[k]->x[i], y = sel[k]->y[i];
            *x0 = x < *x0 ? x : *x0, *x1 = x > *x1 ? x : *x1;
            *y0 = y < *y0 ? y : *y0, *y1 = y > *y1 ? y : *y1;
        }
    if (*x1 - *x0 < 1)
        *x0 -= 0.5, *x1 += 0.5;
    double pad = 0.05 * (*y1 - *y0);
    if (pad <= 0)
        pad = *y1 != 0 ? 0.1 * (*y1 > 0 ? *y1 : -*y1) : 1;
    *y0 -= pad, *y1 += pad;
}

/* Inside the subpage's top right corner; returns its width as a fraction of the page's, so that
   draw_page can leave it that room (drawn first: PLplot measures the text while drawing it). */
static double draw_legend(const df_series *const *sel, int n)
{
    PLINT opt[MAX_CURVES], tcol[MAX_CURVES], lcol[MAX_CURVES], lsty[MAX_CURVES];
    PLFLT lw[MAX_CURVES], w, h;
    const char *text[MAX_CURVES];
    for (int k = 0; k < n; k++) {
        opt[k] = PL_LEGEND_LINE, tcol[k] = COL_FG, lcol[k] = COL_FIRST + k % N_HUES;
        lsty[k] = 1 + (k / N_HUES) % 8, lw[k] = 2.0, text[k] = sel[k]->key;
    }
    plschr(0, LEGEND_CHR);
    pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             PL_POSITION_RIGHT | PL_POSITION_TOP | PL_POSITION_INSIDE | PL_POSITION_SUBPAGE, 0.01, 0.1,
             LEGEND_LINE, 0, COL_FG, 1, 0, 0, n, opt, 1.0, 1.0, 1.8, 0.0, tcol, text, NULL, NULL, NULL, NULL, lcol,
             lsty, lw, NULL, NULL, NULL, NULL);
    return w;
}

/* The page: axes with labels and grid, one curve per series (points marked when few), legend. */
static void draw_page(const char *title, const char *ylabel, const df_series *const *sel, int n)
{
    double x0, x1, y0, y1;
    ranges(sel, n, &x0, &x1, &y0, &y1);
    pladv(0);
    plvpor(0, 1, 0, 1);
    plwind(0, 1, 0, 1);
    double right = 0.95 - draw_legend(sel, n); /* a long metric name narrows the plot, down to half the page */
    plvpor(0.09, right < 0.5 ? 0.5 : right, 0.12, 0.90);
    plwind(x0, x1, y0, y1);
    plschr(0, 0.9);
    plcol0(COL_GRID);
    plbox("g", 0, 0, "g", 0, 0);
    plcol0(COL_FG);
    plbox("bcnst", 0, 0, "bcnstv", 0, 0);
    pllab("step", ylabel, title);
    for (int k = 0; k < n; k++) {
        plcol0(COL_FIRST + k % N_HUES);
        pllsty(1 + (k / N_HUES) % 8);
        plwidth(2.0);
        if (sel[k]->n > 1)
            plline((PLINT)sel[k]->n, sel[k]->x, sel[k]->y);
        if (sel[k]->n <= 50)
            plpoin((PLINT)sel[k]->n, sel[k]->x, sel[k]->y, 17);
    }
    pllsty(1);
    plwidth(1.0);
}

/* One PNG at `path`, written to a temporary and renamed. */
static int draw_png(const char *path, const char *title, const char *ylabel, const df_series *const *sel, int n)
{
    df_tmpfile tf;
    int rc = df_tmpfile_open(&tf, path); /* its fd stays open: the commit's fsync covers what PLplot writes */
    if (rc)
        return rc;
    plsexit(on_plexit);
    if (setjmp(pl_jmp)) {
        df_tmpfile_discard(&tf);
        return df_error(DF_EINTERNAL, "PLplot failed drawing %s: %s", path, pl_msg);
    }
    pl_armed = true;
    plsdev("pngcairo");
    plsfnam(tf.tmp);
    plspage(0, 0, 1100, 620, 0, 0);
    set_colours();
    plinit();
    draw_page(title, ylabel, sel, n);
    plend();
    pl_armed = false;
    rc = df_tmpfile_commit(&tf);
    df_tmpfile_discard(&tf);
    return rc;
}

#else /* built without PLplot */

bool df_plot_available(void) { return false; }

static int check_driver(void)
{
    return df_error(DF_EUNSUPPORTED, "this build of distflow cannot draw: it was configured without PLplot "
                                     "(install libplplot-dev and plplot-driver-cairo, then reconfigure with "
                                     "DF_WITH_PLOT=ON)");
}

static int draw_png(const char *path, const char *title, const char *ylabel, const df_series *const *sel, int n)
{
    (void)path, (void)title, (void)ylabel, (void)sel, (void)n;
    return check_driver();
}

#endif

/* Select, draw, report one PNG; *drawn += 1 when it was. A panel with no series: nothing. */
static int plot_one(const df_metrics_table *t, const char *out_dir, const char *stem, const char *title,
                    const char *ylabel, const char *const *pats, int n_pats, df_plot_written_fn written, void *user,
                    int *drawn)
{
    const df_series *sel[MAX_CURVES];
    const char *keys[MAX_CURVES];
    int n = 0;
    for (int i = 0; i < n_pats && pats[i]; i++)
        select_series(t, pats[i], sel, &n);
    if (n == 0)
        return DF_OK;
    char name[300];
    snprintf(name, sizeof name, "%s.png", stem);
    char *path = df_path_join(out_dir, name);
    int rc = path ? draw_png(path, title, ylabel, sel, n) : df_error(DF_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++)
        keys[k] = sel[k]->key;
    if (!rc && written)
        written(user, path, keys, n);
    if (!rc)
        (*drawn)++;
    free(path);
    return rc;
}

int df_plot_metrics(const df_metrics_table *t, const char *out_dir, const char *const *keys, int n_keys,
                    df_plot_written_fn written, void *user, int *n_written)
{
    int drawn = 0, rc = check_driver();
    for (int i = 0; !rc && i < n_keys; i++) { /* every named key must exist before anything is drawn */
        const df_series *sel[MAX_CURVES];
        int n = 0;
        select_series(t, keys[i], sel, &n);
        if (n == 0)
            rc = df_error(DF_EINVAL, "no metric '%s' in the file", keys[i]);
    }
    if (!rc)
        rc = df_mkdir_p(out_dir);
    for (int i = 0; !rc && i < n_keys; i++) {
        char stem[256];
        file_stem(keys[i], stem, sizeof stem);
        rc = plot_one(t, out_dir, stem, keys[i], keys[i], &keys[i], 1, written, user, &drawn);
    }
    for (size_t p = 0; !rc && n_keys == 0 && p < N_PANELS; p++)
        rc = plot_one(t, out_dir, panels[p].file, panels[p].title, panels[p].ylabel, panels[p].keys, 8, written,
                      user, &drawn);
    if (!rc && drawn == 0)
        rc = df_error(DF_EINVAL, "none of the metrics of the standard panels is in the file (score, lengths, "
                                 "losses, ...): name some with --keys");
    if (n_written)
        *n_written = drawn;
    return rc;
}
