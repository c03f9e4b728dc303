# shellcheck shell=bash
# scripts/demo_lib.sh — what the demo scripts share (sourced by demo.sh, demo_marft.sh and
# demo_embodied.sh after they cd to the repository root).

# OpenMP threads that spin while waiting lose their core when anything else runs; yield instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# Progress goes to stderr: stdout carries the demo's one result line.
log() { printf '\n[demo] %s\n' "$*" >&2; }

# The checkpoint a trainer's output directory $1 names as its latest: $1/global_step_N.
latest_ckpt() { printf '%s/global_step_%s' "$1" "$(tr -d '[:space:]' < "$1/latest_checkpointed_iteration.txt")"; }

# LAUNCH: the command the RL step runs under — nothing, or DEMO_NP ranks under mpiexec
# (DEMO_MPIEXEC, default mpiexec) with one OpenMP thread per rank's share of the CPUs (more
# would oversubscribe them); Open MPI refuses root without the two variables.
# shellcheck disable=SC2034 # LAUNCH is the caller's
demo_launch() {
  LAUNCH=()
  if [ "${DEMO_NP:-1}" -gt 1 ]; then
    LAUNCH=("${DEMO_MPIEXEC:-mpiexec}" --oversubscribe --bind-to none -np "$DEMO_NP")
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / DEMO_NP > 0 ? $(nproc) / DEMO_NP : 1 ))}
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  fi
}
