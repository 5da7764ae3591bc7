#!/usr/bin/env bash
# The shared libspecd exports only the public API (SPECD_API, every name prefixed specd_), never
# an internal helper or the acceptance engine's test hook, and links no jemalloc; the umbrella
# header includes every public header and compiles on its own; the build tree's specd.pc builds a
# program against the build tree.
set -euo pipefail
build=$1 src=$2
cc=${CC:-cc}
lib="$build/libspecd.so"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
bad=$(printf '%s\n' "$syms" | grep -v '^specd_' || true)
if [ -n "$bad" ]; then echo "exported without the specd_ prefix:"; echo "$bad"; exit 1; fi
if printf '%s\n' "$syms" | grep -q 'specd_accept_debug_mutate'; then
  echo "the test hook specd_accept_debug_mutate is exported"; exit 1
fi
# a program started without jemalloc (Python) must be able to dlopen libspecd.so: jemalloc's
# initial-exec TLS would not fit, so only libspecd.a links it (common/alloc.c)
if readelf -d "$lib" | grep -q 'NEEDED.*libjemalloc'; then
  echo "libspecd.so links jemalloc"; exit 1
fi
for h in "$src"/include/specd/*.h; do
  name=$(basename "$h")
  grep -q "#include \"specd/$name\"" "$src/include/specd/specd.h" || [ "$name" = specd.h ] || {
    echo "specd.h does not include $name"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <specd/specd.h>\nint main(void) { return specd_policy_find("none") ? 0 : 1; }\n' > "$tmp/u.c"
san=${SANITIZE:+-fsanitize=$SANITIZE} # an instrumented libspecd needs an instrumented program
PKG_CONFIG_PATH="$build" "$cc" -std=c11 -Wall -Wextra -Werror -pedantic $san "$tmp/u.c" \
  $(PKG_CONFIG_PATH="$build" pkg-config --cflags --libs specd) -Wl,-rpath,"$build" -o "$tmp/u"
"$tmp/u"
echo "exports: $(printf '%s\n' "$syms" | wc -l) symbols, all specd_; umbrella and build-tree specd.pc: ok"
