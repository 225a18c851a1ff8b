/* The fields advisor reads from Chrome-trace events, scanned straight into columns.
 *
 * Why native code: through Python objects (msgspec's typed structs, then numpy columns), a
 * 386 MB trace's 908,396 events cost 2.1-2.3 s of CPU, half of it one object per event and
 * per field. This scanner reads the same fields from the JSON text into flat arrays and makes
 * no Python object per event: one per distinct value only, returned once.
 *
 * What it accepts: exactly what advisor.trace.columns._Event decodes strictly (strings for
 * ph/cat/name, an integer or a string for pid/tid, numbers for ts/dur, an object for args with
 * integer ids), in valid JSON. Anything else (a null, a float id, an escape in a key, a
 * duplicate field, invalid UTF-8, a nesting deeper than MAX_DEPTH) makes scan() return None
 * and forget what it saw in that call: the caller then decodes that batch the usual way, so
 * the table is the same with or without this module.
 *
 * Scanner.scan(buffer, start, stop) reads the events in buffer[start:stop] (the body of the
 * traceEvents array, or a run of it cut between two events) and returns
 *   (n, key, new_tokens, new_keys, floats, ints, stack, raws)
 * where, for n events: key is int32[n], an id of the distinct (name, cat, ph, pid, tid) raw
 * JSON values; new_tokens the raw JSON values first seen in this call (bytes, ids counting on
 * from earlier calls); new_keys int32[m][5] the token ids (-1: absent) of the keys first seen;
 * floats float64[3][n] (ts NaN, dur 0, flops NaN when absent); ints int64[N_INTS][n] (-1 when
 * absent); stack int32[n] the "Call stack" token id and raws int32[N_RAWS][n] the token ids of
 * "Input Dims", "Input type" and "Concrete Inputs" (-1 when absent).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned char uchar;

enum { F_EXT, F_EXT_OLD, F_CORR, F_BYTES, F_STREAM, F_DEVICE, F_TOTAL, F_MEM_BYTES, F_ADDR,
       F_DEV_TYPE, F_DEV_ID, F_PY_ID, F_PY_PARENT, F_SEQ, N_INTS };
enum { R_DIMS, R_TYPE, R_CONCRETE, N_RAWS };
enum { K_NAME, K_CAT, K_PH, K_PID, K_TID, N_KEYF };
enum { D_TS, D_DUR, D_FLOPS, N_FLOATS };
#define MAX_DEPTH 64
#define MISSING (-1)

/* ---- growable arrays ---------------------------------------------------------------------- */

typedef struct { void *data; Py_ssize_t len, cap; } Vec;

static int vec_reserve(Vec *v, Py_ssize_t need, size_t item) {
    if (need <= v->cap) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 256;
    while (cap < need) cap *= 2;
    void *d = realloc(v->data, (size_t)cap * item);
    if (!d) return -1;
    v->data = d;
    v->cap = cap;
    return 0;
}

/* ---- the scanner object: distinct tokens and keys, kept across calls ------------------------ */

typedef struct {
    PyObject_HEAD
    Vec tok_ptr, tok_len, tok_hash; /* char*, Py_ssize_t, uint64_t per token (owned copies) */
    Vec keys;                       /* int32[5] per key */
    Vec key_hash;                   /* uint64_t per key */
    int32_t *tok_index, *key_index; /* open addressing: id + 1, 0 empty */
    Py_ssize_t tok_slots, key_slots;
    Py_ssize_t tok_sent, key_sent;  /* ids below these were returned by a successful call */
} Scanner;

static inline uint64_t hash_bytes(const uchar *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int index_grow(int32_t **index, Py_ssize_t *slots, const uint64_t *hashes, Py_ssize_t count) {
    Py_ssize_t n = *slots ? *slots : 1024;
    while (n < 2 * (count + 1)) n *= 2;
    int32_t *t = calloc((size_t)n, sizeof(int32_t));
    if (!t) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        size_t s = (size_t)hashes[i] & (size_t)(n - 1);
        while (t[s]) s = (s + 1) & (size_t)(n - 1);
        t[s] = (int32_t)(i + 1);
    }
    free(*index);
    *index = t;
    *slots = n;
    return 0;
}

