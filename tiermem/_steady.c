/* The one-step append's checks, id lookup, write and flush in one call (`tiermem.steady_append`).
 *
 * A caller that waits through a flush between appends finds the interpreter's caches cold
 * at every append, and then each Python call of the one-step path costs several times its
 * warm price: measured, that cold Python, not the system calls, is most of what an append
 * adds to the disk's own flush. This does the same steps with no Python frame between them:
 * the lag list's page compared with the record the full path read, one `stat` per other
 * listed segment and one for the segment itself, the id looked up in the index through
 * SQLite's own interface (a statement prepared once, each lookup its own read), the
 * writer's tails asked, the line encoded by the caller's encoder, written, and flushed by
 * the caller's flush function (`os.fsync`, which lets go of the interpreter lock meanwhile).
 *
 * It answers -1 when anything is not as the full path left it (nothing done; the Python
 * path decides), -2 when only the segment is longer (nothing done; whole lines of other
 * processes, perhaps), the bytes written when done, or (1, errno) when the write failed, for the
 * caller to clean up as the Python path does; the flush's own error is raised as it is.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest write made with the interpreter lock held (tiermem.heldio.HELD_WRITE_MAX). */
#define HELD_WRITE_MAX (64 * 1024)

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *lookup;
} Index;

static void index_close_db(Index *self) {
    if (self->lookup != NULL) {
        sqlite3_finalize(self->lookup);
        self->lookup = NULL;
    }
    if (self->db != NULL) {
        sqlite3_close_v2(self->db);
        self->db = NULL;
    }
}

static void index_dealloc(Index *self) {
    index_close_db(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int index_init(Index *self, PyObject *args, PyObject *kwds) {
    const char *path;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "s", &path)) return -1;
    index_close_db(self);
    /* No busy wait: a lookup that would wait (the index being recovered or checkpointed in a
     * way that blocks readers) answers -1 and the Python path waits, the interpreter lock let go. */
    int rc = sqlite3_open_v2(path, &self->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(self->db, "SELECT 1 FROM event_ids WHERE event_id = ?", -1,
                                SQLITE_PREPARE_PERSISTENT, &self->lookup, NULL);
    if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_OSError, "opening the id index: %s",
                     self->db != NULL ? sqlite3_errmsg(self->db) : sqlite3_errstr(rc));
        index_close_db(self);
        return -1;
    }
    return 0;
}

static PyObject *index_close(Index *self, PyObject *unused) {
    (void)unused;
    index_close_db(self);
    Py_RETURN_NONE;
}

static PyMethodDef INDEX_METHODS[] = {
    {"close", (PyCFunction)index_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tiermem._steady.Index",
    .tp_basicsize = sizeof(Index),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A connection to the id index with its lookup prepared.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)index_init,
    .tp_dealloc = (destructor)index_dealloc,
    .tp_methods = INDEX_METHODS,
};

/* 1 if the id is in the index, 0 if not, -1 if the lookup did not answer (fall back). */
static int looked_up(Index *index, const char *eid, Py_ssize_t len) {
    if (index->lookup == NULL) return -1;
    sqlite3_stmt *stmt = index->lookup;
    int found = -1;
    if (sqlite3_bind_text(stmt, 1, eid, (int)len, SQLITE_STATIC) == SQLITE_OK) {
        int rc = sqlite3_step(stmt);
        found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    }
    /* Ends the read at once: no read transaction is kept from one append to the next. */
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return found;
}

/* 1 if the file at (dir_fd, path) is (ino, size), 0 if not or gone, -1 on another error. */
static int stat_is(int dir_fd, const char *path, unsigned long long ino, long long size) {
    struct stat st;
    if (fstatat(dir_fd, path, &st, 0) != 0) return errno == ENOENT ? 0 : -1;
    return (unsigned long long)st.st_ino == ino && (long long)st.st_size == size;
}

static PyObject *failed(int stage, int err) { return Py_BuildValue("(ii)", stage, err); }


/* append_one(index, lag, raw, others, dir_fd, name, ino, end, max_bytes, eid, tails, dumps,
 *            event, fd, flush) -> bytes written, -1 or -2 (fall back), or (1, errno); flush None: no flush. */
