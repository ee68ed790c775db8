/* exactc runtime: reading and writing .npy files.
 *
 * The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version
 * byte, the header length (2 bytes little-endian in version 1.0, 4 bytes in 2.0 and 3.0),
 * then the header: a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a final '\n', then the elements in C order.
 *
 * What is read: versions 1.0, 2.0 and 3.0; the three keys, each once, in any order;
 * descr '<f8', '<f4', '<i4' or '<i8'; fortran_order False; a shape tuple of up to
 * EXACTC_NPY_MAX_DIMS decimal dimensions. The header may be written by hand in the
 * subset of Python literal syntax that such a dict needs: either quote, whitespace and
 * '#' comments anywhere, a trailing comma or none, a '+' sign, Python 2's 'L' suffix
 * before version 3.0. Everything else is refused with a message that names the field
 * and the rule (docs/design.md, principle 8). This parser sees files from anywhere and is
 * fuzzed: every byte it reads is first checked against the length it was given.
 *
 * Where exactc is stricter than np.load, on purpose: trailing bytes after the data are
 * refused (a file numpy wrote ends where its data ends, so extra bytes mean the header's
 * shape is not the one the writer meant, or two files were concatenated); the byte
 * orders '|' and '=' are refused for these multi-byte types (numpy writes '<'); the
 * header must be ASCII, without string escapes, prefixes or line continuations. And
 * laxer in one way: any whitespace may follow the closing '}', where Python's tokenizer
 * refuses some ("}\n  " is an unexpected indent).
 *
 * What is written: version 1.0, byte for byte as np.save writes it (keys sorted, repr of
 * the shape tuple, 21 - len(repr(shape[0])) spaces of growth room, then spaces and '\n'
 * up to a multiple of 64 bytes counting the magic and the length field).
 *
 * A file is read in steps its own header bounds (exactc_read_more): the magic and version,
 * the header length, the header, then the data the shape needs, and one byte more to
 * refuse trailing bytes. So a pipe or /dev/zero never makes the reader grow past what
 * the header declares.
 *
 * Elements are decoded and encoded byte by byte as little-endian, so the same code runs
 * (and is tested) on every host whatever its own byte order.
 */
#include "exactc_rt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * Errors: every failure goes through exactc_fail, which tolerates err == NULL and
 * errlen == 0.
 * ---------------------------------------------------------------------------------- */

int exactc_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A header string quoted into a message: at most 24 bytes, unprintable bytes as '?'. */
static void quote_for_message(char *dst, size_t cap, const unsigned char *s, size_t n) {
    size_t k = 0;
    size_t limit = n < 24 ? n : 24;
    for (size_t i = 0; i < limit && k + 1 < cap; i++) {
        unsigned char c = s[i];
        dst[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n > limit && k + 4 < cap) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k] = '\0';
}

/* ------------------------------------------------------------------------------------
 * Dtypes and shapes
 * ---------------------------------------------------------------------------------- */

size_t exactc_dtype_size(exactc_dtype t) {
    switch (t) {
    case EXACTC_F64: return 8;
    case EXACTC_F32: return 4;
    case EXACTC_I32: return 4;
    case EXACTC_I64: return 8;
    }
    return 0;
}

const char *exactc_dtype_name(exactc_dtype t) {
    switch (t) {
    case EXACTC_F64: return "<f8";
    case EXACTC_F32: return "<f4";
    case EXACTC_I32: return "<i4";
    case EXACTC_I64: return "<i8";
    }
    return "?";
}

/* Decimal digits of u into dst (no terminator); returns the count (at most 20). */
static size_t format_decimal(char *dst, uint64_t u) {
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10u));
        u /= 10u;
    } while (u != 0);
    for (size_t i = 0; i < n; i++) dst[i] = tmp[n - 1 - i];
    return n;
}

/* Python's repr of the shape tuple: "()", "(5,)", "(2, 3)". Room needed: parentheses, a
 * 1-tuple's comma and the terminator, and per dimension a sign, 20 digits and ", ". */
