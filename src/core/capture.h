/* Capture hooks the rest of core calls: reading values or syncing while a
 * step function is being traced is a graph break. */
#ifndef LZ_CAPTURE_H
#define LZ_CAPTURE_H

/* Notes a graph break if a capture is tracing (no-op otherwise). */
void lz_capture_note_break(const char *reason);
/* 1 while a step function is being traced. */
int  lz_capture_tracing(void);

#endif
