/* libFuzzer target: the netCDF reader (array_read, array_read_ensemble) and
 * writer (array_write like an input, tools/cli/netcdf.c). Structure-aware:
 * the input describes a file (classic or netCDF-4; dimensions, some of them
 * huge or unlimited; the variable's type; CF attributes of any type and
 * length; a history as text or strings; a user-typed global attribute; the
 * values) that is written with the netCDF C API, then a spec with the rest of
 * the input as its hyperslab. Mutating HDF5's bytes would fuzz libhdf5's own
 * parser, which is not dakit's (docs/reliability.md). Any file is read or
 * refused with a sentence; a result's shape multiplies out to its count and
 * it writes back as netCDF like its input. */
#include <math.h>
#include <netcdf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/netcdf.h"

#include "fuzz_bytes.h"

static char dir[64], in_path[128], out_path[128];

/* The folder and its files go when the fuzzer ends. */
static void clean_up(void)
{
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/dakit-fuzz-nc-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    atexit(clean_up);
    snprintf(in_path, sizeof in_path, "%s/in.nc", dir);
    snprintf(out_path, sizeof out_path, "%s/out.nc", dir);
    return 0;
}

static const nc_type types[] = {NC_BYTE, NC_UBYTE, NC_SHORT, NC_USHORT, NC_INT,  NC_UINT,
                                NC_INT64, NC_UINT64, NC_FLOAT, NC_DOUBLE, NC_CHAR, NC_STRING};
static const char *const att_names[] = {"scale_factor", "add_offset", "_FillValue", "missing_value",
                                        "valid_min",    "valid_max",  "valid_range", "_Unsigned", "units"};

/* An attribute from the input: absent, text, or 1-4 numbers of some type. */
static void put_att(int id, int var, const char *name, fuzz_bytes *b, nc_type vtype, int nc4)
{
    uint8_t how = fb_u8(b);
    if (how < 100)
        return;
    if (how < 130) {
        char text[16] = {0};
        size_t n = fb_u8(b) % 8;
        for (size_t i = 0; i < n; i++)
            text[i] = (char)("truefals0.1e-x "[fb_u8(b) % 15]);
        nc_put_att_text(id, var, name, n ? n : 1, n ? text : "t");
        return;
    }
    double v[4];
    size_t n = 1 + fb_u8(b) % 4;
    for (size_t i = 0; i < n; i++)
        v[i] = fb_double(b);
    nc_type t = how < 200 ? vtype : types[how % (nc4 ? 10 : 6)];
    if (t == NC_CHAR || t == NC_STRING)
        t = NC_DOUBLE;
    nc_put_att_double(id, var, name, t, n, v); /* NC_ERANGE leaves what fits */
}

/* Writes the file the input describes; the variable is "v". 0, or -1 when
 * netCDF refused the description (not an input for dakit then). */