#define SHAPE_REPR_CAP (4 + EXACTC_NPY_MAX_DIMS * 23)

static size_t format_shape(char *dst, const int64_t *shape, int ndim) {
    size_t k = 0;
    dst[k++] = '(';
    for (int i = 0; i < ndim; i++) {
        if (i > 0) {
            dst[k++] = ',';
            dst[k++] = ' ';
        }
        uint64_t magnitude = (uint64_t)shape[i];
        if (shape[i] < 0) { /* only in messages about a bad shape */
            dst[k++] = '-';
            magnitude = (uint64_t)0 - magnitude;
        }
        k += format_decimal(dst + k, magnitude);
    }
    if (ndim == 1) dst[k++] = ',';
    dst[k++] = ')';
    dst[k] = '\0';
    return k;
}

/* Bytes of an array of `shape`: 0 on success, -1 if a dimension is negative or if the
 * product of the dimensions (zeros counted as ones, as numpy does) times the element size
 * exceeds INT64_MAX or SIZE_MAX, numpy's own limit for an array it can create. */
static int shape_nbytes(const int64_t *shape, int ndim, size_t elem, size_t *nbytes) {
    uint64_t limit = (uint64_t)INT64_MAX;
    if ((uint64_t)SIZE_MAX < limit) limit = (uint64_t)SIZE_MAX;
    uint64_t bound = elem; /* product of max(d, 1), times elem */
    uint64_t count = 1;    /* product of d */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        uint64_t d = (uint64_t)shape[i];
        uint64_t d1 = d == 0 ? 1 : d;
        if (bound > limit / d1) return -1;
        bound *= d1;
        count *= d; /* count <= bound / elem, so it cannot overflow */
    }
    *nbytes = (size_t)(count * elem);
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Little-endian element copies
 * ---------------------------------------------------------------------------------- */

static void decode_le(void *dst, const unsigned char *src, size_t count, size_t elem) {
    unsigned char *out = dst;
    for (size_t i = 0; i < count; i++, src += elem, out += elem) {
        if (elem == 4) {
            uint32_t u = (uint32_t)src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 |
                         (uint32_t)src[3] << 24;
            memcpy(out, &u, 4);
        } else {
            uint64_t u = 0;
            for (int b = 7; b >= 0; b--) u = u << 8 | src[b];
            memcpy(out, &u, 8);
        }
    }
}

static void encode_le(unsigned char *dst, const void *src, size_t count, size_t elem) {
    const unsigned char *in = src;
    for (size_t i = 0; i < count; i++, dst += elem, in += elem) {
        if (elem == 4) {
            uint32_t u;
            memcpy(&u, in, 4);
            for (int b = 0; b < 4; b++) dst[b] = (unsigned char)(u >> (8 * b));
        } else {
            uint64_t u;
            memcpy(&u, in, 8);
            for (int b = 0; b < 8; b++) dst[b] = (unsigned char)(u >> (8 * b));
        }
    }
}

/* ------------------------------------------------------------------------------------
 * The header dict: a cursor over [0, n) and one function per kind of token.
 * ---------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t i, n;
    int version; /* major version: 1, 2 or 3 */
} cursor;

static int at(const cursor *c) { return c->i < c->n ? c->s[c->i] : -1; }

static int is_space(int ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f';
}

/* Whitespace and Python comments: what the tokenizer skips. (Line continuations are
 * not read: no writer emits them, and after the closing '}' Python refuses them.) */
static void skip_space(cursor *c) {
    while (c->i < c->n) {
        if (is_space(c->s[c->i])) {
            c->i++;
        } else if (c->s[c->i] == '#') {
            while (c->i < c->n && c->s[c->i] != '\n' && c->s[c->i] != '\r') c->i++;
        } else {
            break;
        }
    }
}

