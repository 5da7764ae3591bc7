#!/usr/bin/env bash
# Dependencies point down (README "Map", docs/design.md "Layers"): a file may include public headers
# (specd/...) and the internal headers of its own layer and the layers below it, never above;
# the two daemons never include each other. One object library builds every layer, so the
# compiler would accept an upward include: this test refuses it.
# A layer is a folder, or a named set of files (files_of). serve/ sits above session and below
# cli (`specd serve`); the JSON, UTF-8 and Prometheus writers and the HTTP server it shares with
# cli/ and the daemons' --metrics-port live in common/ (the specd_text and specd_http libraries),
# so serve includes nothing of cli/ and the daemons nothing of serve/.
# verifier/ holds the verifiers' pieces below the session: the acceptance engine (accept), the
# device verify driver (device: the session's device backend and specd-verifier both run the
# kernel through it) and the remote verifier's client (remote, over ipc/); none includes session/.
set -euo pipefail
src=$1
# policy/ is the framework (its top-level files) and one folder per family: a family includes the
# framework and its own folder, never another family.
framework="policy/builtin.h policy/options.h policy/seq_verifier.h policy/mask_rows.h policy/policy_device.h policy/artifacts.h"
below() { # the include prefixes a layer may use
  case $1 in
    common) echo "common" ;;
    kernels) echo "common kernels" ;;
    model) echo "common kernels model" ;;
    grammar) echo "common model/runtime/json.h grammar" ;;
    verifier/accept) echo "common kernels verifier/accept" ;;
    verifier/device) echo "common kernels verifier/device" ;;
    ipc) echo "common kernels ipc" ;;
    verifier/remote) echo "common kernels verifier/accept ipc verifier/remote" ;;
    ipc/daemon) echo "common kernels ipc" ;; # the daemons' shared main and --metrics-port
    policy) echo "common kernels model verifier/accept ipc $framework" ;;
    policy/ar|policy/self|policy/dlm) echo "common kernels model verifier/accept ipc $framework $1" ;;
    session) echo "common kernels model grammar verifier/accept ipc verifier/remote policy session" ;;
    serve) echo "common kernels model grammar verifier/accept ipc policy session serve" ;;
    drafter) echo "common kernels model verifier/accept ipc policy session drafter" ;;
    verifier/daemon) echo "common kernels model verifier/accept ipc policy session verifier/daemon" ;;
    cli) echo "common kernels model grammar verifier/accept ipc policy session cli serve" ;;
  esac
}
shared_below() { # layers every verifier above them uses: the device verify driver
  case $1 in
    session|verifier/daemon) echo "verifier/device" ;;
  esac
}
files_of() { # the paths a layer's files are found under
  case $1 in
    policy) (cd "$src" && echo policy/*.c policy/*.h) ;;
    *) echo "$1" ;;
  esac
}
bad=0
for layer in common kernels model grammar verifier/accept verifier/device ipc ipc/daemon verifier/remote policy policy/ar policy/self policy/dlm session serve drafter verifier/daemon cli; do
  allowed="$(below "$layer") $(shared_below "$layer")"
  for f in $(files_of "$layer"); do # a renamed file must not leave its layer unchecked
    [ -e "$src/$f" ] || { echo "layer $layer: $f does not exist"; bad=1; }
  done
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
    case $inc in specd/*|*.pb-c.h|schema_hash.h) continue ;; esac
    [[ $inc == */* ]] || continue # same-folder includes
    ok=0
    for a in $allowed; do [[ $inc == "$a"/* || $inc == "$a" ]] && ok=1; done
    if [ $ok = 0 ]; then echo "upward include: $file includes $inc (layer $layer)"; bad=1; fi
  done < <(cd "$src" && grep -rnHE '^#include "' $(files_of "$layer") --include=*.c --include=*.h --include=*.cu || true)
done
[ $bad = 0 ] && echo "layers: every include points down"
exit $bad
