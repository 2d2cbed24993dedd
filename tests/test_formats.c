#define _GNU_SOURCE
/* The field's formats through the dakit command (docs/formats.md): netCDF
 * in and out of gauss, enkf and kmeans (hyperslabs, both ensemble layouts,
 * one file per member, dimensions, coordinates, attributes and history
 * kept), an ODIM_H5 volume made by make_odim clustered on its polar grid,
 * the RADOLAN labels as CF netCDF, and bad files refused with a sentence,
 * a non-zero exit and no output left.
 *   test_formats DAKIT MAKE_ODIM RADOLAN_FILE */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netcdf.h>

#include <dakit/dakit.h>

#include "check.h"
#include "cli/netcdf.h"
#include "cli/npy.h"

static char dir[256];
static const char *dakit;

static int run(const char *args, char *out, size_t out_len)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && timeout 120 %s %s 2>&1", dir, dakit, args); /* a hang fails, not waits */
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char *at(const char *name)
{
    static char path[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static int exists(const char *name)
{
    return access(at(name), F_OK) == 0;
}

#define NC(call) CHECK((call) == NC_NOERR, "%s", #call)

/* A (time 2, y 12, x 15) float64 field T with coordinates and attributes. */
static double field(int t, int y, int x)
{
    return sin(0.3 * x + 0.7 * t) * cos(0.2 * y) + 0.01 * x * y;
}

static void write_field(void)
{
    int id, dt, dy, dx, vt, vy, vx, v, dims[3];
    NC(nc_create(at("field.nc"), NC_NETCDF4 | NC_CLOBBER, &id));
    NC(nc_def_dim(id, "time", 2, &dt));
    NC(nc_def_dim(id, "y", 12, &dy));
    NC(nc_def_dim(id, "x", 15, &dx));
    NC(nc_def_var(id, "time", NC_DOUBLE, 1, &dt, &vt));
    NC(nc_def_var(id, "y", NC_DOUBLE, 1, &dy, &vy));
    NC(nc_def_var(id, "x", NC_DOUBLE, 1, &dx, &vx));
    dims[0] = dt, dims[1] = dy, dims[2] = dx;
    NC(nc_def_var(id, "T", NC_DOUBLE, 3, dims, &v));
    int vs;
    NC(nc_def_var(id, "S", NC_FLOAT, 2, dims + 1, &vs));
    NC(nc_put_att_text(id, vy, "units", 2, "km"));
    NC(nc_put_att_text(id, v, "units", 1, "K"));
    NC(nc_put_att_text(id, v, "long_name", 11, "temperature"));
    NC(nc_put_att_text(id, NC_GLOBAL, "title", 10, "test field"));
    NC(nc_put_att_text(id, NC_GLOBAL, "history", 8, "made 1st"));
    NC(nc_enddef(id));
    double t[2] = {0, 6}, y[12], x[15], T[2 * 12 * 15];
    for (int i = 0; i < 12; i++)
        y[i] = 100 + 2.5 * i;
    for (int i = 0; i < 15; i++)
        x[i] = -7 + i;
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 12; i++)
            for (int j = 0; j < 15; j++)
                T[(a * 12 + i) * 15 + j] = field(a, i, j);
    NC(nc_put_var_double(id, vt, t));
    NC(nc_put_var_double(id, vy, y));
    NC(nc_put_var_double(id, vx, x));
    NC(nc_put_var_double(id, v, T));
    NC(nc_close(id));
}

/* The text of attribute name of var (NC_GLOBAL) in file, or "". */
static const char *att_text(const char *file, const char *var, const char *name)
{
    static char text[4096];
    int id, v = NC_GLOBAL;
    size_t n;
    text[0] = '\0';
    if (nc_open(at(file), NC_NOWRITE, &id) != NC_NOERR)
        return text;
    if ((!var || nc_inq_varid(id, var, &v) == NC_NOERR) && nc_inq_attlen(id, v, name, &n) == NC_NOERR &&
        n < sizeof text && nc_get_att_text(id, v, name, text) == NC_NOERR)
        text[n] = '\0';
    nc_close(id);
    return text;
}

/* A variable read whole as double; *ndim and dimension names (joined by ',') given back. */
static double *read_var(const char *file, const char *var, size_t *count, char *dims, size_t dlen)
{
    int id, v, nd, dimids[8];
    if (nc_open(at(file), NC_NOWRITE, &id) != NC_NOERR)
        return NULL;
    if (nc_inq_varid(id, var, &v) != NC_NOERR) {
        nc_close(id);
        return NULL;
    }
    nc_inq_varndims(id, v, &nd);
    nc_inq_vardimid(id, v, dimids);
    *count = 1;
    if (dims)
        dims[0] = '\0';
    for (int d = 0; d < nd; d++) {
        size_t len;
        char name[NC_MAX_NAME + 1];
        nc_inq_dim(id, dimids[d], name, &len);
        *count *= len;
        if (dims)
            snprintf(dims + strlen(dims), dlen - strlen(dims), "%s%s=%zu", d ? "," : "", name, len);
    }
    double *x = malloc(*count * sizeof *x);
    nc_get_var_double(id, v, x);
    nc_close(id);
    return x;
}

static double *read_npy(const char *name, size_t *count)
{
    npy_array a;
    char err[512];
    if (npy_read(at(name), &a, err, sizeof err) != DK_OK)
        return NULL;
    double *x = malloc(a.count * sizeof *x);
    for (size_t i = 0; i < a.count; i++)
        x[i] = a.dtype == DK_F64 ? ((double *)a.data)[i] : ((float *)a.data)[i];
    *count = a.count;
    npy_free(&a);
    return x;
}

static double max_diff(const double *a, const double *b, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

/* Ensemble of L = 6 members on a 4 x 5 grid, value(member, y, x). */
static double ens_value(int m, int y, int x)
{
    return sin(1.3 * m + 0.4 * x) + 0.3 * cos(0.9 * y * (m + 1));
}

/* The value as the netCDF files store it (float32). */
static double ens_float(int m, int y, int x)
{
    volatile float f = (float)ens_value(m, y, x);
    return f;
}

static void write_ensemble(const char *name, int member_first, int nmem_files)
{
    int id, dm, dy, dx, v, vm;
    if (nmem_files) { /* one file per member */
        for (int m = 0; m < 6; m++) {
            char file[64];
            snprintf(file, sizeof file, "mem_%03d.nc", m);
            NC(nc_create(at(file), NC_NETCDF4 | NC_CLOBBER, &id));
            NC(nc_def_dim(id, "y", 4, &dy));
            NC(nc_def_dim(id, "x", 5, &dx));
            int dims[2] = {dy, dx};
            NC(nc_def_var(id, "T", NC_FLOAT, 2, dims, &v));
            NC(nc_enddef(id));
            float T[20];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 5; j++)
                    T[i * 5 + j] = (float)ens_value(m, i, j);
            NC(nc_put_var_float(id, v, T));
            NC(nc_close(id));
        }
        return;
    }
    NC(nc_create(at(name), NC_CLOBBER, &id)); /* classic netCDF */
    NC(nc_def_dim(id, "y", 4, &dy));
    NC(nc_def_dim(id, "x", 5, &dx));
    NC(nc_def_dim(id, "realization", 6, &dm));
    NC(nc_def_var(id, "realization", NC_INT, 1, &dm, &vm));
    int dims[3];
    if (member_first)
        dims[0] = dm, dims[1] = dy, dims[2] = dx;
    else
        dims[0] = dy, dims[1] = dx, dims[2] = dm;
    NC(nc_def_var(id, "T", NC_FLOAT, 3, dims, &v));
    NC(nc_enddef(id));
    float T[120];
    int mem[6] = {1, 2, 3, 4, 5, 6};
    for (int m = 0; m < 6; m++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 5; j++)
                T[member_first ? (m * 4 + i) * 5 + j : (i * 5 + j) * 6 + m] = (float)ens_value(m, i, j);
    NC(nc_put_var_int(id, vm, mem));
    NC(nc_put_var_float(id, v, T));
    NC(nc_close(id));
}

/* Whether a temporary output (".NAME.tmp-...") was left in the folder. */
static int leftovers(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -q '\\.tmp-'", dir);
    return system(cmd) == 0;
}

/* A netCDF-4 file with T(y 3, x 4) = 0..11, open for more definitions: *id. */
static void begin_t(const char *name, int *id, int *dy, int *dx, int *v, int format)
{
    NC(nc_create(at(name), format | NC_CLOBBER, id));
    NC(nc_def_dim(*id, "y", 3, dy));
    NC(nc_def_dim(*id, "x", 4, dx));
    int dims[2] = {*dy, *dx};
    NC(nc_def_var(*id, "T", NC_DOUBLE, 2, dims, v));
}

static void end_t(int id, int v)
{
    double T[12];
    for (int i = 0; i < 12; i++)
        T[i] = i;
    NC(nc_enddef(id));
    NC(nc_put_var_double(id, v, T));
    NC(nc_close(id));
}

/* The values the commands read from spec (array_read), as double. */
static double *values_read(const char *spec, size_t *n, char *out, size_t out_len)
{
    npy_array a;
    out[0] = '\0';
    if (array_read(at(spec), NULL, &a, NULL, out, out_len) != DK_OK)
        return NULL;
    double *x = malloc((a.count ? a.count : 1) * sizeof *x);
    for (size_t i = 0; i < a.count; i++)
        x[i] = a.dtype == DK_F64 ? ((double *)a.data)[i] : ((float *)a.data)[i];
    *n = a.count;
    npy_free(&a);
    return x;
}

/* Issue 30: hostile netCDF-4, HDF5 and ODIM_H5 files, each refused with a
 * sentence (or read right), never a crash, a hang or a file read that the
 * user did not name. */
static void hostile_files(const char *odim)
{
    char out[16384], cmd[8192];
    int id, dy, dx, v, rc;
    size_t n;

    /* 1. a variable named like a dimension with 1001 dimensions: was a stack overflow writing the output */
    begin_t("md.nc", &id, &dy, &dx, &v, 0); /* classic: netCDF-4 allows 32 */
    int many[1001];
    for (int k = 0; k < 1000; k++) {
        char name[16];
        snprintf(name, sizeof name, "a%d", k);
        NC(nc_def_dim(id, name, 1, &many[k]));
    }
    many[1000] = dx;
    int vx;
    NC(nc_def_var(id, "x", NC_BYTE, 1001, many, &vx));
    end_t(id, v);
    rc = run("gauss --in md.nc:T --out md_out.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 0 && exists("md_out.nc") && !leftovers(), "x(a0..a999, x) beside T(y, x): exit %d: %s", rc, out);

    /* 2. a global attribute of a compound type: was a free of an uninitialised pointer */
    begin_t("cg.nc", &id, &dy, &dx, &v, NC_NETCDF4);
    nc_type ct;
    struct { int a; double b; } pair = {1, 2.0};
    NC(nc_def_compound(id, sizeof pair, "pair_t", &ct));
    NC(nc_insert_compound(id, ct, "a", 0, NC_INT));
    NC(nc_insert_compound(id, ct, "b", sizeof(double), NC_DOUBLE));
    NC(nc_put_att(id, NC_GLOBAL, "pair", ct, 1, &pair));
    end_t(id, v);
    rc = run("gauss --in cg.nc:T --out cg_out.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "global attribute pair has a user-defined type") && !exists("cg_out.nc") &&
              !leftovers(), "a compound global attribute: exit %d: %s", rc, out);

    /* 3. sizes from the file: 2^61 + 1 doubles (the byte count wrapped to 8), and one value written at 2^60
     * along an unlimited dimension (HDF5 grew past 10 GB) */
    int dt;
    size_t far = (size_t)1 << 61, one = 1;
    double x = 7;
    NC(nc_create(at("ov.nc"), NC_NETCDF4 | NC_CLOBBER, &id));
    NC(nc_def_dim(id, "a", NC_UNLIMITED, &dt));
    NC(nc_def_var(id, "T", NC_DOUBLE, 1, &dt, &v));
    NC(nc_enddef(id));
    NC(nc_put_vara_double(id, v, &far, &one, &x));
    NC(nc_close(id));
    rc = run("gauss --in ov.nc:T --out ov_out.npy --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "2305843009213693953 values: their size in bytes overflows") &&
              !exists("ov_out.npy"), "2^61 + 1 doubles: exit %d: %s", rc, out);
    NC(nc_create(at("ul.nc"), NC_NETCDF4 | NC_CLOBBER, &id));
    NC(nc_def_dim(id, "t", NC_UNLIMITED, &dt));
    NC(nc_def_var(id, "T", NC_DOUBLE, 1, &dt, &v));
    NC(nc_enddef(id));
    far = (size_t)1 << 60;
    NC(nc_put_vara_double(id, v, &far, &one, &x));
    NC(nc_close(id));
    rc = run("gauss --in ul.nc:T --out ul_out.npy --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "more than this machine's memory") && !exists("ul_out.npy"),
          "a value at 2^60 along an unlimited dimension: exit %d: %s", rc, out);
    double *got = values_read("ul.nc:T[t=1152921504606846974:1152921504606846977]", &n, out, sizeof out);
    CHECK(got && n == 3 && isnan(got[0]) && isnan(got[1]) && got[2] == 7,
          "the last 3 values of it (unwritten: NaN, then 7): %s", out);
    free(got);

    /* 4. ODIM geometry that is infinite or absurd: was NaN coordinates and a picture indexed out of bounds */
    static const char *const geometry[][2] = {{"elangle", "inf"}, {"rscale", "1e308"}, {"rstart", "-inf"},
                                              {"elangle", "nan"}};
    for (int k = 0; k < 4; k++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s bad_geo.h5 where %s %s", dir, odim, geometry[k][0], geometry[k][1]);
        CHECK(system(cmd) == 0, "make_odim where %s %s", geometry[k][0], geometry[k][1]);
        rc = run("kmeans --odim bad_geo.h5 --k 3 --labels geo.nc --png geo.png --reference", out, sizeof out);
        CHECK(rc == 1 && (strstr(out, "must be a finite number") || strstr(out, "lacks")) && !exists("geo.nc") &&
                  !exists("geo.png"), "ODIM where/%s = %s: exit %d: %s", geometry[k][0], geometry[k][1], rc, out);
    }

    /* 5. data in another file (HDF5 external storage), a FIFO (was a hang), a virtual dataset */
    FILE *f = fopen(at("secret.bin"), "wb");
    for (int i = 0; i < 20; i++) {
        double s = 1000 + i;
        fwrite(&s, sizeof s, 1, f);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && %s ext.h5 hdf5-external secret.bin && %s extf.h5 hdf5-external fifo && "
             "mkfifo fifo && %s vole.h5 external secret.bin && %s volv.h5 virtual vol.h5", dir, odim, odim, odim,
             odim);
    CHECK(system(cmd) == 0, "make_odim external, virtual");
    rc = run("gauss --in ext.h5:T --out ext_out.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "keeps its data in another file") && !exists("ext_out.nc"),
          "netCDF-4 data in another file: exit %d: %s", rc, out);
    rc = run("gauss --in extf.h5:T --out extf_out.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "keeps its data in another file"), "data in a FIFO: exit %d: %s", rc, out);
    rc = run("kmeans --odim vole.h5 --labels ve.nc --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "keeps its data in another file") && !exists("ve.nc"),
          "ODIM data in another file: exit %d: %s", rc, out);
    rc = run("kmeans --odim volv.h5 --labels vv.nc --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "is virtual") && !exists("vv.nc"), "ODIM virtual data: exit %d: %s", rc, out);

    /* 8. CF decoding as netCDF4-python: a vector missing_value, _Unsigned, unwritten values (the default fill),
     * a scale_factor that is NaN or text */
    NC(nc_create(at("cf.nc"), NC_NETCDF4 | NC_CLOBBER, &id));
    int d4, vm, vu, vf, vn, vt;
    NC(nc_def_dim(id, "i", 4, &d4));
    NC(nc_def_var(id, "M", NC_SHORT, 1, &d4, &vm));
    NC(nc_def_var(id, "U", NC_BYTE, 1, &d4, &vu));
    NC(nc_def_var(id, "F", NC_FLOAT, 1, &d4, &vf));
    NC(nc_def_var(id, "N", NC_SHORT, 1, &d4, &vn));
    NC(nc_def_var(id, "X", NC_SHORT, 1, &d4, &vt));
    short mv[2] = {-1, -2};
    NC(nc_put_att_short(id, vm, "missing_value", NC_SHORT, 2, mv));
    NC(nc_put_att_text(id, vu, "_Unsigned", 4, "true"));
    double nan_scale = NAN;
    NC(nc_put_att_double(id, vn, "scale_factor", NC_DOUBLE, 1, &nan_scale));
    NC(nc_put_att_text(id, vt, "scale_factor", 3, "0.1"));
    NC(nc_enddef(id));
    short ms[4] = {1, -1, -2, 5}, ns[4] = {1, 2, 3, 4};
    signed char us[4] = {-1, 1, -128, 127};
    float fs[2] = {1.5f, 2.5f};
    size_t zero = 0, two = 2;
    NC(nc_put_var_short(id, vm, ms));
    NC(nc_put_var_schar(id, vu, us));
    NC(nc_put_vara_float(id, vf, &zero, &two, fs));
    NC(nc_put_var_short(id, vn, ns));
    NC(nc_put_var_short(id, vt, ns));
    NC(nc_close(id));
    got = values_read("cf.nc:M", &n, out, sizeof out);
    CHECK(got && n == 4 && got[0] == 1 && isnan(got[1]) && isnan(got[2]) && got[3] == 5,
          "missing_value = {-1, -2}: %g %g %g %g: %s", got ? got[0] : 0, got ? got[1] : 0, got ? got[2] : 0,
          got ? got[3] : 0, out);
    free(got);
    got = values_read("cf.nc:U", &n, out, sizeof out);
    CHECK(got && n == 4 && got[0] == 255 && got[1] == 1 && got[2] == 128 && got[3] == 127,
          "_Unsigned = true on bytes -1 1 -128 127: %g %g %g %g: %s", got ? got[0] : 0, got ? got[1] : 0,
          got ? got[2] : 0, got ? got[3] : 0, out);
    free(got);
    got = values_read("cf.nc:F", &n, out, sizeof out);
    CHECK(got && n == 4 && got[0] == 1.5 && got[1] == 2.5 && isnan(got[2]) && isnan(got[3]),
          "values never written (the default fill): %g %g %g %g: %s", got ? got[0] : 0, got ? got[1] : 0,
          got ? got[2] : 0, got ? got[3] : 0, out);
    free(got);
    rc = run("gauss --in cf.nc:N --out cfn.npy --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "scale_factor is nan") && !exists("cfn.npy"), "scale_factor NaN: %d: %s", rc, out);
    rc = run("gauss --in cf.nc:X --out cfx.npy --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "the attribute scale_factor is text") && !exists("cfx.npy"),
          "scale_factor '0.1' (text): %d: %s", rc, out);

    /* 13. a .npy through a pipe: the format check consumed it ("is not a .npy file") */
    snprintf(cmd, sizeof cmd, "cd %s && cat e.npy | timeout 60 %s gauss --in /dev/stdin --out pg.npy --sigma 1 "
             "--reference >/dev/null 2>&1", dir, dakit);
    rc = system(cmd);
    size_t m;
    double *pg = read_npy("pg.npy", &m);
    CHECK(rc == 0 && pg && m == 120, "gauss --in a pipe: status %d", rc);
    free(pg);

    /* 15. a negative index: was "index y=18446744073709551615" */
    rc = run("gauss --in 'field.nc:T[time=0,y=-1]' --out neg.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc != 0 && strstr(out, "no negative ones") && !strstr(out, "18446744073709551615") && !exists("neg.nc"),
          "hyperslab [y=-1]: %d: %s", rc, out);

    /* 17. a history of NC_STRING kept; members of shapes (4, 5) and (5, 4); ODIM data of strings */
    begin_t("hs.nc", &id, &dy, &dx, &v, NC_NETCDF4);
    const char *hist[1] = {"made by a string history"};
    NC(nc_put_att_string(id, NC_GLOBAL, "history", 1, hist));
    end_t(id, v);
    rc = run("gauss --in hs.nc:T --out hs_out.nc --sigma 1 --reference", out, sizeof out);
    CHECK(rc == 0 && strstr(att_text("hs_out.nc", NULL, "history"), "dakit gauss") &&
              strstr(att_text("hs_out.nc", NULL, "history"), "\nmade by a string history"),
          "a history of strings: '%s' %s", att_text("hs_out.nc", NULL, "history"), out);
    for (int m = 0; m < 2; m++) {
        char name[32];
        snprintf(name, sizeof name, "sm_%03d.nc", m);
        NC(nc_create(at(name), NC_NETCDF4 | NC_CLOBBER, &id));
        NC(nc_def_dim(id, "y", m ? 5 : 4, &dy));
        NC(nc_def_dim(id, "x", m ? 4 : 5, &dx));
        int dims[2] = {dy, dx};
        NC(nc_def_var(id, "T", NC_DOUBLE, 2, dims, &v));
        NC(nc_close(id));
    }
    rc = run("enkf cov --ens 'sm_{:03d}.nc:T' --loc c.npy --H H.mtx --out sm.npy --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "has shape 5 x 4 but the first member has 4 x 5") && !exists("sm.npy"),
          "members of shapes (4, 5) and (5, 4): %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "cd %s && %s vols.h5 string", dir, odim);
    CHECK(system(cmd) == 0, "make_odim string");
    rc = run("kmeans --odim vols.h5 --labels vs.nc --reference", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "holds text (strings), not numbers") && !strstr(out, "damaged") && !exists("vs.nc"),
          "ODIM data of strings: %d: %s", rc, out);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        printf("usage: test_formats DAKIT MAKE_ODIM RADOLAN_FILE\n");
        return 2;
    }
    static char dakit_path[4096], odim_path[4096], radolan[4096];
    if (!realpath(argv[1], dakit_path) || !realpath(argv[2], odim_path) || !realpath(argv[3], radolan)) {
        printf("cannot find the programs or the RADOLAN file\n");
        return 2;
    }
    dakit = dakit_path;
    snprintf(dir, sizeof dir, "/tmp/dakit-formats-%d", (int)getpid());
    char cmd[8192], out[16384], err[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0)
        return 1;
    size_t n, m;
    char dims[256];

    /* gauss: netCDF in (a hyperslab), netCDF out with the input's dims, coords, attributes, history */
    write_field();
    int rc = run("gauss --in field.nc:T[time=1] --out g.nc --sigma 2 --reference --method rf --boundary zero", out,
                 sizeof out);
    CHECK(rc == 0, "gauss nc -> nc (%d): %s", rc, out);
    double *g = read_var("g.nc", "T", &n, dims, sizeof dims);
    CHECK(g && n == 180 && !strcmp(dims, "y=12,x=15"), "g.nc:T has dims %s", g ? dims : "(none)");
    CHECK(!strcmp(att_text("g.nc", "T", "units"), "K") && !strcmp(att_text("g.nc", "y", "units"), "km") &&
              !strcmp(att_text("g.nc", NULL, "title"), "test field"),
          "attributes not kept: units '%s', y units '%s', title '%s'", att_text("g.nc", "T", "units"),
          att_text("g.nc", "y", "units"), att_text("g.nc", NULL, "title"));
    const char *hist = att_text("g.nc", NULL, "history");
    CHECK(strstr(hist, "dakit gauss --in field.nc:T[time=1]") && strstr(hist, "\nmade 1st"),
          "history line not added in front of the old one: '%s'", hist);
    double *yc = read_var("g.nc", "y", &m, NULL, 0);
    CHECK(yc && m == 12 && yc[3] == 107.5, "coordinate y not copied");
    free(yc);
    /* against the reference on the slab, and the same through .npy */
    double slab[180], ref[180];
    for (int i = 0; i < 180; i++)
        slab[i] = field(1, i / 15, i % 15);
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF, d.boundary = DK_BOUNDARY_ZERO;
    d.dtype = DK_F64, d.ndim = 2, d.shape[0] = 12, d.shape[1] = 15, d.axes = 3, d.sigma[0] = d.sigma[1] = 2;
    dk_gauss_reference(&d, slab, ref);
    CHECK(g && max_diff(g, ref, 180) < 1e-12, "g.nc differs from the reference");
    rc = run("gauss --in field.nc --var T --in field.nc:T[time=1] --out g.npy --sigma 2 --reference --method rf "
             "--boundary zero", out, sizeof out);
    double *gn = read_npy("g.npy", &m);
    CHECK(rc == 0 && gn && m == 180 && g && max_diff(g, gn, 180) == 0, "nc -> npy differs from nc -> nc: %s", out);
    /* npy -> nc -> npy */
    rc = run("gauss --in g.npy --out h.nc --sigma 1 --reference --method rf --boundary zero", out, sizeof out);
    double *h = read_var("h.nc", "data", &n, dims, sizeof dims);
    CHECK(rc == 0 && h && !strcmp(dims, "dim0=12,dim1=15"), "npy -> nc: %s %s", out, h ? dims : "");
    rc = run("gauss --in h.nc --out h2.npy --sigma 1 --reference --method rf --boundary zero", out, sizeof out);
    double *h1 = read_npy("h2.npy", &m);
    d.sigma[0] = d.sigma[1] = 1;
    double twice[180];
    if (gn)
        dk_gauss_reference(&d, gn, ref), dk_gauss_reference(&d, ref, twice);
    CHECK(rc == 0 && h1 && gn && max_diff(h1, twice, 180) < 1e-12, "npy -> nc -> npy: %s", out);
    free(g), free(gn), free(h), free(h1);
    /* a range hyperslab keeps the coordinates of its part */
    rc = run("gauss --in 'field.nc:T[time=0,y=5:9]' --out s.nc --sigma 1 --reference", out, sizeof out);
    g = read_var("s.nc", "T", &n, dims, sizeof dims);
    yc = read_var("s.nc", "y", &m, NULL, 0);
    CHECK(rc == 0 && g && !strcmp(dims, "y=4,x=15") && yc && yc[0] == 112.5, "range hyperslab: %s %s", out,
          g ? dims : "");
    free(g), free(yc);

    /* enkf: (member, y, x), (y, x, member) and one file per member give the same PHT as the .npy */
    write_ensemble("e1.nc", 1, 0);
    write_ensemble("e2.nc", 0, 0);
    write_ensemble(NULL, 0, 1);
    npy_array E = {.dtype = DK_F64, .ndim = 2, .shape = {20, 6}, .count = 120};
    E.data = malloc(120 * sizeof(double));
    for (int i = 0; i < 20; i++)
        for (int l = 0; l < 6; l++)
            ((double *)E.data)[i * 6 + l] = ens_float(l, i / 5, i % 5);
    CHECK(npy_write(at("e.npy"), &E, err, sizeof err) == DK_OK, "%s", err);
    free(E.data);
    npy_array c = {.dtype = DK_F64, .ndim = 1, .shape = {20}, .count = 20};
    double cv[20], yv[3] = {0.5, -0.2, 1.0}, rv[3] = {0.5, 0.5, 0.5};
    for (int i = 0; i < 20; i++)
        cv[i] = exp(-i * i / 8.0);
    c.data = cv;
    CHECK(npy_write(at("c.npy"), &c, err, sizeof err) == DK_OK, "%s", err);
    npy_array yo = {.dtype = DK_F64, .ndim = 1, .shape = {3}, .count = 3, .data = yv};
    npy_array ro = {.dtype = DK_F64, .ndim = 1, .shape = {3}, .count = 3, .data = rv};
    npy_write(at("y.npy"), &yo, err, sizeof err);
    npy_write(at("r.npy"), &ro, err, sizeof err);
    FILE *f = fopen(at("H.mtx"), "w");
    fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n3 20 3\n1 2 1.0\n2 8 1.0\n3 17 1.0\n");
    fclose(f);
    const char *ens[] = {"e.npy", "e1.nc:T", "e2.nc:T", "'mem_{:03d}.nc:T'"};
    double *pht[4] = {0};
    for (int k = 0; k < 4; k++) {
        snprintf(cmd, sizeof cmd, "enkf cov --ens %s --loc c.npy --H H.mtx --out pht%d.npy --reference", ens[k], k);
        rc = run(cmd, out, sizeof out);
        char name[32];
        snprintf(name, sizeof name, "pht%d.npy", k);
        pht[k] = read_npy(name, &m);
        CHECK(rc == 0 && pht[k] && m == 60, "enkf cov --ens %s: %s", ens[k], out);
    }
    for (int k = 1; k < 4; k++)
        CHECK(pht[0] && pht[k] && max_diff(pht[0], pht[k], 60) == 0, "PHT from %s differs from the .npy's", ens[k]);
    for (int k = 0; k < 4; k++)
        free(pht[k]);
    /* PHT as netCDF over the state dimensions; the analysis in the input's layout */
    rc = run("enkf cov --ens e1.nc:T --loc c.npy --H H.mtx --out pht.nc --reference", out, sizeof out);
    g = read_var("pht.nc", "PHT", &n, dims, sizeof dims);
    CHECK(rc == 0 && g && !strcmp(dims, "y=4,x=5,observation=3"), "pht.nc dims %s: %s", g ? dims : "", out);
    free(g);
    rc = run("enkf analysis --ens e2.nc:T --loc c.npy --H H.mtx --obs y.npy --obs-var r.npy --seed 7 --out a2.nc "
             "--reference", out, sizeof out);
    g = read_var("a2.nc", "T", &n, dims, sizeof dims);
    CHECK(rc == 0 && g && !strcmp(dims, "y=4,x=5,realization=6"), "a2.nc dims %s: %s", g ? dims : "", out);
    yc = read_var("a2.nc", "realization", &m, NULL, 0);
    CHECK(yc && m == 6 && yc[5] == 6, "the member coordinate was not kept");
    free(yc);
    rc = run("enkf analysis --ens 'mem_{:03d}.nc:T' --loc c.npy --H H.mtx --obs y.npy --obs-var r.npy --seed 7 "
             "--out 'ana_{:03d}.nc' --reference", out, sizeof out);
    CHECK(rc == 0 && exists("ana_000.nc") && exists("ana_005.nc") && !exists("ana_006.nc"),
          "per-member output: %s", out);
    double *a5 = read_var("ana_005.nc", "T", &m, dims, sizeof dims);
    CHECK(g && a5 && m == 20 && !strcmp(dims, "y=4,x=5"), "ana_005.nc dims %s", a5 ? dims : "");
    for (size_t i = 0; g && a5 && i < 20; i++) /* member 5 of a2.nc (y, x, member) */
        CHECK(a5[i] == g[i * 6 + 5], "member 5 differs at %zu: %g vs %g", i, a5[i], g[i * 6 + 5]);
    free(g), free(a5);

    /* kmeans points from netCDF, labels to netCDF */
    rc = run("kmeans --in 'field.nc:T[time=0,y=0]' --k 2 --labels kl.nc --reference", out, sizeof out);
    g = read_var("kl.nc", "labels", &n, dims, sizeof dims);
    CHECK(rc == 0 && g && !strcmp(dims, "x=15"), "kmeans --in nc: %s %s", out, g ? dims : "");
    free(g);

    /* ODIM_H5: a synthetic volume (make_odim), and the same turned by 180 degrees */
    snprintf(cmd, sizeof cmd, "cd %s && %s vol.h5 && %s volr.h5 roll 180 && %s volc.h5 corrupt && %s volp.h5 plain",
             dir, odim_path, odim_path, odim_path, odim_path);
    CHECK(system(cmd) == 0, "make_odim failed");
    rc = run("kmeans --odim vol.h5 --sweep 1 --k 4 --labels ol.nc --png ppi.png --reference", out, sizeof out);
    CHECK(rc == 0 && exists("ppi.png"), "kmeans --odim: %s", out);
    rc = run("kmeans --odim volr.h5 --k 4 --labels olr.nc --reference", out, sizeof out);
    double *la = read_var("ol.nc", "labels", &n, dims, sizeof dims), *lb = read_var("olr.nc", "labels", &m, NULL, 0);
    CHECK(rc == 0 && la && lb && n == 43200 && !strcmp(dims, "azimuth=360,range=120"), "odim labels %s: %s",
          la ? dims : "", out);
    if (la && lb && n == m) {
        /* the storm core across north: one cluster on both sides of the seam, the strongest one */
        int core = (int)la[0 * 120 + 60];
        CHECK(core >= 0 && la[359 * 120 + 60] == core && la[1 * 120 + 60] == core && la[358 * 120 + 60] == core,
              "the storm core across north is split: %g %g | %g %g", la[358 * 120 + 60], la[359 * 120 + 60],
              la[0 * 120 + 60], la[120 + 60]);
        /* where north lies in the stored rays changes little (docs/formats.md: the copied rays' share) */
        size_t same = 0;
        for (size_t i = 0; i < 360; i++)
            for (size_t j = 0; j < 120; j++)
                same += la[i * 120 + j] == lb[((i + 180) % 360) * 120 + j];
        CHECK(same >= 43200 * 95 / 100, "turning the volume by 180 degrees changed %zu of 43200 labels",
              43200 - same);
        printf("odim: %zu of 43200 labels agree with the volume turned by 180 degrees\n", same);
    }
    free(la), free(lb);
    CHECK(!strcmp(att_text("ol.nc", NULL, "odim_quantity"), "DBZH") &&
              !strcmp(att_text("ol.nc", "lat", "units"), "degrees_north"),
          "odim labels attributes");

    /* RADOLAN labels as CF netCDF */
    snprintf(cmd, sizeof cmd, "kmeans --radolan %s --labels rl.nc --reference", radolan);
    rc = run(cmd, out, sizeof out);
    CHECK(rc == 0, "kmeans --radolan --labels rl.nc: %s", out);
    CHECK(!strcmp(att_text("rl.nc", NULL, "radolan_product"), "RX") &&
              !strcmp(att_text("rl.nc", NULL, "radolan_time"), "2014-08-10T20:50Z") &&
              !strcmp(att_text("rl.nc", NULL, "radolan_units"), "dBZ") &&
              !strcmp(att_text("rl.nc", "x", "units"), "m") &&
              !strcmp(att_text("rl.nc", "crs", "grid_mapping_name"), "polar_stereographic") &&
              !strcmp(att_text("rl.nc", "labels", "grid_mapping"), "crs"),
          "RADOLAN CF attributes: product '%s' time '%s'", att_text("rl.nc", NULL, "radolan_product"),
          att_text("rl.nc", NULL, "radolan_time"));
    double *lat = read_var("rl.nc", "lat", &n, NULL, 0), *lon = read_var("rl.nc", "lon", &m, NULL, 0);
    /* DWD's corners of the 900 x 900 grid: 46.9526N 3.5889E (south-west), 54.7405N 15.7208E (north-east);
     * pixel centres lie within a pixel of them */
    CHECK(lat && lon && n == 810000 && fabs(lat[0] - 46.9526) < 0.01 && fabs(lon[0] - 3.5889) < 0.01 &&
              fabs(lat[n - 1] - 54.7405) < 0.01 && fabs(lon[n - 1] - 15.7208) < 0.02,
          "RADOLAN corners: %g %g .. %g %g", lat ? lat[0] : 0, lon ? lon[0] : 0, lat ? lat[n - 1] : 0,
          lon ? lon[n - 1] : 0);
    free(lat), free(lon);
    if (system("command -v ncdump >/dev/null") == 0) {
        snprintf(cmd, sizeof cmd, "ncdump -h %s | grep -q 'time:units = \"minutes since 1970-01-01'", at("rl.nc"));
        CHECK(system(cmd) == 0, "ncdump -h rl.nc shows no CF time");
    }

    /* bad files: a sentence, a non-zero exit, no output */
    f = fopen(at("text.nc"), "w");
    fprintf(f, "this is not netCDF\n");
    fclose(f);
    static const struct {
        const char *args, *says, *output;
    } bad[] = {
        {"gauss --in text.nc:T --out o1.nc --sigma 1 --reference", "not a netCDF file", "o1.nc"},
        {"gauss --in field.nc:Q --out o2.nc --sigma 1 --reference", "has no variable 'Q'; it has:", "o2.nc"},
        {"gauss --in field.nc --out o3.nc --sigma 1 --reference", "several variables", "o3.nc"},
        {"gauss --in 'field.nc:T[time=5]' --out o4.nc --sigma 1 --reference", "out of range", "o4.nc"},
        {"gauss --in 'field.nc:T[z=0]' --out o5.nc --sigma 1 --reference", "no dimension 'z'", "o5.nc"},
        {"enkf cov --ens 'field.nc:T[time=0,y=0]' --loc c.npy --H H.mtx --out o6.nc --reference", "dimensions",
         "o6.nc"},
        {"enkf cov --ens 'nomem_{:03d}.nc:T' --loc c.npy --H H.mtx --out o7.nc --reference", "no member files",
         "o7.nc"},
        {"kmeans --odim volc.h5 --labels o8.nc --png o8.png --reference", "damaged", "o8.nc"},
        {"kmeans --odim volp.h5 --labels o9.nc --reference", "not ODIM_H5", "o9.nc"},
        {"kmeans --odim text.nc --labels o10.nc --reference", "not an HDF5 file", "o10.nc"},
        {"kmeans --odim vol.h5 --sweep 9 --labels o11.nc --reference", "has no sweep 9", "o11.nc"},
        {"kmeans --odim vol.h5 --quantity TH --labels o12.nc --reference", "no quantity TH", "o12.nc"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rc = run(bad[k].args, out, sizeof out);
        CHECK(rc != 0 && strstr(out, bad[k].says) && !exists(bad[k].output),
              "dakit %s: exit %d, expected '%s' and no %s; said: %s", bad[k].args, rc, bad[k].says, bad[k].output,
              out);
    }
    hostile_files(odim_path);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!failures && system(cmd) != 0)
        printf("could not remove %s\n", dir);
    printf("%s (%d failure%s)\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
