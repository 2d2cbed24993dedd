/* Plugin discovery and selection. Like the OpenCL ICD loader, one broken
 * plugin never hides the others: each file is loaded on its own and, when
 * refused, recorded with a one-line reason that `dakit info` shows. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include <dakit/enkf.h>
#include <dakit/gauss.h>
#include <dakit/gbees.h>
#include <dakit/kmeans.h>

typedef struct entry {
    dk_backend backend;    /* plugin == NULL: refused before the descriptor was usable */
    dk_plugin desc;        /* the plugin's descriptor, zero past its own size */
    dk_backend_info info;
    void *handle;
    int probed;
} entry;

/* Grown while discovering (once, before any context points into it), so
 * that no folder's plugin is dropped for the number of files before it. */
static entry *entries;
static int entry_count, entry_capacity;
static pthread_once_t discovered = PTHREAD_ONCE_INIT;
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const algo_names[DK_ALGO_COUNT] = {"gauss", "enkf", "kmeans", "gbees", "letkf"};

const char *dk_algo_name(dk_algo algo)
{
    return algo < DK_ALGO_COUNT ? algo_names[algo] : "unknown";
}

static const void *plugin_ops(const dk_plugin *p, dk_algo algo)
{
    switch (algo) {
    case DK_ALGO_GAUSS: return p->gauss;
    case DK_ALGO_ENKF: return p->enkf;
    case DK_ALGO_KMEANS: return p->kmeans;
    case DK_ALGO_GBEES: return p->gbees;
    case DK_ALGO_LETKF: return p->letkf;
    default: return NULL;
    }
}

/* Every ops table starts with its variant list. */
static const char *const *plugin_variants(const dk_plugin *p, dk_algo algo)
{
    switch (algo) {
    case DK_ALGO_GAUSS: return p->gauss->variants;
    case DK_ALGO_ENKF: return p->enkf->variants;
    case DK_ALGO_KMEANS: return p->kmeans->variants;
    case DK_ALGO_GBEES: return p->gbees->variants;
    case DK_ALGO_LETKF: return p->letkf->variants;
    default: return NULL;
    }
}

static entry *refuse(entry *e, const char *fmt, const char *detail)
{
    char copy[sizeof e->info.reason]; /* detail may point into another entry */
    snprintf(copy, sizeof copy, "%s", detail ? detail : "");
    snprintf(e->info.reason, sizeof e->info.reason, fmt, copy);
    e->info.usable = 0;
    e->backend.plugin = NULL;
    if (e->handle)
        dlclose(e->handle);
    e->handle = NULL;
    e->probed = 1;
    dk_log(DK_LOG_INFO, "refused plugin %s: %s", e->info.path, e->info.reason);
    return e;
}

static int already_seen(const char *real)
{
    for (int i = 0; i < entry_count; i++)
        if (strcmp(entries[i].info.path, real) == 0)
            return 1;
    return 0;
}

/* Anyone who can write a plugin folder or file can run code in every
 * process that uses dakit. */
static void warn_if_writable(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & S_IWOTH) && !(S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX)))
        dk_log(DK_LOG_WARN, "plugin %s %s is writable by every user: anyone can make dakit load their code", what,
               path);
}

static entry *new_entry(const char *real)
{
    if (entry_count == entry_capacity) {
        int cap = entry_capacity ? 2 * entry_capacity : 16;
        entry *grown = realloc(entries, (size_t)cap * sizeof *grown);
        if (!grown) {
            dk_log(DK_LOG_ERROR, "out of memory after %d plugin files; %s and any after it are not loaded",
                   entry_count, real);
            return NULL;
        }
        entries = grown;
        entry_capacity = cap;
    }
    entry *e = &entries[entry_count++];
    memset(e, 0, sizeof *e);
    snprintf(e->info.path, sizeof e->info.path, "%s", real);
    snprintf(e->backend.path, sizeof e->backend.path, "%s", real);
    return e;
}