static int is_ident(int ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* What stands at the cursor, for "expected X, found Y" messages. */
static void describe_here(const cursor *c, char *dst, size_t cap) {
    if (c->i >= c->n) {
        snprintf(dst, cap, "the end of the header");
        return;
    }
    size_t n = c->n - c->i;
    char q[40];
    quote_for_message(q, sizeof q, c->s + c->i, n < 12 ? n : 12);
    snprintf(dst, cap, "'%s' at byte %zu of the header", q, c->i);
}

/* A quoted string without escapes: on success *text, *len point into the header. */
static int parse_string(cursor *c, const unsigned char **text, size_t *len, const char *what,
                        char *err, size_t errlen) {
    int quote = at(c);
    if (quote != '\'' && quote != '"') {
        char here[96];
        describe_here(c, here, sizeof here);
        return exactc_fail(err, errlen, "npy: header %s must be a quoted string; found %s", what,
                        here);
    }
    size_t start = c->i + 1;
    for (size_t j = start; j < c->n; j++) {
        unsigned char ch = c->s[j];
        if (ch == (unsigned char)quote) {
            *text = c->s + start;
            *len = j - start;
            c->i = j + 1;
            return 0;
        }
        if (ch == '\\' || ch == '\n' || ch == '\r')
            return exactc_fail(err, errlen,
                            "npy: header %s contains an escape or a newline; exactc reads "
                            "plain quoted strings only",
                            what);
    }
    return exactc_fail(err, errlen, "npy: header %s is an unterminated string", what);
}

static int expect_char(cursor *c, int ch, const char *context, char *err, size_t errlen) {
    skip_space(c);
    if (at(c) == ch) {
        c->i++;
        return 0;
    }
    char here[96];
    describe_here(c, here, sizeof here);
    return exactc_fail(err, errlen, "npy: header expected '%c' %s; found %s", ch, context, here);
}

static int same(const unsigned char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n == m && memcmp(s, lit, m) == 0;
}

static int parse_descr(cursor *c, exactc_dtype *dtype, char *err, size_t errlen) {
    const unsigned char *s;
    size_t n;
    skip_space(c);
    if (at(c) == '[')
        return exactc_fail(err, errlen,
                        "npy: descr is a list (a structured dtype); exactc reads little-endian "
                        "f64, f32, int32, int64 only");
    if (parse_string(c, &s, &n, "descr", err, errlen) != 0) return -1;
    if (same(s, n, "<f8")) *dtype = EXACTC_F64;
    else if (same(s, n, "<f4")) *dtype = EXACTC_F32;
    else if (same(s, n, "<i4")) *dtype = EXACTC_I32;
    else if (same(s, n, "<i8")) *dtype = EXACTC_I64;
    else {
        char q[40];
        quote_for_message(q, sizeof q, s, n);
        if (n > 0 && (s[0] == '>' || s[0] == '!'))
            return exactc_fail(err, errlen,
                            "npy: descr '%s' is big-endian; exactc reads little-endian f64, "
                            "f32, int32, int64 only",
                            q);
        return exactc_fail(err, errlen,
                        "npy: descr '%s' is not supported; exactc reads little-endian f64 "
                        "('<f8'), f32 ('<f4'), int32 ('<i4'), int64 ('<i8') only",
                        q);
    }
    return 0;
}

static int parse_fortran_order(cursor *c, char *err, size_t errlen) {
    skip_space(c);
    size_t start = c->i;
    while (c->i < c->n && is_ident(c->s[c->i])) c->i++;
    if (same(c->s + start, c->i - start, "False")) return 0;
    if (same(c->s + start, c->i - start, "True"))
        return exactc_fail(err, errlen,
                        "npy: fortran_order True is not supported; save with "
                        "np.ascontiguousarray");
    c->i = start;
    char here[96];
    describe_here(c, here, sizeof here);
    return exactc_fail(err, errlen, "npy: fortran_order must be True or False; found %s", here);
}

/* One dimension: decimal digits after at most one sign ('-' is read to say that it is
 * not allowed, unless the value is 0); an 'L' suffix is Python 2's long, which numpy
 * removes in versions 1.0 and 2.0 (the upper-case one only). */
static int parse_dimension(cursor *c, int index, int64_t *dim, char *err, size_t errlen) {
    int negative = 0;
    if (at(c) == '-' || at(c) == '+') {
        negative = at(c) == '-';
        c->i++;
        skip_space(c);
    }
    size_t start = c->i;
    uint64_t v = 0;
    int overflow = 0;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        unsigned digit = (unsigned)(c->s[c->i] - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10u) overflow = 1;
        else v = v * 10u + digit;
        c->i++;
    }
    size_t digits = c->i - start;
    if (digits == 0) {
        char here[96];
        describe_here(c, here, sizeof here);
        return exactc_fail(err, errlen,
                        "npy: shape must be a tuple of non-negative integers; found %s", here);
    }
    if (digits > 1 && c->s[start] == '0')
        return exactc_fail(err, errlen,
                        "npy: shape dimension %d has a leading zero; write plain decimal",
                        index);
    if (c->version < 3 && at(c) == 'L') c->i++;
    if (at(c) >= 0 && is_ident(at(c))) {
        char here[96];
        describe_here(c, here, sizeof here);
        return exactc_fail(err, errlen,
                        "npy: shape dimension %d is not a decimal integer; found %s", index,
                        here);
    }
    if (overflow)
        return exactc_fail(err, errlen, "npy: shape dimension %d is larger than %lld", index,
                        (long long)INT64_MAX);
    if (negative && v != 0)
        return exactc_fail(err, errlen,
                        "npy: shape dimension %d is -%llu; dimensions must be >= 0", index,
                        (unsigned long long)v);
    *dim = (int64_t)v;
    return 0;
}

