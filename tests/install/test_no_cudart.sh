#!/usr/bin/env bash
# A CPU-only user of libspecd does not need the CUDA runtime: neither libspecd.so nor the programs
# (which link the static libspecd) list libcudart (or the driver's libcuda) as NEEDED; CUDA is
# opened with dlopen when first asked for (kernels/cuda/). Where CUDA is built, the kernel
# library libspecd_cuda.so is the one that needs libcudart, which shows this test reads NEEDED
# entries that are really there. A CPU-only program also runs with no CUDA library reachable.
set -euo pipefail
build=$1
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
bad=0
for f in "$build/libspecd.so" "$build/specd" "$build/specd-verifier" "$build/specd-drafter"; do
  [ -e "$f" ] || { echo "missing: $f"; exit 1; }
  n=$(needed "$f")
  [ -n "$n" ] || { echo "$f: no NEEDED entries read"; exit 1; }
  if grep -E '^libcuda(rt)?\.so' <<<"$n"; then echo "$f needs the CUDA runtime above"; bad=1; fi
done
if [ -e "$build/libspecd_cuda.so" ]; then
  needed "$build/libspecd_cuda.so" | grep -q '^libcudart\.so' ||
    { echo "libspecd_cuda.so does not need libcudart: this test reads NEEDED wrongly"; exit 1; }
fi
# ldd resolves the whole tree (a dependency of a dependency would show here too).
if ldd "$build/libspecd.so" | grep -E 'libcuda(rt)?\.so'; then
  echo "libspecd.so pulls in the CUDA runtime through a dependency"; bad=1
fi
# and a CPU-only program runs with no CUDA library reachable
LD_LIBRARY_PATH=/nonexistent SPECD_CUDA_LIBRARY=/nonexistent/libspecd_cuda.so "$build/specd" version \
  >/dev/null || { echo "specd does not start without CUDA libraries"; bad=1; }
[ $bad = 0 ] && echo "no libcudart: libspecd.so and the programs need no CUDA library"
exit $bad
