/* --device NAME (lazyc bench, train, grads): the device is chosen before
 * the command makes its first tensor, so a name lazyc cannot use is a
 * usage error that costs nothing. */
#include <stdio.h>

#include "cli.h"
#include "lazyc.h"

int lz_cli_device(const char *cmd, const char *name)
{
    if (!name || lz_device_use(name) == 0) return 0;
    fprintf(stderr, "lazyc %s: --device %s: %s\n", cmd, name, lz_last_error());
    return -1;
}
