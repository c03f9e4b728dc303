#!/usr/bin/env bash
# No configuration key is silently ignored (docs/configuration.md, "Keys distflow has no use for"):
# every key of the train and sft tables is either read by the code, the source of another key's
# derived default that is read, or marked DFK_NO_EFFECT / DFK_UNSUPPORTED in its table (then
# df_config_check_compat warns about it or refuses it).
#
# "Read" is decided by the compiler, not by names: the library's sources are compiled again
# (syntax only) with -DDF_CFG_AUDIT, which marks every field of the typed config structs
# deprecated with its key (distflow/config.h, DF_CFG_AUDIT_ATTR), so each use of a field is a
# warning naming the key. The schema files, whose offsetof() tables touch every field, are left out.
# Usage: check-config-readers.sh BUILD_DIR (with compile_commands.json and the distflow binary).
# Prints every key nothing reads; exits 1 if any.
set -euo pipefail

build=${1:?usage: check-config-readers.sh BUILD_DIR}
db=$build/compile_commands.json
df=$build/distflow
[ -f "$db" ] || { echo "check-config-readers: no $db (configure with CMake first)" >&2; exit 2; }
[ -x "$df" ] || { echo "check-config-readers: no $df" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The library's compile commands (distflow_objs), one per source file, as shell words.
grep -o '"command": ".*' "$db" | sed -e 's/^"command": "//' -e 's/",\{0,1\}$//' -e 's/\\"/"/g' |
  grep -- '-o CMakeFiles/distflow_objs.dir/' | grep -v -e '/src/config/schema_[a-z]*\.c' |
  awk '{ f = $NF; if (!(f in seen)) { seen[f] = 1; print } }' > "$tmp/commands"
[ -s "$tmp/commands" ] || { echo "check-config-readers: no library compile command in $db" >&2; exit 2; }

# Each command, syntax only, with the audit attribute; the keys named in its warnings.
: > "$tmp/read"
while read -r cmd; do
  cmd=$(sed -e 's/ -o [^ ]*/ -fsyntax-only/' -e 's/ -Werror\b//g' <<<"$cmd")
  eval "$cmd -DDF_CFG_AUDIT -Wno-error -Wdeprecated-declarations" 2>&1 |
    grep -o "distflow-config-read [a-z]*:[A-Za-z0-9_.*]*" | cut -d' ' -f2 >> "$tmp/read" || true
done < "$tmp/commands"
# the two optimizer blocks share one struct, whose keys the compiler names by the block's macro
sed -n 's/^train:DFK_OPTIM_GROUP\.\(.*\)/train:actor_rollout_ref.actor.optim.\1\ntrain:critic.optim.\1/p' "$tmp/read" >> "$tmp/read"
sort -u -o "$tmp/read" "$tmp/read"
[ -s "$tmp/read" ] || { echo "check-config-readers: the audit build named no key (compiler?)" >&2; exit 2; }

# Walk `config help` of both commands: key lines (an open group's `group.*` too), their compat marker and
# their derived-default source.
bad=0
for table in train sft; do
  flag=; [ $table = sft ] && flag=--sft
  "$df" config help $flag > "$tmp/help.$table"
  # "KEY marked|- SOURCE,...": the keys its default derives from (null: value of X) or interpolates (${X})
  awk '
    /^[A-Za-z0-9_.]+(\.\*)?  / { key = $1; src = ""; line = $0
                          if (match(line, /\(null: value of [A-Za-z0-9_.]+\)/)) src = substr(line, RSTART + 15, RLENGTH - 16)
                          while (match(line, /\$\{[A-Za-z0-9_.]+\}/)) {
                            src = src (src == "" ? "" : ",") substr(line, RSTART + 2, RLENGTH - 3); line = substr(line, RSTART + RLENGTH) }
                          keys[key] = src; order[n++] = key; next }
    /^    \[(no effect|not supported) / { marked[key] = 1 }
    END { for (i = 0; i < n; i++) { k = order[i]; print k, (k in marked) ? "marked" : "-", keys[k] == "" ? "-" : keys[k] } }
  ' "$tmp/help.$table" > "$tmp/keys.$table"
  # a source counts as read when a key derived from it is read
  # (repeated: a chain of derived defaults reads back one link per pass)
  for _ in 1 2 3; do
    awk -v t=$table: 'NR == FNR { read[$1] = 1; next }
         $3 != "-" && ((t $1) in read) { m = split($3, f, ","); for (i = 1; i <= m; i++) print t f[i] }' \
      "$tmp/read" "$tmp/keys.$table" >> "$tmp/read"
    sort -u -o "$tmp/read" "$tmp/read"
  done
  while read -r key mark _; do
    [ "$mark" = marked ] && continue
    grep -qxF "$table:$key" "$tmp/read" && continue
    echo "distflow $table: key $key is accepted but nothing reads it: make it work, or mark it" \
         "DFK_NO_EFFECT / DFK_UNSUPPORTED in its table (include/distflow/${table}_config.def)"
    bad=1
  done < "$tmp/keys.$table"
done
n_read=$(wc -l < "$tmp/read")
[ $bad -eq 0 ] && echo "check-config-readers: every key is read or marked ($n_read keys read by the library)"
exit $bad
