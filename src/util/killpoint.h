/*
 * killpoint.h (internal, test-only) — deterministic crash injection for the crash tests
 * (tests/test_crash_resume.c, docs/testing.md "Kill points").
 *
 * DF_TEST_KILL_AT=<event>:<count>[@<rank>] makes the process raise SIGKILL just before the
 * count-th occurrence (from 1) of <event>; with @<rank>, only on that MPI rank (read from
 * OMPI_COMM_WORLD_RANK or PMI_RANK; 0 outside mpiexec). Events:
 *   gen      a decode step of a rollout (mid-generation)
 *   update   a micro-batch of an actor, critic or SFT update (between micro-batches)
 *   save     a file-system operation inside a checkpoint save: every create, write, fsync,
 *            rename, mkdir and removal of the save path (so a test can kill between every write)
 *   metrics  after a step's metrics.jsonl line, before that step's checkpoint
 * DF_TEST_KILL_COUNTS=<file> writes each event's count to <file> at a normal exit ("gen 41\n..."),
 * on rank 0 only, so a test can choose counts from an uninterrupted run.
 *
 * Neither variable is meant for users; unset (every real run) a kill point costs one load and a
 * branch. The counters are the one process-wide state outside the registries (docs/conventions.md
 * §2): a test hook, read once.
 */
#ifndef DF_UTIL_KILLPOINT_H
#define DF_UTIL_KILLPOINT_H

#include <stdbool.h>

/** One occurrence of `event` ("gen", "update", "metrics"); SIGKILL when it is the chosen one. */
void df_kill_point(const char *event);

/** One file-system operation (fsutil); an occurrence of "save" while a save scope is open. */
void df_kill_point_fs(void);

/** Open (true) or close (false) the save scope: the checkpoint writers of train and sft. */
void df_kill_point_save_scope(bool open);

#endif
