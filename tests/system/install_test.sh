#!/usr/bin/env bash
# The installed crown as a user meets it: cmake --install into a fresh
# prefix; find_package(Crown) from an outside project, built and run under
# the installed crownrun; `module load crown` with Lmod (Lua and Tcl
# modulefiles) in a non-interactive bash, then crownrun and `import crown`.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== cmake --install into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log"
for path in bin/crownrun include/crown/crown.h lib/libcrown_actor.a lib/cmake/Crown/CrownConfig.cmake \
  lib/python3/dist-packages/crown/__init__.py share/modulefiles/crown/0.1.0.lua share/modulefiles/crown/0.1.0; do
  [[ -e "$prefix/$path" ]] || { echo "FAIL: $path was not installed"; exit 1; }
done

echo "== find_package(Crown) from an outside project"
cmake -S "$source_dir/tests/system/find_package" -B "$work/outside" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/outside" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$prefix/bin/crownrun" -n 4 "$work/outside/uses_crown" | tee "$work/run.log"
# 4 ranks: 4 * 9 + (0 + 1 + 2 + 3)
grep -q "installed crown: sum 42 on 4 ranks" "$work/run.log"

echo "== module load crown (Lmod, Lua modulefile), non-interactive bash"
lmod_init=/usr/share/lmod/lmod/init/bash
[[ -r $lmod_init ]] || { echo "FAIL: Lmod is not installed ($lmod_init)"; exit 1; }
module_check='
  set -e
  source '"$lmod_init"'
  module use "$1"
  module load crown
  [[ "$CROWN_HOME" == "$2" ]] || { echo "CROWN_HOME=$CROWN_HOME, expected $2"; exit 1; }
  [[ "$(command -v crownrun)" == "$2/bin/crownrun" ]]
  cd /
  python3 -c "import crown, os; print(\"import crown:\", os.path.dirname(crown.__file__))"
  crownrun -n 4 python3 "$3"
'
env -i HOME="$HOME" PATH=/usr/bin:/bin bash -c "$module_check" check "$prefix/share/modulefiles" \
  "$prefix" "$source_dir/examples/python/counter.py" | tee "$work/lua.log"
grep -q "import crown: $prefix/lib/python3/dist-packages/crown" "$work/lua.log"
grep -q "total: " "$work/lua.log"

echo "== module load crown (Lmod reading the Tcl modulefile)"
mkdir -p "$work/tcl/crown"
cp "$prefix/share/modulefiles/crown/0.1.0" "$work/tcl/crown/0.1.0"
# The Tcl file finds its prefix from its own path: give it the same layout.
mkdir -p "$work/tclprefix/share/modulefiles"
mv "$work/tcl/crown" "$work/tclprefix/share/modulefiles/crown"
for dir in bin lib include; do ln -s "$prefix/$dir" "$work/tclprefix/$dir"; done
env -i HOME="$HOME" PATH=/usr/bin:/bin bash -c "$module_check" check \
  "$work/tclprefix/share/modulefiles" "$work/tclprefix" "$source_dir/examples/python/counter.py" \
  | tee "$work/tcl.log"
grep -q "total: " "$work/tcl.log"

echo "install_test: PASS"
