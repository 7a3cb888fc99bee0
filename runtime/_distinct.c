/* The quote search's near-duplicate check over a ranked run of results, compiled (optional).
 *
 * runtime/near_duplicates.py is the definition and the fallback; this does the same in one loop:
 * each result's filing prefix read from the top of its set (the question's words after all
 * others), the kept results filed under its words looked up in a small hash table, and the
 * shared words of a pair counted by merging the two ascending sets. A pair is near-identical
 * when shared >= keep * (|a| + |b| - shared), in doubles, as Python computes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    Py_ssize_t n;
} Set;

typedef struct {
    int64_t word;
    Py_ssize_t kept; /* the kept result filed under it */
    Py_ssize_t next; /* the next entry of the same bucket, -1 at the end */
} Filed;

typedef struct {
    Py_ssize_t *buckets; /* per bucket: its first entry, -1 when empty */
    Py_ssize_t n_buckets;
    Filed *entries;
    Py_ssize_t n_entries, cap_entries;
} Table;

static size_t bucket_of(int64_t word, Py_ssize_t n_buckets) {
    uint64_t h = (uint64_t)word * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 32) & (size_t)(n_buckets - 1);
}

static int table_grow(Table *t) {
    Py_ssize_t n = t->n_buckets * 2;
    Py_ssize_t *b = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    if (b == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) b[i] = -1;
    for (Py_ssize_t e = 0; e < t->n_entries; e++) {
        size_t k = bucket_of(t->entries[e].word, n);
        t->entries[e].next = b[k];
        b[k] = e;
    }
    PyMem_Free(t->buckets);
    t->buckets = b;
    t->n_buckets = n;
    return 0;
}

static int table_add(Table *t, int64_t word, Py_ssize_t kept) {
    if (t->n_entries >= t->cap_entries) {
        Py_ssize_t cap = t->cap_entries * 2;
        Filed *e = PyMem_Realloc(t->entries, sizeof(Filed) * (size_t)cap);
        if (e == NULL) return -1;
        t->entries = e;
        t->cap_entries = cap;
    }
    if (t->n_entries * 2 >= t->n_buckets && table_grow(t) < 0) return -1;
    size_t k = bucket_of(word, t->n_buckets);
    Filed *f = &t->entries[t->n_entries];
    f->word = word;
    f->kept = kept;
    f->next = t->buckets[k];
    t->buckets[k] = t->n_entries++;
    return 0;
}

static int is_late(const int64_t *late, Py_ssize_t n_late, int64_t w) {
    Py_ssize_t lo = 0, hi = n_late;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (late[mid] < w) lo = mid + 1;
        else hi = mid;
    }
    return lo < n_late && late[lo] == w;
}

/* The set's filing prefix (at most `length` words) into `out`; returns how many. */
static Py_ssize_t prefix_of(const int64_t *w, Py_ssize_t n, Py_ssize_t length, const int64_t *late,
                            Py_ssize_t n_late, int64_t *out) {
    Py_ssize_t got = 0;
    for (Py_ssize_t i = n - 1; i >= 0 && got < length; i--)
        if (!is_late(late, n_late, w[i])) out[got++] = w[i];
    for (Py_ssize_t i = n - 1; i >= 0 && got < length; i--)
        if (is_late(late, n_late, w[i])) out[got++] = w[i];
    return got;
}

static Py_ssize_t shared_words(const int64_t *a, Py_ssize_t na, const int64_t *b, Py_ssize_t nb) {
    Py_ssize_t i = 0, j = 0, shared = 0;
    while (i < na && j < nb) {
        if (a[i] < b[j]) i++;
        else if (a[i] > b[j]) j++;
        else {
            shared++;
            i++;
            j++;
        }
    }
    return shared;
}

static int is_int64(const char *format) {
    if (format == NULL) return 0;
    if (format[0] == '@' || format[0] == '=' || format[0] == '<') format++;
    return (format[0] == 'l' || format[0] == 'q') && format[1] == 0;
}

/* A word set: a one-dimensional array of int64, strictly ascending (distinct numbers). */
static int check_set(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->ndim != 1 || view->itemsize != 8 || !is_int64(view->format)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "a word set must be a one-dimensional int64 array");
        return -1;
    }
    const int64_t *w = view->buf;
    for (Py_ssize_t i = 1; i < view->shape[0]; i++)
        if (w[i] <= w[i - 1]) {
            PyBuffer_Release(view);
            PyErr_SetString(PyExc_ValueError, "a word set's numbers must be distinct and ascending");
            return -1;
        }
    return 0;
}

