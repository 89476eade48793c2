/* Which device the tensors live on (lz_device_use, lz_device_name in
 * lazyc.h; LZ_DEVICE): the engine starts the backend with the first
 * tensor, as the program or the environment chose it. */
#ifndef LZ_ENGINE_DEVICE_H
#define LZ_ENGINE_DEVICE_H

/* Starts the chosen backend if none is registered yet: 0, or -1 with an
   error naming op and why (LZ_DEVICE names no backend, the device refused). */
int lz_device_start(const char *op);

#endif
