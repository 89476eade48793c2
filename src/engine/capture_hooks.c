/* What the rest of the library tells capture while a step function is
 * traced (data made from host memory, state the library made for itself),
 * kept for capture's own files to read. */
#include "engine/capture_hooks.h"

#include <stdlib.h>

#include "backend/buffer.h"
#include "base/fault.h"
#include "engine/step.h"
#include "engine/tensor.h"

static int internal_state_made;   /* during this trace (lz_capture_note_internal_state) */
static lz_capture_note *notes;
static int n_notes, cap_notes;
static int notes_lost;       /* a note found no memory: this trace cannot be bound */

void lz_capture_note_internal_state(void)
{
    if (lz_capture_tracing()) internal_state_made = 1;
}

void lz_capture_note_host_data(lz_tensor *t, const char *op)
{
    if (!lz_capture_tracing() || !t) return;
    if (n_notes == cap_notes) {
        int cap = cap_notes ? cap_notes * 2 : 16;
        lz_capture_note *n = lz_host_realloc(notes, sizeof *n * (size_t)cap);
        if (!n) {
            /* bind_leaf would take a tensor made here for a constant */
            notes_lost = 1;
            return;
        }
        notes = n;
        cap_notes = cap;
    }
    lz_tensor_ref(t);
    lz_buffer_ref(t->node->buf);
    notes[n_notes++] = (lz_capture_note){t, t->node->buf, op};
}

static void drop_notes(void)
{
    for (int i = 0; i < n_notes; i++) {
        lz_tensor_unref(notes[i].t);
        lz_buffer_unref(notes[i].buf);
    }
    /* freed, not kept: one allocation per trace that makes host data, and
       nothing left over at exit */
    free(notes);
    notes = NULL;
    n_notes = cap_notes = 0;
    notes_lost = 0;
}

void lz_capture_notes_begin(void)
{
    internal_state_made = 0;
    drop_notes();
}

void lz_capture_notes_end(void) { drop_notes(); }

const lz_capture_note *lz_capture_notes(int *n)
{
    *n = n_notes;
    return notes;
}

int lz_capture_notes_lost(void) { return notes_lost; }

int lz_capture_internal_state_made(void) { return internal_state_made; }
