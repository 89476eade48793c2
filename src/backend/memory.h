/* Device memory: every buffer and executable arena is allocated here, so
 * the peak is the most device memory held at once. */
#ifndef LZ_MEMORY_H
#define LZ_MEMORY_H

#include <stddef.h>
#include <stdint.h>

void   *lz_device_alloc(size_t nbytes);
void    lz_device_free(void *p, size_t nbytes);
int64_t lz_device_bytes_now(void);
int64_t lz_device_peak_bytes(void);
/* Restarts the peak from the bytes held now (lz_metrics_reset). */
void    lz_device_peak_reset(void);
/* Hands the backend's cached free memory back to the system (lz_shutdown). */
void    lz_device_trim(void);

#endif
