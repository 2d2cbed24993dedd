#!/bin/sh
# meson install into a scratch folder, then use the install as a stranger
# would: the installed dakit without LD_LIBRARY_PATH or DAKIT_PLUGIN_PATH
# (install rpath, plugins found beside libdakit), its man pages, and small
# programs built against it with pkg-config and with CMake's
# find_package(dakit), the Fortran example among them where built.
# usage: install_check.sh BUILD_DIR SOURCE_DIR man|no-man fortran|no-fortran [fortran-mpi]
set -eu
build=$1
src=$2
man=$3
fortran=$4
fortran_mpi=${5:-no-fortran-mpi}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH DAKIT_PLUGIN_PATH DAKIT_BACKEND

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet
pc=$(find "$tmp/root" -name dakit.pc | head -1)
[ -n "$pc" ] || { echo "meson install wrote no dakit.pc"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# the .pc files name the configured prefix; point them into the scratch install
prefix="$tmp/root$(pkg-config --variable=prefix dakit)"
pcx="pkg-config --define-variable=prefix=$prefix"
libdir=$($pcx --variable=libdir dakit)

echo "== the installed dakit, no LD_LIBRARY_PATH"
info=$("$prefix/bin/dakit" info)
echo "$info" | grep -q "$tmp/root.*dakit-cpu.so" || {
  echo "$info"; echo "the installed dakit did not load the installed cpu plugin"; exit 1; }
echo "$info" | grep "dakit-cpu.so"

echo "== the installed data: dakit bench finds it from any folder"
radar=raa01-rx_10000-1408102050-dwd---bin.gz
[ -s "$prefix/share/dakit/$radar" ] || { echo "no $prefix/share/dakit/$radar"; exit 1; }
bench=$(cd "$tmp" && env -u DAKIT_DATA -u DAKIT_RADOLAN "$prefix/bin/dakit" bench --case radar_900 \
  --backend cpu --max-runs 3 --min-time 0 2>&1) || { echo "$bench"; echo "dakit bench radar_900 failed"; exit 1; }
echo "$bench" | grep -q "radar_900: data $tmp/root.*/share/dakit/$radar" || {
  echo "$bench"; echo "the installed dakit did not read the installed data file"; exit 1; }
echo "$bench" | grep "radar_900: data" | head -1

if [ "$man" = man ]; then
  echo "== man pages"
  for page in dakit dakit-gauss dakit-enkf dakit-kmeans dakit-letkf dakit-gbees-plot dakit-gbees-mc; do
    f="$prefix/share/man/man1/$page.1"
    [ -s "$f" ] || { echo "no man page $f"; exit 1; }
    grep -q '^\.SH NAME' "$f" || { echo "$f is no man page"; exit 1; }
  done
  # every document a man page names is installed where its SEE ALSO says
  for doc in $(cat "$prefix"/share/man/man1/*.1 | grep -o 'docs/[a-z-]*\.md' | sort -u); do
    [ -s "$prefix/share/doc/dakit/$doc" ] || { echo "a man page names $doc, not installed in share/doc/dakit"; exit 1; }
  done
  ls "$prefix/share/man/man1"
fi

echo "== a C program with pkg-config"
cc -Wall -Wextra -Werror $($pcx --cflags dakit) "$src/cmake/example/smooth.c" -o "$tmp/smooth-pc" \
  $($pcx --libs dakit) -lm
LD_LIBRARY_PATH="$libdir" "$tmp/smooth-pc"

cmake_args=""
if [ "$fortran" = fortran ]; then
  echo "== the Fortran example with pkg-config"
  [ -f "$($pcx --variable=includedir dakit-fortran)/dakit.mod" ] || { echo "dakit.mod is not in the include folder"; exit 1; }
  (cd "$tmp" && gfortran -std=f2008 -Wall "$src/bindings/fortran/example/smooth.f90" \
     $($pcx --cflags --libs dakit-fortran) -o "$tmp/smooth-fortran-pc")
  LD_LIBRARY_PATH="$libdir" "$tmp/smooth-fortran-pc"
  cmake_args="-DDAKIT_FORTRAN_EXAMPLE=$src/bindings/fortran/example/smooth.f90"
fi
mpirun="mpirun -n 2 --oversubscribe"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$fortran_mpi" = fortran-mpi ]; then
  echo "== the Fortran MPI example with pkg-config (mpifort), 2 ranks"
  [ -f "$($pcx --variable=includedir dakit-fortran-mpi)/dakit_mpi.mod" ] || { echo "dakit_mpi.mod is not in the include folder"; exit 1; }
  (cd "$tmp" && mpifort -std=f2008 -Wall "$src/bindings/fortran/example/mpi_smooth.f90" \
     $($pcx --cflags --libs dakit-fortran-mpi) -o "$tmp/mpi-smooth-fortran-pc")
  LD_LIBRARY_PATH="$libdir" $mpirun "$tmp/mpi-smooth-fortran-pc"
  cmake_args="$cmake_args -DDAKIT_FORTRAN_MPI_EXAMPLE=$src/bindings/fortran/example/mpi_smooth.f90"
fi

if command -v cmake >/dev/null; then
  echo "== CMake find_package(dakit)"
  cmake -S "$src/cmake/example" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" $cmake_args >"$tmp/cmake.log" 2>&1 || {
    cat "$tmp/cmake.log"; exit 1; }
  grep "dakit 0" "$tmp/cmake.log"
  cmake --build "$tmp/cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  # CMake's build rpath points at the imported libraries: no LD_LIBRARY_PATH
  "$tmp/cmake/smooth"
  if [ "$fortran" = fortran ]; then
    "$tmp/cmake/smooth_fortran"
  fi
  if [ "$fortran_mpi" = fortran-mpi ]; then
    $mpirun "$tmp/cmake/mpi_smooth_fortran"
  fi
  if [ -f "$(dirname "$pc")/dakit-mpi.pc" ]; then
    [ -x "$tmp/cmake/mpi_hello" ] || { echo "libdakit-mpi is installed but dakit::mpi was not found"; exit 1; }
    "$tmp/cmake/mpi_hello"
  fi
else
  echo "== CMake: skipped, no cmake on PATH (tools/setup installs it)"
fi
echo "install check passed"