/* The id of a raw token, added when new; -1 on memory failure. */
static int32_t intern_token(Scanner *self, const uchar *p, Py_ssize_t n, uint64_t h) {
    size_t mask = (size_t)self->tok_slots - 1;
    size_t s = (size_t)h & mask;
    const uint64_t *hashes = self->tok_hash.data;
    char **ptrs = self->tok_ptr.data;
    const Py_ssize_t *lens = self->tok_len.data;
    for (int32_t id; (id = self->tok_index[s]); s = (s + 1) & mask) {
        id--;
        if (hashes[id] == h && lens[id] == n && memcmp(ptrs[id], p, (size_t)n) == 0) return id;
    }
    Py_ssize_t count = self->tok_len.len;
    if (count >= INT32_MAX - 1) return -1;
    if (vec_reserve(&self->tok_ptr, count + 1, sizeof(char *)) || vec_reserve(&self->tok_len, count + 1, sizeof(Py_ssize_t)) ||
        vec_reserve(&self->tok_hash, count + 1, sizeof(uint64_t)))
        return -1;
    char *copy = malloc((size_t)n + 1);
    if (!copy) return -1;
    memcpy(copy, p, (size_t)n);
    ((char **)self->tok_ptr.data)[count] = copy;
    ((Py_ssize_t *)self->tok_len.data)[count] = n;
    ((uint64_t *)self->tok_hash.data)[count] = h;
    self->tok_ptr.len = self->tok_len.len = self->tok_hash.len = count + 1;
    if (2 * (count + 1) > self->tok_slots) {
        if (index_grow(&self->tok_index, &self->tok_slots, self->tok_hash.data, count + 1)) return -1;
    } else {
        self->tok_index[s] = (int32_t)(count + 1);
    }
    return (int32_t)count;
}

typedef struct { const uchar *p; Py_ssize_t n; uint64_t h; } Span;

static int token_equals(Scanner *self, int32_t id, const Span *sp) {
    if (id < 0) return sp->p == NULL;
    if (sp->p == NULL) return 0;
    return ((uint64_t *)self->tok_hash.data)[id] == sp->h && ((Py_ssize_t *)self->tok_len.data)[id] == sp->n &&
           memcmp(((char **)self->tok_ptr.data)[id], sp->p, (size_t)sp->n) == 0;
}

/* The id of an event's (name, cat, ph, pid, tid); -1 on memory failure. */
static int32_t intern_key(Scanner *self, const Span sp[N_KEYF]) {
    uint64_t h = 0x2545F4914F6CDD1DULL;
    for (int f = 0; f < N_KEYF; f++) h = (h ^ (sp[f].p ? sp[f].h : 0x51ULL)) * 0x9E3779B97F4A7C15ULL + (uint64_t)f;
    h ^= h >> 31;
    size_t mask = (size_t)self->key_slots - 1;
    size_t s = (size_t)h & mask;
    for (int32_t id; (id = self->key_index[s]); s = (s + 1) & mask) {
        id--;
        if (((uint64_t *)self->key_hash.data)[id] != h) continue;
        const int32_t *k = (int32_t *)self->keys.data + 5 * (Py_ssize_t)id;
        int same = 1;
        for (int f = 0; f < N_KEYF && same; f++) same = token_equals(self, k[f], &sp[f]);
        if (same) return id;
    }
    int32_t ids[N_KEYF];
    for (int f = 0; f < N_KEYF; f++) {
        ids[f] = sp[f].p ? intern_token(self, sp[f].p, sp[f].n, sp[f].h) : MISSING;
        if (sp[f].p && ids[f] < 0) return -1;
    }
    Py_ssize_t count = self->key_hash.len;
    if (vec_reserve(&self->keys, 5 * (count + 1), sizeof(int32_t)) || vec_reserve(&self->key_hash, count + 1, sizeof(uint64_t)))
        return -1;
    memcpy((int32_t *)self->keys.data + 5 * count, ids, sizeof ids);
    ((uint64_t *)self->key_hash.data)[count] = h;
    self->keys.len = 5 * (count + 1);
    self->key_hash.len = count + 1;
    if (2 * (count + 1) > self->key_slots) {
        if (index_grow(&self->key_index, &self->key_slots, self->key_hash.data, count + 1)) return -1;
    } else {
        /* the probe above ended on an empty slot, but intern_token may have moved nothing here */
        s = (size_t)h & mask;
        while (self->key_index[s]) s = (s + 1) & mask;
        self->key_index[s] = (int32_t)(count + 1);
    }
    return (int32_t)count;
}

