/* A table of choices made by timing, kept for the process and, unless
 * LZ_CONV_CACHE=0, in a file later processes read instead of timing again:
 * ${XDG_CACHE_HOME:-$HOME/.cache}/lazyc/<prefix><hash>.txt, one file per
 * machine identity (the CPU's model string, the instruction set oneDNN
 * actually uses, so DNNL_MAX_CPU_ISA=AVX2 has its own, oneDNN's version and
 * lazyc's), which the file's second line spells out; then one line per
 * choice, its key's integers and its value. The file is replaced durably
 * (base/durable.h) after each new choice; a file that does not parse, or
 * was written for another identity, is ignored with one notice on stderr
 * (its choices are timed again and the file rewritten), never an error.
 * The convolution ways (conv_choices.h) and autocast's product choices
 * (product_choice.c) are two such tables. */
#ifndef LZ_CHOICES_FILE_H
#define LZ_CHOICES_FILE_H

#include <pthread.h>
#include <stdint.h>

#define LZ_CHOICES_MAX_KEY 24
#define LZ_CHOICES_MAX 2048

typedef struct lz_choice_entry { int64_t key[LZ_CHOICES_MAX_KEY], value; } lz_choice_entry;

/* A table: the first line below is its definition, the rest its state
   (zero, and the lock PTHREAD_MUTEX_INITIALIZER, at first). */
typedef struct lz_choices {
    const char *magic, *prefix, *what;   /* first line; file name; "convolution choices" */
    int key_len;                         /* at most LZ_CHOICES_MAX_KEY */
    int64_t lo, hi;                      /* a value outside [lo, hi] makes the file corrupt */
    pthread_mutex_t lock;
    lz_choice_entry table[LZ_CHOICES_MAX];
    int n, read_once, write_noticed;
    int64_t loaded;
    char path[4096];                     /* "" when not kept in a file */
    char identity[512];
} lz_choices;

/* The value recorded for key, or missing. The first call reads the file. */
int64_t lz_choices_find(lz_choices *c, const int64_t *key, int64_t missing);
/* Records value for key, for the process and in the file. */
void    lz_choices_put(lz_choices *c, const int64_t *key, int64_t value);
/* Choices read from the file so far (tests). */
int64_t lz_choices_loaded(lz_choices *c);
/* Copies up to cap entries (reading the file first) into out; their count. */
int     lz_choices_list(lz_choices *c, lz_choice_entry *out, int cap);
/* The file's path ("" when none), after the first read. */
void    lz_choices_path(lz_choices *c, char *out, size_t n);

#endif
