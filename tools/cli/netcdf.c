#define _GNU_SOURCE
#include "cli/netcdf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/output.h"

#ifdef DK_HAVE_NETCDF
#include <netcdf.h>
#endif

#define FAIL(st, ...) (snprintf(err, len, __VA_ARGS__), (st))

static char command_line[2048];

void array_set_command_line(int argc, char **argv)
{
    size_t at = 0;
    command_line[0] = '\0';
    for (int i = 0; i < argc && at < sizeof command_line - 1; i++) {
        const char *a = i ? argv[i] : "dakit"; /* not the build folder's path to it */
        int n = snprintf(command_line + at, sizeof command_line - at, "%s%s", i ? " " : "", a);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

int array_is_netcdf_name(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot && (!strcmp(dot, ".nc") || !strcmp(dot, ".nc4") || !strcmp(dot, ".netcdf"));
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Splits spec into the file and what follows its ':' (variable and
 * hyperslab): the longest prefix that names a file, or the part before the
 * first ':' when none does (the error then names that file). */
void array_split_spec(const char *spec, char *path, size_t plen, const char **rest)
{
    *rest = NULL;
    snprintf(path, plen, "%s", spec);
    if (is_file(spec) || strchr(spec, '{'))
        goto pattern;
    for (const char *c = strrchr(spec, ':'); c; c = c > spec ? memrchr(spec, ':', (size_t)(c - spec)) : NULL) {
        snprintf(path, plen, "%.*s", (int)(c - spec), spec);
        if (is_file(path)) {
            *rest = c + 1;
            return;
        }
    }
    const char *c = strchr(spec, ':');
    if (c) {
        snprintf(path, plen, "%.*s", (int)(c - spec), spec);
        *rest = c + 1;
    }
    return;
pattern:
    /* a pattern's ':' after the closing brace separates the variable */
    {
        const char *close = strrchr(spec, '}');
        const char *c = strchr(close ? close : spec, ':');
        if (c) {
            snprintf(path, plen, "%.*s", (int)(c - spec), spec);
            *rest = c + 1;
        }
    }
}

/* What the first bytes say: 'n' .npy, 'c' netCDF (classic or HDF5-based), 0 neither or unreadable. */
int array_sniff(const char *path)
{
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    if (got >= 6 && !memcmp(b, "\x93NUMPY", 6))
        return 'n';
    if (got >= 4 && !memcmp(b, "CDF", 3) && (b[3] == 1 || b[3] == 2 || b[3] == 5))
        return 'c';
    if (got >= 8 && !memcmp(b, "\x89HDF\r\n\x1a\n", 8))
        return 'c';
    return 0;
}

/* "2305843009213693953 x 4": a shape for a sentence. */
static const char *shape_text(const size_t *count, int nd, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int d = 0; d < nd; d++) {
        size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%zu", d ? " x " : "", count[d]);
    }
    return buf;
}

#ifdef DK_HAVE_HDF5
#include <hdf5.h>

typedef struct elsewhere {
    char *why;
    size_t len;
    const char *path;
} elsewhere;

static herr_t check_link(hid_t group, const char *name, const H5L_info_t *info, void *p)
{
    elsewhere *e = p;
    if (info->type == H5L_TYPE_EXTERNAL) {
        snprintf(e->why, e->len, "%s: /%s is an external link to another file; dakit reads only what the file "
                 "itself holds", e->path, name);
        return 1;
    }
    if (info->type != H5L_TYPE_HARD)
        return 0;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0)
        return 0;
    int found = 0;
    if (H5Iget_type(obj) == H5I_DATASET) {
        hid_t dcpl = H5Dget_create_plist(obj);
        if (dcpl >= 0) {
            if (H5Pget_external_count(dcpl) > 0) {
                snprintf(e->why, e->len, "%s: the dataset /%s keeps its data in another file (HDF5 external "
                         "storage); dakit reads only what the file itself holds", e->path, name);
                found = 1;
            } else if (H5Pget_layout(dcpl) == H5D_VIRTUAL) {
                snprintf(e->why, e->len, "%s: the dataset /%s is virtual (its data lives in other files); dakit "
                         "reads only what the file itself holds", e->path, name);
                found = 1;
            }
            H5Pclose(dcpl);
        }
    }
    H5Oclose(obj);
    return found;
}

int hdf5_points_elsewhere(const char *path, char *why, size_t len)
{
    htri_t is = -1;
    hid_t file = -1;
    int found = 0;
    elsewhere e = {why, len, path};
    H5E_BEGIN_TRY
    {
        is = H5Fis_hdf5(path);
        if (is > 0 && (file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) >= 0) {
            found = H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, check_link, &e) > 0;
            H5Fclose(file);
        }
    }
    H5E_END_TRY;
    return found;
}
#else
int hdf5_points_elsewhere(const char *path, char *why, size_t len)
{
    (void)path, (void)why, (void)len;
    return 0;
}
#endif

#ifdef DK_HAVE_NETCDF

int array_have_netcdf(void)
{
    return 1;
}

#define NC_TRY(call, ...)                                                                                         \
    do {                                                                                                          \
        int nc_rc_ = (call);                                                                                      \
        if (nc_rc_ != NC_NOERR) {                                                                                 \
            char what_[512];                                                                                      \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                                           \
            st = FAIL(DK_ERR_FORMAT, "%s: %s", what_, nc_strerror(nc_rc_));                                      \
            goto done;                                                                                            \
        }                                                                                                         \
    } while (0)

static const char *const member_names[] = {"member", "members", "ens", "ensemble", "realization", "number",
                                           "mem", NULL};

/* Whether dimension dimid of ncid numbers ensemble members: by its name, or
 * its coordinate's standard_name "realization" or axis "E". */
static int is_member_dim(int ncid, int dimid)
{
    char name[NC_MAX_NAME + 1];
    if (nc_inq_dimname(ncid, dimid, name) != NC_NOERR)
        return 0;
    for (int k = 0; member_names[k]; k++)
        if (!strcasecmp(name, member_names[k]))
            return 1;
    int cv;
    if (nc_inq_varid(ncid, name, &cv) != NC_NOERR)
        return 0;
    char text[64];
    size_t n;
    static const char *const attrs[][2] = {{"standard_name", "realization"}, {"axis", "E"}};
    for (int a = 0; a < 2; a++)
        if (nc_inq_attlen(ncid, cv, attrs[a][0], &n) == NC_NOERR && n < sizeof text &&
            nc_get_att_text(ncid, cv, attrs[a][0], text) == NC_NOERR) {
            text[n] = '\0';
            if (!strcmp(text, attrs[a][1]))
                return 1;
        }
    return 0;
}

