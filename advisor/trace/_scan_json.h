/* JSON lexing for the trace scanner (advisor/trace/_scan.c includes this once): whitespace,
 * strings (validated: escapes, control characters, UTF-8), numbers and any value skipped. */
#ifndef ADVISOR_SCAN_JSON_H
#define ADVISOR_SCAN_JSON_H

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

/* Eight bytes at a time where the first special byte can be found from the mask's lowest bit
 * (little-endian, with a count-trailing-zeros builtin); one at a time elsewhere, or when built
 * with -DADVISOR_SCAN_BYTEWISE (how that path is tested here). */
#if !defined(ADVISOR_SCAN_BYTEWISE) && defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDWISE 1
#define FIRST_BYTE(m) (__builtin_ctzll(m) >> 3)
#else
#define WORDWISE 0
#define FIRST_BYTE(m) 0
#endif

/* Sixteen bytes at a time where SSE2 is there (every x86-64): one signed compare finds both the
 * control characters and the non-ASCII bytes (negative as int8). A call stack runs to kilobytes. */
#if WORDWISE && defined(__SSE2__)
#include <emmintrin.h>
#define VECTORWISE 1
#define FIRST_LANE(m) __builtin_ctz((unsigned)(m))
static inline int vector_special(const uchar *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                               _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return _mm_movemask_epi8(hit);
}
#else
#define VECTORWISE 0
#define FIRST_LANE(m) 0
static inline int vector_special(const uchar *p) { (void)p; return 1; }
#endif

static const uchar *scan_string(const uchar *p, const uchar *e, int *escaped) {
    p++;
    while (p < e) {
        while (VECTORWISE && e - p >= 16) {
            int m = vector_special(p);
            if (m) {
                p += FIRST_LANE(m);
                goto special;
            }
            p += 16;
        }
        while (WORDWISE && e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t m = word_special(w);
            if (m) {
                p += FIRST_BYTE(m);
                goto special;
            }
            p += 8;
        }
        if (p >= e) break;
    special:;
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

#endif
