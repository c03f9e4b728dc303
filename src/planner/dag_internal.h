/* dag_internal.h (internal) — helpers shared by src/planner/ (and src/planner/). */
#ifndef DF_DAG_INTERNAL_H
#define DF_DAG_INTERNAL_H

#include "distflow/dag.h"

/* siiRL Node.__init__ checks: type / role in range, and only COMPUTE,
 * MODEL_TRAIN and MODEL_INFERENCE nodes may have a non-DEFAULT role. */
int df_node_check_kind(const char *node_id, df_node_type type, df_node_role role);

/* plugin.c: true when ref looks like "path/to/libx.so:symbol" (the part
 * before the last ':' ends in ".so" or contains a '/'). */
int df_plugin_is_ref(const char *ref);

/* plugin_elf.c: check the ELF file at `path` (a real path) as df_plugin_check
 * describes, without loading it; `symbol` NULL checks everything but the
 * symbol. obj_size 0: `symbol` must be a function; else a data object of
 * obj_size bytes, whose bytes as stored in the file are copied to obj
 * (df_plugin_check_object). Errors (no file / ref context: the caller adds
 * it) as df_plugin_check. */
int df_plugin_elf_check(const char *path, const char *symbol, size_t obj_size, void *obj);

/* plugin.c: ref's exported data object of `size` bytes (checked in the file first, as
 * df_plugin_check_object; the library loaded as df_plugin_symbol does), then reg(object, arg)
 * with what it registers recorded as the plugin's (removed when the plugin is unloaded, as what
 * its df_plugin_init registers). Errors: those of df_plugin_check_object / df_plugin_symbol,
 * reg's. */
int df_plugin_object_register(const char *ref, size_t size, int (*reg)(const void *obj, void *arg), void *arg);

/* task_graph.c: index of the node with id `id` in g (insertion order), -1 if none or id is NULL. */
int df_task_graph_index_of(const df_task_graph *g, const char *id);

/* agent_options.c: df_agent_options ownership (free of NULL is a no-op; copy of NULL gives NULL)
 * and its picture for df_task_graph_print ("train_cycle 15, share_instance 0, obs_with_env,
 * process_path p.py, env_path [e.py:E], pre_process_kwargs {pre_chat_template}"). */
struct df_sbuf;
void df_agent_options_free(df_agent_options *o);
int df_agent_options_copy(const df_agent_options *o, df_agent_options **out);
void df_agent_options_describe(const df_agent_options *o, struct df_sbuf *b);

#endif /* DF_DAG_INTERNAL_H */
