/* Capture hooks the rest of the engine calls. Whether a step function is
 * being traced, and its graph breaks, are the barrier's (engine/step.h). */
#ifndef LZ_CAPTURE_H
#define LZ_CAPTURE_H

struct lz_tensor;
/* Notes data made from host memory (op: the public call) while a step
   function is traced: a replay reuses its value (one warning names them). */
void lz_capture_note_host_data(struct lz_tensor *t, const char *op);
/* A tensor's requires-grad flag changed: every capture re-traces once
   (its graph and gradients may differ). */
void lz_capture_leaves_changed(void);
/* The library made state of its own that lives across calls (the random
   generator, made by the first random op): a call that made it is a
   warm-up, run lazily, and the next call traces with that state bound. */
void lz_capture_note_library_state(void);

#endif
