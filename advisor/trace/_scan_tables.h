/* The scanner's tables (advisor/trace/_scan.c includes this once): growable arrays, and the
 * distinct raw tokens and event keys a Scanner keeps across calls, by hash. */
#ifndef ADVISOR_SCAN_TABLES_H
#define ADVISOR_SCAN_TABLES_H

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

/* The last n (< 8) bytes of a token as one word, read without going past them. Not copied
 * byte by byte into a zeroed word: reading that word back stalls on the byte stores, which
 * cost a quarter of the scan when every key of every event was hashed that way. */
static inline uint64_t tail_word(const uchar *p, Py_ssize_t n) {
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        return (uint64_t)a | (uint64_t)b << 32;
    }
    return n ? (uint64_t)p[0] | (uint64_t)p[n >> 1] << 8 | (uint64_t)p[n - 1] << 16 : 0;
}

static inline uint64_t mix_word(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 32);
}

/* Long tokens (a call stack runs to kilobytes, half of a kineto trace's bytes) are hashed in
 * four independent lanes: one lane's multiply chain would bound the scan at ~1.6 bytes a cycle. */
static inline uint64_t hash_bytes(const uchar *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    if (n >= 32) {
        uint64_t lane[4] = {h, h ^ 0x243F6A8885A308D3ULL, h ^ 0x13198A2E03707344ULL, h ^ 0xA4093822299F31D0ULL};
        while (n >= 32) {
            for (int i = 0; i < 4; i++) {
                uint64_t w;
                memcpy(&w, p + 8 * i, 8);
                lane[i] = mix_word(lane[i], w);
            }
            p += 32;
            n -= 32;
        }
        h = mix_word(mix_word(mix_word(lane[0], lane[1]), lane[2]), lane[3]);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix_word(h, w);
        p += 8;
        n -= 8;
    }
    h = (h ^ tail_word(p, n)) * 0xC4CEB9FE1A85EC53ULL;
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

#endif