/* Forget the tokens and keys added since the last successful call (a scan that gave up). */
static int rollback(Scanner *self) {
    for (Py_ssize_t i = self->tok_sent; i < self->tok_len.len; i++) free(((char **)self->tok_ptr.data)[i]);
    self->tok_ptr.len = self->tok_len.len = self->tok_hash.len = self->tok_sent;
    self->keys.len = 5 * self->key_sent;
    self->key_hash.len = self->key_sent;
    free(self->tok_index);
    free(self->key_index);
    self->tok_index = self->key_index = NULL;
    self->tok_slots = self->key_slots = 0;
    if (index_grow(&self->tok_index, &self->tok_slots, self->tok_hash.data, self->tok_sent)) return -1;
    return index_grow(&self->key_index, &self->key_slots, self->key_hash.data, self->key_sent);
}

/* ---- JSON lexing ------------------------------------------------------------------------------ */

static inline const uchar *skip_ws(const uchar *p, const uchar *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int is_hex(uchar c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

/* Length of a valid UTF-8 sequence starting at p (its first byte >= 0x80), 0 when invalid. */
static int utf8_len(const uchar *p, const uchar *e) {
    uchar c = p[0];
    int n;
    uchar lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else return 0;
    if (e - p < n || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

/* p at a '"': the byte after the closing quote, or NULL for anything JSON does not allow. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The high bit of each byte of w that is '"', '\\', a control character or non-ASCII (the bytes a
 * string scan must look at); exact for the lowest such byte, which is all it is used for. */
static inline uint64_t word_special(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), slash = w ^ (ONES * '\\');
    return (((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | (w - ONES * 0x20) | w) & HIGHS;
}

static const uchar *scan_string(const uchar *p, const uchar *e, int *escaped) {
    p++;
    while (p < e) {
        while (e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t m = word_special(w);
            if (m) {
                p += __builtin_ctzll(m) >> 3;
                break;
            }
            p += 8;
        }
        if (p >= e) break;
        uchar c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            if (escaped) *escaped = 1;
            if (e - p < 2) return NULL;
            uchar x = p[1];
            if (x == 'u') {
                if (e - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) return NULL;
                p += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' || x == 't') {
                p += 2;
            } else {
                return NULL;
            }
        } else if (c >= 0x80) {
            int n = utf8_len(p, e);
            if (!n) return NULL;
            p += n;
        } else {
            p++;
        }
    }
    return NULL;
}

typedef struct { int is_int; int64_t i; double d; } Number;

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number at p: the byte after it, or NULL. is_int: an integer within int64; the double
 * is correctly rounded (an exact one-operation fast path, else strtod). */
static const uchar *scan_number(const uchar *p, const uchar *e, Number *out) {
    const uchar *start = p;
    int neg = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return NULL;
    uint64_t m = 0;
    int nd = 0, frac = 0, exp = 0, trunc = 0, is_int = 1;
    if (*p == '0') p++;
    else for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (nd < 19) { m = m * 10 + (uint64_t)(*p - '0'); nd++; }
        else trunc = 1;
    }
    if (p < e && *p == '.') {
        is_int = 0;
        p++;
        if (p >= e || *p < '0' || *p > '9') return NULL;
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (nd < 19) { m = m * 10 + (uint64_t)(*p - '0'); frac++; if (m) nd++; }
            else trunc = 1;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        int eneg = 0;
        if (p < e && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= e || *p < '0' || *p > '9') return NULL;
        for (; p < e && *p >= '0' && *p <= '9'; p++) if (exp < 100000) exp = exp * 10 + (*p - '0');
        if (eneg) exp = -exp;
    }
    if (is_int && !trunc && m <= (uint64_t)INT64_MAX + (uint64_t)neg) {
        out->is_int = 1;
        out->i = neg ? (int64_t)(0 - m) : (int64_t)m;
        out->d = (double)out->i;
        return p;
    }
    out->is_int = 0; /* an integer beyond int64 too: a float field takes it, an integer one does not */
    int scale = exp - frac;
    if (!is_int && !trunc && m <= (1ULL << 53) && scale >= -22 && scale <= 22) {
        double d = (double)m;
        d = scale >= 0 ? d * POW10[scale] : d / POW10[-scale];
        out->d = neg ? -d : d;
        return p;
    }
    char buf[72];
    if (p - start >= (Py_ssize_t)sizeof buf) return NULL;
    memcpy(buf, start, (size_t)(p - start));
    buf[p - start] = 0;
    out->d = strtod(buf, NULL);
    if (!isfinite(out->d)) return NULL;
    return p;
}

/* Any JSON value at p (after whitespace): the byte after it, or NULL. */
static const uchar *skip_value(const uchar *p, const uchar *e, int depth) {
    if (p >= e) return NULL;
    switch (*p) {
    case '"':
        return scan_string(p, e, NULL);
    case '{':
    case '[': {
        uchar close = *p == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return NULL;
        p = skip_ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= e || *p != '"' || !(p = scan_string(p, e, NULL))) return NULL;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') return NULL;
                p = skip_ws(p + 1, e);
            }
            if (!(p = skip_value(p, e, depth + 1))) return NULL;
            p = skip_ws(p, e);
            if (p >= e) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = skip_ws(p + 1, e);
        }
    }
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default: {
        Number num;
        return scan_number(p, e, &num);
    }
    }
}

