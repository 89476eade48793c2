/* Capture hooks the rest of the library calls, and what they noted, read
 * back by capture's own files (engine/capture_internal.h). Whether a step
 * function is being traced, and its graph breaks, are the barrier's
 * (engine/step.h). */
#ifndef LZ_CAPTURE_HOOKS_H
#define LZ_CAPTURE_HOOKS_H

struct lz_buffer;
struct lz_tensor;
/* Notes data made from host memory (op: the public call) while a step
   function is traced: a replay reuses its value (one warning names them). */
void lz_capture_note_host_data(struct lz_tensor *t, const char *op);
/* The library made state of its own that lives across calls (the random
   generator, made by the first random op): a call that made it is a
   warm-up, run lazily, and the next call traces with that state bound. */
void lz_capture_note_internal_state(void);

/* A data tensor made from host memory while a function is traced. */
typedef struct lz_capture_note {
    struct lz_tensor *t;     /* a plain reference */
    struct lz_buffer *buf;   /* its buffer when made */
    const char *op;
} lz_capture_note;
/* A trace begins (nothing noted yet) and ends (its notes let go). */
void lz_capture_notes_begin(void);
void lz_capture_notes_end(void);
/* The data tensors made from host memory during this trace, *n of them. */
const lz_capture_note *lz_capture_notes(int *n);
/* 1 if a note found no memory: this trace cannot be bound. */
int lz_capture_notes_lost(void);
/* 1 if the library made state of its own during this trace. */
int lz_capture_internal_state_made(void);

#endif