static int parse_shape(cursor *c, int64_t *shape, int *ndim, char *err, size_t errlen) {
    skip_space(c);
    if (at(c) != '(') {
        char here[96];
        describe_here(c, here, sizeof here);
        return exactc_fail(err, errlen,
                        "npy: shape must be a tuple such as (2, 3) or (5,); found %s", here);
    }
    c->i++;
    int count = 0;
    int trailing_comma = 0;
    for (;;) {
        skip_space(c);
        if (at(c) == ')') {
            c->i++;
            break;
        }
        if (count == EXACTC_NPY_MAX_DIMS) {
            /* Count the rest only to report it; each step consumes at least one byte. */
            int total = count;
            while (c->i < c->n && c->s[c->i] != ')') {
                if (c->s[c->i] == ',') {
                    size_t j = c->i + 1;
                    while (j < c->n && is_space(c->s[j])) j++;
                    if (j < c->n && c->s[j] != ')') total++;
                }
                c->i++;
            }
            return exactc_fail(err, errlen, "npy: shape has %d dimensions; at most %d", total + 1,
                            EXACTC_NPY_MAX_DIMS);
        }
        if (parse_dimension(c, count, &shape[count], err, errlen) != 0) return -1;
        count++;
        skip_space(c);
        trailing_comma = 0;
        if (at(c) == ',') {
            c->i++;
            trailing_comma = 1;
        } else if (at(c) != ')') {
            char here[96];
            describe_here(c, here, sizeof here);
            return exactc_fail(err, errlen,
                            "npy: shape expected ',' or ')' after dimension %d; found %s",
                            count - 1, here);
        }
    }
    if (count == 1 && !trailing_comma)
        return exactc_fail(err, errlen,
                        "npy: shape (%lld) is an integer in parentheses, not a tuple; a "
                        "1-d shape is written (%lld,)",
                        (long long)shape[0], (long long)shape[0]);
    *ndim = count;
    return 0;
}

