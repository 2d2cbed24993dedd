"""What the command-line tests under mpirun share (tests/test_mpi_cli_*.sh):
.npy files written and split without NumPy, a pass/fail tally, and a
command run on every rank with each rank's stderr and exit status kept."""
import os
import struct
import subprocess


def npy(path, shape, values, dtype="<f8"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        dtype, "".join(f"{s}," for s in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    code = {"<f8": "d", "<f4": "f", "<i4": "i"}[dtype]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), code), *values))


def split_npy(path):
    """(header bytes, struct code, data bytes, values) of a .npy file."""
    raw = open(path, "rb").read()
    hlen = struct.unpack("<H", raw[8:10])[0]
    head, data = raw[:10 + hlen], raw[10 + hlen:]
    code = "d" if b"'<f8'" in head else "i" if b"'<i4'" in head else "f"
    return head, code, data, struct.unpack("<%d%s" % (len(data) // (8 if code == "d" else 4), code), data)


class Tally:
    """ok/FAIL lines, counted."""

    def __init__(self):
        self.fails = 0

    def check(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (("  " + detail) if detail else ""), flush=True)
        if not ok:
            self.fails += 1


def mpi_runner(dakit, mpirun, tmp, env):
    """run_mpi(np, args, tag, last_dir=None, timeout=280): dakit ARGS on np
    ranks, every rank in tmp/good and the last one in last_dir when given;
    returns mpirun's status and each rank's stderr and exit status."""
    path = lambda name: os.path.join(tmp, name)

    def run_mpi(np, args, tag, last_dir=None, timeout=280):
        quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [dakit] + args)
        r = "$OMPI_COMM_WORLD_RANK"
        script = (f'cd "{path("good")}"; if [ "{r}" = {np - 1} ] && [ -n "{last_dir or ""}" ]; then '
                  f'cd "{last_dir}"; fi; '
                  f'{quoted} >"{tmp}/{tag}.out.{r}" 2>"{tmp}/{tag}.err.{r}"; s=$?; echo $s >"{tmp}/{tag}.rc.{r}"; exit $s')
        p = subprocess.run([mpirun, "-n", str(np), "--oversubscribe", "--mca", "orte_abort_on_non_zero_status", "0",
                            "sh", "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
        text = lambda name: open(path(name)).read() if os.path.exists(path(name)) else ""
        return (p.returncode, [text(f"{tag}.err.{k}") for k in range(np)],
                [text(f"{tag}.rc.{k}").strip() for k in range(np)])

    return run_mpi
