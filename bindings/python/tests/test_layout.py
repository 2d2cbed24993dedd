"""The ctypes structures against the C compiler's layout of the public
headers: every field's offset and every structure's size. Needs a C compiler
and the repository's headers (beside these tests)."""
import ctypes
import os
import shutil
import subprocess

import pytest

from dakit import _native

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INCLUDE = os.path.join(REPO, "core", "include")

STRUCTS = {
    "dk_device_info": _native.DeviceInfo,
    "dk_backend_info": _native.BackendInfo,
    "dk_native": _native.Native,
    "dk_gauss_desc": _native.GaussDesc,
    "dk_kmeans_desc": _native.KMeansDesc,
    "dk_kmeans_result": _native.KMeansResult,
    "dk_csr": _native.CSR,
    "dk_enkf_desc": _native.EnkfDesc,
    "dk_letkf_desc": _native.LetkfDesc,
    "dk_kmeans_texture_stats": _native.TextureStats,
    "dk_radolan": _native.Radolan,
}
RENAMED = {"lambda_": "lambda"}  # a Python keyword


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc or not os.path.isfile(os.path.join(INCLUDE, "dakit", "dakit.h")):
        pytest.skip("no C compiler or no dakit headers beside the tests")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include <dakit/dakit.h>', 'int main(void) {']
    for cname, cls in STRUCTS.items():
        lines.append('printf("%s size %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            f = RENAMED.get(field, field)
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (cname, field, cname, f))
    lines += ['return 0;', '}']
    d = tmp_path_factory.mktemp("layout")
    src, exe = d / "layout.c", d / "layout"
    src.write_text("\n".join(lines))
    subprocess.run([cc, "-I", INCLUDE, "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


@pytest.mark.parametrize("cname", sorted(STRUCTS))
def test_structure_matches_the_header(c_layout, cname):
    cls = STRUCTS[cname]
    assert ctypes.sizeof(cls) == c_layout[(cname, "size")]
    for field, _ in cls._fields_:
        assert getattr(cls, field).offset == c_layout[(cname, field)], field
