#define _GNU_SOURCE
/* .npy files and the `dakit gauss` command: good files round-trip through
 * the command and match the reference; every kind of bad file and bad flag
 * gets a sentence and a non-zero exit, never a crash. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dakit/dakit.h>

#include "check.h"
#include "cli/npy.h"

static char dir[256];
static const char *dakit;

static void write_bytes(const char *name, const char *header_dict, size_t data_bytes, int version)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    size_t hlen = strlen(header_dict);
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(version, f);
    fputc(0, f);
    if (version == 1) {
        fputc((int)(hlen & 0xff), f);
        fputc((int)(hlen >> 8), f);
    } else {
        for (int i = 0; i < 4; i++)
            fputc((int)((hlen >> (8 * i)) & 0xff), f);
    }
    fwrite(header_dict, 1, hlen, f);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(i % 7, f);
    fclose(f);
}

static int run(const char *args, char *out, size_t out_len)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, dakit, args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: test_npy_cli PATH-TO-dakit\n");
        return 2;
    }
    static char dakit_path[4096];
    if (!realpath(argv[1], dakit_path)) {
        printf("cannot find %s\n", argv[1]);
        return 2;
    }
    dakit = dakit_path;
    snprintf(dir, sizeof dir, "/tmp/dakit-test-%d", (int)getpid());
    char cmd[512], out[8192], err[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0)
        return 1;

    /* a good 2-D float64 file through the command, against the reference */
    npy_array a = {.dtype = DK_F64, .ndim = 2, .shape = {40, 50}, .count = 2000};
    a.data = malloc(2000 * sizeof(double));
    for (int i = 0; i < 2000; i++)
        ((double *)a.data)[i] = sin(i * 0.37) + (i % 13 == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/x.npy", dir);
    CHECK(npy_write(path, &a, err, sizeof err) == DK_OK, "npy_write: %s", err);
    npy_array back;
    CHECK(npy_read(path, &back, err, sizeof err) == DK_OK, "npy_read: %s", err);
    CHECK(back.ndim == 2 && back.shape[0] == 40 && back.shape[1] == 50 && back.dtype == DK_F64 &&
              memcmp(back.data, a.data, 2000 * sizeof(double)) == 0,
          "round trip");
    npy_free(&back);

    int rc = run("gauss --in x.npy --out y.npy --sigma 3,1.5 --method rf --K 5 --boundary constant --backend cpu", out,
                 sizeof out);
    CHECK(rc == 0, "gauss command failed (%d): %s", rc, out);
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF;
    d.dtype = DK_F64;
    d.ndim = 2;
    d.shape[0] = 40;
    d.shape[1] = 50;
    d.axes = 3;
    d.sigma[0] = 3;
    d.sigma[1] = 1.5;
    d.K = 5;
    d.boundary = DK_BOUNDARY_CONSTANT;
    double *ref = malloc(2000 * sizeof(double));
    dk_gauss_reference(&d, a.data, ref);
    snprintf(path, sizeof path, "%s/y.npy", dir);
    if (npy_read(path, &back, err, sizeof err) == DK_OK) {
        double worst = 0;
        for (int i = 0; i < 2000; i++)
            worst = fmax(worst, fabs(((double *)back.data)[i] - ref[i]));
        CHECK(worst < 1e-13, "command output differs from the reference by %.3e", worst);
        npy_free(&back);
    } else {
        CHECK(0, "reading the command's output: %s", err);
    }
    /* the command's defaults: deriche with the reflect boundary (scipy's gaussian_filter), not rf */
    rc = run("gauss --in x.npy --out d.npy --sigma 3,1.5 --backend cpu", out, sizeof out);
    CHECK(rc == 0, "gauss with the default method failed (%d): %s", rc, out);
    d.method = DK_GAUSS_DERICHE;
    d.boundary = DK_BOUNDARY_REFLECT;
    double *want = malloc(2000 * sizeof(double)), *rf = malloc(2000 * sizeof(double));
    dk_gauss_reference(&d, a.data, want);
    d.method = DK_GAUSS_RF;
    d.boundary = DK_BOUNDARY_ZERO;
    d.K = 4;
    dk_gauss_reference(&d, a.data, rf);
    snprintf(path, sizeof path, "%s/d.npy", dir);
    if (npy_read(path, &back, err, sizeof err) == DK_OK) {
        double worst = 0, from_rf = 0;
        for (int i = 0; i < 2000; i++) {
            worst = fmax(worst, fabs(((double *)back.data)[i] - want[i]));
            from_rf = fmax(from_rf, fabs(((double *)back.data)[i] - rf[i]));
        }
        CHECK(worst < 1e-13 && from_rf > 1e-2,
              "the default is not deriche + reflect: %.3e from it, %.3e from rf K 4 with the zero boundary", worst,
              from_rf);
        npy_free(&back);
    } else {
        CHECK(0, "reading the default command's output: %s", err);
    }
    free(want);
    free(rf);
    rc = run("gauss --help", out, sizeof out);
    CHECK(strstr(out, "--method deriche|rf|vyv") && strstr(out, "deriche (default)") &&
              strstr(out, "(default reflect)"),
          "--help names the defaults deriche and reflect: %s", out);
    /* getopt_long: --opt=value, in any order, gives the same file */
    rc = run("gauss --backend=cpu --sigma=3,1.5 --method=rf --K=5 --boundary=constant --in=x.npy --out=y2.npy", out, sizeof out);
    CHECK(rc == 0, "gauss with --opt=value failed (%d): %s", rc, out);
    char cmp[1200];
    snprintf(cmp, sizeof cmp, "cmp -s %s/y.npy %s/y2.npy", dir, dir);
    CHECK(system(cmp) == 0, "--opt=value and --opt value gave different files");
    rc = run("gauss --in x.npy --out z.npy --sigma 2 --axes 1 --dtype f32 --backend cpu", out, sizeof out);
    snprintf(path, sizeof path, "%s/z.npy", dir);
    CHECK(rc == 0 && npy_read(path, &back, err, sizeof err) == DK_OK && back.dtype == DK_F32,
          "--dtype f32 writes float32: %s", out);
    npy_free(&back);

    /* bad files */
    write_bytes("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 4), }\n", 64, 1);
    write_bytes("int.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (16,), }\n", 64, 1);
    write_bytes("bigendian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (16,), }\n", 64, 1);
    write_bytes("truncated.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }\n", 64, 1);
    write_bytes("lies.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 64, 1);
    write_bytes("badshape.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, x), }\n", 16, 1);
    write_bytes("v9.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 16, 9);
    write_bytes("v2.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", 16, 2);
    write_bytes("fourd.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2, 2), }\n", 64, 1);
    write_bytes("empty.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }\n", 0, 1);
    snprintf(path, sizeof path, "%s/text.npy", dir);
    FILE *f = fopen(path, "w");
    fputs("just some text\n", f);
    fclose(f);
    static const struct {
        const char *file, *expect;
    } bad[] = {
        {"fortran.npy", "Fortran order"},
        {"int.npy", "not supported"},
        {"bigendian.npy", "not supported"},
        {"truncated.npy", "promises 400 bytes"},
        {"lies.npy", "promises 16 bytes"},
        {"badshape.npy", "shape"},
        {"v9.npy", "version 9"},
        {"text.npy", "not a .npy file"},
        {"missing.npy", "cannot open"},
        {"fourd.npy", "4 dimensions"},
        {"empty.npy", "shape[0] is 0"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char args[256];
        snprintf(args, sizeof args, "gauss --in %s --out o.npy --sigma 2 --backend cpu", bad[k].file);
        rc = run(args, out, sizeof out);
        CHECK(rc != 0 && rc < 128, "%s: exit %d", bad[k].file, rc);
        CHECK(strstr(out, bad[k].expect) != NULL, "%s: message lacks '%s': %s", bad[k].file, bad[k].expect, out);
    }
    rc = run("gauss --in v2.npy --out o.npy --sigma 2 --backend cpu", out, sizeof out);
    CHECK(rc == 0, "a version 2.0 file is read: %s", out);

    /* bad flags */
    static const struct {
        const char *args, *expect;
    } flags[] = {
        {"gauss --in x.npy --out o.npy --sigma 0", "sigma"},
        {"gauss --in x.npy --out o.npy --sigma nan", "sigma"},
        {"gauss --in x.npy --out o.npy --sigma 2 --K 0", "--K"},
        {"gauss --in x.npy --out o.npy --sigma 2 --K 3", "with --method deriche it would be ignored"},
        {"gauss --in x.npy --out o.npy --sigma 2 --axes 2", "axis 2 is out of range"},
        {"gauss --in x.npy --out o.npy --sigma 1,2,3", "one per filtered axis"},
        {"gauss --in x.npy --out o.npy --sigma 2 --backend quantum", "Available backends"},
        {"gauss --in x.npy --out o.npy --sigma 2 --boundary sideways", "--boundary"},
        {"gauss --in x.npy --out o.npy --sigma 2 --mode fast", "--mode"},
        {"gauss --in x.npy --out o.npy --sigma 2 --variant nope --backend cpu", "no variant"},
        {"gauss --in x.npy --out o.npy", "required"},
        {"gauss --in x.npy --out /nonexistent/dir/o.npy --sigma 2 --backend cpu", "cannot create"},
        {"frobnicate", "unknown command"},
    };
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
        rc = run(flags[k].args, out, sizeof out);
        CHECK(rc != 0 && rc < 128, "'%s': exit %d", flags[k].args, rc);
        CHECK(strstr(out, flags[k].expect) != NULL, "'%s': message lacks '%s': %s", flags[k].args, flags[k].expect,
              out);
    }
    /* a bad option: the same sentence in every command, exit status 2 */
    static const struct {
        const char *args, *expect;
    } options[] = {
        {"gauss --in x.npy --out o.npy --sigma 2 --frobnicate", "dakit gauss: unknown option '--frobnicate' (dakit gauss --help)"},
        {"gauss --in x.npy --out o.npy --sig 2", "dakit gauss: unknown option '--sig' (dakit gauss --help)"},
        {"gauss --in x.npy --out o.npy --sigma", "dakit gauss: --sigma needs a value (dakit gauss --help)"},
        {"gauss --in x.npy --out o.npy --sigma 2 --reference=yes",
         "dakit gauss: --reference takes no value, not '--reference=yes' (dakit gauss --help)"},
        {"gauss --in x.npy --out o.npy --sigma 2 stray", "dakit gauss: unexpected argument 'stray' (dakit gauss --help)"},
        {"gauss -q", "dakit gauss: unknown option '-q' (dakit gauss --help)"},
        {"kmeans --frobnicate", "dakit kmeans: unknown option '--frobnicate' (dakit kmeans --help)"},
        {"enkf cov --frobnicate", "dakit enkf: unknown option '--frobnicate' (dakit enkf --help)"},
        {"enkf l96 --frobnicate", "dakit enkf: unknown option '--frobnicate' (dakit enkf --help)"},
        {"letkf --frobnicate", "dakit letkf: unknown option '--frobnicate' (dakit letkf --help)"},
        {"letkf l96 --frobnicate", "dakit letkf l96: unknown option '--frobnicate' (dakit letkf l96 --help)"},
        {"gbees --frobnicate", "dakit gbees: unknown option '--frobnicate' (dakit gbees --help)"},
        {"gbees-plot run --frobnicate", "dakit gbees-plot: unknown option '--frobnicate' (dakit gbees-plot --help)"},
        {"gbees-plot run other", "dakit gbees-plot: unexpected argument 'other' (dakit gbees-plot --help)"},
        {"gbees-mc --frobnicate", "dakit gbees-mc: unknown option '--frobnicate' (dakit gbees-mc --help)"},
        {"conform --frobnicate", "dakit conform: unknown option '--frobnicate' (dakit conform --help)"},
        {"bench --frobnicate", "dakit bench: unknown option '--frobnicate' (dakit bench --help)"},
        {"demo --frobnicate", "dakit demo: unknown option '--frobnicate' (dakit demo --help)"},
        {"info --frobnicate", "dakit info: unknown option '--frobnicate' (dakit info --help)"},
    };
    for (size_t k = 0; k < sizeof options / sizeof options[0]; k++) {
        rc = run(options[k].args, out, sizeof out);
        CHECK(rc == 2 && strstr(out, options[k].expect) != NULL, "'%s': exit %d, not 2 with '%s': %s",
              options[k].args, rc, options[k].expect, out);
    }
    rc = run("gauss --help", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "usage: dakit gauss"), "--help");

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
    free(a.data);
    free(ref);
    return failures ? 1 : 0;
}
