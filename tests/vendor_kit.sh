#!/bin/sh
# The vendor kit end to end: install dakit into a scratch folder, build the
# example plugin out of tree against the installed headers (the plugin kit
# included) with pkg-config, and pass the gauss and gbees conformance cases
# with it through DAKIT_PLUGIN_PATH.
# usage: vendor_kit.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet
pc=$(find "$tmp/root" -name dakit.pc | head -1)
[ -n "$pc" ] || { echo "meson install wrote no dakit.pc"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# the .pc file names the configured prefix; point it into the scratch install
prefix="$tmp/root$(pkg-config --variable=prefix dakit)"
cflags=$(pkg-config --define-variable=prefix="$prefix" --cflags dakit)
echo "pkg-config --cflags dakit: $cflags"
case "$cflags" in *"$tmp/root"*) ;; *) echo "cflags do not point into the install"; exit 1 ;; esac

mkdir "$tmp/plugins"
cc -shared -fPIC -O2 -fvisibility=hidden -Wall -Wextra -Werror $cflags "$src/examples/serial-plugin/serial.c" -o "$tmp/plugins/dakit-serial.so" -lm

libdir=$(pkg-config --define-variable=prefix="$prefix" --variable=libdir dakit)
dakit=$(find "$tmp/root" -path '*/bin/dakit' | head -1)
export LD_LIBRARY_PATH="$libdir"
export DAKIT_PLUGIN_PATH="$tmp/plugins"
"$dakit" info | grep -A3 '^serial'
"$dakit" conform --backend serial --algo gauss,gbees --quick
