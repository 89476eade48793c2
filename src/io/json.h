/* A small JSON reader for file headers (safetensors): parses a whole text
 * into a tree, keeps object members in file order, reads integers exactly
 * as int64 and reports the byte offset of the first error. */
#ifndef LZ_JSON_H
#define LZ_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LZ_JSON_NULL, LZ_JSON_BOOL, LZ_JSON_NUMBER, LZ_JSON_STRING,
               LZ_JSON_ARRAY, LZ_JSON_OBJECT } lz_json_type;

typedef struct lz_json lz_json;
struct lz_json {
    lz_json_type type;
    int      boolean;
    int      is_int;      /* number written without fraction or exponent, fits int64 */
    int64_t  i;
    double   d;
    char    *str;         /* string value, UTF-8, NUL-terminated */
    size_t   str_len;     /* may contain NUL bytes from \u0000 */
    int      n;           /* array items or object members */
    lz_json *items;       /* array items / object member values */
    char   **keys;        /* object member names */
};

/* Parses text[0..len). NULL on error, with a message naming the byte
   offset written to err (errcap bytes). Nesting deeper than 64 is an
   error, so a hostile header cannot exhaust the stack. */
lz_json *lz_json_parse(const char *text, size_t len, char *err, size_t errcap);
void     lz_json_free(lz_json *v);
/* Member of an object by name, or NULL. */
const lz_json *lz_json_get(const lz_json *obj, const char *key);

#endif
