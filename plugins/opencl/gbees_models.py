#!/usr/bin/env python3
"""Carries the gbees model files into the opencl plugin: reads the
#include lines of dakit/kit/gbees/models/all.h and writes a C header with
a table from each model's name (its file name without .h) to the file's
text, which gbees.c compiles into the OpenCL program of a plan. Adding a
model therefore stays one file and its all.h lines. A make-style depfile
names the model files, so editing one rebuilds the header.

usage: gbees_models.py ALL.H OUTPUT.h DEPFILE"""
import os
import re
import sys


def c_string(text):
    out = []
    for line in text.splitlines():
        escaped = line.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'     "{escaped}\\n"')
    return "\n".join(out) if out else '     ""'


def main():
    all_h, header_path, dep_path = sys.argv[1:4]
    folder = os.path.dirname(os.path.abspath(all_h))
    with open(all_h, encoding="utf-8") as f:
        files = re.findall(r'^\s*#\s*include\s+"([^"]+\.h)"', f.read(), re.MULTILINE)
    if not files:
        sys.exit(f"gbees_models.py: {all_h} includes no model file")
    out = ["/* Generated from dakit/kit/gbees/models/all.h by gbees_models.py; do not edit. */",
           "typedef struct dk_opencl_gbees_model_source {",
           "    const char *name;",
           "    const char *source;",
           "} dk_opencl_gbees_model_source;",
           "",
           "static const dk_opencl_gbees_model_source dk_opencl_gbees_models[] = {"]
    paths = []
    for name in files:
        path = os.path.join(folder, name)
        paths.append(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        out.append(f'    {{"{os.path.splitext(os.path.basename(name))[0]}",')
        out.append(c_string(text) + "},")
    out.append("    {NULL, NULL},")
    out.append("};")
    with open(header_path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    with open(dep_path, "w", encoding="utf-8") as f:
        deps = " ".join(p.replace(" ", "\\ ") for p in [os.path.abspath(all_h)] + paths)
        f.write(f"{header_path}: {deps}\n")


if __name__ == "__main__":
    main()