/* The one variable of the file that is not a coordinate and has dimensions,
 * or -1 with a sentence that lists the candidates. */
static int only_data_variable(int ncid, const char *path, char *err, size_t len)
{
    int nvars, found = -1, many = 0;
    char list[1024] = "";
    if (nc_inq_nvars(ncid, &nvars) != NC_NOERR)
        nvars = 0;
    for (int v = 0; v < nvars; v++) {
        char name[NC_MAX_NAME + 1];
        int nd, dimid;
        nc_inq_varname(ncid, v, name);
        nc_inq_varndims(ncid, v, &nd);
        if (nd == 0)
            continue;
        if (nc_inq_dimid(ncid, name, &dimid) == NC_NOERR && nd == 1)
            continue; /* a coordinate variable */
        if (found >= 0)
            many = 1;
        else
            found = v;
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", name);
    }
    if (found < 0) {
        snprintf(err, len, "%s holds no data variable", path);
        return -1;
    }
    if (many) {
        snprintf(err, len, "%s holds several variables (%s); name one: %s:VARIABLE or --var", path, list, path);
        return -1;
    }
    return found;
}

static void list_variables(int ncid, char *list, size_t n)
{
    int nvars;
    list[0] = '\0';
    if (nc_inq_nvars(ncid, &nvars) != NC_NOERR)
        return;
    for (int v = 0; v < nvars; v++) {
        char name[NC_MAX_NAME + 1];
        nc_inq_varname(ncid, v, name);
        size_t at = strlen(list);
        snprintf(list + at, n - at, "%s%s", at ? ", " : "", name);
    }
}

/* Parses "name=i" / "name=a:b" items of a hyperslab "[...]" against the
 * variable's dimensions: start, count, and keep[d] (0 for a single index). */
static dk_status parse_slab(int ncid, const char *path, const char *var, const char *slab, int nd,
                            const int *dimids, const size_t *size, size_t *start, size_t *count, int *keep,
                            char *err, size_t len)
{
    for (int d = 0; d < nd; d++) {
        start[d] = 0;
        count[d] = size[d];
        keep[d] = 1;
    }
    if (!slab)
        return DK_OK;
    const char *p = slab;
    while (*p && *p != ']') {
        const char *eq = strchr(p, '=');
        size_t nlen = eq ? (size_t)(eq - p) : 0;
        if (!eq || nlen == 0 || nlen > NC_MAX_NAME)
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: the hyperslab must be [dim=i,dim=start:stop,...], not '[%s'",
                        path, var, slab);
        char name[NC_MAX_NAME + 1];
        memcpy(name, p, nlen);
        name[nlen] = '\0';
        int d = -1;
        for (int k = 0; k < nd; k++) {
            char dn[NC_MAX_NAME + 1];
            nc_inq_dimname(ncid, dimids[k], dn);
            if (!strcmp(dn, name))
                d = k;
        }
        if (d < 0)
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: variable %s has no dimension '%s'", path, var, name);
        char *end;
        errno = 0;
        /* strtoull takes "-1" as 2^64 - 1: an index must start with a digit */
        unsigned long long a = isdigit((unsigned char)eq[1]) ? strtoull(eq + 1, &end, 10) : 0, b;
        if (!isdigit((unsigned char)eq[1]) || errno)
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: '%s=' must be followed by an index from 0 or start:stop "
                        "(indices count from 0; no negative ones)", path, var, name);
        if (*end == ':') {
            const char *s = end + 1;
            b = isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
            if (!isdigit((unsigned char)*s) || errno || b <= a || b > size[d])
                return FAIL(DK_ERR_INVALID_ARGUMENT,
                            "%s:%s: the range %s=%llu:... must end after its start and at most at %zu (the "
                            "dimension's length)", path, var, name, a, size[d]);
            start[d] = (size_t)a;
            count[d] = (size_t)(b - a);
        } else {
            if (a >= size[d])
                return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: index %s=%llu is out of range (length %zu)", path, var,
                            name, a, size[d]);
            start[d] = (size_t)a;
            count[d] = 1;
            keep[d] = 0;
        }
        p = end;
        if (*p == ',')
            p++;
        else if (*p != ']')
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: the hyperslab must be [dim=i,dim=start:stop,...], not '[%s'",
                        path, var, slab);
    }
    if (*p != ']' || p[1])
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: the hyperslab must end with ']', as in [time=0]", path, var);
    return DK_OK;
}

/* A numeric attribute of up to max values: 0 absent, the number of values,
 * or -1 with a sentence when it is text, of a user-defined type or longer. */
static int att_numbers(int ncid, int varid, const char *path, const char *var, const char *name, double *v,
                       size_t max, char *err, size_t len)
{
    nc_type t;
    size_t n;
    if (nc_inq_att(ncid, varid, name, &t, &n) != NC_NOERR)
        return 0;
    if (t == NC_CHAR || t == NC_STRING || t > NC_STRING || n == 0) {
        snprintf(err, len, "%s:%s: the attribute %s is %s, not a number; dakit (as netCDF4-python) cannot apply "
                 "it: fix or delete the attribute (ncatted -a %s,%s,d,,)", path, var, name,
                 t == NC_CHAR || t == NC_STRING ? "text" : n == 0 ? "empty" : "of a user-defined type", name, var);
        return -1;
    }
    if (n > max) {
        snprintf(err, len, "%s:%s: the attribute %s has %zu values; dakit takes at most %zu", path, var, name, n,
                 max);
        return -1;
    }
    if (nc_get_att_double(ncid, varid, name, v) != NC_NOERR) {
        snprintf(err, len, "%s:%s: the attribute %s cannot be read as numbers", path, var, name);
        return -1;
    }
    return (int)n;
}

#define CF_MAX_MISSING 256

