#!/bin/sh
# Builds dakit-serial.so against an installed dakit (pkg-config finds it).
# usage: ./build.sh [OUTPUT_DIR]
set -e
out=${1:-.}
cc -shared -fPIC -O2 -Wall -Wextra $(pkg-config --cflags dakit) "$(dirname "$0")/serial.c" -o "$out/dakit-serial.so"
echo "built $out/dakit-serial.so; try: DAKIT_PLUGIN_PATH=$out dakit conform --backend serial --algo gauss"
