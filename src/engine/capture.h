/* Capture hooks the rest of core calls: reading values or syncing while a
 * step function is being traced is a graph break. */
#ifndef LZ_CAPTURE_H
#define LZ_CAPTURE_H

/* Notes a graph break if a capture is tracing (no-op otherwise). */
void lz_capture_note_break(const char *reason);
/* 1 while a step function is being traced. */
int  lz_capture_tracing(void);

struct lz_tensor;
/* Notes data made from host memory (op: the public call) while a step
   function is traced: a replay reuses its value (one warning names them). */
void lz_capture_note_host_data(struct lz_tensor *t, const char *op);
/* A tensor's requires-grad flag changed: every capture re-traces once
   (its graph and gradients may differ). */
void lz_capture_leaves_changed(void);

#endif