static void load_plugin(const char *path)
{
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(path, real)) {
        /* a dangling link: named, as every file discovery passes over */
        int why = errno;
        entry *e = already_seen(path) ? NULL : new_entry(path);
        if (e) {
            refuse(e, "skipped: %s", strerror(why));
            dk_log(DK_LOG_WARN, "plugin discovery skipped %s: %s", path, e->info.reason);
        }
        return;
    }
    if (already_seen(real))
        return;
    entry *e = new_entry(real);
    if (!e)
        return;
    /* dlopen reads the file: a FIFO would block every process forever */
    const char *not_plugin = stat(real, &st) != 0 ? strerror(errno)
                             : S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file"
                             : S_ISDIR(st.st_mode)  ? "a folder, not a regular file"
                             : !S_ISREG(st.st_mode) ? "a device or socket, not a regular file"
                                                    : NULL;
    if (not_plugin) {
        refuse(e, "skipped: %s (a plugin is a shared object file)", not_plugin);
        dk_log(DK_LOG_WARN, "plugin discovery skipped %s: %s", real, e->info.reason);
        return;
    }
    warn_if_writable(real, "file");

    e->handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!e->handle) {
        refuse(e, "not a loadable shared object: %s", dlerror());
        return;
    }
    dk_plugin_entry_fn fn;
    *(void **)&fn = dlsym(e->handle, DK_PLUGIN_ENTRY_NAME);
    if (!fn) {
        refuse(e, "no entry symbol " DK_PLUGIN_ENTRY_NAME "%s", "");
        return;
    }
    const dk_plugin *p = fn();
    if (!p) {
        refuse(e, "its entry returned no descriptor%s", "");
        return;
    }
    if (p->abi_version != DK_PLUGIN_ABI_VERSION) {
        char detail[96];
        snprintf(detail, sizeof detail, "%u, but this dakit loads ABI version %u", p->abi_version,
                 DK_PLUGIN_ABI_VERSION);
        refuse(e, "plugin ABI version %s", detail);
        return;
    }
    /* An older plugin's descriptor ends early: copy what it has, the rest
     * stays NULL (absent); a newer one's extra members are not read. */
    size_t required = offsetof(dk_plugin, buffer_copy) + sizeof p->buffer_copy;
    if (p->size < required) {
        char detail[96];
        snprintf(detail, sizeof detail, "%u bytes, shorter than the %zu every ABI %u plugin has", p->size,
                 required, DK_PLUGIN_ABI_VERSION);
        refuse(e, "descriptor size %s", detail);
        return;
    }
    memcpy(&e->desc, p, p->size < sizeof e->desc ? p->size : sizeof e->desc);
    p = &e->desc;
    if (!p->name || !p->name[0] || strchr(p->name, ',')) {
        refuse(e, "descriptor has no usable name%s", "");
        return;
    }
    snprintf(e->info.name, sizeof e->info.name, "%s", p->name);
    snprintf(e->info.version, sizeof e->info.version, "%s", p->version ? p->version : "?");
    e->info.priority = p->priority;
    if (!p->probe || !p->device_open || !p->device_close || !p->buffer_alloc || !p->buffer_free ||
        !p->buffer_write || !p->buffer_read || !p->buffer_copy) {
        refuse(e, "descriptor lacks a required entry (probe, device or buffer functions)%s", "");
        return;
    }
    for (int i = 0; i < entry_count - 1; i++) {
        if (entries[i].backend.plugin && strcmp(entries[i].info.name, p->name) == 0) {
            refuse(e, "a plugin of the same name was found first at %s", entries[i].info.path);
            return;
        }
    }
    size_t len = 0;
    for (int a = 0; a < DK_ALGO_COUNT; a++) {
        if (!plugin_ops(p, (dk_algo)a))
            continue;
        len += (size_t)snprintf(e->info.algorithms + len, sizeof e->info.algorithms - len, "%s%s",
                                len ? "," : "", algo_names[a]);
        const char *const *v = plugin_variants(p, (dk_algo)a);
        char *out = e->info.variants[a];
        size_t cap = sizeof e->info.variants[a], used = 0;
        for (; v && *v && used < cap; v++)
            used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", *v);
    }
    /* device-side communication: an incomplete table is ignored, not fatal */
    const dk_comm_ops *c = p->comm;
    if (c && (!c->name || !c->device_key || !c->make_id || !c->comm_create || !c->comm_destroy ||
              !c->all_reduce_sum || !c->exchange || c->id_size == 0 || c->id_size > DK_COMM_ID_MAX)) {
        dk_log(DK_LOG_WARN, "plugin %s: its device-side communication table lacks a required entry or has an id "
               "size outside 1..%d; the distributed layer will stage through the host", real, DK_COMM_ID_MAX);
        e->desc.comm = NULL;
    }
    const dk_comm_queue_ops *q = e->desc.comm ? p->comm_queue : NULL;
    if (q && (!q->all_reduce_sum || !q->exchange || !q->wait)) {
        dk_log(DK_LOG_WARN, "plugin %s: its queued collectives table lacks a required entry; the distributed "
               "layer will call the blocking ones", real);
        q = NULL;
    }
    e->desc.comm_queue = e->desc.comm ? q : NULL;
    if (p->comm)
        snprintf(e->info.comm, sizeof e->info.comm, "%s", p->comm->name);
    e->backend.plugin = p;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Every *.so in dir, in name order so discovery is repeatable. */
