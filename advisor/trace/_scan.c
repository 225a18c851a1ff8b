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
/* The rows of scan()'s columns by name, in the enums' order: the module exports them, so the
 * Python side (advisor.trace.native) reads them from here, never from a copy of its own. */
static const char *const INT_NAMES[N_INTS] = {"ext_id", "ext_id_old", "correlation", "bytes", "stream", "device",
                                              "total_allocated", "mem_bytes", "mem_addr", "device_type",
                                              "device_id", "py_id", "py_parent", "seq_nr"};
static const char *const RAW_NAMES[N_RAWS] = {"input_dims", "input_type", "concrete"};
static const char *const FLOAT_NAMES[N_FLOATS] = {"ts", "dur", "flops"};
static const char *const KEY_NAMES[N_KEYF] = {"name", "cat", "ph", "pid", "tid"};
#define MAX_DEPTH 64
#define MISSING (-1)

#include "_scan_tables.h"
#include "_scan_json.h"

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

/* A module attribute: a tuple of the names of a column block's rows, in order. */
static int add_names(PyObject *m, const char *attr, const char *const *names, int count) {
    PyObject *t = PyTuple_New(count);
    if (!t) return -1;
    for (int i = 0; i < count; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name) {
            Py_DECREF(t);
            return -1;
        }
        PyTuple_SET_ITEM(t, i, name);
    }
    if (PyModule_AddObject(m, attr, t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

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
    if (add_names(m, "INT_FIELDS", INT_NAMES, N_INTS) || add_names(m, "RAW_FIELDS", RAW_NAMES, N_RAWS) ||
        add_names(m, "FLOAT_FIELDS", FLOAT_NAMES, N_FLOATS) || add_names(m, "KEY_FIELDS", KEY_NAMES, N_KEYF)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