/* The dict: '{' (key ':' value ',')* '}' then nothing but whitespace. */
static int parse_header(cursor *c, exactc_array *out, char *err, size_t errlen) {
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    /* numpy writes ASCII; refusing other bytes up front spares the rules of latin1 (1.0,
     * 2.0) and UTF-8 (3.0) in comments, the one place they could otherwise appear. */
    for (size_t j = 0; j < c->n; j++)
        if (c->s[j] >= 0x80 || c->s[j] == 0)
            return exactc_fail(err, errlen,
                            "npy: header byte %zu is 0x%02x; exactc reads ASCII headers "
                            "without NUL bytes only",
                            j, (unsigned)c->s[j]);
    /* Python's literal_eval strips leading spaces and tabs; other whitespace too here. */
    if (expect_char(c, '{', "at the start of the header dict", err, errlen) != 0) return -1;
    for (;;) {
        skip_space(c);
        if (at(c) == '}') {
            c->i++;
            break;
        }
        const unsigned char *key;
        size_t keylen;
        if (parse_string(c, &key, &keylen, "key", err, errlen) != 0) return -1;
        if (expect_char(c, ':', "after a header key", err, errlen) != 0) return -1;
        int *seen;
        int rc;
        if (same(key, keylen, "descr")) {
            seen = &seen_descr;
            rc = parse_descr(c, &out->dtype, err, errlen);
        } else if (same(key, keylen, "fortran_order")) {
            seen = &seen_fortran;
            rc = parse_fortran_order(c, err, errlen);
        } else if (same(key, keylen, "shape")) {
            seen = &seen_shape;
            rc = parse_shape(c, out->shape, &out->ndim, err, errlen);
        } else {
            char q[40];
            quote_for_message(q, sizeof q, key, keylen);
            return exactc_fail(err, errlen,
                            "npy: header key '%s' is unknown; a .npy header has exactly "
                            "'descr', 'fortran_order' and 'shape'",
                            q);
        }
        if (*seen) {
            char q[40];
            quote_for_message(q, sizeof q, key, keylen);
            return exactc_fail(err, errlen, "npy: header key '%s' appears twice", q);
        }
        if (rc != 0) return -1;
        *seen = 1;
        skip_space(c);
        if (at(c) == ',') {
            c->i++;
        } else if (at(c) != '}') {
            char here[96];
            describe_here(c, here, sizeof here);
            return exactc_fail(err, errlen,
                            "npy: header expected ',' or '}' after a value; found %s", here);
        }
    }
    skip_space(c);
    if (c->i != c->n) {
        char here[96];
        describe_here(c, here, sizeof here);
        return exactc_fail(err, errlen,
                        "npy: header has %s after the closing '}'; only padding spaces and "
                        "'\\n' may follow",
                        here);
    }
    if (!seen_descr) return exactc_fail(err, errlen, "npy: header has no 'descr' key");
    if (!seen_fortran) return exactc_fail(err, errlen, "npy: header has no 'fortran_order' key");
    if (!seen_shape) return exactc_fail(err, errlen, "npy: header has no 'shape' key");
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Reading
 * ---------------------------------------------------------------------------------- */

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Everything before the data: the magic, the version, the header length and the header
 * itself; the array's dtype and shape go to `out` (its data stays NULL), where the data
 * starts to *data_at and its byte count to *nbytes. A file cut anywhere in this prefix is
 * refused with the message that names where. */
static int parse_prefix(const unsigned char *buf, size_t len, exactc_array *out, size_t *data_at,
                        size_t *nbytes, char *err, size_t errlen) {
    size_t head = len < 6 ? len : 6;
    if ((head > 0 && memcmp(buf, npy_magic, head) != 0) || len == 0)
        return exactc_fail(err, errlen, "npy: not a .npy file (magic)");
    if (len < 8)
        return exactc_fail(err, errlen,
                        "npy: file is %zu bytes, truncated before the version (magic and "
                        "version take 8)",
                        len);
    int major = buf[6], minor = buf[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return exactc_fail(err, errlen,
                        "npy: version %d.%d is not supported; exactc reads 1.0, 2.0 and 3.0",
                        major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    if (len < 8 + lenbytes)
        return exactc_fail(err, errlen,
                        "npy: file is %zu bytes, truncated in the header length field", len);
    size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    if (lenbytes == 4) hlen |= (size_t)buf[10] << 16 | (size_t)((uint32_t)buf[11] << 24);
    size_t hstart = 8 + lenbytes;
    if (hlen > len - hstart)
        return exactc_fail(err, errlen,
                        "npy: header length %zu runs past the end of the file (%zu bytes "
                        "after the length field)",
                        hlen, len - hstart);

    cursor c = {buf + hstart, 0, hlen, major};
    if (parse_header(&c, out, err, errlen) != 0) return -1;
    if (shape_nbytes(out->shape, out->ndim, exactc_dtype_size(out->dtype), nbytes) != 0) {
        char shape_text[SHAPE_REPR_CAP];
        format_shape(shape_text, out->shape, out->ndim);
        return exactc_fail(err, errlen,
                        "npy: shape %s of %s is too large: its byte count overflows",
                        shape_text, exactc_dtype_name(out->dtype));
    }
    *data_at = hstart + hlen;
    return 0;
}

int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err,
                     size_t errlen) {
    if (out == NULL) return exactc_fail(err, errlen, "npy: no output array given");
    memset(out, 0, sizeof *out);
    if (buf == NULL && len > 0) return exactc_fail(err, errlen, "npy: no input buffer given");
    size_t data_at, nbytes;
    if (parse_prefix(buf, len, out, &data_at, &nbytes, err, errlen) != 0) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    size_t have = len - data_at;
    if (have != nbytes) {
        char shape_text[SHAPE_REPR_CAP];
        format_shape(shape_text, out->shape, out->ndim);
        int rc = exactc_fail(err, errlen, "npy: data is %zu bytes; shape %s of %s needs %zu%s",
                          have, shape_text, exactc_dtype_name(out->dtype), nbytes,
                          have > nbytes ? " (trailing bytes after the data are refused)" : "");
        memset(out, 0, sizeof *out);
        return rc;
    }
    void *data = malloc(nbytes > 0 ? nbytes : 1);
    if (data == NULL) {
        memset(out, 0, sizeof *out);
        return exactc_fail(err, errlen, "npy: out of memory for %zu bytes of data", nbytes);
    }
    size_t elem = exactc_dtype_size(out->dtype);
    decode_le(data, buf + data_at, nbytes / elem, elem);
    out->data = data;
    out->nbytes = nbytes;
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Reading files: in steps, each as long as what came before says (a header gives the
 * length of the rest). Memory grows with the bytes that arrive and never past what the
 * header declares, so a pipe or /dev/zero cannot make a reader grow without bound, and a
 * file that goes on after its declared end is refused without reading the rest.
 * ---------------------------------------------------------------------------------- */

enum { READ_FIRST_CHUNK = 1 << 16 };

int exactc_read_more(FILE *f, const char *path, unsigned char **buf, size_t *len, size_t want,
                     char *err, size_t errlen) {
    if (want > SIZE_MAX - *len)
        return exactc_fail(err, errlen, "'%s': %zu more bytes do not fit in memory", path, want);
    size_t goal = *len + want;
    while (*len < goal) {
        size_t room = *len < READ_FIRST_CHUNK ? READ_FIRST_CHUNK : *len; /* doubling */
        if (room > goal - *len) room = goal - *len;
        unsigned char *grown = realloc(*buf, *len + room);
        if (grown == NULL)
            return exactc_fail(err, errlen, "out of memory reading '%s' (%zu bytes)", path,
                            *len + room);
        *buf = grown;
        size_t got = fread(*buf + *len, 1, room, f);
        *len += got;
        if (got < room) {
            if (ferror(f))
                return exactc_fail(err, errlen, "error reading '%s': %s", path, strerror(errno));
            break; /* the file ended: the caller says what was missing */
        }
    }
    return 0;
}

int exactc_read_past_end(FILE *f, const char *path, char *err, size_t errlen) {
    if (getc(f) != EOF) return 1;
    if (ferror(f)) return exactc_fail(err, errlen, "error reading '%s': %s", path, strerror(errno));
    return 0;
}

int exactc_npy_read(const char *path, exactc_array *out, char *err, size_t errlen) {
    if (out != NULL) memset(out, 0, sizeof *out);
    if (out == NULL) return exactc_fail(err, errlen, "npy: no output array given");
    if (path == NULL) return exactc_fail(err, errlen, "npy: no path given");
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return exactc_fail(err, errlen, "npy: cannot open '%s' for reading: %s", path,
                        strerror(errno));
    int rc = exactc_npy_read_stream(f, path, out, err, errlen);
    fclose(f);
    return rc;
}

int exactc_npy_read_stream(FILE *f, const char *path, exactc_array *out, char *err,
                           size_t errlen) {
    if (out == NULL) return exactc_fail(err, errlen, "npy: no output array given");
    memset(out, 0, sizeof *out);
    unsigned char *buf = NULL;
    size_t len = 0, data_at = 0, nbytes = 0;
    char why[512] = "";
    int rc = -1, more = 0;
    /* The magic and version (8 bytes), the header length (2 or 4), the header, the data:
     * a file that ends early is parsed as it is, for the message that names where. */
    if (exactc_read_more(f, path, &buf, &len, 8, why, sizeof why) != 0) goto failed_read;
    size_t lenbytes = len < 8 || memcmp(buf, npy_magic, 6) != 0 || buf[7] != 0 ? 0
                      : buf[6] == 1 ? 2 : buf[6] == 2 || buf[6] == 3 ? 4 : 0;
    if (exactc_read_more(f, path, &buf, &len, lenbytes, why, sizeof why) != 0) goto failed_read;
    if (lenbytes > 0 && len == 8 + lenbytes) {
        size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        if (lenbytes == 4) hlen |= (size_t)buf[10] << 16 | (size_t)((uint32_t)buf[11] << 24);
        if (exactc_read_more(f, path, &buf, &len, hlen, why, sizeof why) != 0) goto failed_read;
    }
    if (parse_prefix(buf, len, out, &data_at, &nbytes, err, errlen) != 0) goto done;
    if (exactc_read_more(f, path, &buf, &len, nbytes, why, sizeof why) != 0) goto failed_read;
    if (len - data_at == nbytes && (more = exactc_read_past_end(f, path, why, sizeof why)) != 0) {
        if (more < 0) goto failed_read;
        char shape_text[SHAPE_REPR_CAP];
        format_shape(shape_text, out->shape, out->ndim);
        exactc_fail(err, errlen,
                 "npy: '%s' goes on after the %zu data bytes of shape %s of %s (trailing bytes "
                 "after the data are refused)",
                 path, nbytes, shape_text, exactc_dtype_name(out->dtype));
        goto done;
    }
    rc = exactc_npy_parse(buf, len, out, err, errlen);
    goto done;
failed_read:
    exactc_fail(err, errlen, "npy: %s", why);
done:
    if (rc != 0) memset(out, 0, sizeof *out);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * Writing
 * ---------------------------------------------------------------------------------- */

enum { NPY_ALIGN = 64, NPY_GROWTH_DIGITS = 21 };

int exactc_npy_format(const exactc_array *a, unsigned char **buf, size_t *len, char *err,
                      size_t errlen) {
    if (buf == NULL || len == NULL) return exactc_fail(err, errlen, "npy: no output buffer given");
    *buf = NULL;
    *len = 0;
    if (a == NULL) return exactc_fail(err, errlen, "npy: no array given");
    size_t elem = exactc_dtype_size(a->dtype);
    if (elem == 0)
        return exactc_fail(err, errlen,
                        "npy: dtype value %d is not an exactc_dtype: EXACTC_F64 ('<f8'), "
                        "EXACTC_F32 ('<f4'), EXACTC_I32 ('<i4') or EXACTC_I64 ('<i8')",
                        (int)a->dtype);
    if (a->ndim < 0 || a->ndim > EXACTC_NPY_MAX_DIMS)
        return exactc_fail(err, errlen, "npy: ndim is %d; it must be 0 to %d", a->ndim,
                        EXACTC_NPY_MAX_DIMS);
    char shape_text[SHAPE_REPR_CAP];
    format_shape(shape_text, a->shape, a->ndim);
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] < 0)
            return exactc_fail(err, errlen,
                            "npy: shape %s: dimension %d is negative; dimensions must be >= 0",
                            shape_text, i);
    size_t nbytes;
    if (shape_nbytes(a->shape, a->ndim, elem, &nbytes) != 0)
        return exactc_fail(err, errlen,
                        "npy: shape %s of %s is too large: its byte count overflows",
                        shape_text, exactc_dtype_name(a->dtype));
    if (a->nbytes != nbytes)
        return exactc_fail(err, errlen, "npy: nbytes is %zu; shape %s of %s needs %zu", a->nbytes,
                        shape_text, exactc_dtype_name(a->dtype), nbytes);
    if (nbytes > 0 && a->data == NULL)
        return exactc_fail(err, errlen, "npy: data is NULL for %zu bytes", nbytes);

    /* The dict text exactly as numpy's _write_array_header builds it. */
    char header[320];
    int n = snprintf(header, sizeof header,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     exactc_dtype_name(a->dtype), shape_text);
    if (n < 0 || (size_t)n >= sizeof header)
        return exactc_fail(err, errlen, "npy: header text does not fit"); /* cannot happen */
    size_t hlen = (size_t)n;
    if (a->ndim > 0) {
        char digits[20];
        size_t first = format_decimal(digits, (uint64_t)a->shape[0]);
        size_t growth = NPY_GROWTH_DIGITS - first; /* first <= 19 */
        memset(header + hlen, ' ', growth);
        hlen += growth;
    }
    /* _wrap_header: pad so that magic (8) + length (2) + header + '\n' is a multiple of
     * 64; numpy pads a full 64 when it already is. */
    size_t padlen = NPY_ALIGN - ((10 + hlen + 1) % NPY_ALIGN);
    size_t total_header = hlen + padlen + 1;
    if (nbytes > SIZE_MAX - 10 - total_header)
        return exactc_fail(err, errlen, "npy: data of %zu bytes is too large to format", nbytes);
    size_t total = 10 + total_header + nbytes;
    unsigned char *out = malloc(total);
    if (out == NULL) return exactc_fail(err, errlen, "npy: out of memory for %zu bytes", total);
    memcpy(out, npy_magic, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (unsigned char)(total_header & 0xffu);
    out[9] = (unsigned char)(total_header >> 8);
    memcpy(out + 10, header, hlen);
    memset(out + 10 + hlen, ' ', padlen);
    out[10 + hlen + padlen] = '\n';
    encode_le(out + 10 + total_header, a->data, nbytes / elem, elem);
    *buf = out;
    *len = total;
    return 0;
}

int exactc_npy_write(const char *path, const exactc_array *a, char *err, size_t errlen) {
    if (path == NULL) return exactc_fail(err, errlen, "npy: no path given");
    unsigned char *buf;
    size_t len;
    if (exactc_npy_format(a, &buf, &len, err, errlen) != 0) return -1;
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        int e = errno;
        free(buf);
        return exactc_fail(err, errlen, "npy: cannot open '%s' for writing: %s", path,
                        strerror(e));
    }
    size_t wrote = fwrite(buf, 1, len, f);
    int e = errno;
    free(buf);
    /* fclose flushes: a full disk may only show here. */
    int closed = fclose(f);
    if (wrote != len || closed != 0) {
        /* The truncated file is left in place rather than removed: `path` may be a device
         * or a FIFO, and a short .npy file is refused by every reader, this one included. */
        if (wrote == len) e = errno;
        return exactc_fail(err, errlen, "npy: writing '%s' failed after %zu of %zu bytes: %s",
                        path, wrote, len, strerror(e));
    }
    return 0;
}

void exactc_array_free(exactc_array *a) {
    if (a == NULL) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}
