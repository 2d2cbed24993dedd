#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"

int cmd_info(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: dakit info\n\nLists every plugin found, its version, devices, algorithms and\n"
               "their variants, and the reason any plugin was refused.\n");
        return 0;
    }
    int n = dk_backend_count();
    printf("dakit %s: %d plugin(s) found\n", DK_VERSION_STRING, n);
    int usable = 0;
    for (int i = 0; i < n; i++) {
        dk_backend_info b;
        if (dk_backend_get(i, &b) != DK_OK)
            continue;
        if (b.usable) {
            usable++;
            printf("\n%s %s (priority %d)\n  file: %s\n  algorithms: %s\n", b.name, b.version,
                   b.priority, b.path, b.algorithms[0] ? b.algorithms : "none");
            static const char *algos[] = {"gauss", "enkf", "kmeans", "gbees"};
            for (int a = 0; a < 4; a++)
                if (b.variants[a][0])
                    printf("    %-7s variants: %s (--variant; default: %s)\n", algos[a], b.variants[a],
                           a == 1 ? "the cost model's pick" : "the first");
            for (int d = 0; d < b.device_count; d++) {
                static const char *kinds[] = {"", ", cpu", ", gpu", ", accelerator"};
                unsigned k = (unsigned)b.devices[d].kind;
                printf("  device %d: %s%s", d, b.devices[d].name, k < 4 ? kinds[k] : "");
                if (b.devices[d].memory_bytes)
                    printf(" (%.1f GiB)", (double)b.devices[d].memory_bytes / (1 << 30));
                printf("\n");
            }
        } else {
            printf("\n%s refused\n  file: %s\n  reason: %s\n", b.name[0] ? b.name : "(unnamed)",
                   b.path, b.reason);
        }
    }
    if (!n)
        printf("\nno plugin found: set DAKIT_PLUGIN_PATH to the folder holding dakit-*.so\n");
    dk_context *ctx;
    if (dk_context_create(NULL, &ctx) == DK_OK) {
        printf("\nauto selection picks: %s (%s)\n", dk_context_backend(ctx), dk_context_device(ctx));
        dk_context_destroy(ctx);
    } else {
        printf("\nauto selection fails: %s\n", dk_last_error(NULL));
    }
    return usable ? 0 : 1;
}