/* How the stored values become physical ones, as netCDF4-python's
 * automatic mask and scale does it: a value equal to _FillValue (or, when
 * there is none, to the type's default fill, except for bytes without fill
 * mode) or to any of missing_value's values is missing; _Unsigned = "true"
 * reads a signed integer type as unsigned; a value outside valid_range (or
 * valid_min, valid_max) is missing; then value * scale_factor + add_offset.
 * Missing values become NaN. */
typedef struct cf_decode {
    int have_fill;
    double fill;
    int n_missing;
    double missing[CF_MAX_MISSING];
    double unsigned_span; /* 2^bits for an _Unsigned integer type, else 0 */
    double vmin, vmax;    /* -inf, +inf when absent */
    double scale, offset;
    int packed;
} cf_decode;

static double default_fill(nc_type t)
{
    switch (t) {
    case NC_BYTE: return NC_FILL_BYTE;
    case NC_UBYTE: return NC_FILL_UBYTE;
    case NC_SHORT: return NC_FILL_SHORT;
    case NC_USHORT: return NC_FILL_USHORT;
    case NC_INT: return NC_FILL_INT;
    case NC_UINT: return NC_FILL_UINT;
    case NC_INT64: return (double)NC_FILL_INT64;
    case NC_UINT64: return (double)NC_FILL_UINT64;
    case NC_FLOAT: return NC_FILL_FLOAT;
    default: return NC_FILL_DOUBLE;
    }
}

static dk_status cf_read(int ncid, int varid, nc_type xtype, const char *path, const char *var, cf_decode *cf,
                         char *err, size_t len)
{
    memset(cf, 0, sizeof *cf);
    cf->vmin = -INFINITY, cf->vmax = INFINITY, cf->scale = 1, cf->offset = 0;
    double v[2];
    int n;
    static const char *const packing[] = {"scale_factor", "add_offset"};
    for (int k = 0; k < 2; k++) {
        if ((n = att_numbers(ncid, varid, path, var, packing[k], v, 1, err, len)) < 0)
            return DK_ERR_FORMAT;
        if (n == 0)
            continue;
        if (!isfinite(v[0]))
            return FAIL(DK_ERR_FORMAT, "%s:%s: the attribute %s is %g; unpacking needs a finite number", path, var,
                        packing[k], v[0]);
        *(k ? &cf->offset : &cf->scale) = v[0];
        cf->packed = 1;
    }
    if ((n = att_numbers(ncid, varid, path, var, "_FillValue", v, 1, err, len)) < 0)
        return DK_ERR_FORMAT;
    if (n == 1) {
        cf->have_fill = 1, cf->fill = v[0];
    } else {
        int no_fill = 0;
        if (nc_inq_var_fill(ncid, varid, &no_fill, NULL) != NC_NOERR)
            no_fill = 0;
        /* bytes have no default fill when filling is off (netCDF4-python) */
        if (!no_fill || (xtype != NC_BYTE && xtype != NC_UBYTE))
            cf->have_fill = 1, cf->fill = default_fill(xtype);
    }
    if ((n = att_numbers(ncid, varid, path, var, "missing_value", cf->missing, CF_MAX_MISSING, err, len)) < 0)
        return DK_ERR_FORMAT;
    cf->n_missing = n;
    char text[16] = "";
    size_t tl;
    nc_type tt;
    if (nc_inq_att(ncid, varid, "_Unsigned", &tt, &tl) == NC_NOERR && tt == NC_CHAR && tl < sizeof text &&
        nc_get_att_text(ncid, varid, "_Unsigned", text) == NC_NOERR) {
        text[tl] = '\0';
        static const struct { nc_type t; double span; } ints[] = {
            {NC_BYTE, 256.0}, {NC_SHORT, 65536.0}, {NC_INT, 4294967296.0}, {NC_INT64, 18446744073709551616.0}};
        for (int k = 0; k < 4; k++)
            if (!strcasecmp(text, "true") && xtype == ints[k].t)
                cf->unsigned_span = ints[k].span;
    }
    if ((n = att_numbers(ncid, varid, path, var, "valid_range", v, 2, err, len)) < 0)
        return DK_ERR_FORMAT;
    if (n == 2) {
        cf->vmin = v[0], cf->vmax = v[1];
    } else {
        if (n == 1)
            return FAIL(DK_ERR_FORMAT, "%s:%s: the attribute valid_range has one value; it needs two (min, max)",
                        path, var);
        if ((n = att_numbers(ncid, varid, path, var, "valid_min", v, 1, err, len)) < 0)
            return DK_ERR_FORMAT;
        if (n)
            cf->vmin = v[0];
        if ((n = att_numbers(ncid, varid, path, var, "valid_max", v, 1, err, len)) < 0)
            return DK_ERR_FORMAT;
        if (n)
            cf->vmax = v[0];
    }
    if (isnan(cf->vmin) || isnan(cf->vmax))
        return FAIL(DK_ERR_FORMAT, "%s:%s: valid_range (or valid_min, valid_max) is NaN", path, var);
    if (cf->unsigned_span) { /* the limits are stored in the signed type too */
        if (cf->vmin < 0 && isfinite(cf->vmin))
            cf->vmin += cf->unsigned_span;
        if (cf->vmax < 0 && isfinite(cf->vmax))
            cf->vmax += cf->unsigned_span;
    }
    return DK_OK;
}

/* One stored value (as read, in double) to its physical value or NaN. */
static double cf_value(const cf_decode *cf, double v)
{
    if (isnan(v) || (cf->have_fill && (v == cf->fill || (isnan(cf->fill) && isnan(v)))))
        return NAN;
    for (int k = 0; k < cf->n_missing; k++)
        if (v == cf->missing[k])
            return NAN;
    if (cf->unsigned_span && v < 0)
        v += cf->unsigned_span;
    if (v < cf->vmin || v > cf->vmax)
        return NAN;
    return cf->packed ? v * cf->scale + cf->offset : v;
}

