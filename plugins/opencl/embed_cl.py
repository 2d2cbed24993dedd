#!/usr/bin/env python3
"""Turns an OpenCL C source into a C header holding it as one string, so
that the plugin carries its kernels and needs no file at run time.

usage: embed_cl.py INPUT.cl OUTPUT.h VARIABLE"""
import sys


def main():
    source_path, header_path, name = sys.argv[1:4]
    with open(source_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = [f"/* Generated from {source_path.split('/')[-1]} by embed_cl.py; do not edit. */",
           f"static const char {name}[] ="]
    for line in lines:
        escaped = line.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'    "{escaped}\\n"')
    out.append("    ;")
    with open(header_path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