/* ---- one batch ---------------------------------------------------------------------------- */

typedef struct {
    Py_ssize_t n;
    Vec key, stack, floats[N_FLOATS], ints[N_INTS], raws[N_RAWS];
} Out;

static void out_free(Out *o) {
    free(o->key.data);
    free(o->stack.data);
    for (int i = 0; i < N_FLOATS; i++) free(o->floats[i].data);
    for (int i = 0; i < N_INTS; i++) free(o->ints[i].data);
    for (int i = 0; i < N_RAWS; i++) free(o->raws[i].data);
}

static int out_reserve(Out *o, Py_ssize_t need) {
    if (need <= o->key.cap) return 0;
    Py_ssize_t cap = o->key.cap ? 2 * o->key.cap : 4096;
    int bad = vec_reserve(&o->key, cap, 4) || vec_reserve(&o->stack, cap, 4);
    for (int i = 0; i < N_FLOATS; i++) bad = bad || vec_reserve(&o->floats[i], cap, 8);
    for (int i = 0; i < N_INTS; i++) bad = bad || vec_reserve(&o->ints[i], cap, 8);
    for (int i = 0; i < N_RAWS; i++) bad = bad || vec_reserve(&o->raws[i], cap, 4);
    return bad ? -1 : 0;
}

/* Which field a key names: an index, or -1 (skipped). Keys are compared as raw bytes: a key
 * with an escape never gets here. */
#define MATCH(s) (n == (Py_ssize_t)sizeof(s) - 1 && memcmp(k, s, sizeof(s) - 1) == 0)

enum { A_INT, A_NULLABLE_INT, A_FLOPS, A_RAW, A_STACK };

static int args_field(const uchar *k, Py_ssize_t n, int *kind) {
    *kind = A_INT;
    if (MATCH("External id")) return F_EXT;
    if (MATCH("external id")) return F_EXT_OLD;
    if (MATCH("correlation")) return F_CORR;
    if (MATCH("bytes")) return F_BYTES;
    if (MATCH("stream")) return F_STREAM;
    if (MATCH("device")) return F_DEVICE;
    if (MATCH("Total Allocated")) return F_TOTAL;
    if (MATCH("Bytes")) return F_MEM_BYTES;
    if (MATCH("Addr")) return F_ADDR;
    if (MATCH("Device Type")) return F_DEV_TYPE;
    if (MATCH("Device Id")) return F_DEV_ID;
    if (MATCH("Python id")) return F_PY_ID;
    if (MATCH("Sequence number")) return F_SEQ;
    if (MATCH("Python parent id")) { *kind = A_NULLABLE_INT; return F_PY_PARENT; }
    *kind = A_RAW;
    if (MATCH("Input Dims")) return R_DIMS;
    if (MATCH("Input type")) return R_TYPE;
    if (MATCH("Concrete Inputs")) return R_CONCRETE;
    *kind = A_FLOPS;
    if (MATCH("flops")) return 0;
    *kind = A_STACK;
    if (MATCH("Call stack")) return 0;
    return -1;
}

/* A key string at p ('"'): its bytes (without quotes) and the byte after it; NULL when it is not
 * a plain key (an escape could spell a known key differently). */
static const uchar *scan_key(const uchar *p, const uchar *e, const uchar **k, Py_ssize_t *n) {
    int escaped = 0;
    if (p >= e || *p != '"') return NULL;
    const uchar *q = scan_string(p, e, &escaped);
    if (!q || escaped) return NULL;
    *k = p + 1;
    *n = q - p - 2;
    q = skip_ws(q, e);
    if (q >= e || *q != ':') return NULL;
    q = skip_ws(q + 1, e);
    return q < e ? q : NULL; /* a value follows: callers read its first byte */
}

