/*
 * Keys carried over from verl / siiRL without a use in distflow (config.h,
 * df_config_compat): unsupported values refused, settings without effect named
 * in a warning, so that no setting is silently ignored.
 */
#include "config/config_internal.h"

#include <stdlib.h>
#include <string.h>

df_config_compat df_config_schema_compat(const df_config_schema *s, int i)
{
    return s->compat && i >= 0 && i < s->n ? (df_config_compat)s->compat[i] : DF_CFG_EFFECTIVE;
}

/* v formatted as entry e's value into b (reset first). */
static void format_value(df_sbuf *b, const df_config_entry *e, const cfg_value *v)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
    cfg_format_value(b, e, v);
}

/* Whether slot i of `c` differs from its default: the same slot of the defaults-only config *d (loaded
   here the first time it is needed), or for a derived default (null_from) its source key's value in `c`. */
static int differs(const df_config *c, df_config **d, int i, df_sbuf *v, df_sbuf *dv, bool *out)
{
    const df_config_entry *e = &c->schema->entries[i];
    format_value(v, e, &c->slots[i].v);
    if (e->null_from) {
        format_value(dv, e, &c->slots[cfg_find(c->schema, e->null_from)].v);
    } else {
        if (!*d && df_config_load(c->schema, NULL, NULL, 0, d))
            return df_error_wrap(DF_EINTERNAL, "the %s config's defaults", c->schema->name);
        format_value(dv, e, &(*d)->slots[i].v);
    }
    if (v->failed || dv->failed)
        return df_error(DF_ENOMEM, "out of memory checking the %s config", c->schema->name);
    *out = strcmp(v->s ? v->s : "", dv->s ? dv->s : "") != 0;
    return DF_OK;
}

int df_config_check_compat(const df_config *c, df_warn_fn warn, void *user)
{
    const df_config_schema *s = c->schema;
    if (!s->compat)
        return DF_OK;
    df_config *d = NULL; /* the defaults, loaded only when a classed key is set */
    df_sbuf v = {0}, dv = {0}, inert = {0};
    int n_inert = 0, rc = DF_OK;
    for (int i = 0; i < s->n && !rc; i++) {
        df_config_compat cls = (df_config_compat)s->compat[i];
        bool diff = false;
        if (cls == DF_CFG_EFFECTIVE || !cfg_slot_user_set(&c->slots[i]) ||
            (rc = differs(c, &d, i, &v, &dv, &diff)) || !diff)
            continue;
        const df_config_entry *e = &s->entries[i];
        if (cls == DF_CFG_UNSUPPORTED)
            rc = df_error(DF_EUNSUPPORTED, "%s: %s=%s is not supported by distflow (%s); only the default %s "
                          "is accepted", c->slots[i].where, e->key, v.s, e->help, dv.s);
        else if (e->type == DF_CFG_MAP) /* a whole block (siiRL's megatron, processor): its name is enough */
            df_sbuf_printf(&inert, "%s%s (%s)", n_inert++ ? ", " : "", e->key, c->slots[i].where);
        else
            df_sbuf_printf(&inert, "%s%s=%s (%s)", n_inert++ ? ", " : "", e->key, v.s, c->slots[i].where);
    }
    if (!rc && inert.failed)
        rc = df_error(DF_ENOMEM, "out of memory checking the %s config", s->name);
    if (!rc && n_inert && warn) {
        df_sbuf msg = {0};
        df_sbuf_printf(&msg, "%d setting%s with no effect in distflow (kept so that verl / siiRL files load; "
                       "`distflow config help KEY` says why): %s", n_inert, n_inert > 1 ? "s" : "", inert.s);
        warn(user, msg.failed ? "settings with no effect in distflow (out of memory listing them)" : msg.s);
        df_sbuf_free(&msg);
    }
    df_sbuf_free(&v);
    df_sbuf_free(&dv);
    df_sbuf_free(&inert);
    df_config_free(d);
    return rc;
}
