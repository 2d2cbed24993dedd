/* libFuzzer target: the ODIM_H5 reader (odim_read, tools/kmeans/odim.c).
 * Structure-aware, as fuzz_netcdf: the input describes a volume (which
 * attributes exist, as numbers of any value or as text; the data's type,
 * class and shape; external or virtual storage) that is written with the
 * HDF5 C API, then read. Any volume is read or refused with a sentence; a
 * sweep read has finite geometry, a state for every bin and a finite value
 * for every bin that holds one. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kmeans/odim.h"

#include "fuzz_bytes.h"

static char dir[64], path[128], elsewhere[128];

/* The folder and its files go when the fuzzer ends. */
static void clean_up(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/dakit-fuzz-odim-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    atexit(clean_up);
    snprintf(path, sizeof path, "%s/vol.h5", dir);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere.bin", dir);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return 0;
}

/* A scalar attribute from the input: absent, text, or a number (integer or float). */
static void attr(hid_t loc, const char *name, fuzz_bytes *b, double usual, const char *text)
{
    uint8_t how = fb_u8(b);
    if (how < 16)
        return;
    hid_t sp = H5Screate(H5S_SCALAR), a;
    if (how < 32 || text) {
        const char *v = text && how >= 32 ? text : "12x";
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, strlen(v) + 1);
        a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, t, v);
        H5Tclose(t);
    } else {
        double v = how < 160 ? usual : fb_double(b);
        a = H5Acreate2(loc, name, how & 1 ? H5T_STD_I64LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        long long i = isfinite(v) && fabs(v) < 9e18 ? (long long)v : 0;
        H5Awrite(a, how & 1 ? H5T_NATIVE_LLONG : H5T_NATIVE_DOUBLE, how & 1 ? (void *)&i : (void *)&v);
    }
    H5Aclose(a);
    H5Sclose(sp);
}

static hid_t group(hid_t loc, const char *name)
{
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

static void write_volume(fuzz_bytes *b)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return;
    attr(f, "Conventions", b, 0, fb_u8(b) < 240 ? "ODIM_H5/V2_2" : "CF-1.8");
    hid_t g = group(f, "what");
    attr(g, "object", b, 0, fb_u8(b) < 200 ? "PVOL" : "COMP");
    attr(g, "date", b, 0, "20140810");
    attr(g, "time", b, 0, "205000");
    H5Gclose(g);
    g = group(f, "where");
    attr(g, "lat", b, 50, NULL);
    attr(g, "lon", b, 8, NULL);
    attr(g, "height", b, 100, NULL);
    H5Gclose(g);
    hsize_t rays = 1 + fb_u8(b) % 8, bins = 1 + fb_u8(b) % 8;
    hid_t ds = group(f, "dataset1"), w = group(ds, "where"), d = group(ds, "data1"), dw = group(d, "what");
    attr(w, "elangle", b, 0.5, NULL);
    attr(w, "nbins", b, (double)bins, NULL);
    attr(w, "nrays", b, (double)rays, NULL);
    attr(w, "rscale", b, 500, NULL);
    attr(w, "rstart", b, 0, NULL);
    attr(dw, "quantity", b, 0, "DBZH");
    attr(dw, "gain", b, 0.5, NULL);
    attr(dw, "offset", b, -32, NULL);
    attr(dw, "nodata", b, 255, NULL);
    attr(dw, "undetect", b, 0, NULL);
    uint8_t kind = fb_u8(b);
    if (kind >= 250) { /* the data's shape disagrees with where/ */
        rays += fb_u8(b) % 3;
        bins += 1;
    }
    hsize_t dims[2] = {rays, bins};
    hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t types[] = {H5T_NATIVE_UCHAR, H5T_NATIVE_USHORT, H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE, H5T_NATIVE_INT};
    hid_t t = types[kind % 5], st = -1;
    if (kind % 16 == 15) { /* strings */
        st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, 4);
        t = st;
    }
    if (kind >= 230 && kind < 240)
        H5Pset_external(pl, elsewhere, 0, H5F_UNLIMITED);
    if (kind >= 240 && kind < 250) {
        hid_t src = H5Screate_simple(2, dims, NULL);
        H5Pset_virtual(pl, sp, elsewhere, "/data", src);
        H5Sclose(src);
    }
    hid_t data = H5Dcreate2(d, "data", t, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    if (data >= 0 && kind < 230) {
        double v[64 * 2];
        for (size_t i = 0; i < rays * bins; i++)
            v[i] = fb_double(b);
        if (st >= 0) {
            char text[128][4];
            for (size_t i = 0; i < rays * bins; i++)
                snprintf(text[i], 4, "%d", (int)fmod(fabs(isfinite(v[i]) ? v[i] : 1), 100));
            H5Dwrite(data, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, text);
        } else {
            hid_t xfer = H5Pcreate(H5P_DATASET_XFER); /* out-of-range values: what HDF5's conversion makes of them */
            H5Dwrite(data, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, xfer, v);
            H5Pclose(xfer);
        }
    }
    if (data >= 0)
        H5Dclose(data);
    if (st >= 0)
        H5Tclose(st);
    H5Pclose(pl);
    H5Sclose(sp);
    H5Gclose(dw);
    H5Gclose(d);
    H5Gclose(w);
    H5Gclose(ds);
    H5Fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_bytes b = {data, size};
    write_volume(&b);
    odim_sweep s;
    char err[1024];
    err[0] = '\0';
    dk_status st = odim_read(path, "DBZH", 1, &s, err, sizeof err);
    if (st == DK_OK) {
        if (!s.value || !s.state || !s.nrays || !s.nbins || !isfinite(s.elangle) || !isfinite(s.rscale_m) ||
            !isfinite(s.rstart_km) || !isfinite(s.lat) || !isfinite(s.lon) || !(s.rscale_m > 0))
            abort();
        size_t n = s.nrays * s.nbins, counted[3] = {0};
        for (size_t i = 0; i < n; i++) {
            if (s.state[i] > 2 || (s.state[i] == 2) != isfinite(s.value[i]))
                abort();
            counted[s.state[i]]++;
        }
        if (counted[0] != s.nodata || counted[1] != s.undetect || counted[2] != s.values)
            abort();
        odim_free(&s);
    } else if (!err[0] || s.value || s.state) {
        abort();
    }
    unlink(path);
    return 0;
}
