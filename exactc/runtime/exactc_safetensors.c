/* exactc runtime: reading .safetensors files.
 *
 * The format (huggingface/safetensors): 8 bytes, a little-endian u64 N; N bytes of a
 * UTF-8 JSON object; then the data. The object maps each tensor name to
 *     {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 * (offsets relative to the first byte after the header) and may hold "__metadata__",
 * an object of strings, which is skipped.
 *
 * What is checked, each failure a message in `err` naming the field and the rule: N is
 * at most EXACTC_ST_MAX_HEADER (the safetensors library's limit) and fits the file; the
 * header is one JSON object (strings of UTF-8 with their escapes, non-negative integers
 * without a leading zero, arrays, nested objects; nothing after it but spaces);
 * __metadata__ is null or an object of strings; each tensor has the three fields, at most
 * EXACTC_ST_MAX_DIMS dimensions, begin <= end, and end - begin = the element size times
 * the product of the shape (no overflow); no name twice; and the tensors tile the data
 * section exactly, as the safetensors library requires: sorted by offset, the first
 * begins at 0, each begins where the one before ends, and the last ends at the file's
 * end. So a gap, an overlap, a header length that does not land on the first tensor's
 * byte, or trailing bytes are all refused: each is a file that another reader could read
 * differently. This parser sees files from anywhere and is fuzzed: every byte it reads is
 * first checked against the length it was given.
 *
 * exactc_st_open reads a file in three steps, each as long as the one before declares
 * (the length, the header, the tensors' data), then checks that nothing follows: the
 * memory it takes is bounded by the header, whatever the file is (a pipe, /dev/zero).
 */
#include "exactc_rt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * A small JSON reader over [p, end): only what a safetensors header holds.
 * ---------------------------------------------------------------------------------- */
typedef struct {
    const unsigned char *s;
    size_t len;
    size_t pos;
    int depth;
    char *err;
    size_t errlen;
} st_json;

#define ST_MAX_DEPTH 16