static PyObject *append_one(PyObject *self, PyObject *args) {
    PyObject *index_obj, *lag, *raw, *others, *eid, *tails, *dumps, *event, *flush;
    int dir_fd, fd;
    const char *name;
    unsigned long long ino;
    long long end, max_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OSO!isKLLUO!OO!iO", &IndexType, &index_obj, &lag, &raw,
                          &PyTuple_Type, &others, &dir_fd, &name, &ino, &end, &max_bytes, &eid,
                          &PyTuple_Type, &tails, &dumps, &PyDict_Type, &event, &fd, &flush))
        return NULL;
    if (end >= max_bytes) return PyLong_FromLong(-1);

    /* The lag list: byte for byte the record the full path read. */
    Py_buffer page;
    if (PyObject_GetBuffer(lag, &page, PyBUF_SIMPLE) < 0) return NULL;
    int same = page.len == PyBytes_GET_SIZE(raw) && memcmp(page.buf, PyBytes_AS_STRING(raw), (size_t)page.len) == 0;
    PyBuffer_Release(&page);
    if (!same) return PyLong_FromLong(-1);

    /* The other listed segments, then this one: as the full path left them. */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(others); i++) {
        PyObject *other = PyTuple_GET_ITEM(others, i);
        const char *path;
        unsigned long long o_ino;
        long long o_size;
        if (!PyArg_ParseTuple(other, "s(KL)", &path, &o_ino, &o_size)) return NULL;
        if (stat_is(dir_fd, path, o_ino, o_size) != 1) return PyLong_FromLong(-1);
    }
    struct stat own;
    if (fstatat(dir_fd, name, &own, 0) != 0 || (unsigned long long)own.st_ino != ino) return PyLong_FromLong(-1);
    /* Longer: other processes' lines, perhaps, which the caller may take into its tail and ask again. */
    if ((long long)own.st_size != end) return PyLong_FromLong((long long)own.st_size > end ? -2 : -1);

    /* The id: in neither the index nor any of the writer's tails. */
    Py_ssize_t eid_len;
    const char *eid_utf8 = PyUnicode_AsUTF8AndSize(eid, &eid_len);
    if (eid_utf8 == NULL) return NULL;
    if (looked_up((Index *)index_obj, eid_utf8, eid_len) != 0) return PyLong_FromLong(-1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tails); i++) {
        int held = PySet_Contains(PyTuple_GET_ITEM(tails, i), eid);
        if (held < 0) return NULL;
        if (held) return PyLong_FromLong(-1);
    }

    /* The line, in one write (lines never interleave: the stream lock is held). */
    PyObject *encoded = PyObject_CallOneArg(dumps, event);
    if (encoded == NULL) return NULL;
    if (!PyBytes_Check(encoded)) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_TypeError, "the encoder must return bytes");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(encoded);
    char small[4096];
    char *line = n + 1 <= (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc((size_t)n + 1);
    if (line == NULL) {
        Py_DECREF(encoded);
        return PyErr_NoMemory();
    }
    memcpy(line, PyBytes_AS_STRING(encoded), (size_t)n);
    Py_DECREF(encoded);
    line[n] = '\n';
    Py_ssize_t total = n + 1, done = 0;
    int err = 0;
    /* A large line is written without the interpreter lock (as heldio does past HELD_WRITE_MAX):
       a write the kernel holds back for dirty pages would otherwise stop every other thread.
       `line` is this call's own copy and the stream's lock is held, so nothing else touches it. */
    PyThreadState *released = total > HELD_WRITE_MAX ? PyEval_SaveThread() : NULL;
    while (done < total) {
        ssize_t w = write(fd, line + done, (size_t)(total - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO; /* nothing written and no error: do not loop on it */
            break;
        }
        done += w;
    }
    if (released != NULL) PyEval_RestoreThread(released);
    if (line != small) PyMem_Free(line);
    if (err) return failed(1, err);
    if (flush != Py_None) {
        PyObject *fd_obj = PyLong_FromLong(fd);
        if (fd_obj == NULL) return NULL;
        PyObject *flushed = PyObject_CallOneArg(flush, fd_obj);
        Py_DECREF(fd_obj);
        if (flushed == NULL) return NULL;
        Py_DECREF(flushed);
    }
    return PyLong_FromSsize_t(total);
}

static PyMethodDef METHODS[] = {
    {"append_one", append_one, METH_VARARGS, "the one-step append of one event, or -1 to fall back"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_steady", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__steady(void) {
    if (PyType_Ready(&IndexType) < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (m == NULL) return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