/* Reads path's variable (from the spec rest "VAR[slab]" or var) into out. */
static dk_status nc_read(const char *path, const char *rest, const char *var_opt, npy_array *out, array_origin *o,
                         char *err, size_t len)
{
    dk_status st = DK_OK;
    int ncid = -1;
    memset(out, 0, sizeof *out);
    char why[1024];
    if (hdf5_points_elsewhere(path, why, sizeof why))
        return FAIL(DK_ERR_FORMAT, "%s", why);
    int rc = nc_open(path, NC_NOWRITE, &ncid);
    if (rc != NC_NOERR) {
        ncid = -1;
        if (rc == NC_ENOTNC || rc == NC_EHDFERR)
            return FAIL(DK_ERR_FORMAT, "%s is not a netCDF file (%s)", path, nc_strerror(rc));
        return FAIL(DK_ERR_IO, "cannot open %s: %s", path, nc_strerror(rc));
    }
    char var[NC_MAX_NAME + 1] = "";
    const char *slab = NULL;
    if (rest && *rest) {
        size_t n = strcspn(rest, "[");
        if (n > NC_MAX_NAME) {
            st = FAIL(DK_ERR_INVALID_ARGUMENT, "%s: the variable name '%s' is too long", path, rest);
            goto done;
        }
        memcpy(var, rest, n);
        var[n] = '\0';
        if (rest[n] == '[')
            slab = rest + n + 1;
    }
    if (!var[0] && var_opt)
        snprintf(var, sizeof var, "%s", var_opt);
    int varid;
    if (var[0]) {
        if (nc_inq_varid(ncid, var, &varid) != NC_NOERR) {
            char list[1024];
            list_variables(ncid, list, sizeof list);
            st = FAIL(DK_ERR_INVALID_ARGUMENT, "%s has no variable '%s'; it has: %s", path, var, list);
            goto done;
        }
    } else {
        if ((varid = only_data_variable(ncid, path, err, len)) < 0) {
            st = DK_ERR_INVALID_ARGUMENT;
            goto done;
        }
        nc_inq_varname(ncid, varid, var);
    }
    int nd, dimids[NC_MAX_VAR_DIMS];
    nc_type xtype;
    NC_TRY(nc_inq_varndims(ncid, varid, &nd), "%s: variable %s", path, var);
    if (nd < 1 || nd > NPY_MAX_DIMS) {
        st = FAIL(DK_ERR_FORMAT, "%s: variable %s has %d dimensions; 1 to %d are supported", path, var, nd,
                  NPY_MAX_DIMS);
        goto done;
    }
    NC_TRY(nc_inq_var(ncid, varid, NULL, &xtype, &nd, dimids, NULL), "%s: variable %s", path, var);
    if (xtype == NC_CHAR || xtype == NC_STRING || xtype > NC_STRING) {
        st = FAIL(DK_ERR_FORMAT, "%s: variable %s holds text or a user type, not numbers", path, var);
        goto done;
    }
    size_t size[NPY_MAX_DIMS], start[NPY_MAX_DIMS], count[NPY_MAX_DIMS];
    int keep[NPY_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        NC_TRY(nc_inq_dimlen(ncid, dimids[d], &size[d]), "%s: variable %s", path, var);
    if ((st = parse_slab(ncid, path, var, slab, nd, dimids, size, start, count, keep, err, len)) != DK_OK)
        goto done;
    cf_decode cf;
    if ((st = cf_read(ncid, varid, xtype, path, var, &cf, err, len)) != DK_OK)
        goto done;
    out->dtype = xtype == NC_FLOAT && !cf.packed ? DK_F32 : DK_F64;
    size_t esize = out->dtype == DK_F32 ? 4 : 8, bytes;
    char shape[256];
    double gib;
    if (size_product(count, nd, esize, &out->count, &bytes) != 0) {
        st = FAIL(DK_ERR_FORMAT, "%s:%s: %s values: their size in bytes overflows", path, var,
                  shape_text(count, nd, shape, sizeof shape));
        goto done;
    }
    if (!size_fits_memory(bytes, &gib)) {
        char first[NC_MAX_NAME + 1] = "dim";
        nc_inq_dimname(ncid, dimids[0], first);
        st = FAIL(DK_ERR_FORMAT, "%s:%s: %s values (%.3g GiB) are more than this machine's memory (%.3g GiB); "
                  "read a part, as in %s:%s[%s=0:10]", path, var, shape_text(count, nd, shape, sizeof shape),
                  (double)bytes / 1073741824.0, gib, path, var, first);
        goto done;
    }
    if (o) {
        memset(o, 0, sizeof *o);
        o->netcdf = 1;
        o->member = -1;
        snprintf(o->path, sizeof o->path, "%s", path);
        snprintf(o->var, sizeof o->var, "%s", var);
    }
    for (int d = 0; d < nd; d++) {
        if (!keep[d])
            continue;
        if (o) {
            nc_inq_dimname(ncid, dimids[d], o->dim[o->ndim]);
            o->start[o->ndim] = start[d];
            o->count[o->ndim] = count[d];
            if (o->member < 0 && is_member_dim(ncid, dimids[d]))
                o->member = o->ndim;
            o->ndim++;
        }
        out->shape[out->ndim++] = count[d];
    }
    if (out->ndim == 0) { /* every dimension given one index: a single value */
        out->ndim = 1;
        out->shape[0] = 1;
    }
    if (!(out->data = malloc(bytes ? bytes : 1))) {
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for %s:%s (%zu values)", path, var, out->count);
        goto done;
    }
    if (out->dtype == DK_F32)
        NC_TRY(nc_get_vara_float(ncid, varid, start, count, out->data), "reading %s:%s", path, var);
    else
        NC_TRY(nc_get_vara_double(ncid, varid, start, count, out->data), "reading %s:%s", path, var);
    for (size_t i = 0; i < out->count; i++) {
        if (out->dtype == DK_F32)
            ((float *)out->data)[i] = (float)cf_value(&cf, ((float *)out->data)[i]);
        else
            ((double *)out->data)[i] = cf_value(&cf, ((double *)out->data)[i]);
    }
done:
    if (st != DK_OK) {
        free(out->data);
        out->data = NULL;
    }
    if (ncid >= 0)
        nc_close(ncid);
    return st;
}

/* ---- writing ---- */

/* A netCDF output: made at a temporary name (cli/output.h) and renamed when closed. */
typedef array_nc nc_out;
static dk_status write_globals(int out, int src, char *err, size_t len);

static dk_status out_create(nc_out *w, const char *path, char *err, size_t len)
{
    memset(w, 0, sizeof *w);
    w->ncid = -1;
    if (output_open(&w->o, path, err, len) != 0)
        return DK_ERR_IO;
    w->have_output = 1;
    if (!w->o.tmp[0]) {
        output_abort(&w->o);
        w->have_output = 0;
        return FAIL(DK_ERR_IO, "cannot write %s as netCDF: it is not a regular file", path);
    }
    int rc = nc_create(w->o.tmp, NC_NETCDF4 | NC_CLOBBER, &w->ncid);
    if (rc != NC_NOERR) {
        output_abort(&w->o);
        w->have_output = 0;
        return FAIL(DK_ERR_IO, "cannot create %s: %s", path, nc_strerror(rc));
    }
    w->open = 1;
    return DK_OK;
}

static dk_status out_finish(nc_out *w, dk_status st, char *err, size_t len)
{
    if (w->open) {
        int rc = nc_close(w->ncid);
        w->open = 0;
        if (rc != NC_NOERR && st == DK_OK)
            st = FAIL(DK_ERR_IO, "writing %s failed: %s", w->o.path, nc_strerror(rc));
    }
    if (!w->have_output)
        return st;
    w->have_output = 0;
    if (st != DK_OK) {
        output_abort(&w->o);
        return st;
    }
    return output_commit(&w->o, err, len) == 0 ? DK_OK : DK_ERR_IO;
}

dk_status array_nc_create(array_nc *w, const char *path, char *err, size_t len)
{
    dk_status st = out_create(w, path, err, len);
    if (st == DK_OK && (st = write_globals(w->ncid, -1, err, len)) != DK_OK)
        st = out_finish(w, st, err, len);
    return st;
}

dk_status array_nc_finish(array_nc *w, dk_status st, char *err, size_t len)
{
    return out_finish(w, st, err, len);
}

/* The global history of src, text (NC_CHAR) or strings (NC_STRING, one
 * line each), into *text (malloc'ed). */
static dk_status read_history(int src, nc_type t, size_t n, char **text, char *err, size_t len)
{
    dk_status st = DK_OK;
    char **lines = NULL;
    if (t == NC_CHAR) {
        if (!(*text = calloc(n + 1, 1)))
            return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for the history attribute");
        NC_TRY(nc_get_att_text(src, NC_GLOBAL, "history", *text), "reading the global attribute history");
        return DK_OK;
    }
    if (!(lines = calloc(n ? n : 1, sizeof *lines)))
        return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for the history attribute");
    NC_TRY(nc_get_att_string(src, NC_GLOBAL, "history", lines), "reading the global attribute history");
    size_t total = 1;
    for (size_t k = 0; k < n; k++)
        total += (lines[k] ? strlen(lines[k]) : 0) + 1;
    if (!(*text = calloc(total, 1))) {
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for the history attribute");
    } else {
        for (size_t k = 0; k < n; k++)
            if (lines[k])
                strcat(strcat(*text, k ? "\n" : ""), lines[k]);
    }
    nc_free_string(n, lines);
done:
    free(lines);
    return st;
}

/* The global attributes of the source (when there is one), Conventions
 * when it had none, and the history line in front of its history. */
static dk_status write_globals(int out, int src, char *err, size_t len)
{
    dk_status st = DK_OK;
    int natts = 0;
    char *old = NULL, *line = NULL;
    size_t oldlen = 0;
    if (src >= 0 && nc_inq_natts(src, &natts) == NC_NOERR)
        for (int a = 0; a < natts; a++) {
            char name[NC_MAX_NAME + 1];
            nc_type t;
            nc_inq_attname(src, NC_GLOBAL, a, name);
            NC_TRY(nc_inq_att(src, NC_GLOBAL, name, &t, &oldlen), "reading the global attribute %s", name);
            if (!strcmp(name, "history") && (t == NC_CHAR || t == NC_STRING)) {
                if ((st = read_history(src, t, oldlen, &old, err, len)) != DK_OK)
                    goto done;
                continue;
            }
            if (t > NC_STRING) {
                st = FAIL(DK_ERR_FORMAT, "the global attribute %s has a user-defined type (compound, enum, vlen or "
                          "opaque), which dakit does not copy into its netCDF output; write a .npy output or delete "
                          "the attribute", name);
                goto done;
            }
            NC_TRY(nc_copy_att(src, NC_GLOBAL, name, out, NC_GLOBAL), "copying the global attribute %s", name);
        }
    if (nc_inq_attlen(out, NC_GLOBAL, "Conventions", &oldlen) != NC_NOERR)
        NC_TRY(nc_put_att_text(out, NC_GLOBAL, "Conventions", 6, "CF-1.8"), "writing Conventions");
    char stamp[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = asprintf(&line, "%s: %s%s%s", stamp, command_line[0] ? command_line : "dakit", old ? "\n" : "",
                     old ? old : "");
    if (n < 0) {
        line = NULL;
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    NC_TRY(nc_put_att_text(out, NC_GLOBAL, "history", strlen(line), line), "writing history");
done:
    free(old);
    free(line);
    return st;
}

/* Defines dimension `name` of length n (or finds it, when it exists with
 * that length) and, when src holds a coordinate variable of that name, a copy
 * of its values [start, start + n) and attributes. *dimid set. */
static dk_status define_dim(int out, int src, const char *name, size_t start, size_t n, int *dimid,
                            void **coord, int *coord_var, char *err, size_t len)
{
    dk_status st = DK_OK;
    *coord = NULL;
    *coord_var = -1;
    size_t have;
    if (nc_inq_dimid(out, name, dimid) == NC_NOERR) {
        nc_inq_dimlen(out, *dimid, &have);
        if (have != n)
            return FAIL(DK_ERR_INVALID_ARGUMENT, "two dimensions called %s with lengths %zu and %zu", name, have, n);
        return DK_OK;
    }
    NC_TRY(nc_def_dim(out, name, n, dimid), "defining dimension %s", name);
    int cv, nd;
    nc_type t;
    /* a coordinate variable has one dimension: counted before any are read,
     * since a variable of that name may have up to NC_MAX_VAR_DIMS */
    if (src < 0 || nc_inq_varid(src, name, &cv) != NC_NOERR || nc_inq_varndims(src, cv, &nd) != NC_NOERR ||
        nd != 1 || nc_inq_vartype(src, cv, &t) != NC_NOERR || t == NC_STRING || t > NC_STRING)
        return DK_OK;
    int cdim;
    char cname[NC_MAX_NAME + 1];
    if (nc_inq_vardimid(src, cv, &cdim) != NC_NOERR || nc_inq_dimname(src, cdim, cname) != NC_NOERR ||
        strcmp(cname, name) != 0)
        return DK_OK; /* x(y) is no coordinate of x */
    size_t tsize;
    nc_inq_type(src, t, NULL, &tsize);
    if (!(*coord = malloc(n * tsize + 1)))
        return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
    NC_TRY(nc_get_vara(src, cv, &start, &n, *coord), "reading coordinate %s", name);
    NC_TRY(nc_def_var(out, name, t, 1, dimid, coord_var), "defining coordinate %s", name);
    int natts;
    nc_inq_varnatts(src, cv, &natts);
    for (int a = 0; a < natts; a++) {
        char an[NC_MAX_NAME + 1];
        nc_inq_attname(src, cv, a, an);
        NC_TRY(nc_copy_att(src, cv, an, out, *coord_var), "copying %s:%s", name, an);
    }
done:
    if (st != DK_OK) {
        free(*coord);
        *coord = NULL;
    }
    return st;
}

/* Attributes that describe the file's encoding, not the quantity: not
 * copied, since the values are written unpacked and in another type. */
static int encoding_att(const char *name)
{
    static const char *const names[] = {"_FillValue", "missing_value", "scale_factor", "add_offset",
                                        "valid_min",  "valid_max",     "valid_range",  NULL};
    for (int k = 0; names[k]; k++)
        if (!strcmp(name, names[k]))
            return 1;
    return 0;
}

/* Writes one variable with the given dimension names and, from like's file,
 * coordinates, globals and (same_quantity) the variable's attributes. */
static dk_status nc_write(const char *path, const char *name, array_kind kind, int ndim, const size_t *shape,
                          char dims[][ARRAY_NAME_MAX], const size_t *starts, const void *data,
                          const array_origin *like, int same_quantity, char *err, size_t len)
{
    dk_status st = DK_OK;
    nc_out w;
    int src = -1, srcvar = -1;
    void *coord[NPY_MAX_DIMS] = {0};
    int coord_var[NPY_MAX_DIMS], dimid[NPY_MAX_DIMS];
    if (like && like->netcdf && nc_open(like->path, NC_NOWRITE, &src) != NC_NOERR)
        src = -1;
    if (src >= 0 && nc_inq_varid(src, like->var, &srcvar) != NC_NOERR)
        srcvar = -1;
    if ((st = out_create(&w, path, err, len)) != DK_OK)
        goto close_src;
    if ((st = write_globals(w.ncid, src, err, len)) != DK_OK)
        goto done;
    for (int d = 0; d < ndim; d++)
        if ((st = define_dim(w.ncid, src, dims[d], starts ? starts[d] : 0, shape[d], &dimid[d], &coord[d],
                             &coord_var[d], err, len)) != DK_OK)
            goto done;
    static const nc_type types[] = {[ARRAY_F32] = NC_FLOAT, [ARRAY_F64] = NC_DOUBLE, [ARRAY_I32] = NC_INT};
    int varid;
    NC_TRY(nc_def_var(w.ncid, name, types[kind], ndim, dimid, &varid), "defining variable %s", name);
    NC_TRY(nc_def_var_deflate(w.ncid, varid, 1, 1, 4), "compressing variable %s", name);
    if (kind == ARRAY_I32) {
        int fill = -1;
        NC_TRY(nc_put_att_int(w.ncid, varid, "_FillValue", NC_INT, 1, &fill), "writing %s:_FillValue", name);
    }
    if (same_quantity && srcvar >= 0) {
        int natts;
        nc_inq_varnatts(src, srcvar, &natts);
        for (int a = 0; a < natts; a++) {
            char an[NC_MAX_NAME + 1];
            nc_inq_attname(src, srcvar, a, an);
            if (!encoding_att(an))
                NC_TRY(nc_copy_att(src, srcvar, an, w.ncid, varid), "copying %s:%s", name, an);
        }
    }
    NC_TRY(nc_enddef(w.ncid), "writing %s", path);
    for (int d = 0; d < ndim; d++)
        if (coord[d])
            NC_TRY(nc_put_var(w.ncid, coord_var[d], coord[d]), "writing coordinate %s", dims[d]);
    NC_TRY(nc_put_var(w.ncid, varid, data), "writing %s:%s", path, name);
done:
    st = out_finish(&w, st, err, len);
close_src:
    for (int d = 0; d < ndim; d++)
        free(coord[d]);
    if (src >= 0)
        nc_close(src);
    return st;
}

#else /* no netCDF */

dk_status array_nc_create(array_nc *w, const char *path, char *err, size_t len)
{
    memset(w, 0, sizeof *w);
    return FAIL(DK_ERR_NOT_IMPLEMENTED, "%s: this dakit was built without netCDF support (install libnetcdf-dev, "
                                        "e.g. by tools/setup, and build again)", path);
}

dk_status array_nc_finish(array_nc *w, dk_status st, char *err, size_t len)
{
    (void)w, (void)err, (void)len;
    return st;
}

int array_have_netcdf(void)
{
    return 0;
}

#define NO_NETCDF(what)                                                                                           \
    FAIL(DK_ERR_NOT_IMPLEMENTED, "%s is netCDF, but this dakit was built without netCDF support (install "       \
                                 "libnetcdf-dev, e.g. by tools/setup, and build again)", what)

static dk_status nc_read(const char *path, const char *rest, const char *var_opt, npy_array *out, array_origin *o,
                         char *err, size_t len)
{
    (void)rest, (void)var_opt, (void)out, (void)o;
    return NO_NETCDF(path);
}

static dk_status nc_write(const char *path, const char *name, array_kind kind, int ndim, const size_t *shape,
                          char dims[][ARRAY_NAME_MAX], const size_t *starts, const void *data,
                          const array_origin *like, int same_quantity, char *err, size_t len)
{
    (void)name, (void)kind, (void)ndim, (void)shape, (void)dims, (void)starts, (void)data, (void)like;
    (void)same_quantity;
    return NO_NETCDF(path);
}

#endif

/* ---- the dispatch ---- */

static dk_status read_file(const char *path, const char *rest, const char *var, npy_array *out, array_origin *o,
                           char *err, size_t len)
{
    if (o) {
        memset(o, 0, sizeof *o);
        o->member = -1;
    }
    /* a pipe (--in <(cat x.npy)) can be read once: no sniffing, and
     * netCDF, which seeks, is no candidate */
    struct stat sb;
    if (!rest && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
        return npy_read(path, out, err, len);
    int kind = array_sniff(path);
    if (kind == 'c' || (kind == 0 && (rest || array_is_netcdf_name(path)) && is_file(path)))
        return nc_read(path, rest, var, out, o, err, len);
    if (rest && *rest)
        return FAIL(DK_ERR_FORMAT, "%s is not a netCDF file, so it has no variable '%s'", path, rest);
    if (!is_file(path) && (array_is_netcdf_name(path) || rest))
        return FAIL(DK_ERR_IO, "cannot open %s: %s", path, strerror(ENOENT));
    return npy_read(path, out, err, len);
}

dk_status array_read(const char *spec, const char *var, npy_array *out, array_origin *origin, char *err, size_t len)
{
    char path[4096];
    const char *rest;
    memset(out, 0, sizeof *out);
    if (strchr(spec, '{'))
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: a {} pattern names an ensemble's member files; it is taken only "
                                             "where an ensemble is read", spec);
    array_split_spec(spec, path, sizeof path, &rest);
    return read_file(path, rest, var, out, origin, err, len);
}

/* The file name of member m from a pattern with one {} field; -1 when the
 * pattern is not one. */
static int member_path(const char *pattern, int m, char *path, size_t plen)
{
    const char *open = strchr(pattern, '{'), *close = open ? strchr(open, '}') : NULL;
    if (!open || !close || strchr(close + 1, '{'))
        return -1;
    int zero = 0, width = 0;
    const char *p = open + 1;
    if (*p == ':') {
        p++;
        if (*p == '0')
            zero = 1, p++;
        while (isdigit((unsigned char)*p) && width <= 32) /* no int overflow on a long field */
            width = width * 10 + (*p++ - '0');
        if (width > 32)
            return -1;
        if (*p == 'd')
            p++;
    }
    if (p != close)
        return -1;
    int n = snprintf(path, plen, "%.*s%0*d%s", (int)(open - pattern), pattern, zero ? width : 0, m, close + 1);
    if (!zero && width) /* {:3d}: blank padded */
        n = snprintf(path, plen, "%.*s%*d%s", (int)(open - pattern), pattern, width, m, close + 1);
    return n < 0 || (size_t)n >= plen ? -1 : 0;
}

static dk_status to_f64(npy_array *a, char *err, size_t len)
{
    if (a->dtype == DK_F64)
        return DK_OK;
    double *d = malloc((a->count ? a->count : 1) * sizeof *d);
    if (!d)
        return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < a->count; i++)
        d[i] = ((float *)a->data)[i];
    free(a->data);
    a->data = d;
    a->dtype = DK_F64;
    return DK_OK;
}

static dk_status read_members(const char *pattern, const char *rest, const char *var, npy_array *out,
                              array_origin *o, char *err, size_t len)
{
    char path[4096];
    int first = 0;
    if (member_path(pattern, 0, path, sizeof path) != 0)
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: the member pattern must hold one field {} {:d} {:3d} or {:03d}",
                     pattern);
    if (!is_file(path)) {
        first = 1;
        member_path(pattern, 1, path, sizeof path);
        if (!is_file(path))
            return FAIL(DK_ERR_IO, "no member files: neither member 0 nor 1 of %s exists (%s)", pattern, path);
    }
    size_t L = 0;
    while (member_path(pattern, first + (int)L, path, sizeof path) == 0 && is_file(path))
        L++;
    dk_status st = DK_OK;
    npy_array m0 = {0};
    double *all = NULL;
    size_t N = 0;
    for (size_t l = 0; l < L; l++) {
        npy_array m;
        member_path(pattern, first + (int)l, path, sizeof path);
        if ((st = read_file(path, rest, var, &m, l == 0 ? o : NULL, err, len)) != DK_OK ||
            (st = to_f64(&m, err, len)) != DK_OK)
            goto done;
        if (l == 0) {
            N = m.count;
            size_t dims[2] = {N, L}, count, bytes;
            if (size_product(dims, 2, sizeof *all, &count, &bytes) != 0 || !(all = malloc(bytes ? bytes : 1))) {
                npy_free(&m);
                st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for %zu members of %zu values", L, N);
                goto done;
            }
            m0 = m;
            m0.data = NULL;
        } else if (m.count != N || m.ndim != m0.ndim || memcmp(m.shape, m0.shape, sizeof m.shape)) {
            char a[256], b[256];
            npy_free(&m);
            st = FAIL(DK_ERR_FORMAT, "member %s has shape %s but the first member has %s", path,
                      shape_text(m.shape, m.ndim, a, sizeof a), shape_text(m0.shape, m0.ndim, b, sizeof b));
            goto done;
        }
        for (size_t i = 0; i < N; i++)
            all[i * L + l] = ((double *)m.data)[i];
        npy_free(&m);
    }
    out->dtype = DK_F64;
    out->ndim = 2;
    out->shape[0] = N;
    out->shape[1] = L;
    out->count = N * L;
    out->data = all;
    all = NULL;
    if (o) {
        o->member = -1;
        snprintf(o->pattern, sizeof o->pattern, "%s", pattern);
        o->first = first;
    }
done:
    free(all);
    return st;
}

dk_status array_read_ensemble(const char *spec, const char *var, npy_array *out, array_origin *origin, char *err,
                              size_t len)
{
    char path[4096];
    const char *rest;
    array_origin local;
    array_origin *o = origin ? origin : &local;
    memset(out, 0, sizeof *out);
    array_split_spec(spec, path, sizeof path, &rest);
    if (strchr(path, '{'))
        return read_members(path, rest, var, out, o, err, len);
    dk_status st = read_file(path, rest, var, out, o, err, len);
    if (st != DK_OK || !o->netcdf || o->member < 0)
        return st;
    /* the member dimension last, the others flattened in their order */
    size_t L = out->shape[o->member], inner = 1, outer = 1;
    for (int d = o->member + 1; d < out->ndim; d++)
        inner *= out->shape[d];
    for (int d = 0; d < o->member; d++)
        outer *= out->shape[d];
    size_t esize = out->dtype == DK_F32 ? 4 : 8, N = outer * inner;
    unsigned char *t = malloc(out->count ? out->count * esize : 1);
    if (!t) {
        npy_free(out);
        return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const unsigned char *s = out->data;
    for (size_t a = 0; a < outer; a++)
        for (size_t l = 0; l < L; l++)
            for (size_t b = 0; b < inner; b++)
                memcpy(t + ((a * inner + b) * L + l) * esize, s + ((a * L + l) * inner + b) * esize, esize);
    free(out->data);
    out->data = t;
    out->ndim = 2;
    out->shape[0] = N;
    out->shape[1] = L;
    return DK_OK;
}

dk_status array_write(const char *path, const char *name, array_kind kind, int ndim, const size_t *shape,
                      const void *data, const array_origin *like, int same_quantity, char *err, size_t len)
{
    if (!array_is_netcdf_name(path)) {
        if (kind == ARRAY_I32)
            return npy_write_typed(path, "<i4", 4, ndim, shape, data, err, len);
        return npy_write_typed(path, kind == ARRAY_F32 ? "<f4" : "<f8", kind == ARRAY_F32 ? 4 : 8, ndim, shape, data,
                               err, len);
    }
    char dims[NPY_MAX_DIMS][ARRAY_NAME_MAX];
    size_t starts[NPY_MAX_DIMS] = {0};
    int same = like && like->netcdf && like->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = like->count[d] == shape[d];
    for (int d = 0; d < ndim; d++) {
        if (same) {
            snprintf(dims[d], sizeof dims[d], "%s", like->dim[d]);
            starts[d] = like->start[d];
        } else
            snprintf(dims[d], sizeof dims[d], "dim%d", d);
    }
    return nc_write(path, name, kind, ndim, shape, dims, starts, data, same ? like : NULL, same && same_quantity,
                    err, len);
}

dk_status array_write_ensemble(const char *path, const double *data, size_t N, size_t L, const array_origin *like,
                               char *err, size_t len)
{
    size_t shape[2] = {N, L};
    const char *name = like && like->netcdf ? like->var : "ensemble";
    if (strchr(path, '{')) {
        /* one file per member, each like the first input member */
        if (!like || !like->pattern[0])
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: a per-member output pattern needs an ensemble read from "
                                                 "per-member files", path);
        char one[4096];
        if (member_path(path, like->first, one, sizeof one) != 0)
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: the member pattern must hold one field {} {:d} {:3d} or "
                                                 "{:03d}", path);
        double *m = malloc((N ? N : 1) * sizeof *m);
        if (!m)
            return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
        size_t mshape[NPY_MAX_DIMS];
        int nd = like->netcdf ? like->ndim : 1;
        for (int d = 0; d < nd; d++)
            mshape[d] = like->netcdf ? like->count[d] : N;
        dk_status st = DK_OK;
        for (size_t l = 0; l < L && st == DK_OK; l++) {
            for (size_t i = 0; i < N; i++)
                m[i] = data[i * L + l];
            member_path(path, like->first + (int)l, one, sizeof one);
            st = array_write(one, name, ARRAY_F64, nd, mshape, m, like, 1, err, len);
        }
        free(m);
        return st;
    }
    if (!array_is_netcdf_name(path) || !like || !like->netcdf || like->member < 0)
        return array_write(path, name, ARRAY_F64, 2, shape, data, like, 1, err, len);
    /* back to the input's order: member dimension where it was */
    size_t inner = 1, outer = 1, Lm = like->count[like->member];
    for (int d = like->member + 1; d < like->ndim; d++)
        inner *= like->count[d];
    for (int d = 0; d < like->member; d++)
        outer *= like->count[d];
    if (Lm != L || outer * inner != N)
        return array_write(path, name, ARRAY_F64, 2, shape, data, NULL, 0, err, len);
    double *t = malloc((N * L > 0 ? N * L : 1) * sizeof *t);
    if (!t)
        return FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t a = 0; a < outer; a++)
        for (size_t l = 0; l < L; l++)
            for (size_t b = 0; b < inner; b++)
                t[(a * L + l) * inner + b] = data[(a * inner + b) * L + l];
    dk_status st = array_write(path, name, ARRAY_F64, like->ndim, like->count, t, like, 1, err, len);
    free(t);
    return st;
}

