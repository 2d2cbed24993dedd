/* The sentence of a check the Fortran module makes itself (an array of the
 * wrong shape or kind for the plan), kept per thread as libdakit keeps its
 * own, so that dk_last_error in Fortran words both kinds of failure. */
#include <stdio.h>

static _Thread_local char message[512];
static _Thread_local const void *message_ctx;

void dkf_error_set(const void *ctx, const char *text)
{
    snprintf(message, sizeof message, "%s", text);
    message_ctx = ctx;
}

void dkf_error_clear(void)
{
    message[0] = '\0';
    message_ctx = NULL;
}

/* The module's own sentence when the calling thread's last call failed in
 * its checks: on ctx, on no context (a plan never made), or on any context
 * when ctx is NULL; else NULL. */
const char *dkf_error_get(const void *ctx)
{
    if (!message[0] || (ctx && message_ctx && ctx != message_ctx))
        return NULL;
    return message;
}