static void scan_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0)
        return;
    dk_log(DK_LOG_DEBUG, "looking for plugins in %s", dir);
    warn_if_writable(dir, "folder");
    for (int i = 0; i < n; i++) {
        if (ends_with(names[i]->d_name, ".so")) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            load_plugin(path);
        }
        free(names[i]);
    }
    free(names);
}

/* In a Meson build tree libdakit sits at the top and each plugin in
 * plugins/<name>/, so tests and the CLI run without installing. */
static void scan_build_tree(const char *selfdir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/meson-private", selfdir);
    if (!is_dir(path))
        return;
    snprintf(path, sizeof path, "%s/plugins", selfdir);
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
            if (is_dir(sub))
                scan_dir(sub);
        }
        free(names[i]);
    }
    if (n >= 0)
        free(names);
}

/* OpenMP threads that spin while they wait take their core from the other
 * processes of a shared node, and a plugin's parallel loop then waits for
 * the thread that lost its core (docs/tuning.md). Unless the user chose,
 * the OpenMP runtime the cpu plugin loads waits passively; the runtime
 * reads the variable once, when it loads, so a process that loaded it
 * before (an OpenMP program of its own) keeps its own setting. */
static void choose_omp_wait_policy(void)
{
    if (getenv("OMP_WAIT_POLICY"))
        return;
    void *omp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!omp)
        omp = dlopen("libomp.so", RTLD_LAZY | RTLD_NOLOAD);
    if (omp) {
        dlclose(omp);
        return;
    }
    setenv("OMP_WAIT_POLICY", "passive", 0);
}

static void discover(void)
{
    choose_omp_wait_policy();
    const char *env = getenv("DAKIT_PLUGIN_PATH");
    if (env && *env) {
        char *copy = strdup(env), *save = NULL;
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save))
            scan_dir(d);
        free(copy);
    }
    Dl_info self;
    if (dladdr((void *)&discover, &self) && self.dli_fname) {
        char real[PATH_MAX];
        if (realpath(self.dli_fname, real)) {
            char *slash = strrchr(real, '/');
            if (slash)
                *slash = '\0';
            scan_build_tree(real);
            char inst[PATH_MAX];
            snprintf(inst, sizeof inst, "%s/dakit/plugins", real);
            scan_dir(inst);
        }
    }
#ifdef DK_PLUGIN_INSTALL_DIR
    scan_dir(DK_PLUGIN_INSTALL_DIR);
#endif
}

static void ensure_discovered(void)
{
    pthread_once(&discovered, discover);
}

