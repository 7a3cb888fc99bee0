/* The append path's short system calls, made without letting go of the interpreter lock.
 *
 * Python lets go of its lock around every system call, since any of them may block.
 * Most of the log's calls on its own files do not (a lock nobody holds, the size of a
 * file, a write into the page cache), yet each time the lock is let go while other
 * threads wait for it, one of them takes it and the caller waits to get it back: with
 * eight callers in group commit, those hand-offs (futex calls and context switches)
 * cost more than the calls. These versions keep the lock. Only calls that cannot wait
 * for another process are made this way: a `flock` is tried without blocking, and the
 * caller takes the ordinary blocking call when the lock is held elsewhere.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* flock_now(fd, op) -> True if done, False if another holder makes it wait. */
static PyObject *flock_now(PyObject *self, PyObject *args) {
    int fd, op;
    (void)self;
    if (!PyArg_ParseTuple(args, "ii", &fd, &op)) return NULL;
    for (;;) {
        if (flock(fd, op | LOCK_NB) == 0) Py_RETURN_TRUE;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0) return NULL;
            continue;
        }
        if (errno == EWOULDBLOCK) Py_RETURN_FALSE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
}

/* stat_at(dir_fd, name) -> (inode, size), or None if there is no such file. */
static PyObject *stat_at(PyObject *self, PyObject *args) {
    int dir_fd;
    const char *name;
    struct stat st;
    (void)self;
    if (!PyArg_ParseTuple(args, "is", &dir_fd, &name)) return NULL;
    if (fstatat(dir_fd, name, &st, 0) != 0) {
        if (errno == ENOENT) Py_RETURN_NONE;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, name);
    }
    return Py_BuildValue("(KL)", (unsigned long long)st.st_ino, (long long)st.st_size);
}

/* size_of(fd) -> the open file's size. */
static PyObject *size_of(PyObject *self, PyObject *arg) {
    struct stat st;
    (void)self;
    int fd = (int)PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fstat(fd, &st) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)st.st_size);
}

/* write_now(fd, data) -> bytes written (one write; the caller loops on a short one). */
static PyObject *write_now(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer data;
    (void)self;
    if (!PyArg_ParseTuple(args, "iy*", &fd, &data)) return NULL;
    ssize_t n;
    for (;;) {
        n = write(fd, data.buf, (size_t)data.len);
        if (n >= 0 || errno != EINTR) break;
        if (PyErr_CheckSignals() < 0) {
            PyBuffer_Release(&data);
            return NULL;
        }
    }
    PyBuffer_Release(&data);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(n);
}

/* pread_now(fd, n, offset) -> bytes. */
static PyObject *pread_now(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t n;
    long long offset;
    (void)self;
    if (!PyArg_ParseTuple(args, "inL", &fd, &n, &offset)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative length");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) return NULL;
    ssize_t got;
    for (;;) {
        got = pread(fd, PyBytes_AS_STRING(out), (size_t)n, (off_t)offset);
        if (got >= 0 || errno != EINTR) break;
        if (PyErr_CheckSignals() < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    if (got < 0) {
        Py_DECREF(out);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (got != n && _PyBytes_Resize(&out, got) < 0) return NULL;
    return out;
}

/* dup_now(fd) -> a duplicate, not inherited by child processes (as os.dup). */
static PyObject *dup_now(PyObject *self, PyObject *arg) {
    (void)self;
    int fd = (int)PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    int out = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (out < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(out);
}

/* close_now(fd): as os.close (a descriptor is released even when close reports an error). */
static PyObject *close_now(PyObject *self, PyObject *arg) {
    (void)self;
    int fd = (int)PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (close(fd) != 0 && errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"flock_now", flock_now, METH_VARARGS, "flock_now(fd, op) -> True, or False if it would wait"},
    {"stat_at", stat_at, METH_VARARGS, "stat_at(dir_fd, name) -> (inode, size) or None"},
    {"size_of", size_of, METH_O, "size_of(fd) -> size"},
    {"write_now", write_now, METH_VARARGS, "write_now(fd, data) -> bytes written"},
    {"pread_now", pread_now, METH_VARARGS, "pread_now(fd, n, offset) -> bytes"},
    {"dup_now", dup_now, METH_O, "dup_now(fd) -> fd"},
    {"close_now", close_now, METH_O, "close_now(fd)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_heldio", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__heldio(void) { return PyModule_Create(&MODULE); }