static PyObject *distinct_run(PyObject *self, PyObject *args) {
    PyObject *ranked, *late_obj;
    double keep;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OOdn", &ranked, &late_obj, &keep, &limit)) return NULL;
    /* Outside (0, 1] (or NaN) the prefix length below would be meaningless and could overflow:
     * refused, as the Python path refuses it. */
    if (!(keep > 0.0 && keep <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "keep must be a number in (0, 1]");
        return NULL;
    }
    Py_buffer late_view;
    if (check_set(late_obj, &late_view) < 0) return NULL;
    const int64_t *late = late_view.buf;
    Py_ssize_t n_late = late_view.shape[0];
    PyObject *iter = PyObject_GetIter(ranked);
    PyObject *out = PyList_New(0);
    Set *sets = PyMem_Malloc(sizeof(Set) * 64);
    Py_ssize_t n_sets = 0, cap_sets = 64;
    Table t = {PyMem_Malloc(sizeof(Py_ssize_t) * 256), 256, PyMem_Malloc(sizeof(Filed) * 256), 0, 256};
    Py_ssize_t *stamp = PyMem_Malloc(sizeof(Py_ssize_t) * 64); /* per kept: the last result it met */
    int64_t *prefix = NULL;
    Py_ssize_t cap_prefix = 0;
    int failed = iter == NULL || out == NULL || sets == NULL || t.buckets == NULL || t.entries == NULL ||
                 stamp == NULL;
    if (failed && !PyErr_Occurred()) PyErr_NoMemory();
    if (!failed)
        for (Py_ssize_t i = 0; i < t.n_buckets; i++) t.buckets[i] = -1;
    Py_ssize_t seen = 0;
    while (!failed) {
        PyObject *pair = PyIter_Next(iter);
        if (pair == NULL) {
            failed = PyErr_Occurred() != NULL;
            break;
        }
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "ranked must yield (what, word set) pairs");
            failed = 1;
            break;
        }
        Set cur;
        if (check_set(PyTuple_GET_ITEM(pair, 1), &cur.view) < 0) {
            Py_DECREF(pair);
            failed = 1;
            break;
        }
        cur.n = cur.view.shape[0];
        const int64_t *w = cur.view.buf;
        /* keep in (0, 1] puts keep * n in (0, n]: no overflow, and a prefix is never longer than
         * its set, so the buffer is sized by the set. */
        Py_ssize_t length = cur.n - (Py_ssize_t)(keep * (double)cur.n) + 2;
        if (length > cur.n) length = cur.n;
        if (length < 0) length = 0;
        if (length > cap_prefix) {
            int64_t *p = PyMem_Realloc(prefix, sizeof(int64_t) * (size_t)length);
            if (p == NULL) {
                PyBuffer_Release(&cur.view);
                Py_DECREF(pair);
                PyErr_NoMemory();
                failed = 1;
                break;
            }
            prefix = p;
            cap_prefix = length;
        }
        Py_ssize_t n_prefix = prefix_of(w, cur.n, length, late, n_late, prefix);
        int dropped = 0;
        seen++;
        for (Py_ssize_t p = 0; p < n_prefix && !dropped; p++) {
            for (Py_ssize_t e = t.buckets[bucket_of(prefix[p], t.n_buckets)]; e >= 0; e = t.entries[e].next) {
                if (t.entries[e].word != prefix[p]) continue;
                Py_ssize_t m = t.entries[e].kept;
                if (stamp[m] == seen) continue;
                stamp[m] = seen;
                Py_ssize_t other = sets[m].n;
                Py_ssize_t small = cur.n < other ? cur.n : other, large = cur.n < other ? other : cur.n;
                if ((double)small < keep * (double)large) continue;
                Py_ssize_t shared = shared_words(w, cur.n, sets[m].view.buf, other);
                if ((double)shared >= keep * (double)(cur.n + other - shared)) {
                    dropped = 1;
                    break;
                }
            }
        }
        if (dropped) {
            PyBuffer_Release(&cur.view);
            Py_DECREF(pair);
            continue;
        }
        if (n_sets >= cap_sets) {
            Set *s = PyMem_Realloc(sets, sizeof(Set) * (size_t)(cap_sets * 2));
            Py_ssize_t *st = s == NULL ? NULL : PyMem_Realloc(stamp, sizeof(Py_ssize_t) * (size_t)(cap_sets * 2));
            if (s != NULL) sets = s;
            if (st != NULL) stamp = st;
            if (s == NULL || st == NULL) {
                PyBuffer_Release(&cur.view);
                Py_DECREF(pair);
                PyErr_NoMemory();
                failed = 1;
                break;
            }
            cap_sets *= 2;
        }
        stamp[n_sets] = 0;
        sets[n_sets++] = cur; /* released at the end, with every kept set */
        for (Py_ssize_t p = 0; p < n_prefix && !failed; p++)
            if (table_add(&t, prefix[p], n_sets - 1) < 0) {
                PyErr_NoMemory();
                failed = 1;
            }
        if (failed || PyList_Append(out, PyTuple_GET_ITEM(pair, 0)) < 0) {
            Py_DECREF(pair);
            failed = 1;
            break;
        }
        Py_DECREF(pair);
        if (PyList_GET_SIZE(out) >= limit) break;
    }
    for (Py_ssize_t i = 0; i < n_sets; i++) PyBuffer_Release(&sets[i].view);
    PyMem_Free(sets);
    PyMem_Free(stamp);
    PyMem_Free(prefix);
    PyMem_Free(t.buckets);
    PyMem_Free(t.entries);
    Py_XDECREF(iter);
    PyBuffer_Release(&late_view);
    if (failed) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"distinct_run", distinct_run, METH_VARARGS,
     "distinct_run(ranked, late, keep, limit): the first `limit` of ranked (what, word set) pairs, "
     "near-identical sets kept once (runtime.near_duplicates)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_distinct", NULL, -1, methods};

PyMODINIT_FUNC PyInit__distinct(void) { return PyModule_Create(&module); }
