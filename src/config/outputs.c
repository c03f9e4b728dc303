/*
 * The output settings `train` and `sft` share (config.h, df_config_check_outputs): trainer.logger's
 * names, trainer.tensorboard_dir without the logger that reads it, the checkpoint contents lists, the
 * output directory and the checkpoint to resume from.
 */
#include "config/config_internal.h"

#include "logging/loggers.h"

#include <stdio.h>
#include <string.h>

/* Slot i's string list as a typed list. */
static df_config_strs strs_of(const df_config *c, int i)
{
    const cfg_value *v = &c->slots[i].v;
    return (df_config_strs){.items = (const char *const *)v->items, .n = v->n_items, .null = v->is_null};
}

/* Where the run writes and what it resumes from. */
static int check_dirs(const df_config *c)
{
    int od = cfg_find(c->schema, "trainer.default_local_dir"), rm = cfg_find(c->schema, "trainer.resume_mode"),
        rp = cfg_find(c->schema, "trainer.resume_from_path");
    if (od >= 0 && (!c->slots[od].v.s || !c->slots[od].v.s[0]))
        return df_error(DF_EINVAL, "trainer.default_local_dir (%s) is empty: name the directory the checkpoints and "
                        "metrics go to", c->slots[od].where);
    const char *mode = rm >= 0 ? c->slots[rm].v.s : NULL, *from = rp >= 0 ? c->slots[rp].v.s : NULL;
    if (from && mode && strcmp(mode, "resume_path"))
        return df_error(DF_EINVAL, "trainer.resume_from_path=%s (%s) is read only with trainer.resume_mode=resume_path "
                        "(verl's rule), but resume_mode is %s (%s): set resume_mode=resume_path to continue from it",
                        from, c->slots[rp].where, mode, c->slots[rm].where);
    return DF_OK;
}

int df_config_check_outputs(const df_config *c, const df_config_list_ref *contents, int n)
{
    const df_config_schema *s = c->schema;
    int lg = cfg_find(s, "trainer.logger"), tb = cfg_find(s, "trainer.tensorboard_dir");
    int rc = DF_OK;
    if (lg >= 0) {
        df_config_strs names = strs_of(c, lg);
        char where[300];
        snprintf(where, sizeof where, "trainer.logger (%s)", c->slots[lg].where);
        rc = df_loggers_check_names(names.items, names.n, where);
        const char *dir = tb >= 0 ? c->slots[tb].v.s : NULL;
        if (!rc && dir && !df_config_strs_has(&names, "tensorboard"))
            rc = df_error(DF_EINVAL, "trainer.tensorboard_dir='%s' (%s): trainer.logger has no tensorboard, so no "
                          "event file would be written", dir, c->slots[tb].where);
    }
    if (!rc)
        rc = check_dirs(c);
    /* a checkpoint always holds the model, the optimizer and the extra state (docs/checkpoints.md) */
    for (int i = 0; i < n && !rc; i++) {
        const df_config_strs *l = contents[i].list;
        if (!df_config_strs_has(l, "model") || !df_config_strs_has(l, "optimizer") || !df_config_strs_has(l, "extra"))
            rc = df_error(DF_EUNSUPPORTED, "%s (%s): a distflow checkpoint always holds model, optimizer and extra "
                          "(and the Hugging Face weights); the list must name all three (docs/checkpoints.md)",
                          contents[i].key, df_config_where(c, contents[i].key));
    }
    return rc;
}
