#define _GNU_SOURCE
#include "cli/output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The temporary files being written, for the signal handler: an interrupted
 * command removes them before it dies. */
#define SLOTS 16
static char *volatile pending[SLOTS];
static int handlers_installed;

/* The files of an open group, written and waiting for their names; the
 * signal handler removes them too. A node is complete before it is linked. */
typedef struct held {
    struct held *next;
    char tmp[4096], path[4096];
} held;
static held *volatile group_files;
static int group_open;

static void on_signal(int sig)
{
    for (int i = 0; i < SLOTS; i++)
        if (pending[i])
            unlink(pending[i]);
    for (held *h = group_files; h; h = h->next)
        unlink(h->tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void)
{
    if (handlers_installed)
        return;
    handlers_installed = 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* leave alone a signal the caller ignores (nohup) or handles */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_signal;
            sigemptyset(&sa.sa_mask);
            sigaction(sigs[i], &sa, NULL);
        }
    }
}

static int folder_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return snprintf(dir, len, ".") >= (int)len ? -1 : 0;
    if (slash == path)
        return snprintf(dir, len, "/") >= (int)len ? -1 : 0;
    return snprintf(dir, len, "%.*s", (int)(slash - path), path) >= (int)len ? -1 : 0;
}

int output_check(const char *path, char *err, size_t len)
{
    char dir[4096];
    struct stat st;
    if (!path || !*path) {
        snprintf(err, len, "an output path is empty");
        return -1;
    }
    if (strlen(path) >= sizeof dir - 64 || folder_of(path, dir, sizeof dir) != 0) {
        snprintf(err, len, "cannot create %.200s...: the path is too long", path);
        return -1;
    }
    if (path[strlen(path) - 1] == '/') {
        snprintf(err, len, "cannot create %s: the path names a folder, not a file", path);
        return -1;
    }
    if (stat(dir, &st) != 0) {
        snprintf(err, len, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, len, "cannot create %s: %s is not a folder", path, dir);
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, len, "cannot create %s: it is a folder", path);
        return -1;
    }
    return 0;
}

/* o->f writes through this, which keeps the errno of the first failure
 * (stdio only keeps a flag). */
static ssize_t cookie_write(void *cookie, const char *buf, size_t size)
{
    output *o = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(o->fd, buf + done, size - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (!o->error)
                o->error = w < 0 ? errno : ENOSPC;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int cookie_close(void *cookie)
{
    output *o = cookie;
    int rc = close(o->fd);
    if (rc != 0 && !o->error)
        o->error = errno;
    o->fd = -1;
    return rc;
}

static FILE *open_stream(output *o, int fd)
{
    o->fd = fd;
    cookie_io_functions_t io = {NULL, cookie_write, NULL, cookie_close};
    return fopencookie(o, "wb", io);
}

int output_open(output *o, const char *path, char *err, size_t len)
{
    memset(o, 0, sizeof *o);
    o->slot = -1;
    o->fd = -1;
    if (output_check(path, err, len) != 0)
        return -1;
    /* a symbolic link to a file: replace the file it points to, not the link */
    char real[PATH_MAX];
    struct stat st;
    const char *target = path;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, real))
        target = real;
    snprintf(o->path, sizeof o->path, "%s", target);
    if (stat(target, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a device, a pipe, a socket: written in place */
        int fd = open(target, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || !(o->f = open_stream(o, fd))) {
            snprintf(err, len, "cannot create %s: %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        return 0;
    }
    char dir[4096];
    folder_of(target, dir, sizeof dir);
    const char *slash = strrchr(target, '/');
    const char *base = slash ? slash + 1 : target;
    static unsigned counter;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        if (snprintf(o->tmp, sizeof o->tmp, "%s/.%s.tmp-%ld-%u", dir, base, (long)getpid(), counter++) >=
            (int)sizeof o->tmp) {
            snprintf(err, len, "cannot create %s: the path is too long", path);
            o->tmp[0] = '\0';
            return -1;
        }
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        snprintf(err, len, "cannot create %s: %s", path, strerror(errno));
        o->tmp[0] = '\0';
        return -1;
    }
    o->f = open_stream(o, fd);
    if (!o->f) {
        snprintf(err, len, "cannot create %s: %s", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = '\0';
        return -1;
    }
    install_handlers();
    for (int i = 0; i < SLOTS; i++)
        if (!pending[i]) {
            o->slot = i;
            pending[i] = o->tmp;
            break;
        }
    return 0;
}

static void release(output *o)
{
    if (o->slot >= 0)
        pending[o->slot] = NULL;
    o->slot = -1;
}

void output_abort(output *o)
{
    if (o->f)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp[0])
        unlink(o->tmp);
    release(o);
    o->tmp[0] = '\0';
}

int output_commit(output *o, char *err, size_t len)
{
    if (!o->f) {
        snprintf(err, len, "writing %s failed: it was not open", o->path);
        return -1;
    }
    if ((fflush(o->f) != 0 || ferror(o->f)) && !o->error)
        o->error = EIO;
    /* a full disk may only say so when the data reaches it */
    if (!o->error && o->tmp[0] && fsync(o->fd) != 0)
        o->error = errno;
    if (fclose(o->f) != 0 && !o->error)
        o->error = EIO;
    o->f = NULL;
    if (!o->error && o->tmp[0] && group_open) {
        held *h = malloc(sizeof *h);
        if (!h)
            o->error = ENOMEM;
        else {
            snprintf(h->tmp, sizeof h->tmp, "%s", o->tmp);
            snprintf(h->path, sizeof h->path, "%s", o->path);
            h->next = group_files;
            group_files = h;
            release(o);
            o->tmp[0] = '\0';
            return 0;
        }
    }
    if (!o->error && o->tmp[0] && rename(o->tmp, o->path) != 0)
        o->error = errno;
    int e = o->error;
    if (e) {
        snprintf(err, len, "writing %s failed: %s", o->path, strerror(e));
        if (o->tmp[0])
            unlink(o->tmp);
    }
    release(o);
    o->tmp[0] = '\0';
    return e ? -1 : 0;
}

void output_group_begin(void)
{
    group_open = 1;
}

int output_group_end(int keep, char *err, size_t len)
{
    int rc = 0;
    group_open = 0;
    /* renamed in the order written (the list holds the last first) */
    held *order = NULL;
    while (group_files) {
        held *h = group_files;
        group_files = h->next;
        h->next = order;
        order = h;
        if (!keep)
            unlink(h->tmp);
    }
    while (order) {
        held *h = order;
        order = h->next;
        if (keep && rc == 0 && rename(h->tmp, h->path) != 0) {
            snprintf(err, len, "writing %s failed: %s", h->path, strerror(errno));
            rc = -1;
        }
        if (rc != 0)
            unlink(h->tmp);
        free(h);
    }
    return rc;
}
