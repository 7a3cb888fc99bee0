/* The shared parts of the quote search's compiled module (runtime/_blockscore.c, its scores and
 * block selection; runtime/_blockcounts.c, its term counts): the arrays each call reads, taken
 * through the buffer protocol (numpy arrays, C-contiguous, of the item sizes the Python side makes
 * them) and released together. */

#ifndef TIERMEM_BLOCKSCORE_H
#define TIERMEM_BLOCKSCORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer b[20];
    int n;
} Views;

static inline void release(Views *v) {
    for (int i = 0; i < v->n; i++) PyBuffer_Release(&v->b[i]);
    v->n = 0;
}

/* A C-contiguous buffer of `count` items of `size` bytes (count < 0: any count), or NULL. */
static inline const void *take(Views *v, PyObject *o, Py_ssize_t size, Py_ssize_t count, const char *name,
                        Py_ssize_t *got) {
    Py_buffer *b = &v->b[v->n];
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    v->n++;
    if (b->itemsize != size || b->len % size != 0 || (count >= 0 && b->len != count * size)) {
        PyErr_Format(PyExc_ValueError, "%s: wrong item size or length", name);
        return NULL;
    }
    if (got) *got = b->len / size;
    return b->buf;
}

/* The counting functions (runtime/_blockcounts.c), listed in the module's methods. */
PyObject *inside_counts(PyObject *self, PyObject *args);
PyObject *near_counts(PyObject *self, PyObject *args);
PyObject *block_sums(PyObject *self, PyObject *args);

#endif
