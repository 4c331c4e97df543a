#!/usr/bin/env bash
# launch/install-deps is idempotent: run again once everything is there, it
# is quick, asks apt nothing and changes no package.
# Usage: install_deps_test.sh SOURCE_DIR
set -euo pipefail
install_deps=$1/launch/install-deps
"$install_deps" >/dev/null  # whatever was missing is installed now
before=$(dpkg-query -W -f='${Package} ${Version} ${Status}\n' | sort)
start=$(date +%s%N)
output=$("$install_deps")
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
after=$(dpkg-query -W -f='${Package} ${Version} ${Status}\n' | sort)
echo "$output (second run: $elapsed_ms ms)"
[[ "$output" =~ ^install-deps:\ all\ [0-9]+\ packages\ present$ ]] || { echo "FAIL: it did not find everything present"; exit 1; }
((elapsed_ms < 5000)) || { echo "FAIL: the second run took $elapsed_ms ms"; exit 1; }
[[ "$before" == "$after" ]] || { echo "FAIL: the second run changed packages"; diff <(echo "$before") <(echo "$after"); exit 1; }
echo "install_deps_test: PASS"
