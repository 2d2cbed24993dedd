/* Progress lines for long commands (cli/progress.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/progress.h"

void progress_init(progress *p, const char *cmd)
{
    memset(p, 0, sizeof *p);
    p->mode = -1;
    p->cmd = cmd;
}

int progress_option(progress *p, const char *arg)
{
    if (!strcmp(arg, "--progress"))
        p->mode = 1;
    else if (!strcmp(arg, "--quiet"))
        p->mode = 0;
    else
        return 0;
    return 1;
}

void progress_start(progress *p)
{
    p->tty = isatty(2);
    p->on = p->mode == 1 || (p->mode == -1 && p->tty);
    p->start = p->last = cli_now();
}

static void print(progress *p, const char *fmt, va_list ap)
{
    double now = cli_now();
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    if (p->tty) {
        fprintf(stderr, "\r\033[Kdakit %s: [%.1f s] %s", p->cmd, now - p->start, text);
        p->open = 1;
    } else {
        fprintf(stderr, "dakit %s: [%.1f s] %s\n", p->cmd, now - p->start, text);
    }
    fflush(stderr);
    p->last = now;
}

void progress_stage(progress *p, const char *fmt, ...)
{
    if (!p->on)
        return;
    va_list ap;
    va_start(ap, fmt);
    print(p, fmt, ap);
    va_end(ap);
}

void progress_tick(progress *p, const char *fmt, ...)
{
    if (!p->on || cli_now() - p->last < (p->tty ? 0.25 : PROGRESS_EVERY))
        return;
    va_list ap;
    va_start(ap, fmt);
    print(p, fmt, ap);
    va_end(ap);
}

void progress_clear(progress *p)
{
    if (p->open)
        fprintf(stderr, "\r\033[K");
    p->open = 0;
}
