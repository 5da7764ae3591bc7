#!/usr/bin/env bash
# Dependencies point down (README "Map", DESIGN.md section 3): a file may include public headers
# (specd/...) and the internal headers of its own layer and the layers below it, never above;
# the two daemons never include each other. One object library builds every layer, so the
# compiler would accept an upward include: this test refuses it.
set -euo pipefail
src=$1
below() { # the include prefixes a layer may use
  case $1 in
    common) echo "common" ;;
    kernels) echo "common kernels" ;;
    model) echo "common kernels model" ;;
    verifier/accept) echo "common kernels verifier/accept" ;;
    ipc) echo "common kernels ipc" ;;
    policy) echo "common kernels model verifier/accept ipc policy" ;;
    session) echo "common kernels model verifier/accept ipc policy session" ;;
    drafter) echo "common kernels model verifier/accept ipc policy session drafter" ;;
    verifier/daemon) echo "common kernels model verifier/accept ipc policy session verifier/daemon" ;;
    cli) echo "common kernels model verifier/accept ipc policy session cli" ;;
  esac
}
bad=0
for layer in common kernels model verifier/accept ipc policy session drafter verifier/daemon cli; do
  allowed=$(below "$layer")
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
    case $inc in specd/*|*.pb-c.h|schema_hash.h) continue ;; esac
    [[ $inc == */* ]] || continue # same-folder includes
    ok=0
    for a in $allowed; do [[ $inc == "$a"/* ]] && ok=1; done
    if [ $ok = 0 ]; then echo "upward include: $file includes $inc (layer $layer)"; bad=1; fi
  done < <(cd "$src" && grep -rnE '^#include "' "$layer" --include=*.c --include=*.h --include=*.cu || true)
done
[ $bad = 0 ] && echo "layers: every include points down"
exit $bad
