#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds an example against the installed copy
# through pkg-config, once against the shared library and once against the static one, and runs
# both.
set -euo pipefail
build=$1 src=$2
cc=${CC:-cc}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
pkg-config --exists specd
libdir=$(pkg-config --variable=libdir specd)
example="$src/examples/hello_specd.c"

"$cc" -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags --libs specd) \
  -Wl,-rpath,"$libdir" -o "$prefix/example_shared"
"$prefix/example_shared"

"$cc" -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags specd) \
  "$libdir/libspecd.a" $(pkg-config --static --libs specd | sed 's/-lspecd//') \
  -o "$prefix/example_static"
"$prefix/example_static"

# the host-engine example, built against the installed copy, on the real model
"$cc" -std=c11 -Wall -Wextra -Werror "$src/examples/host_engine.c" $(pkg-config --cflags --libs specd) \
  -Wl,-rpath,"$libdir" -o "$prefix/host_engine"
"$prefix/host_engine" "$SPECD_TEST_MODEL" ngram

test -x "$prefix/bin/specd"
"$prefix/bin/specd" version
echo "install + pkg-config: ok"