static int write_file(fuzz_bytes *b, int *ndims_out)
{
    uint8_t flags = fb_u8(b);
    int nc4 = flags & 1, id, rc;
    if (nc_create(in_path, NC_CLOBBER | (nc4 ? NC_NETCDF4 : NC_64BIT_DATA), &id) != NC_NOERR)
        return -1;
    nc_set_fill(id, NC_NOFILL, NULL);
    int nd = 1 + fb_u8(b) % 4, dims[4];
    size_t size[4];
    double total = 1;
    int huge = 0;
    for (int d = 0; d < nd; d++) {
        uint8_t k = fb_u8(b);
        /* now and then, in netCDF-4 (no bytes behind it), one huge one: 2^40
         * to 2^51, beyond any memory, so that reading it whole must be refused
         * (a dataset past 2^64 bytes fails in nc_close, and libnetcdf leaks then) */
        size[d] = k < 200 || !nc4 || huge ? k % 7 : (size_t)1 << (40 + k % 12);
        huge |= size[d] > 6;
        total *= size[d] ? (double)size[d] : 1;
        char name[16];
        snprintf(name, sizeof name, "%s%d", d == 0 && (flags & 2) ? "member" : "d", d);
        int unlimited = d == 0 && (flags & 4);
        if (nc_def_dim(id, name, unlimited ? NC_UNLIMITED : size[d], &dims[d]) != NC_NOERR)
            goto fail;
        if (unlimited)
            size[d] = 0;
    }
    /* values that fit in memory are written; a huge variable is declared only
     * (its size is what dakit must refuse) */
    nc_type t = types[fb_u8(b) % (nc4 ? 12 : 10)];
    int v;
    if (nc_def_var(id, "v", t, nd, dims, &v) != NC_NOERR)
        goto fail;
    if (flags & 8) { /* a coordinate variable for d0, or a variable named like it with more dimensions */
        int cv;
        char name[16];
        nc_inq_dimname(id, dims[0], name);
        nc_def_var(id, name, NC_DOUBLE, (flags & 16) ? nd : 1, dims, &cv);
    }
    for (size_t a = 0; a < sizeof att_names / sizeof att_names[0]; a++)
        put_att(id, v, att_names[a], b, t, nc4);
    uint8_t h = fb_u8(b);
    if (h & 1)
        nc_put_att_text(id, NC_GLOBAL, "history", 5, "made\n");
    if (nc4 && (h & 2)) {
        const char *lines[2] = {"first", "second"};
        nc_put_att_string(id, NC_GLOBAL, "history", 1 + (h >> 7), lines);
    }
    if (nc4 && (h & 4)) {
        nc_type ct;
        struct { int a; double b; } c = {1, 2.0};
        if (nc_def_compound(id, sizeof c, "pair", &ct) == NC_NOERR &&
            nc_insert_compound(id, ct, "a", 0, NC_INT) == NC_NOERR &&
            nc_insert_compound(id, ct, "b", sizeof(double), NC_DOUBLE) == NC_NOERR)
            nc_put_att(id, NC_GLOBAL, "pair", ct, 1, &c);
    }
    /* a description HDF5 refuses at enddef: nc_close releases what nc_abort
     * would leave allocated in libnetcdf */
    if ((rc = nc_enddef(id)) != NC_NOERR) {
        nc_close(id);
        return -1;
    }
    if (total <= 4096 && t != NC_STRING) {
        size_t start[4] = {0}, count[4];
        for (int d = 0; d < nd; d++)
            count[d] = d == 0 && (flags & 4) ? fb_u8(b) % 5 : size[d];
        size_t n = 1;
        for (int d = 0; d < nd; d++)
            n *= count[d];
        double *x = malloc((n ? n : 1) * sizeof *x);
        for (size_t i = 0; i < n; i++)
            x[i] = fb_double(b);
        if (t == NC_CHAR) {
            char *c = malloc(n ? n : 1);
            for (size_t i = 0; i < n; i++)
                c[i] = (char)(0x20 + i % 90);
            nc_put_vara_text(id, v, start, count, c);
            free(c);
        } else {
            nc_put_vara_double(id, v, start, count, x); /* NC_ERANGE: the rest is written */
        }
        free(x);
    } else if (nc4 && (flags & 4)) { /* one value far out along the unlimited dimension */
        size_t start[4] = {0}, count[4] = {1, 1, 1, 1};
        /* near (a read of at most tens of MB) or past any memory (a read
         * that must be refused): between, a read this machine can hold
         * would be legitimate, and past libFuzzer's 2 GB memory limit */
        const uint8_t k = fb_u8(b);
        start[0] = (size_t)1 << (k < 128 ? k % 16 : 40 + k % 12);
        for (int d = 1; d < nd; d++)
            count[d] = size[d] && size[d] <= 4 ? size[d] : 0;
        double x[64] = {0};
        if (t != NC_CHAR && t != NC_STRING && size[1 % nd] <= 4)
            nc_put_vara_double(id, v, start, count, x);
    }
    *ndims_out = nd;
    return nc_close(id) == NC_NOERR ? 0 : -1;
fail:
    nc_abort(id);
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_bytes b = {data, size};
    int nd = 0;
    uint8_t mode = fb_u8(&b);
    if (write_file(&b, &nd) != 0) {
        unlink(in_path);
        return 0;
    }
    /* the rest of the input: the spec's hyperslab */
    char spec[512];
    int at = snprintf(spec, sizeof spec, "%s:v", in_path);
    if (b.left && (mode & 1)) {
        size_t n = b.left < sizeof spec - (size_t)at - 1 ? b.left : sizeof spec - (size_t)at - 1;
        memcpy(spec + at, b.p, n);
        spec[at + (int)n] = '\0';
        if (strlen(spec + at) != n)
            spec[at] = '\0'; /* a NUL inside: no hyperslab */
    }
    char err[1024];
    npy_array a;
    array_origin o;
    dk_status st = (mode & 2) ? array_read_ensemble(spec, NULL, &a, &o, err, sizeof err)
                              : array_read(spec, NULL, &a, &o, err, sizeof err);
    if (st == DK_OK) {
        size_t count = 1;
        if (a.ndim < 1 || a.ndim > NPY_MAX_DIMS || !a.data || (a.dtype != DK_F32 && a.dtype != DK_F64))
            abort();
        for (int i = 0; i < a.ndim; i++)
            count *= a.shape[i];
        if (count != a.count)
            abort();
        if (a.count) /* every value is there: touch the last one */
            (void)*(volatile unsigned char *)((unsigned char *)a.data + a.count * dk_dtype_size(a.dtype) - 1);
        if (mode & 4) {
            if (a.dtype == DK_F32)
                st = array_write(out_path, "v", ARRAY_F32, a.ndim, a.shape, a.data, &o, 1, err, sizeof err);
            else
                st = array_write(out_path, "v", ARRAY_F64, a.ndim, a.shape, a.data, &o, 1, err, sizeof err);
            if (st != DK_OK && !err[0])
                abort();
            unlink(out_path);
        }
        npy_free(&a);
    } else if (!err[0] || a.data) {
        abort(); /* a refusal says why and holds nothing */
    }
    unlink(in_path);
    return 0;
}
