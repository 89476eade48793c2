/* Device selection. The engine starts the backend: the first tensor made
 * from data registers the one lz_device_use or LZ_DEVICE chose (the CPU's
 * by default), unless a program or test registered another before. Every
 * tensor's values root in data made by engine/tensor_api.c (ops only
 * combine tensors), so nothing reaches device memory or the compiler
 * earlier; and this file is in every program that makes a tensor, as a
 * constructor elsewhere would not be in a static link that never names it.
 * A backend other than the CPU's comes from its own shared object
 * (backend/registry.c). */
#include "engine/device.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/metrics.h"
#include "base/settings.h"
#include "base/thread.h"

static void host_error(const char *msg) { lz_errorf("%s", msg); }

/* the settings table by id, for a backend's own LZ_* variables */
static int64_t host_setting_int(int id)
{
    return id >= 0 && id < LZ_SETTING_COUNT ? lz_setting_int((lz_setting_id)id) : 0;
}

static const char *host_setting_text(int id)
{
    return id >= 0 && id < LZ_SETTING_COUNT ? lz_setting_text((lz_setting_id)id) : "";
}

/* The backend called name, or NULL + error. */
static const lz_backend *open_backend(const char *name)
{
    if (strcmp(name, "cpu") == 0) return lz_backend_cpu();
    const lz_backend_host host = {.abi = LZ_BACKEND_ABI, .size = sizeof host,
                                  .cpu = lz_backend_cpu(), .set_error = host_error,
                                  .setting_int = host_setting_int, .setting_text = host_setting_text,
                                  .count_launches = lz_metrics_add_launches};
    return lz_backend_load(name, &host);
}

/* The error now set, prefixed "what: " (the message is copied first: it
   is the buffer lz_errorf writes). */
static int prefixed(const char *what)
{
    char why[512];
    snprintf(why, sizeof why, "%s", lz_last_error() ? lz_last_error() : "unknown error");
    return lz_errorf_int("%s: %s", what, why);
}

int lz_device_start(const char *op)
{
    if (lz_backend_current()) return 0;
    const char *name = lz_setting_text(LZ_SETTING_DEVICE);
    const lz_backend *b = open_backend(name);
    if (!b) {
        char what[160];
        snprintf(what, sizeof what, "%s: LZ_DEVICE=%s", op, name);
        return prefixed(what);
    }
    lz_backend_register(b);
    return 0;
}

int lz_device_use(const char *name)
{
    if (lz_owner_check("lz_device_use")) return -1;
    if (!name) return lz_errorf_int("lz_device_use: name is NULL");
    const lz_backend *cur = lz_backend_current();
    if (cur) {
        if (strcmp(cur->name, name) == 0) return 0;
        return lz_errorf_int("lz_device_use: tensors already live on device '%s'; choose the device "
                             "before the first tensor is made", cur->name);
    }
    const lz_backend *b = open_backend(name);
    if (!b) return prefixed("lz_device_use");
    lz_backend_register(b);
    return 0;
}

const char *lz_device_name(void)
{
    const lz_backend *cur = lz_backend_current();
    return cur ? cur->name : lz_setting_text(LZ_SETTING_DEVICE);
}