static const uchar *scan_args(Scanner *self, const uchar *p, const uchar *e, Out *o, Py_ssize_t row) {
    uint32_t seen = 0;
    if (p >= e || *p != '{') return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    for (;;) {
        const uchar *k;
        Py_ssize_t n;
        int kind;
        if (!(p = scan_key(p, e, &k, &n))) return NULL;
        int f = args_field(k, n, &kind);
        if (f < 0) {
            if (!(p = skip_value(p, e, 2))) return NULL;
        } else {
            uint32_t bit = 1u << (kind == A_INT || kind == A_NULLABLE_INT ? f : kind == A_RAW ? N_INTS + f
                                                                            : kind == A_FLOPS ? N_INTS + N_RAWS
                                                                                              : N_INTS + N_RAWS + 1);
            if (seen & bit) return NULL;
            seen |= bit;
            if (kind == A_RAW) {
                const uchar *q = skip_value(p, e, 2);
                if (!q) return NULL;
                int32_t id = intern_token(self, p, q - p, hash_bytes(p, q - p));
                if (id < 0) return NULL;
                ((int32_t *)o->raws[f].data)[row] = id;
                p = q;
            } else if (kind == A_STACK) {
                if (*p == 'n') {
                    if (!(p = skip_value(p, e, 2))) return NULL;
                } else {
                    if (*p != '"') return NULL;
                    const uchar *q = scan_string(p, e, NULL);
                    if (!q) return NULL;
                    int32_t id = intern_token(self, p, q - p, hash_bytes(p, q - p));
                    if (id < 0) return NULL;
                    ((int32_t *)o->stack.data)[row] = id;
                    p = q;
                }
            } else if (kind == A_NULLABLE_INT && *p == 'n') {
                if (!(p = skip_value(p, e, 2))) return NULL;
            } else {
                Number num;
                if (!(p = scan_number(p, e, &num))) return NULL;
                if (kind == A_FLOPS) ((double *)o->floats[D_FLOPS].data)[row] = num.d;
                else if (!num.is_int) return NULL;
                else ((int64_t *)o->ints[f].data)[row] = num.i;
            }
        }
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
}

static void row_defaults(Out *o, Py_ssize_t row) {
    ((double *)o->floats[D_TS].data)[row] = NAN;
    ((double *)o->floats[D_DUR].data)[row] = 0.0;
    ((double *)o->floats[D_FLOPS].data)[row] = NAN;
    for (int i = 0; i < N_INTS; i++) ((int64_t *)o->ints[i].data)[row] = MISSING;
    for (int i = 0; i < N_RAWS; i++) ((int32_t *)o->raws[i].data)[row] = MISSING;
    ((int32_t *)o->stack.data)[row] = MISSING;
}

/* One event at p ('{'): the byte after it, or NULL. */
static const uchar *scan_event(Scanner *self, const uchar *p, const uchar *e, Out *o) {
    Py_ssize_t row = o->n;
    if (out_reserve(o, row + 1)) return NULL;
    row_defaults(o, row);
    Span sp[N_KEYF] = {{0}};
    unsigned seen = 0;
    if (p >= e || *p != '{') return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') p++;
    else for (;;) {
        const uchar *k;
        Py_ssize_t n;
        if (!(p = scan_key(p, e, &k, &n))) return NULL;
        int f = -1;
        if (MATCH("ph")) f = K_PH;
        else if (MATCH("cat")) f = K_CAT;
        else if (MATCH("name")) f = K_NAME;
        else if (MATCH("pid")) f = K_PID;
        else if (MATCH("tid")) f = K_TID;
        else if (MATCH("ts")) f = N_KEYF + D_TS;
        else if (MATCH("dur")) f = N_KEYF + D_DUR;
        else if (MATCH("args")) f = N_KEYF + 2;
        if (f < 0) {
            if (!(p = skip_value(p, e, 1))) return NULL;
        } else {
            if (seen & (1u << f)) return NULL;
            seen |= 1u << f;
            if (f < N_KEYF) {
                const uchar *q;
                if (p < e && *p == '"') {
                    q = scan_string(p, e, NULL);
                } else if (f == K_PID || f == K_TID) {
                    Number num;
                    q = scan_number(p, e, &num);
                    if (q && !num.is_int) return NULL;
                } else {
                    return NULL;
                }
                if (!q) return NULL;
                sp[f].p = p;
                sp[f].n = q - p;
                sp[f].h = hash_bytes(p, q - p);
                p = q;
            } else if (f == N_KEYF + 2) {
                if (!(p = scan_args(self, p, e, o, row))) return NULL;
            } else {
                Number num;
                if (!(p = scan_number(p, e, &num))) return NULL;
                ((double *)o->floats[f - N_KEYF].data)[row] = num.d;
            }
        }
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == '}') { p++; break; }
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
    int32_t key = intern_key(self, sp);
    if (key < 0) return NULL;
    ((int32_t *)o->key.data)[row] = key;
    o->n = row + 1;
    return p;
}

static PyObject *column_bytes(Vec *cols, int count, Py_ssize_t n, size_t item) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * n * (Py_ssize_t)item));
    if (!b) return NULL;
    char *dst = PyBytes_AS_STRING(b);
    for (int i = 0; i < count; i++) {
        if (n) memcpy(dst + (size_t)i * (size_t)n * item, cols[i].data, (size_t)n * item);
    }
    return b;
}