dk_status array_write_state_by(const char *path, const char *name, const double *data, size_t N, size_t M,
                               const array_origin *like, const char *second_dim, char *err, size_t len)
{
    size_t shape[NPY_MAX_DIMS] = {N, M};
    if (!array_is_netcdf_name(path) || !like || !like->netcdf)
        return array_write(path, name, ARRAY_F64, 2, shape, data, NULL, 0, err, len);
    /* the state dimensions of the input (all but the member one; for
     * per-member files all of the member file's), then second_dim */
    char dims[NPY_MAX_DIMS][ARRAY_NAME_MAX];
    size_t starts[NPY_MAX_DIMS] = {0}, count = 1;
    int nd = 0;
    for (int d = 0; d < like->ndim && nd < NPY_MAX_DIMS - 1; d++) {
        if (d == like->member)
            continue;
        snprintf(dims[nd], sizeof dims[nd], "%s", like->dim[d]);
        starts[nd] = like->start[d];
        shape[nd++] = like->count[d];
        count *= like->count[d];
    }
    if (like->member < 0 && !like->pattern[0] && like->ndim == 2) { /* (N, L) without a member dimension */
        nd = 1;
        count = like->count[0];
        shape[0] = count;
    }
    if (count != N || nd == 0) {
        shape[0] = N;
        shape[1] = M;
        return array_write(path, name, ARRAY_F64, 2, shape, data, NULL, 0, err, len);
    }
    snprintf(dims[nd], sizeof dims[nd], "%s", second_dim);
    shape[nd++] = M;
    return nc_write(path, name, ARRAY_F64, nd, shape, dims, starts, data, like, 0, err, len);
}
