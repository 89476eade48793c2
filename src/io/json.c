/* Recursive-descent JSON reader (RFC 8259) for file headers. */
#include "io/json.h"

#include "lazyc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64 };

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errcap;
    int failed;
} parser;

static int fail(parser *p, const char *fmt, ...) LZ_PRINTF_FORMAT(2, 3);
static int fail(parser *p, const char *fmt, ...)
{
    if (p->failed) return -1;
    p->failed = 1;
    if (p->err && p->errcap) {
        int n = snprintf(p->err, p->errcap, "byte %zu: ", p->pos);
        if (n >= 0 && (size_t)n < p->errcap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->errcap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static void free_value(lz_json *v)
{
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        free_value(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static int hex4(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *dst, unsigned cp)
{
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The decoded string is never longer than its source text (an escape of
   n bytes yields at most n bytes of UTF-8), so one allocation suffices. */
static int parse_string(parser *p, char **out, size_t *out_len)
{
    if (peek(p) != '"') return fail(p, "expected a string");
    p->pos++;
    size_t start = p->pos;
    size_t end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, "unterminated string");
    char *buf = malloc(end - start + 1);
    if (!buf) return fail(p, "out of memory");
    size_t n = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) { free(buf); return fail(p, "control character in string"); }
        if (c != '\\') { buf[n++] = (char)c; p->pos++; continue; }
        p->pos++;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) { free(buf); return -1; }
            /* a surrogate pair is two escapes (12 source bytes) for 4 bytes */
            if (cp >= 0xD800 && cp < 0xDC00 && p->pos + 6 <= end && p->s[p->pos] == '\\'
                && p->s[p->pos + 1] == 'u') {
                p->pos += 2;
                unsigned lo;
                if (hex4(p, &lo)) { free(buf); return -1; }
                if (lo < 0xDC00 || lo > 0xDFFF) { free(buf); return fail(p, "bad surrogate pair"); }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xD800 && cp < 0xE000) {
                free(buf);
                return fail(p, "lone surrogate in \\u escape");
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            free(buf);
            return fail(p, "bad escape '\\%c'", e);
        }
    }
    p->pos = end + 1;
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
}

static int parse_number(parser *p, lz_json *v)
{
    size_t start = p->pos;
    int integral = 1;
    if (peek(p) == '-') p->pos++;
    if (peek(p) == '0') p->pos++;
    else if (peek(p) >= '1' && peek(p) <= '9') while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    else return fail(p, "bad number");
    if (peek(p) == '.') {
        integral = 0;
        p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) return fail(p, "bad number: no digit after '.'");
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        integral = 0;
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) return fail(p, "bad number: no digit in exponent");
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n >= sizeof tmp) return fail(p, "number too long");
    memcpy(tmp, p->s + start, n);
    tmp[n] = '\0';
    v->type = LZ_JSON_NUMBER;
    v->d = strtod(tmp, NULL);
    if (integral) {
        errno = 0;
        long long ll = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->i = ll;
        }
    }
    return 0;
}

static int parse_value(parser *p, lz_json *v, int depth);

static int grow(parser *p, lz_json *v, int *cap, int with_keys)
{
    if (v->n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 8;
    lz_json *items = realloc(v->items, sizeof *items * (size_t)nc);
    if (!items) return fail(p, "out of memory");
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, sizeof *keys * (size_t)nc);
        if (!keys) return fail(p, "out of memory");
        v->keys = keys;
    }
    *cap = nc;
    return 0;
}

static int parse_array(parser *p, lz_json *v, int depth)
{
    v->type = LZ_JSON_ARRAY;
    int cap = 0;
    p->pos++;
    skip_ws(p);
    if (peek(p) == ']') { p->pos++; return 0; }
    for (;;) {
        if (grow(p, v, &cap, 0)) return -1;
        memset(&v->items[v->n], 0, sizeof v->items[0]);
        v->n++;
        if (parse_value(p, &v->items[v->n - 1], depth + 1)) return -1;
        skip_ws(p);
        int c = peek(p);
        p->pos++;
        if (c == ']') return 0;
        if (c != ',') { p->pos--; return fail(p, "expected ',' or ']' in array"); }
    }
}

static int parse_object(parser *p, lz_json *v, int depth)
{
    v->type = LZ_JSON_OBJECT;
    int cap = 0;
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') { p->pos++; return 0; }
    for (;;) {
        if (grow(p, v, &cap, 1)) return -1;
        skip_ws(p);
        size_t key_pos = p->pos;
        char *key;
        size_t key_len;
        if (parse_string(p, &key, &key_len)) return -1;
        for (int i = 0; i < v->n; i++)
            if (strcmp(v->keys[i], key) == 0) {
                p->pos = key_pos;
                fail(p, "duplicate key \"%s\"", key);
                free(key);
                return -1;
            }
        memset(&v->items[v->n], 0, sizeof v->items[0]);
        v->keys[v->n] = key;
        v->n++;
        skip_ws(p);
        if (peek(p) != ':') return fail(p, "expected ':' after key \"%s\"", key);
        p->pos++;
        if (parse_value(p, &v->items[v->n - 1], depth + 1)) return -1;
        skip_ws(p);
        int c = peek(p);
        p->pos++;
        if (c == '}') return 0;
        if (c != ',') { p->pos--; return fail(p, "expected ',' or '}' in object"); }
    }
}

static int literal(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "unexpected character '%c'", p->s[p->pos]);
    p->pos += n;
    return 0;
}

static int parse_value(parser *p, lz_json *v, int depth)
{
    if (depth > MAX_DEPTH) return fail(p, "nesting deeper than %d", MAX_DEPTH);
    skip_ws(p);
    int c = peek(p);
    switch (c) {
    case -1: return fail(p, "unexpected end of text");
    case '{': return parse_object(p, v, depth);
    case '[': return parse_array(p, v, depth);
    case '"':
        v->type = LZ_JSON_STRING;
        return parse_string(p, &v->str, &v->str_len);
    case 't': v->type = LZ_JSON_BOOL; v->boolean = 1; return literal(p, "true");
    case 'f': v->type = LZ_JSON_BOOL; return literal(p, "false");
    case 'n': v->type = LZ_JSON_NULL; return literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
        if (c >= 0x20 && c < 0x7F) return fail(p, "unexpected character '%c'", c);
        return fail(p, "unexpected byte 0x%02x", (unsigned)c);
    }
}

lz_json *lz_json_parse(const char *text, size_t len, char *err, size_t errcap)
{
    parser p = { text, len, 0, err, errcap, 0 };
    if (err && errcap) err[0] = '\0';
    lz_json *v = calloc(1, sizeof *v);
    if (!v) {
        fail(&p, "out of memory");
        return NULL;
    }
    if (parse_value(&p, v, 0) == 0) {
        skip_ws(&p);
        if (p.pos < p.len) fail(&p, "text after the end of the value");
    }
    if (p.failed) {
        lz_json_free(v);
        return NULL;
    }
    return v;
}

void lz_json_free(lz_json *v)
{
    if (!v) return;
    free_value(v);
    free(v);
}

const lz_json *lz_json_get(const lz_json *obj, const char *key)
{
    if (!obj || obj->type != LZ_JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}
