#!/bin/sh
# A plugin needs the headers only, never libdakit (docs/plugins.md): a host
# that loads libdakit privately (Python's ctypes does) would refuse a plugin
# that takes a dk_ function from it. Fails when any built plugin does.
# usage: check_plugin_symbols.sh BUILD_DIR
status=0
found=0
for so in "$1"/plugins/*/dakit-*.so; do
  [ -f "$so" ] || continue
  found=$((found + 1))
  missing=$(nm -D --undefined-only "$so" | awk '{print $NF}' | grep '^dk_' || true)
  if [ -n "$missing" ]; then
    echo "FAIL $(basename "$so") takes from libdakit: $(echo $missing)"
    status=1
  else
    echo "ok   $(basename "$so") needs nothing of libdakit"
  fi
done
[ "$found" -gt 0 ] || { echo "FAIL no plugin found under $1/plugins"; exit 1; }
exit $status
