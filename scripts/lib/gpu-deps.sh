# shellcheck shell=bash
# scripts/lib/gpu-deps.sh: the carried Debian packages of a GPU machine without a package registry,
# sourced by scripts/gpu-check (on the device) and scripts/gpu-ldcheck (here, under a model of the
# device's libraries). One rule: a carried library is used only where the machine lacks its soname,
# so a carried copy never stands in front of the system's own (Debian 12's libgnutls.so.30, which
# needs libunistring.so.2, is then never loaded on an Ubuntu 24.04 that has its own .so.30).
#
#   gpu_deps_system_sonames             the sonames this machine's loader finds by itself
#   gpu_deps_unpack DEBDIR PREFIX LIST  unpack DEBDIR/*.deb into PREFIX/stage; link into PREFIX/lib
#                                       the libraries whose soname LIST (a file, one a line) lacks,
#                                       into PREFIX/pkgconfig the pkg-config modules this machine
#                                       lacks; PREFIX/sonames.tsv says, per carried soname, its
#                                       package and "carried" or "system"
#   gpu_deps_env PREFIX                 export the variables the build and the programs need
#   gpu_deps_ldd_check PREFIX FILE...   ldd every FILE; say by name each library that is missing
#                                       and why; return 1 if any is

gpu_deps_system_sonames() {
    {
        ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) (libc6,x86-64.*/\1/p'
        local d
        # the loader's own default folders, and what the environment already adds
        for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib \
            $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
            [ -d "$d" ] && find "$d" -maxdepth 1 -name 'lib*.so.*' -printf '%f\n' 2>/dev/null
            [ -d "$d" ] && find "$d" -maxdepth 1 -name 'ld-linux*.so.*' -printf '%f\n' 2>/dev/null
        done
    } | sort -u
}

# The soname of a shared object (empty when it has none).
gpu_deps_soname() {
    readelf -d "$1" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'
}

gpu_deps_unpack() {
    local debs=$1 prefix=$2 list=$3 f pkg path so
    rm -rf "$prefix"
    mkdir -p "$prefix/stage" "$prefix/lib" "$prefix/pkgconfig"
    : >"$prefix/sonames.tsv"
    for f in "$debs"/*.deb; do
        [ -f "$f" ] || continue
        pkg=$(basename "$f" | cut -d_ -f1)
        dpkg -x "$f" "$prefix/stage" || return 1
        # the package's regular files named like a shared library (not its links)
        dpkg -c "$f" | awk '$1 ~ /^-/ && $NF ~ /\/lib[^\/]*\.so(\.[0-9]+)*$/ { print $NF }' |
            while read -r path; do
                path=$prefix/stage/${path#./}
                so=$(gpu_deps_soname "$path")
                [ -n "$so" ] || continue
                if grep -qxF "$so" "$list"; then
                    printf '%s\t%s\tsystem\n' "$so" "$pkg" >>"$prefix/sonames.tsv"
                else
                    ln -sfn "$path" "$prefix/lib/$so"
                    printf '%s\t%s\tcarried\n' "$so" "$pkg" >>"$prefix/sonames.tsv"
                fi
            done
    done
    # pkg-config modules the machine lacks, rewritten to the stage (Requires.private names the
    # static link's -dev packages, which a shared build never needs and which are not carried)
    local pc mod
    for pc in "$prefix"/stage/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$prefix"/stage/usr/share/pkgconfig/*.pc; do
        [ -f "$pc" ] || continue
        mod=$(basename "$pc" .pc)
        # (GPU_DEPS_NO_DEV=1: as on a machine without any -dev package, for scripts/gpu-ldcheck)
        [ "${GPU_DEPS_NO_DEV:-0}" != 1 ] && pkg-config --exists "$mod" 2>/dev/null && continue
        sed "s|=/usr|=$prefix/stage/usr|g; s|-L/usr|-L$prefix/stage/usr|g; s|-I/usr|-I$prefix/stage/usr|g; /^Requires.private:/d" \
            "$pc" >"$prefix/pkgconfig/$mod.pc"
    done
}

# PREFIX/lib holds only sonames the machine lacks, so it can go anywhere on the loader's path: it
# goes last. Carried programs (protoc-c) are used only where the machine has none.
gpu_deps_env() {
    local prefix=$1
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$prefix/lib
    export PKG_CONFIG_PATH=${PKG_CONFIG_PATH:+$PKG_CONFIG_PATH:}$prefix/pkgconfig
    export PATH=$PATH:$prefix/stage/usr/bin
}

gpu_deps_ldd_check() {
    local prefix=$1 f so why bad=0
    shift
    for f; do
        [ -e "$f" ] || continue
        for so in $(ldd "$f" 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => not found$/\1/p'); do
            why=$(awk -F'\t' -v s="$so" '$1 == s {
                if ($3 == "system") print "its package " $2 " is carried but was not unpacked: the machine seemed to have it"
                else print "unpacked from " $2 ", yet not loadable"
                exit }' "$prefix/sonames.tsv" 2>/dev/null)
            [ -n "$why" ] || why="in no carried package: add its Debian package to scripts/gpu-prepare's list"
            echo "gpu-check: $(basename "$f") cannot start: $so not found ($why)"
            bad=1
        done
    done
    return $bad
}