static void probe_entry(entry *e)
{
    pthread_mutex_lock(&probe_lock);
    if (!e->probed && e->backend.plugin) {
        dk_msg msg = {{0}};
        int n = e->backend.plugin->probe(e->backend.devices, DK_MAX_DEVICES, &msg);
        e->probed = 1;
        if (n < 0) {
            refuse(e, "its probe failed: %s", msg.text[0] ? msg.text : "no reason given");
        } else if (n == 0) {
            refuse(e, "no usable device: %s", msg.text[0] ? msg.text : "the probe found none");
        } else {
            if (n > DK_MAX_DEVICES)
                n = DK_MAX_DEVICES;
            e->backend.device_count = n;
            e->info.device_count = n;
            memcpy(e->info.devices, e->backend.devices, sizeof(dk_device_info) * (size_t)n);
            e->info.usable = 1;
        }
    }
    pthread_mutex_unlock(&probe_lock);
}

DK_API int dk_backend_count(void)
{
    ensure_discovered();
    return entry_count;
}

DK_API dk_status dk_backend_get(int index, dk_backend_info *info)
{
    ensure_discovered();
    if (index < 0 || index >= entry_count || !info)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "backend index %d is out of range (0..%d)",
                       index, entry_count - 1);
    probe_entry(&entries[index]);
    *info = entries[index].info;
    return DK_OK;
}

/* "cpu, opencl" for error messages: the plugins accepted and not refused
 * by a probe so far. It probes nothing, so a mistyped name never wakes a
 * driver (or a broken plugin) that the user did not ask for. */
static void describe_backends(char *out, size_t len, dk_algo algo, int need_algo)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < entry_count; i++) {
        entry *e = &entries[i];
        if (!e->backend.plugin || (e->probed && !e->info.usable) ||
            (need_algo && !plugin_ops(e->backend.plugin, algo)))
            continue;
        used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s", used ? ", " : "",
                                 e->info.name);
    }
    if (!used)
        snprintf(out, len, "none");
}

const void *dk_context_ops(dk_context *ctx, dk_algo algo)
{
    const void *ops = plugin_ops(ctx->backend->plugin, algo);
    if (!ops) {
        char avail[256];
        describe_backends(avail, sizeof avail, algo, 1);
        dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                "backend '%s' does not implement %s; backends that do: %s",
                ctx->backend->plugin->name, dk_algo_name(algo), avail);
    }
    return ops;
}

const char *dk_pick_variant(dk_context *ctx, dk_algo algo, const char *const *variants, const char *requested)
{
    const char *who = ctx ? ctx->backend->plugin->name : "the serial reference";
    if (!variants || !variants[0]) {
        dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "%s: %s lists no variant", dk_algo_name(algo), who);
        return NULL;
    }
    if (!requested)
        return variants[0];
    char offered[256] = "";
    size_t used = 0;
    for (const char *const *v = variants; *v; v++) {
        if (strcmp(*v, requested) == 0)
            return *v;
        used += (size_t)snprintf(offered + used, used < sizeof offered ? sizeof offered - used : 0, "%s%s",
                                 used ? ", " : "", *v);
    }
    dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "%s: %s has no variant '%s'; it offers: %s", dk_algo_name(algo), who,
            requested, offered);
    return NULL;
}

static entry *find_by_name(const char *name, size_t len)
{
    for (int i = 0; i < entry_count; i++)
        if (entries[i].info.name[0] && strlen(entries[i].info.name) == len &&
            strncmp(entries[i].info.name, name, len) == 0)
            return &entries[i];
    return NULL;
}

static int open_on(entry *e, int device, dk_context **out, char *why, size_t why_len)
{
    probe_entry(e);
    if (!e->info.usable) {
        snprintf(why, why_len, "%s: %s", e->info.name, e->info.reason);
        return 0;
    }
    if (device >= e->backend.device_count) {
        snprintf(why, why_len, "%s: DAKIT_DEVICE=%d but it has %d device(s)", e->info.name,
                 device, e->backend.device_count);
        return 0;
    }
    dk_msg msg = {{0}};
    void *dev = NULL;
    if (e->backend.plugin->device_open(device, &dev, &msg) != DK_OK) {
        snprintf(why, why_len, "%s: opening device %d failed: %s", e->info.name, device, msg.text);
        return 0;
    }
    dk_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        e->backend.plugin->device_close(dev);
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    static _Atomic uint64_t next_id = 1;
    ctx->backend = &e->backend;
    ctx->device_index = device;
    ctx->device = dev;
    ctx->id = next_id++;
    pthread_mutex_init(&ctx->lock, NULL);
    *out = ctx;
    dk_log(DK_LOG_INFO, "using backend %s, device %d (%s)", e->info.name, device,
           e->backend.devices[device].name);
    return 1;
}

