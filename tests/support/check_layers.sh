#!/usr/bin/env bash
# The layer order of design.md, checked on the includes: a file of one layer
# may include its own layer and the layers below it, never one above.
#   check_layers.sh SOURCE_ROOT
set -u
root=${1:?usage: check_layers.sh SOURCE_ROOT}
order=(common wire transport actor mesh tensor rdma supervision debug bootstrap)
status=0
for ((i = 0; i < ${#order[@]}; i++)); do
  layer=${order[i]}
  above=("${order[@]:i+1}")
  ((${#above[@]})) || continue
  pattern="#include [<\"](crown/)?($(IFS='|'; echo "${above[*]}"))/"
  for dir in "$root/include/crown/$layer" "$root/src/$layer"; do
    [[ -d $dir ]] || continue
    if hits=$(grep -rEn "$pattern" "$dir"); then
      echo "layer '$layer' includes a layer above it:"
      echo "$hits"
      status=1
    fi
  done
done
# Public headers never include Asio, MPI, CUDA or NCCL (style.md).
if hits=$(grep -rEn '#include [<"](boost/asio|mpi\.h|cuda|nccl)' "$root/include"); then
  echo "a public header includes Asio, MPI, CUDA or NCCL:"
  echo "$hits"
  status=1
fi
# Per-Proc state belongs to the Proc and its modules (actor/module.h), never
# to a process-wide map keyed by Proc.
if hits=$(grep -rEn 'map<[[:space:]]*(const[[:space:]]+)?(crown::)?Proc[[:space:]]*\*' "$root/src" "$root/include"); then
  echo "a process-wide map keyed by Proc (keep per-Proc state in a Proc::Module):"
  echo "$hits"
  status=1
fi
[[ $status -eq 0 ]] && echo "layers: ok (${order[*]})"
exit $status