static void skip_space(st_json *j) {
    while (j->pos < j->len) {
        unsigned char c = j->s[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        j->pos++;
    }
}

static int expect(st_json *j, unsigned char c, const char *what) {
    skip_space(j);
    if (j->pos >= j->len)
        return exactc_fail(j->err, j->errlen, "header: the JSON ends where %s ('%c') was expected", what, c);
    if (j->s[j->pos] != c)
        return exactc_fail(j->err, j->errlen, "header byte %zu: expected %s ('%c'), found 0x%02x", j->pos, what,
                       c, j->s[j->pos]);
    j->pos++;
    return 0;
}

static int peek(st_json *j, unsigned char *c) {
    skip_space(j);
    if (j->pos >= j->len) return exactc_fail(j->err, j->errlen, "header: the JSON ends early, at byte %zu", j->pos);
    *c = j->s[j->pos];
    return 0;
}

static int hex4(st_json *j, unsigned *out) {
    unsigned v = 0;
    if (j->len - j->pos < 4) return exactc_fail(j->err, j->errlen, "header byte %zu: a \\u escape needs 4 hex digits", j->pos);
    for (int k = 0; k < 4; k++) {
        unsigned char c = j->s[j->pos++];
        unsigned d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return exactc_fail(j->err, j->errlen, "header byte %zu: '%c' is not a hex digit of a \\u escape", j->pos - 1, c);
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* The length of the well-formed UTF-8 sequence at s (`avail` bytes there), or 0 if there
 * is none: RFC 3629's table of lead and second bytes, so no overlong form, no surrogate,
 * nothing past U+10FFFF. The safetensors library refuses a header that is not UTF-8, and a
 * name read here must be the name it reads. */
static size_t utf8_length(const unsigned char *s, size_t avail) {
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    size_t n;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) n = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        n = 3;
        if (s[0] == 0xE0) lo = 0xA0;      /* not overlong */
        else if (s[0] == 0xED) hi = 0x9F; /* not a surrogate */
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        n = 4;
        if (s[0] == 0xF0) lo = 0x90;      /* not overlong */
        else if (s[0] == 0xF4) hi = 0x8F; /* not past U+10FFFF */
    } else return 0;
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return n;
}

/* Read a string into a new malloc'd, NUL-terminated buffer (escapes decoded; \u to
 * UTF-8). A NUL inside a name is refused: C could not ask for that tensor. */
static int read_string(st_json *j, char **out) {
    *out = NULL;
    if (expect(j, '"', "a string") != 0) return -1;
    size_t cap = 16, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return exactc_fail(j->err, j->errlen, "out of memory");
    for (;;) {
        if (j->pos >= j->len) {
            free(buf);
            return exactc_fail(j->err, j->errlen, "header: a string is not closed before the header ends");
        }
        unsigned char c = j->s[j->pos++];
        unsigned char enc[4];
        size_t k = 0;
        if (c == '"') break;
        if (c < 0x20) {
            free(buf);
            return exactc_fail(j->err, j->errlen, "header byte %zu: control byte 0x%02x inside a string", j->pos - 1, c);
        }
        if (c >= 0x80) {
            size_t n8 = utf8_length(j->s + j->pos - 1, j->len - j->pos + 1);
            if (n8 == 0) {
                free(buf);
                return exactc_fail(j->err, j->errlen, "header byte %zu: not UTF-8 (0x%02x begins no UTF-8 sequence "
                                   "there); a header is UTF-8 text", j->pos - 1, c);
            }
            memcpy(enc, j->s + j->pos - 1, n8);
            k = n8;
            j->pos += n8 - 1;
        } else if (c != '\\') {
            enc[k++] = c;
        } else {
            if (j->pos >= j->len) {
                free(buf);
                return exactc_fail(j->err, j->errlen, "header: an escape is cut by the header's end");
            }
            unsigned char e = j->s[j->pos++];
            unsigned cp;
            switch (e) {
            case '"': case '\\': case '/': enc[k++] = e; break;
            case 'b': enc[k++] = '\b'; break;
            case 'f': enc[k++] = '\f'; break;
            case 'n': enc[k++] = '\n'; break;
            case 'r': enc[k++] = '\r'; break;
            case 't': enc[k++] = '\t'; break;
            case 'u':
                if (hex4(j, &cp) != 0) { free(buf); return -1; }
                if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
                    unsigned lo;
                    if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') {
                        free(buf);
                        return exactc_fail(j->err, j->errlen, "header byte %zu: a high surrogate without its low half", j->pos);
                    }
                    j->pos += 2;
                    if (hex4(j, &lo) != 0) { free(buf); return -1; }
                    if (lo < 0xDC00 || lo >= 0xE000) {
                        free(buf);
                        return exactc_fail(j->err, j->errlen, "header byte %zu: a high surrogate followed by 0x%04x", j->pos, lo);
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    free(buf);
                    return exactc_fail(j->err, j->errlen, "header byte %zu: a lone low surrogate", j->pos);
                }
                if (cp == 0) {
                    free(buf);
                    return exactc_fail(j->err, j->errlen, "header byte %zu: \\u0000 inside a string", j->pos);
                }
                if (cp < 0x80) enc[k++] = (unsigned char)cp;
                else if (cp < 0x800) { enc[k++] = (unsigned char)(0xC0 | (cp >> 6)); enc[k++] = (unsigned char)(0x80 | (cp & 0x3F)); }
                else if (cp < 0x10000) {
                    enc[k++] = (unsigned char)(0xE0 | (cp >> 12));
                    enc[k++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    enc[k++] = (unsigned char)(0x80 | (cp & 0x3F));
                } else {
                    enc[k++] = (unsigned char)(0xF0 | (cp >> 18));
                    enc[k++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                    enc[k++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    enc[k++] = (unsigned char)(0x80 | (cp & 0x3F));
                }
                break;
            default:
                free(buf);
                return exactc_fail(j->err, j->errlen, "header byte %zu: unknown escape \\%c", j->pos - 1, e);
            }
        }
        if (n + k + 1 > cap) {
            while (n + k + 1 > cap) cap *= 2;
            char *grown = realloc(buf, cap);
            if (grown == NULL) { free(buf); return exactc_fail(j->err, j->errlen, "out of memory"); }
            buf = grown;
        }
        memcpy(buf + n, enc, k);
        n += k;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* A non-negative integer that fits in 63 bits (no sign, fraction or exponent), written as
 * JSON writes one: no leading zero, which the library's parser refuses ([00, 16]). */
static int read_uint(st_json *j, const char *what, uint64_t *out) {
    skip_space(j);
    if (j->pos >= j->len || j->s[j->pos] < '0' || j->s[j->pos] > '9')
        return exactc_fail(j->err, j->errlen, "header byte %zu: %s must be a non-negative integer", j->pos, what);
    if (j->s[j->pos] == '0' && j->len - j->pos > 1 && j->s[j->pos + 1] >= '0' && j->s[j->pos + 1] <= '9')
        return exactc_fail(j->err, j->errlen, "header byte %zu: %s has a leading zero; JSON numbers have none",
                           j->pos, what);
    uint64_t v = 0;
    while (j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
        unsigned d = (unsigned)(j->s[j->pos] - '0');
        if (v > (UINT64_C(0x7fffffffffffffff) - d) / 10)
            return exactc_fail(j->err, j->errlen, "header byte %zu: %s does not fit in 63 bits", j->pos, what);
        v = v * 10 + d;
        j->pos++;
    }
    if (j->pos < j->len && (j->s[j->pos] == '.' || j->s[j->pos] == 'e' || j->s[j->pos] == 'E'))
        return exactc_fail(j->err, j->errlen, "header byte %zu: %s must be an integer", j->pos, what);
    *out = v;
    return 0;
}

/* Skip any JSON value (for __metadata__ and unknown fields), depth-limited. */
static int skip_value(st_json *j) {
    unsigned char c = 0;
    if (peek(j, &c) != 0) return -1;
    if (c == '"') {
        char *s;
        if (read_string(j, &s) != 0) return -1;
        free(s);
        return 0;
    }
    if (c == '{' || c == '[') {
        unsigned char close = c == '{' ? '}' : ']';
        if (++j->depth > ST_MAX_DEPTH)
            return exactc_fail(j->err, j->errlen, "header byte %zu: nested deeper than %d", j->pos, ST_MAX_DEPTH);
        j->pos++;
        if (peek(j, &c) != 0) return -1;
        if (c == close) { j->pos++; j->depth--; return 0; }
        for (;;) {
            if (close == '}') {
                char *key;
                if (read_string(j, &key) != 0) return -1;
                free(key);
                if (expect(j, ':', "a colon") != 0) return -1;
            }
            if (skip_value(j) != 0) return -1;
            if (peek(j, &c) != 0) return -1;
            j->pos++;
            if (c == close) break;
            if (c != ',') return exactc_fail(j->err, j->errlen, "header byte %zu: expected ',' or '%c'", j->pos - 1, close);
        }
        j->depth--;
        return 0;
    }
    if (c >= '0' && c <= '9') {
        uint64_t v;
        return read_uint(j, "a number", &v);
    }
    static const char *words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if (j->len - j->pos >= n && memcmp(j->s + j->pos, words[k], n) == 0) {
            j->pos += n;
            return 0;
        }
    }
    return exactc_fail(j->err, j->errlen, "header byte %zu: 0x%02x does not start a JSON value this reader accepts", j->pos, c);
}

/* __metadata__: null, or an object of strings. The library reads it as a map of string to
 * string and refuses a file whose metadata holds a number, an object, a list, true, false
 * or null as a value. */
static int skip_metadata(st_json *j) {
    unsigned char c = 0;
    if (peek(j, &c) != 0) return -1;
    if (c == 'n') return skip_value(j); /* null (any other word is refused there) */
    if (c != '{') return exactc_fail(j->err, j->errlen, "__metadata__ must be an object of strings (or null)");
    j->pos++;
    if (peek(j, &c) != 0) return -1;
    if (c == '}') { j->pos++; return 0; }
    for (;;) {
        char *s;
        if (read_string(j, &s) != 0) return -1;
        free(s);
        if (expect(j, ':', "a colon") != 0) return -1;
        if (peek(j, &c) != 0) return -1;
        if (c != '"')
            return exactc_fail(j->err, j->errlen, "header byte %zu: a __metadata__ value must be a string", j->pos);
        if (read_string(j, &s) != 0) return -1;
        free(s);
        if (peek(j, &c) != 0) return -1;
        j->pos++;
        if (c == '}') return 0;
        if (c != ',') return exactc_fail(j->err, j->errlen, "header byte %zu: expected ',' or '}'", j->pos - 1);
    }
}

/* ------------------------------------------------------------------------------------
 * Tensors
 * ---------------------------------------------------------------------------------- */
static size_t dtype_bytes(const char *dtype) {
    static const struct { const char *name; size_t size; } known[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1},
        {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(dtype, known[k].name) == 0) return known[k].size;
    return 0;
}

static int read_tensor(st_json *j, exactc_st_tensor *t) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    unsigned char c = 0;
    if (expect(j, '{', "a tensor's object") != 0) return -1;
    if (peek(j, &c) != 0) return -1;
    if (c == '}') { j->pos++; goto check; }
    for (;;) {
        char *key;
        if (read_string(j, &key) != 0) return -1;
        if (expect(j, ':', "a colon") != 0) { free(key); return -1; }
        if (strcmp(key, "dtype") == 0) {
            char *dtype;
            free(key);
            if (have_dtype) return exactc_fail(j->err, j->errlen, "tensor %s: dtype given twice", t->name);
            if (read_string(j, &dtype) != 0) return -1;
            if (strlen(dtype) >= sizeof t->dtype || dtype_bytes(dtype) == 0) {
                int rc = exactc_fail(j->err, j->errlen, "tensor %s: unknown dtype \"%.16s\"", t->name, dtype);
                free(dtype);
                return rc;
            }
            strcpy(t->dtype, dtype);
            free(dtype);
            have_dtype = 1;
        } else if (strcmp(key, "shape") == 0 || strcmp(key, "data_offsets") == 0) {
            int is_shape = key[0] == 's';
            free(key);
            if (is_shape ? have_shape : have_offsets)
                return exactc_fail(j->err, j->errlen, "tensor %s: %s given twice", t->name, is_shape ? "shape" : "data_offsets");
            uint64_t v[EXACTC_ST_MAX_DIMS];
            int n = 0;
            if (expect(j, '[', "an array") != 0) return -1;
            if (peek(j, &c) != 0) return -1;
            if (c == ']') j->pos++;
            else for (;;) {
                if (n == (is_shape ? EXACTC_ST_MAX_DIMS : 2))
                    return exactc_fail(j->err, j->errlen, "tensor %s: %s has more than %d entries", t->name,
                                   is_shape ? "shape" : "data_offsets", is_shape ? EXACTC_ST_MAX_DIMS : 2);
                if (read_uint(j, is_shape ? "a dimension" : "an offset", &v[n]) != 0) return -1;
                n++;
                if (peek(j, &c) != 0) return -1;
                j->pos++;
                if (c == ']') break;
                if (c != ',') return exactc_fail(j->err, j->errlen, "header byte %zu: expected ',' or ']'", j->pos - 1);
            }
            if (is_shape) {
                t->ndim = n;
                for (int k = 0; k < n; k++) t->shape[k] = (int64_t)v[k];
                have_shape = 1;
            } else {
                if (n != 2) return exactc_fail(j->err, j->errlen, "tensor %s: data_offsets must be [begin, end]", t->name);
                t->begin = v[0];
                t->end = v[1];
                have_offsets = 1;
            }
        } else {
            free(key);
            if (skip_value(j) != 0) return -1;
        }
        if (peek(j, &c) != 0) return -1;
        j->pos++;
        if (c == '}') break;
        if (c != ',') return exactc_fail(j->err, j->errlen, "header byte %zu: expected ',' or '}'", j->pos - 1);
    }
check:
    if (!have_dtype || !have_shape || !have_offsets)
        return exactc_fail(j->err, j->errlen, "tensor %s: missing %s", t->name,
                       !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    if (t->begin > t->end)
        return exactc_fail(j->err, j->errlen, "tensor %s: data_offsets [%llu, %llu] end before they begin", t->name,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
    uint64_t bytes = dtype_bytes(t->dtype);
    for (int k = 0; k < t->ndim; k++) {
        uint64_t d = (uint64_t)t->shape[k];
        if (d != 0 && bytes > UINT64_MAX / d)
            return exactc_fail(j->err, j->errlen, "tensor %s: its shape overflows", t->name);
        bytes *= d;
    }
    if (bytes != t->end - t->begin)
        return exactc_fail(j->err, j->errlen, "tensor %s: %llu data bytes for a %s tensor needing %llu", t->name,
                       (unsigned long long)(t->end - t->begin), t->dtype, (unsigned long long)bytes);
    return 0;
}

void exactc_st_close(exactc_safetensors *st) {
    if (st == NULL) return;
    for (size_t k = 0; k < st->count; k++) free(st->tensors[k].name);
    free(st->tensors);
    if (st->owned) free((void *)st->bytes);
    memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------------------------
 * The header as a whole: names once each (sorted, so that a lookup is a binary search
 * and a file of 80,000 tensors is checked in n log n), the data section tiled exactly.
 * ---------------------------------------------------------------------------------- */
static int by_name(const void *a, const void *b) {
    return strcmp(((const exactc_st_tensor *)a)->name, ((const exactc_st_tensor *)b)->name);
}

static int by_offsets(const void *a, const void *b) {
    const exactc_st_tensor *x = *(const exactc_st_tensor *const *)a;
    const exactc_st_tensor *y = *(const exactc_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Sorted by (begin, end), each tensor must begin where the one before ends, the first
 * at 0. *last: the tensor that ends the tiling (NULL for a file without tensors). */
static int check_tiling(const exactc_safetensors *st, const exactc_st_tensor **last, char *err, size_t errlen) {
    *last = NULL;
    if (st->count == 0) return 0;
    const exactc_st_tensor **order = malloc(st->count * sizeof *order);
    if (order == NULL) return exactc_fail(err, errlen, "out of memory");
    for (size_t k = 0; k < st->count; k++) order[k] = &st->tensors[k];
    qsort(order, st->count, sizeof *order, by_offsets);
    uint64_t at = 0;
    const exactc_st_tensor *before = NULL;
    int rc = 0;
    for (size_t k = 0; k < st->count && rc == 0; k++) {
        const exactc_st_tensor *t = order[k];
        if (t->begin > at)
            rc = exactc_fail(err, errlen,
                             "tensor %s: data_offsets [%llu, %llu] leave data bytes [%llu, %llu) to no tensor; a "
                             "file's tensors must tile its data section exactly", t->name,
                             (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)at,
                             (unsigned long long)t->begin);
        else if (t->begin < at)
            rc = exactc_fail(err, errlen,
                             "tensor %s: data_offsets [%llu, %llu] overlap tensor %s's [%llu, %llu]; a file's "
                             "tensors must tile its data section exactly", t->name, (unsigned long long)t->begin,
                             (unsigned long long)t->end, before->name, (unsigned long long)before->begin,
                             (unsigned long long)before->end);
        at = t->end;
        before = t;
    }
    *last = before;
    free(order);
    return rc;
}

/* The header (n bytes at `header`) into st->tensors, checked as a whole; *data_end: the
 * data bytes its tensors cover. */
static int parse_header(const unsigned char *header, size_t n, exactc_safetensors *st, uint64_t *data_end,
                        char *err, size_t errlen) {
    st_json j = {header, n, 0, 0, err, errlen};
    unsigned char c = 0;
    size_t cap = 0;
    if (expect(&j, '{', "the header's object") != 0) return -1;
    if (peek(&j, &c) != 0) return -1;
    if (c == '}') j.pos++;
    else for (;;) {
        char *name;
        if (read_string(&j, &name) != 0) return -1;
        if (expect(&j, ':', "a colon") != 0) { free(name); return -1; }
        if (strcmp(name, "__metadata__") == 0) {
            free(name);
            if (skip_metadata(&j) != 0) return -1;
        } else {
            if (st->count == cap) {
                size_t grown_cap = cap ? cap * 2 : 16;
                exactc_st_tensor *grown = realloc(st->tensors, grown_cap * sizeof *grown);
                if (grown == NULL) { free(name); return exactc_fail(err, errlen, "out of memory"); }
                st->tensors = grown;
                cap = grown_cap;
            }
            exactc_st_tensor *t = &st->tensors[st->count];
            memset(t, 0, sizeof *t);
            t->name = name;
            st->count++;
            if (read_tensor(&j, t) != 0) return -1;
        }
        if (peek(&j, &c) != 0) return -1;
        j.pos++;
        if (c == '}') break;
        if (c != ',') return exactc_fail(err, errlen, "header byte %zu: expected ',' or '}'", j.pos - 1);
    }
    skip_space(&j);
    if (j.pos != j.len) return exactc_fail(err, errlen, "header byte %zu: bytes after the header's object", j.pos);
    if (st->count > 0) qsort(st->tensors, st->count, sizeof *st->tensors, by_name);
    for (size_t k = 1; k < st->count; k++)
        if (strcmp(st->tensors[k - 1].name, st->tensors[k].name) == 0)
            return exactc_fail(err, errlen, "tensor %s appears twice in the header", st->tensors[k].name);
    const exactc_st_tensor *last;
    if (check_tiling(st, &last, err, errlen) != 0) return -1;
    *data_end = last != NULL ? last->end : 0;
    return 0;
}

/* The file's data section holds `have` bytes (`more`: and the file goes on); the tensors
 * cover [0, data_end). Anything but equality is refused. */
static int check_data_length(const exactc_safetensors *st, uint64_t data_end, uint64_t have, int more, char *err,
                             size_t errlen) {
    if (data_end > have) {
        const exactc_st_tensor *last = NULL;
        for (size_t k = 0; k < st->count; k++)
            if (st->tensors[k].end == data_end && st->tensors[k].begin < data_end) last = &st->tensors[k];
        return exactc_fail(err, errlen,
                           "tensor %s: data_offsets [%llu, %llu] outside the %llu data bytes (a header length too "
                           "large, or a truncated file)", last->name, (unsigned long long)last->begin,
                           (unsigned long long)last->end, (unsigned long long)have);
    }
    if (data_end < have || more)
        return exactc_fail(err, errlen,
                           "the tensors end at data byte %llu and the file goes on (a header length too small, or "
                           "trailing bytes); a file's tensors must tile its data section exactly",
                           (unsigned long long)data_end);
    return 0;
}

/* The header length N from the file's first `len` bytes, refused if they are fewer than
 * 8 or if N is over the library's limit (whatever the file holds after them). */
static int header_length(const unsigned char *buf, size_t len, uint64_t *n, char *err, size_t errlen) {
    if (buf == NULL || len < 8) return exactc_fail(err, errlen, "file of %zu bytes: shorter than the 8-byte header length", len);
    *n = 0;
    for (int k = 7; k >= 0; k--) *n = (*n << 8) | buf[k];
    if (*n > EXACTC_ST_MAX_HEADER)
        return exactc_fail(err, errlen, "header length %llu is more than the %d bytes a header may have",
                           (unsigned long long)*n, EXACTC_ST_MAX_HEADER);
    return 0;
}

int exactc_st_parse(const unsigned char *buf, size_t len, exactc_safetensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    uint64_t n = 0, data_end = 0;
    if (header_length(buf, len, &n, err, errlen) != 0) return -1;
    if (n > len - 8) return exactc_fail(err, errlen, "header length %llu runs past the file's %zu bytes",
                                    (unsigned long long)n, len);
    if (parse_header(buf + 8, (size_t)n, st, &data_end, err, errlen) != 0 ||
        check_data_length(st, data_end, len - 8 - n, 0, err, errlen) != 0) {
        exactc_st_close(st); /* st does not own buf yet */
        return -1;
    }
    st->bytes = buf;
    st->len = len;
    st->data_start = 8 + (size_t)n;
    return 0;
}

int exactc_st_open(const char *path, exactc_safetensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return exactc_fail(err, errlen, "cannot open '%s' for reading: %s", path, strerror(errno));
    int rc = exactc_st_open_stream(f, path, st, err, errlen);
    fclose(f);
    return rc;
}

int exactc_st_open_stream(FILE *f, const char *path, exactc_safetensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    unsigned char *buf = NULL;
    size_t len = 0;
    uint64_t n = 0, data_end = 0;
    int rc = -1, more = 0;
    if (exactc_read_more(f, path, &buf, &len, 8, err, errlen) != 0) goto done;
    if (header_length(buf, len, &n, err, errlen) != 0) goto done;
    if (exactc_read_more(f, path, &buf, &len, (size_t)n, err, errlen) != 0) goto done;
    if (len < 8 + n) {
        exactc_fail(err, errlen, "header length %llu runs past the file's %zu bytes", (unsigned long long)n, len);
        goto done;
    }
    if (parse_header(buf + 8, (size_t)n, st, &data_end, err, errlen) != 0) goto done;
    if (data_end > SIZE_MAX - len) {
        exactc_fail(err, errlen, "the tensors' %llu data bytes do not fit in memory", (unsigned long long)data_end);
        goto done;
    }
    if (exactc_read_more(f, path, &buf, &len, (size_t)data_end, err, errlen) != 0) goto done;
    if (len == 8 + n + data_end && (more = exactc_read_past_end(f, path, err, errlen)) < 0) goto done;
    if (check_data_length(st, data_end, len - 8 - n, more, err, errlen) != 0) goto done;
    st->bytes = buf;
    st->len = len;
    st->data_start = 8 + (size_t)n;
    st->owned = 1;
    rc = 0;
done:
    if (rc != 0) {
        exactc_st_close(st);
        free(buf);
    }
    return rc;
}

const exactc_st_tensor *exactc_st_find(const exactc_safetensors *st, const char *name) {
    if (st->count == 0) return NULL;
    exactc_st_tensor key;
    memset(&key, 0, sizeof key);
    key.name = (char *)name;
    return bsearch(&key, st->tensors, st->count, sizeof *st->tensors, by_name);
}

int exactc_st_read(const exactc_safetensors *st, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, void *dst, char *err, size_t errlen) {
    const exactc_st_tensor *t = exactc_st_find(st, name);
    if (t == NULL) return exactc_fail(err, errlen, "tensor %s is missing", name);
    int ok = strcmp(t->dtype, dtype) == 0 && t->ndim == ndim;
    for (int k = 0; ok && k < ndim; k++) ok = t->shape[k] == shape[k];
    if (!ok) {
        char got[200] = "", need[200] = "";
        for (int k = 0; k < t->ndim; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
        for (int k = 0; k < ndim; k++)
            snprintf(need + strlen(need), sizeof need - strlen(need), "%s%lld", k ? ", " : "", (long long)shape[k]);
        return exactc_fail(err, errlen, "tensor %s is %s (%s); it must be %s (%s)", name, t->dtype, got, dtype, need);
    }
    memcpy(dst, st->bytes + st->data_start + t->begin, (size_t)(t->end - t->begin));
    return 0;
}