static int accelerated(const entry *e)
{
    dk_device_kind k = e->backend.devices[0].kind;
    return e->info.usable && (k == DK_DEVICE_GPU || k == DK_DEVICE_ACCELERATOR);
}

/* A GPU behind a lower-priority plugin beats a CPU behind a higher one
 * (OpenCL on a GPU over the OpenMP plugin, but not PoCL over it). */
static int by_preference(const void *a, const void *b)
{
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    if (accelerated(x) != accelerated(y))
        return accelerated(y) - accelerated(x);
    return y->info.priority - x->info.priority;
}

/* Tries the usable backends not yet tried, highest priority first. */
static int open_auto(int device, int *tried, dk_context **out, char *why, size_t why_len)
{
    entry **order = malloc((entry_count ? (size_t)entry_count : 1) * sizeof *order);
    int n = 0;
    if (!order) {
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    for (int i = 0; i < entry_count; i++) {
        if (entries[i].backend.plugin && !tried[i]) {
            probe_entry(&entries[i]);
            order[n++] = &entries[i];
        }
    }
    qsort(order, (size_t)n, sizeof order[0], by_preference);
    int ok = 0;
    for (int i = 0; i < n && !ok; i++) {
        tried[order[i] - entries] = 1;
        ok = open_on(order[i], device, out, why, why_len);
    }
    free(order);
    return ok;
}

DK_API dk_status dk_context_create(const char *backend, dk_context **out)
{
    if (!out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_context_create: ctx must not be NULL");
    *out = NULL;
    ensure_discovered();

    const char *source = "the caller";
    if (!backend || !*backend || strcmp(backend, "auto") == 0) {
        const char *env = getenv("DAKIT_BACKEND");
        backend = env && *env ? env : "auto";
        source = env && *env ? "DAKIT_BACKEND" : "auto selection";
    }
    int device = 0;
    const char *dev_env = getenv("DAKIT_DEVICE");
    if (dev_env && *dev_env) {
        char *end;
        long d = strtol(dev_env, &end, 10);
        if (*end || d < 0 || d >= DK_MAX_DEVICES)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "DAKIT_DEVICE='%s' is not a device index (0..%d)", dev_env,
                           DK_MAX_DEVICES - 1);
        device = (int)d;
    }

    int *tried = calloc(entry_count ? (size_t)entry_count : 1, sizeof *tried);
    if (!tried)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "dk_context_create: out of memory");
    char reasons[1024] = "", why[600];
    size_t used = 0;
    const char *p = backend;
    while (*p) {
        size_t len = strcspn(p, ",");
        while (len && *p == ' ') {
            p++;
            len--;
        }
        while (len && p[len - 1] == ' ')
            len--;
        int ok = 0;
        why[0] = '\0';
        if (len == 4 && strncmp(p, "auto", 4) == 0) {
            ok = open_auto(device, tried, out, why, sizeof why);
        } else if (len) {
            entry *e = find_by_name(p, len);
            if (!e)
                snprintf(why, sizeof why, "%.*s: no plugin of that name was found", (int)len, p);
            else if (!tried[e - entries]) {
                tried[e - entries] = 1;
                ok = open_on(e, device, out, why, sizeof why);
            }
        }
        if (ok) {
            free(tried);
            return DK_OK;
        }
        if (why[0])
            used += (size_t)snprintf(reasons + used, used < sizeof reasons ? sizeof reasons - used : 0,
                                     "%s%s", used ? "; " : "", why);
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    free(tried);
    char avail[256];
    describe_backends(avail, sizeof avail, DK_ALGO_GAUSS, 0);
    return dk_fail(NULL, DK_ERR_NO_BACKEND,
                   "no backend could be opened for '%s' (asked by %s): %s. Available backends: %s "
                   "(`dakit info` lists every plugin and why any was refused)",
                   backend, source, used ? reasons : "no plugin was found", avail);
}