static PyObject *Scanner_scan(Scanner *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop;
    if (!self->tok_index || !self->key_index) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.__init__ was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &stop)) return NULL;
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    const uchar *base = view.buf, *p = base + start, *e = base + stop;
    Out o;
    memset(&o, 0, sizeof o);
    int ok = 1;
    p = skip_ws(p, e);
    while (p < e) {
        if (!(p = scan_event(self, p, e, &o))) { ok = 0; break; }
        p = skip_ws(p, e);
        if (p >= e) break;
        if (*p != ',') { ok = 0; break; }
        p = skip_ws(p + 1, e);
        if (p >= e) { ok = 0; break; } /* a trailing comma */
    }
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (!ok) {
        out_free(&o);
        if (rollback(self)) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    Py_ssize_t n = o.n, ntok = self->tok_len.len, nkey = self->key_hash.len;
    PyObject *tokens = PyList_New(ntok - self->tok_sent);
    if (!tokens) goto done;
    for (Py_ssize_t i = self->tok_sent; i < ntok; i++) {
        PyObject *t = PyBytes_FromStringAndSize(((char **)self->tok_ptr.data)[i], ((Py_ssize_t *)self->tok_len.data)[i]);
        if (!t) { Py_DECREF(tokens); goto done; }
        PyList_SET_ITEM(tokens, i - self->tok_sent, t);
    }
    PyObject *new_keys = PyBytes_FromStringAndSize((char *)((int32_t *)self->keys.data + 5 * self->key_sent),
                                                   (Py_ssize_t)(5 * (nkey - self->key_sent) * sizeof(int32_t)));
    result = Py_BuildValue("(nNNNNNNN)", n, column_bytes(&o.key, 1, n, 4), tokens, new_keys,
                           column_bytes(o.floats, N_FLOATS, n, 8), column_bytes(o.ints, N_INTS, n, 8),
                           column_bytes(&o.stack, 1, n, 4), column_bytes(o.raws, N_RAWS, n, 4));
    if (result) {
        self->tok_sent = ntok;
        self->key_sent = nkey;
    }
done:
    out_free(&o);
    return result;
}

/* ---- the type and the module ------------------------------------------------------------------ */

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return -1;
    if (index_grow(&self->tok_index, &self->tok_slots, NULL, 0) || index_grow(&self->key_index, &self->key_slots, NULL, 0)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Scanner_dealloc(Scanner *self) {
    for (Py_ssize_t i = 0; i < self->tok_len.len; i++) free(((char **)self->tok_ptr.data)[i]);
    free(self->tok_ptr.data);
    free(self->tok_len.data);
    free(self->tok_hash.data);
    free(self->keys.data);
    free(self->key_hash.data);
    free(self->tok_index);
    free(self->key_index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(buffer, start, stop): the events in buffer[start:stop] as columns, or None (decode them another way)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "advisor.trace._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scans Chrome-trace events into columns; keeps the distinct values it has seen.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_scan", "Chrome-trace events scanned into columns (see advisor.trace.native).", -1, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "N_INTS", N_INTS);
    PyModule_AddIntConstant(m, "N_RAWS", N_RAWS);
    return m;
}
