/*
 * weights_dev.h (internal) — a model's float32 weights in a backend's memory: the copy a
 * device backend's forwards read (training's df_acts and the rollout engine). On a
 * host-memory backend there is no copy: the model's own weights are read.
 */
#ifndef DF_MODEL_WEIGHTS_DEV_H
#define DF_MODEL_WEIGHTS_DEV_H

#include "distflow/backend.h"
#include "distflow/model.h"

typedef struct df_weights_dev {
    df_backend be;
    float *blob;            /**< [n_params] in be's memory, m's layout */
    int64_t n_params;
    int64_t version;        /**< the model version last uploaded (0: none) */
    df_model_view view;     /**< views into blob */
    df_layer_view *layers;  /**< [num_hidden_layers], host memory */
} df_weights_dev;

/**
 * Copy m's weights into d on backend be (allocated on the first call and when m's size
 * changes; uploaded when `force` or when m->version is not the one last uploaded). be must
 * outlive d. Errors: DF_ENOMEM, the backend's upload error.
 */
int df_weights_dev_sync(df_weights_dev *d, const df_backend *be, const df_model *m, bool force);
/** True when d holds m's weights at m's current version. */
bool df_weights_dev_current(const df_weights_dev *d, const df_model *m);
/** Release d's buffers (d zeroed; NULL or never synced: no-op). */
void df_weights_dev_free(df_weights_dev *d);

#endif /* DF_MODEL_WEIGHTS_DEV_H */
