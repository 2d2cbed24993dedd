/* Beside a plugin whose probe crashes: asking for a backend by a mistyped
 * name, or by the name of another plugin, probes nothing else, so the
 * process survives and the error names what was found. */
#include <stdio.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"

int main(void)
{
    dk_context *ctx = NULL;
    CHECK(dk_context_create("cpuu", &ctx) == DK_ERR_NO_BACKEND && !ctx, "a mistyped name fails");
    const char *why = dk_last_error(NULL);
    CHECK(strstr(why, "cpuu: no plugin of that name") && strstr(why, "crashprobe") && strstr(why, "cpu"),
          "the error names what was found: %s", why);
    printf("a mistyped backend says: %s\n", why);
    CHECK(dk_context_create("cpu", &ctx) == DK_OK, "cpu opens beside a crashing plugin: %s", dk_last_error(NULL));
    dk_context_destroy(ctx);
    return failures ? 1 : 0;
}
