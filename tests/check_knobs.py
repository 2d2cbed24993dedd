#!/usr/bin/env python3
"""Every tuning knob a plugin reads goes through dk_tuning_string or
dk_tuning_long (no getenv in plugins/ or the plugin kit) and is listed in
docs/tuning.md; every knob the page lists is still read somewhere.

usage: check_knobs.py SOURCE_DIR (the distributed layer, distributed/, follows the
same rule)"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
failures = []
read = {}
sources = [p for d in ("plugins", "core/include/dakit/kit", "examples", "distributed") for p in (root / d).rglob("*")
           if p.suffix in (".c", ".h", ".cu", ".cuh", ".cl")
           and not (d == "distributed" and p.name.startswith("bench"))]  # benchmarks: as tools/
for path in sources:
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in re.finditer(r"\bgetenv\s*\(", text):
        line = text.count("\n", 0, m.start()) + 1
        failures.append(f"{path.relative_to(root)}:{line}: calls getenv; read knobs with dk_tuning_string/dk_tuning_long")
    for m in re.finditer(r"dk_tuning_(?:string|long)\s*\(\s*\"(DAKIT_[A-Z0-9_]+)\"", text):
        read.setdefault(m.group(1), str(path.relative_to(root)))

doc = (root / "docs" / "tuning.md").read_text(encoding="utf-8")
listed = set(re.findall(r"^\|\s*`(DAKIT_[A-Z0-9_]+)[=`]", doc, re.MULTILINE))
plugin_section = doc.split("## Plugins", 1)[-1].split("\n## ", 1)[0]
listed_plugin = set(re.findall(r"^\|\s*`(DAKIT_[A-Z0-9_]+)[=`]", plugin_section, re.MULTILINE))

for name, where in sorted(read.items()):
    if name not in listed:
        failures.append(f"{where}: knob {name} is not listed in docs/tuning.md")
for name in sorted(listed_plugin - set(read)):
    failures.append(f"docs/tuning.md lists {name}, which no plugin reads")
layer_section = doc.split("## Distributed layer", 1)[-1].split("\n## ", 1)[0] if "## Distributed layer" in doc else ""
for name in sorted(set(re.findall(r"^\|\s*`(DAKIT_[A-Z0-9_]+)[=`]", layer_section, re.MULTILINE)) - set(read)):
    failures.append(f"docs/tuning.md lists {name}, which the distributed layer does not read")
if not read:
    failures.append("no knob read through dk_tuning_* was found: is the source folder right?")

for f in failures:
    print("FAIL", f)
print(f"{len(read)} knobs read through dk_tuning_*, all listed" if not failures else f"{len(failures)} problem(s)")
sys.exit(1 if failures else 0)
