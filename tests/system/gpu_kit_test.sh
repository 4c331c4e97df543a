#!/usr/bin/env bash
# The GPU kit (bench/gpu/make_kit.sh, run_kit.sh) carries all it needs: it
# is packed from this build, then run in a mount namespace where the
# system's Open MPI, PMIx and every library the kit packs are hidden, as on
# a lent GPU machine that has none of them. Without a GPU the checks skip,
# saying so; what this proves is that mpirun, its ranks and the binaries
# load from the kit alone.
#   gpu_kit_test.sh SOURCE_DIR BUILD_DIR      (as root: it mounts)
set -euo pipefail
root=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "gpu_kit_test: FAIL: $*"; exit 1; }

"$root/bench/gpu/make_kit.sh" "$build" "$work/out" || fail "make_kit.sh"
kit=$work/out/crown-gpu-kit.tar.gz
mkdir "$work/packed" "$work/empty"
tar -C "$work/packed" -xzf "$kit"

# Run in a private mount namespace: $1 the work folder, $2 the kit, $3 the sources.
cat >"$work/hidden.sh" <<'SCRIPT'
set -u
work=$1 kit=$2 root=$3
ma=$(gcc -print-multiarch)
for d in /usr/lib/$ma/openmpi /usr/share/openmpi /etc/openmpi /usr/lib/$ma/pmix2; do
  [[ -d $d ]] && mount --bind "$work/empty" "$d"
done
for f in /usr/bin/orterun /usr/bin/orted; do mount --bind /dev/null "$f"; done
# Every library that the packed programs load from this system, but those
# a GPU machine brings itself (the C library, the CUDA driver, NCCL, the
# C++ runtime): the kit must carry the rest.
allowed='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|libcuda|libnccl|libstdc\+\+|libgcc_s)\.so'
for elf in $(find "$work/packed" -type f \( -name '*.so*' -o -perm -u+x \)); do
  ldd "$elf" 2>/dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $allowed ]] && continue
  real=$(readlink -f "$path")
  [[ -f $real && $real != "$work"/* ]] && mount --bind /dev/null "$real"
done
# The hiding took: the system's mpirun and its MPI library are gone.
if /usr/bin/orterun --version >/dev/null 2>&1; then echo "system mpirun still runs"; exit 1; fi
if [[ -s /usr/lib/$ma/libmpi.so.40 ]]; then echo "system libmpi still there"; exit 1; fi
echo "system Open MPI hidden"
CROWN_GPU_KIT="$kit" bash "$root/bench/gpu/run_kit.sh"
SCRIPT
rc=0
unshare -m --propagation private bash "$work/hidden.sh" "$work" "$kit" "$root" >"$work/log" 2>&1 ||
  rc=$?
cat "$work/log"
[[ $rc -eq 0 ]] || fail "run_kit.sh exited $rc"
grep -q "system Open MPI hidden" "$work/log" || fail "the system's Open MPI was not hidden"
grep -q "mpirun: /tmp/.*/ompi/bin/mpirun" "$work/log" || fail "mpirun did not come from the kit"
[[ $(grep -c "crown-test: PASS" "$work/log") -eq 3 ]] || fail "not every MPI test passed"
! grep -q "Sorry!\|error while loading\|cannot open shared object" "$work/log" ||
  fail "something did not load from the kit"
grep -q "== done: PASS" "$work/log" || fail "the checks did not pass"
echo "gpu_kit_test: PASS"
