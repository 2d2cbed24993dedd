#!/usr/bin/env python3
"""Writes a Fortran module from its template (docs/fortran.md), so that a
procedure of both real kinds, or of both modules, is written once.

usage: expand.py TEMPLATE OUTPUT [DEPFILE]

DEPFILE (for Meson): OUTPUT's dependencies, the templates it read.

Directives, each alone on a line:
  !> for kinds          the lines up to `!> end` once for real32, once for real64
  !> for kinds ranks    the same for each kind and each rank 1 to 3
  !> end
  !> include FILE [name=value ...]   FILE (beside TEMPLATE), with ${name}
                                     replaced by value; FILE may hold `for`
Inside a `for`: ${k} is f32 or f64, ${real} real(c_float) or real(c_double),
${DK} DK_F32 or DK_F64, ${rank} 1 to 3 and ${dims} ':', ':, :' or ':, :, :'."""
import os
import re
import sys

KINDS = [{"k": "f32", "real": "real(c_float)", "DK": "DK_F32"},
         {"k": "f64", "real": "real(c_double)", "DK": "DK_F64"}]
RANKS = [{"rank": str(r), "dims": ", ".join([":"] * r)} for r in (1, 2, 3)]
NAME = re.compile(r"\$\{(\w+)\}")


def substitute(line, values, where):
    def value(match):
        if match.group(1) not in values:
            sys.exit(f"{where}: ${{{match.group(1)}}} is not defined here")
        return values[match.group(1)]
    return NAME.sub(value, line)


def expand(path, params, out, read):
    read.append(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    block, loops, start = None, None, 0
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        directive = line.strip().split()
        if directive[:2] == ["!>", "for"]:
            if block is not None:
                sys.exit(f"{where}: a `for` inside the `for` of line {start}")
            loops = directive[2:]
            if loops not in (["kinds"], ["kinds", "ranks"]):
                sys.exit(f"{where}: `for` takes `kinds` or `kinds ranks`")
            block, start = [], number
        elif directive[:2] == ["!>", "end"]:
            if block is None:
                sys.exit(f"{where}: an `end` without its `for`")
            for kind in KINDS:
                for rank in RANKS if "ranks" in loops else [{}]:
                    values = {**params, **kind, **rank}
                    out.extend(substitute(text, values, f"{path}:{at}") for at, text in block)
            block = None
        elif directive[:2] == ["!>", "include"] and len(directive) > 2:
            if block is not None:
                sys.exit(f"{where}: an `include` inside a `for`")
            included = dict(p.split("=", 1) for p in directive[3:])
            expand(os.path.join(os.path.dirname(path), directive[2]), {**params, **included}, out, read)
        elif block is not None:
            block.append((number, line))
        else:
            out.append(substitute(line, params, where))
    if block is not None:
        sys.exit(f"{path}:{start}: this `for` has no `end`")


def main():
    template, output = sys.argv[1:3]
    out = [f"! Generated from {os.path.basename(template)} by expand.py; do not edit."]
    read = []
    expand(template, {}, out, read)
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    if len(sys.argv) > 3:
        def escaped(name):
            return name.replace(" ", "\\ ")
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write(f"{escaped(output)}: {' '.join(escaped(name) for name in read)}\n")


if __name__ == "__main__":
    main()
