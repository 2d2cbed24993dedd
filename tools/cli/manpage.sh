#!/bin/sh
# The man page of `dakit` (no COMMAND) or of `dakit COMMAND`, from its --help
# with help2man; the one-line description is the command's line in
# `dakit --help`. SEE ALSO says where the documents that --help names
# (docs/NAME.md) are installed.
# usage: manpage.sh HELP2MAN DAKIT VERSION DOCDIR OUT [COMMAND]
set -eu
help2man=$1 dakit=$2 version=$3 docdir=$4 out=$5 cmd=${6:-}
include="$out.see-also"
cat > "$include" <<END
[SEE ALSO]
The documents that this text names as docs/NAME.md are installed as
$docdir/docs/NAME.md, beside README.md.
END
if [ -z "$cmd" ]; then
  name=$("$dakit" --help | sed -n '1s/^[^:]*: //p')
  "$help2man" --no-info --version-string="$version" --name="$name" --include="$include" --output="$out" "$dakit"
else
  name=$("$dakit" --help | awk -v c="$cmd" '$1 == c { $1 = ""; sub(/^ +/, ""); print; exit }')
  upper=$(echo "$cmd" | tr a-z A-Z)
  "$help2man" --no-info --version-string="$version" --help-option="$cmd --help" --name="$name" \
    --include="$include" "$dakit" |
    sed -e "s/^\.TH DAKIT /.TH DAKIT-$upper /" -e "s/^dakit \\\\-/dakit-$cmd \\\\-/" > "$out.tmp"
  mv "$out.tmp" "$out"
fi
rm -f "$include"
