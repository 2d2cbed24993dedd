#!/usr/bin/env bash
# Packs test_openacc (and test_fortran, when built) to run on a GPU machine that has the NVIDIA driver and
# the CUDA toolkit's libraries (/usr/local/cuda/lib64) but no gfortran and no
# libgomp-plugin-nvptx: the test, libdakit, libdakit-fortran, the cuda and
# cpu plugins, and every library they and libgomp's nvptx plugin load that
# is neither glibc nor CUDA's. OUT/run.sh runs it from wherever OUT lies;
# OUT/run.sh test_fortran cuda DIR runs the module's own test.
# usage: openacc-bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2

exe=$build/bindings/fortran/tests/test_openacc
plugins=("$build/plugins/cuda/dakit-cuda.so" "$build/plugins/cpu/dakit-cpu.so")
for f in "$exe" "${plugins[@]}"; do
  if [ ! -f "$f" ]; then
    echo "$0: $f is missing; build it with: ninja -C $1 plugins/cuda/dakit-cuda.so plugins/cpu/dakit-cpu.so bindings/fortran/tests/test_openacc" >&2
    exit 1
  fi
done
# libgomp opens its offload plugin by name at run time; ask gfortran where
# the one of its own gcc lies
nvptx=$(realpath -e "$(gfortran -print-file-name=libgomp-plugin-nvptx.so.1)" 2>/dev/null) || {
  echo "$0: gfortran has no libgomp-plugin-nvptx.so.1 (Debian: gcc-12-offload-nvptx, libgomp-plugin-nvptx1)" >&2
  exit 1
}

rm -rf "$out"
mkdir -p "$out/lib" "$out/plugins"
cp "$exe" "$out/"
more=$build/bindings/fortran/tests/test_fortran
[ -f "$more" ] && cp "$more" "$out/" || more=
cp "${plugins[@]}" "$out/plugins/"
cp -L "$nvptx" "$out/lib/libgomp-plugin-nvptx.so.1"

# ldd lists every library loaded, dependencies of dependencies included.
# Left out: glibc's (the machine's own C library must be used) and the
# driver's and CUDA toolkit's (the GPU machine has those, matching its driver)
ldd "$exe" $more "${plugins[@]}" "$nvptx" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
while read -r name path; do
  case "$name" in
    ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*) continue ;;
    libcuda.so.*|libnvidia*) continue ;;
  esac
  case "$path" in
    /usr/local/cuda*) continue ;;
  esac
  cp -L "$path" "$out/lib/$name"
done

cat > "$out/run.sh" <<'EOF'
#!/bin/sh
# Runs test_openacc (or the test named first: test_fortran BACKEND DIR) with
# the libraries and plugins beside this script.
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DAKIT_PLUGIN_PATH="$here/plugins"
export LD_LIBRARY_PATH DAKIT_PLUGIN_PATH
case "$1" in
  test_*) test=$1; shift ;;
  *) test=test_openacc ;;
esac
exec "$here/$test" "$@"
EOF
chmod +x "$out/run.sh"
echo "$out: $(du -sh "$out" | cut -f1); libraries: $(cd "$out/lib" && ls | tr '\n' ' ')"
