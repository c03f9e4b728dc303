#!/usr/bin/env bash
# The layering rule of docs/architecture.md ("Layers"): a folder of src/ includes only headers of its
# own layer or of lower ones, internal ("layer/x.h") and public ("distflow/x.h", by the layer that
# implements it) alike. Prints every violation (file: header, layer -> layer) and exits 1 if any.
# Run by ctest (test_layers).
set -euo pipefail
cd "$(dirname "$0")/.."

# lowest first; the CUDA backend sits beside the engine's model ops it mirrors; logging (metrics sinks,
# plots) needs only util, and the trainers above it hand it resolved paths; agent (tools, interactions)
# needs the tokenizer, rewards and YAML limits, and the rollout's multi-turn loop above calls it;
# async (the staleness manager) reads the typed config, and the runtime's workers above call it;
# embodied (control environments, the grid_place simulator) reads its config as agent's environments do
LAYERS=(util logging comm jinja tokenizer algo config agent embodied data coordinator async model engine backend planner workers cli)

# the layer of each public header (include/distflow/<name>.h)
declare -A PUBLIC=(
  [common]=util [platform]=util [rng]=util [metrics]=util
  [comm]=comm [jinja]=jinja [tokenizer]=tokenizer
  [algo]=algo [algo_desc]=algo [reward]=algo [srpo]=algo
  [async]=algo # the decoupled objective's weights (src/algo) and the staleness manager (src/async), which
               # includes nothing above util
  [agent]=agent [env]=agent [marft]=agent [marft_env]=agent [embodied]=embodied
  [config]=config [config_table_begin]=config [config_table_end]=config [train_config]=config
  [sft_config]=config [train_optim]=config
  [batch]=data [dataset]=data [dataloader]=data [synth]=data [marft_demos]=data
  [coordinator]=coordinator
  [model]=model [lora]=model [optim]=model [backend]=model [rollout]=engine
  [dag]=planner [scheduler]=planner
  [worker]=workers [node]=workers
)

rank_of() { # layer name -> its index in LAYERS, or -1
  local i
  for i in "${!LAYERS[@]}"; do [ "${LAYERS[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}

bad=0
for dir in src/*/; do
  layer=$(basename "$dir")
  me=$(rank_of "$layer")
  if [ "$me" -lt 0 ]; then
    echo "check-layers: src/$layer is not a known layer (add it to LAYERS)" >&2
    bad=1
    continue
  fi
  while IFS=: read -r file inc; do
    inc=${inc#*\"}
    inc=${inc%\"*}
    top=${inc%%/*}
    if [ "$top" = distflow ]; then
      name=$(basename "$inc" .h)
      name=${name%.def}
      to=${PUBLIC[$name]:-}
      [ -n "$to" ] || { echo "$file: $inc has no layer in check-layers.sh" >&2; bad=1; continue; }
    else
      to=$top
    fi
    them=$(rank_of "$to")
    if [ "$them" -gt "$me" ]; then
      echo "$file: $inc ($layer includes $to, a higher layer)"
      bad=1
    fi
  done < <(grep -rHE '^#include "[a-z_]+/[a-z_]+\.(h|def)"' "$dir" | sed 's/#include //')
done
exit $bad
