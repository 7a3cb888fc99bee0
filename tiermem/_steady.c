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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest write made with the interpreter lock held (tiermem.heldio.HELD_WRITE_MAX). */
#define HELD_WRITE_MAX (64 * 1024)

/* The wal-index header (SQLite's file format: the first 48 bytes of the `-shm` file, written twice,
 * the second copy first) and the size of the regions in which SQLite maps that file. */
#define WAL_HEADER 48
#define WAL_INDEX_REGION 32768
/* Ids read into the filter at most; past that, SQLite answers every lookup. A reading holds the
 * interpreter lock (~0.2 µs an id: ~14 ms at this size), and past it a lone writer's own commits
 * (its tail sent to the index every few thousand ids) make every filter stale before it pays. */
#define FILTER_MAX_IDS (1 << 16)

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *lookup;
    /* The ids of the index as of one state of its write-ahead log (see `filter_build`). */
    const volatile unsigned char *wal_header; /* SQLite's own mapping of the wal-index header, or NULL */
    unsigned char token[WAL_HEADER];          /* that header when the ids were read */
    unsigned long long *bits;                 /* a Bloom filter of those ids; NULL: none */
    unsigned long long mask;                  /* its number of bits - 1 (a power of two) */
    int valid;                                /* the header is still `token`, as far as last seen */
    int unusable;                             /* not in WAL mode, or no mapping: SQLite answers, always */
    long long built_n;                        /* ids read by the last build (or counted before it stopped) */
    long long misses;                         /* lookups answered by SQLite since the last build */
    long long answered;                       /* "absent" answered by the filter */
    long long answered_at_build;              /* `answered` when the filter was last read */
    int backoff;                              /* readings that did not pay in a row (see `filter_due`) */
    long long readings;                       /* readings of the index begun */
    PyObject *reading_hook;                   /* tests: called once a reading's snapshot is taken */
} Index;

static void filter_drop(Index *self) {
    PyMem_Free(self->bits);
    self->bits = NULL;
    self->valid = 0;
}

static void index_close_db(Index *self) {
    filter_drop(self);
    self->wal_header = NULL;
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
    Py_CLEAR(self->reading_hook);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int index_init(Index *self, PyObject *args, PyObject *kwds) {
    const char *path;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "s", &path)) return -1;
    index_close_db(self);
    self->unusable = 0;
    self->built_n = self->misses = self->answered = self->answered_at_build = 0;
    self->backoff = 0;
    self->readings = 0;
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

/* (valid, ids read by the last reading, lookups SQLite answered since, "absent" answered by the
 * filter, readings begun): what the tests and benchmarks look at. */
static PyObject *index_filter_state(Index *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(OLLLL)", self->valid ? Py_True : Py_False, self->built_n, self->misses, self->answered,
                         self->readings);
}

/* A callable run inside each reading once its snapshot is taken (None: none). What a commit made
 * at that moment must do (drop the filter) cannot be arranged from outside otherwise. */
static PyObject *index_set_reading_hook(Index *self, PyObject *hook) {
    PyObject *old = self->reading_hook;
    self->reading_hook = hook == Py_None ? NULL : Py_NewRef(hook);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyMethodDef INDEX_METHODS[] = {
    {"close", (PyCFunction)index_close, METH_NOARGS, "close the connection"},
    {"set_reading_hook", (PyCFunction)index_set_reading_hook, METH_O,
     "tests: a callable run inside each reading of the index once its snapshot is taken, or None"},
    {"filter_state", (PyCFunction)index_filter_state, METH_NOARGS,
     "(valid, ids read, lookups SQLite answered since, absent answered by the filter, readings begun)"},
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

/* ------------------------------------------------------------------------------------------
 * "Absent" answered without a read transaction.
 *
 * Each lookup through SQLite is its own read transaction, and beginning and ending one costs a
 * pair of `fcntl` locks on the index's shared memory and SQLite's whole read path: the largest
 * part of a one-step append besides the flush, all of it cold after a flush. But the index only
 * changes by commits, and every commit rewrites the wal-index header that every reader consults
 * first (SQLite's documented WAL-index format: two copies of 48 bytes at the start of `-shm`,
 * the second written first, then the first). Within one generation of the write-ahead log
 * (its salts) frames are only appended, so a header that is byte for byte the same (salts,
 * frame count, the frames' running checksum, the commit counter) is the same committed state;
 * a checkpoint copies frames without changing what they say, and a restart draws new salts.
 *
 * So the connection reads the header, then every id of the index in one read transaction: its
 * snapshot is the header's state or a later one, and the filter is used only while the header is
 * still the one read before (its token), that is while no commit has happened since: then the
 * snapshot was exactly that state. (The header is read again after the reading only to drop at
 * once a filter a commit during the reading already made stale.) The ids go into a Bloom filter
 * (no false "absent"). A lookup then reads the header again, as SQLite's own readers do (first copy,
 * then the second, both equal): if it is still that state and the filter does not hold the id,
 * a fresh lookup at that moment would find it absent too, since a commit that is not yet in
 * both copies is not visible to any reader. Anything else (a commit since, by this process or
 * another, a header being written, an id the filter may hold) goes to SQLite as before; a
 * changed header makes the filter stale for good, and it is read again only after enough
 * lookups went to SQLite that reading it costs a fraction of them (`filter_due`).
 *
 * The header is read through SQLite's own mapping of the shared memory (the VFS's `xShmMap`):
 * opening `-shm` separately would give this process a second descriptor of it, and closing
 * that descriptor would drop the POSIX locks SQLite holds on the file. */

static int header_now(const Index *self, unsigned char out[WAL_HEADER]) {
    unsigned char second[WAL_HEADER];
    memcpy(out, (const unsigned char *)self->wal_header, WAL_HEADER);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(second, (const unsigned char *)self->wal_header + WAL_HEADER, WAL_HEADER);
    /* isInit (byte 12) set and both copies equal: a header SQLite's readers would take. */
    return out[12] == 1 && memcmp(out, second, WAL_HEADER) == 0;
}

static unsigned long long mix(unsigned long long h) {
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

static unsigned long long id_hash(const char *eid, Py_ssize_t len) {
    unsigned long long h = 0xCBF29CE484222325ULL ^ (unsigned long long)len;
    for (Py_ssize_t i = 0; i < len; i++) {
        h ^= (unsigned char)eid[i];
        h *= 0x100000001B3ULL;
    }
    return mix(h);
}

/* Three bits per id, by double hashing. */
#define FILTER_PROBES 3
#define PROBE(h, g, i, mask) (((h) + (unsigned long long)(i) * (g)) & (mask))

static void filter_add(Index *self, const char *eid, Py_ssize_t len) {
    unsigned long long h = id_hash(eid, len), g = mix(h) | 1;
    for (int i = 0; i < FILTER_PROBES; i++) {
        unsigned long long bit = PROBE(h, g, i, self->mask);
        self->bits[bit >> 6] |= 1ULL << (bit & 63);
    }
}

static int filter_may_hold(const Index *self, const char *eid, Py_ssize_t len) {
    unsigned long long h = id_hash(eid, len), g = mix(h) | 1;
    for (int i = 0; i < FILTER_PROBES; i++) {
        unsigned long long bit = PROBE(h, g, i, self->mask);
        if (!(self->bits[bit >> 6] & (1ULL << (bit & 63)))) return 0;
    }
    return 1;
}

/* Worth reading the index again: a lookup through SQLite costs about what reading 40 ids in one
 * pass does (~6 µs cold against ~0.15 µs an id), so the index is read again once a 16th of the ids
 * it last held went to SQLite since (at least 64): a reading then costs about a third of the
 * lookups waited for, however soon the next commit makes it stale. When a reading did not pay
 * (its filter answered fewer lookups than that before a commit made it stale: another process
 * committing all the time), the wait doubles, up to 2^10 times, until one does. */
static int filter_due(const Index *self) {
    return !self->unusable && self->built_n <= FILTER_MAX_IDS &&
           self->misses >= (self->built_n / 16 + 64) << self->backoff;
}

/* The filter went stale: note whether it answered enough to have paid for its reading. */
static void filter_stale(Index *self) {
    if (self->answered - self->answered_at_build < self->built_n / 16 + 64) {
        if (self->backoff < 10) self->backoff++;
    } else {
        self->backoff = 0;
    }
    filter_drop(self);
}

/* 1 if the connection's file is in WAL mode, 0 if not, -1 on an error. */
static int in_wal_mode(sqlite3 *db) {
    sqlite3_stmt *stmt = NULL;
    int wal = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
        const unsigned char *mode = sqlite3_column_text(stmt, 0);
        wal = mode != NULL && sqlite3_stricmp((const char *)mode, "wal") == 0;
    }
    sqlite3_finalize(stmt);
    return wal;
}

/* SQLite's own mapping of the wal-index's first region (NULL if the VFS gives none). */
static const volatile unsigned char *wal_index_mapping(sqlite3 *db) {
    sqlite3_file *file = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || file == NULL ||
        file->pMethods == NULL || file->pMethods->iVersion < 2 || file->pMethods->xShmMap == NULL)
        return NULL;
    void volatile *region = NULL;
    if (file->pMethods->xShmMap(file, 0, WAL_INDEX_REGION, 0, &region) != SQLITE_OK) return NULL;
    return (const volatile unsigned char *)region;
}

/* Read every id of the index into a new filter; 1 when it is valid (see above), 0 if not. */
static int filter_build(Index *self) {
    filter_drop(self);
    self->misses = 0;
    self->readings++;
    if (self->wal_header == NULL) {
        int wal = in_wal_mode(self->db); /* a read: SQLite has opened the WAL and mapped its index */
        if (wal == 0) self->unusable = 1;
        if (wal != 1) return 0;
        self->wal_header = wal_index_mapping(self->db);
        if (self->wal_header == NULL) {
            self->unusable = 1;
            return 0;
        }
    }
    unsigned char before[WAL_HEADER], after[WAL_HEADER];
    if (!header_now(self, before)) return 0;
    sqlite3_stmt *count = NULL, *scan = NULL;
    long long n = 0;
    int rc = sqlite3_exec(self->db, "BEGIN", NULL, NULL, NULL);
    /* Sized by the count of the B-tree's cells (no row decoded), 16 bits an id, then read. */
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(self->db, "SELECT count(*) FROM event_ids", -1, &count, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(count) == SQLITE_ROW ? SQLITE_OK : SQLITE_ERROR;
    if (rc == SQLITE_OK) n = sqlite3_column_int64(count, 0);
    sqlite3_finalize(count);
    if (rc == SQLITE_OK && self->reading_hook != NULL) {
        PyObject *done = PyObject_CallNoArgs(self->reading_hook);
        if (done == NULL) {
            PyErr_WriteUnraisable(self->reading_hook);
            rc = SQLITE_ERROR;
        }
        Py_XDECREF(done);
    }
    self->built_n = n;
    if (rc == SQLITE_OK && n <= FILTER_MAX_IDS) {
        unsigned long long nbits = 1 << 16;
        while (nbits < (unsigned long long)n * 16) nbits <<= 1;
        self->bits = PyMem_Calloc(nbits / 64, sizeof(unsigned long long));
        self->mask = nbits - 1;
        rc = self->bits == NULL ? SQLITE_NOMEM
                                : sqlite3_prepare_v2(self->db, "SELECT event_id FROM event_ids", -1, &scan, NULL);
        long long read = 0;
        while (rc == SQLITE_OK && (rc = sqlite3_step(scan)) == SQLITE_ROW) {
            const unsigned char *eid = sqlite3_column_text(scan, 0);
            /* NULL for a stored id: out of memory converting it; a filter without it would lie. */
            if (eid == NULL && sqlite3_column_type(scan, 0) != SQLITE_NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            if (eid != NULL) filter_add(self, (const char *)eid, sqlite3_column_bytes(scan, 0));
            read++;
            rc = SQLITE_OK;
        }
        if (rc == SQLITE_DONE) rc = read == n ? SQLITE_OK : SQLITE_ERROR; /* the same snapshot: always equal */
    }
    sqlite3_finalize(scan);
    sqlite3_exec(self->db, "COMMIT", NULL, NULL, NULL); /* a read: ends the transaction */
    if (!sqlite3_get_autocommit(self->db)) sqlite3_exec(self->db, "ROLLBACK", NULL, NULL, NULL);
    /* A commit since `before` (during the reading, perhaps) would make the filter stale at its
       first use: dropped now. */
    if (rc != SQLITE_OK || self->bits == NULL || !header_now(self, after) ||
        memcmp(before, after, WAL_HEADER) != 0) {
        /* A reading that never answered did not pay either: the wait doubles as for a stale one
           (another process committing while every reading runs would otherwise start one after
           every 64 lookups). */
        if (self->backoff < 10) self->backoff++;
        filter_drop(self);
        return 0;
    }
    memcpy(self->token, before, WAL_HEADER);
    self->valid = 1;
    self->answered_at_build = self->answered;
    return 1;
}

/* 0 when the filter answers "absent" for the index as it is now, -1 when SQLite must be asked. */
static int filter_answer(Index *self, const char *eid, Py_ssize_t len) {
    if (!self->valid && !(filter_due(self) && filter_build(self))) return -1;
    unsigned char now[WAL_HEADER];
    if (!header_now(self, now) || memcmp(now, self->token, WAL_HEADER) != 0) {
        /* Committed since (or being committed): this header never comes back. */
        filter_stale(self);
        return -1;
    }
    if (filter_may_hold(self, eid, len)) return -1;
    self->answered++;
    return 0;
}

/* 1 if the id is in the index, 0 if not, -1 if the lookup did not answer (fall back). */
static int looked_up(Index *index, const char *eid, Py_ssize_t len) {
    if (index->lookup == NULL) return -1;
    if (filter_answer(index, eid, len) == 0) return 0;
    index->misses++;
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


/* The steps of one one-step append up to the flush. Answers the bytes written (>= 0), STEP_MOVED
 * when anything is not as the full path left it, STEP_LONGER when only the segment is longer
 * (nothing done either way), STEP_WRITE_FAILED with *err set (the caller cleans up as the
 * Python path does) or STEP_RAISED with a Python exception set. */
enum { STEP_MOVED = -1, STEP_LONGER = -2, STEP_WRITE_FAILED = -3, STEP_RAISED = -4 };

static Py_ssize_t one_step(Index *index, PyObject *lag, PyObject *raw, PyObject *others, int dir_fd,
                           const char *name, unsigned long long ino, long long end, long long max_bytes,
                           PyObject *eid, PyObject *tails, PyObject *dumps, PyObject *event, int fd,
                           int *err) {
    if (end >= max_bytes) return STEP_MOVED;

    /* The lag list: byte for byte the record the full path read. */
    Py_buffer page;
    if (PyObject_GetBuffer(lag, &page, PyBUF_SIMPLE) < 0) return STEP_RAISED;
    int same = page.len == PyBytes_GET_SIZE(raw) && memcmp(page.buf, PyBytes_AS_STRING(raw), (size_t)page.len) == 0;
    PyBuffer_Release(&page);
    if (!same) return STEP_MOVED;

    /* The other listed segments, then this one: as the full path left them. */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(others); i++) {
        PyObject *other = PyTuple_GET_ITEM(others, i);
        const char *path;
        unsigned long long o_ino;
        long long o_size;
        if (!PyArg_ParseTuple(other, "s(KL)", &path, &o_ino, &o_size)) return STEP_RAISED;
        if (stat_is(dir_fd, path, o_ino, o_size) != 1) return STEP_MOVED;
    }
    struct stat own;
    if (fstatat(dir_fd, name, &own, 0) != 0 || (unsigned long long)own.st_ino != ino) return STEP_MOVED;
    /* Longer: other processes' lines, perhaps, which the caller may take into its tail and ask again. */
    if ((long long)own.st_size != end) return (long long)own.st_size > end ? STEP_LONGER : STEP_MOVED;

    /* The id: in neither the index nor any of the writer's tails. */
    Py_ssize_t eid_len;
    const char *eid_utf8 = PyUnicode_AsUTF8AndSize(eid, &eid_len);
    if (eid_utf8 == NULL) return STEP_RAISED;
    if (looked_up(index, eid_utf8, eid_len) != 0) return STEP_MOVED;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tails); i++) {
        int held = PySet_Contains(PyTuple_GET_ITEM(tails, i), eid);
        if (held < 0) return STEP_RAISED;
        if (held) return STEP_MOVED;
    }

    /* The line, in one write (lines never interleave: the stream lock is held). */
    PyObject *encoded = PyObject_CallOneArg(dumps, event);
    if (encoded == NULL) return STEP_RAISED;
    if (!PyBytes_Check(encoded)) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_TypeError, "the encoder must return bytes");
        return STEP_RAISED;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(encoded);
    char small[4096];
    char *line = n + 1 <= (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc((size_t)n + 1);
    if (line == NULL) {
        Py_DECREF(encoded);
        PyErr_NoMemory();
        return STEP_RAISED;
    }
    memcpy(line, PyBytes_AS_STRING(encoded), (size_t)n);
    Py_DECREF(encoded);
    line[n] = '\n';
    Py_ssize_t total = n + 1, done = 0;
    *err = 0;
    /* A large line is written without the interpreter lock (as heldio does past HELD_WRITE_MAX):
       a write the kernel holds back for dirty pages would otherwise stop every other thread.
       `line` is this call's own copy and the stream's lock is held, so nothing else touches it. */
    PyThreadState *released = total > HELD_WRITE_MAX ? PyEval_SaveThread() : NULL;
    while (done < total) {
        ssize_t w = write(fd, line + done, (size_t)(total - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            *err = w < 0 ? errno : EIO; /* nothing written and no error: do not loop on it */
            break;
        }
        done += w;
    }
    if (released != NULL) PyEval_RestoreThread(released);
    if (line != small) PyMem_Free(line);
    return *err ? STEP_WRITE_FAILED : total;
}

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
    int err = 0;
    Py_ssize_t total = one_step((Index *)index_obj, lag, raw, others, dir_fd, name, ino, end, max_bytes, eid,
                                tails, dumps, event, fd, &err);
    if (total == STEP_RAISED) return NULL;
    if (total == STEP_WRITE_FAILED) return failed(1, err);
    if (total < 0) return PyLong_FromSsize_t(total);
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

/* ------------------------------------------------------------------------------------------
 * The whole usual append of one record in one call: `EventLog.append` of an ordinary
 * interaction, when the one step applies, with no Python frame between the caller and the
 * flush. It does what the Python path between them does, in the same order: the compiled
 * check of the record (the caller's bound `_records` check), the stream's thread lock and
 * `flock` (tried without waiting), the one step above, the flush (`os.fsync`, looked up at each
 * call like the Python path does), the writer's bookkeeping (line count, tail, indexed offset,
 * the id into the tail), the locks let go, and the result. Whatever is not the usual case
 * answers the checked event (or None when the check did not settle the record) with nothing
 * done, and the Python path takes it from there as it would have. */

typedef struct {
    PyObject_HEAD
    PyObject *check;       /* the compiled check with the log's limits bound */
    PyObject *writers;     /* EventLog._writers: stream -> writer */
    PyObject *stream;      /* the stream of interactions */
    PyObject *line_counts; /* EventLog._line_counts */
    PyObject *indexed_to;  /* EventLog._indexed_to */
    PyObject *result_type; /* tiermem.appended.AppendResult */
    PyObject *os_module;   /* for os.fsync; None when the log does not flush */
    PyObject *dumps;       /* orjson.dumps */
    PyObject *on_failure;  /* (w, s, end, stage, errno or exception) -> raises, the locks held */
    Py_ssize_t tail_flush_ids;
} Appender;

static PyObject *S_type, *S_interaction, *S_steady, *S_packed, *S_thread_lock, *S_lock_fd, *S_tails, *S_end,
    *S_ino, *S_ids, *S_ts, *S_event_id, *S_fsync, *S_acquire, *S_release, *S_stream, *S_segment, *S_line,
    *S_duplicate;

static int appender_traverse(Appender *self, visitproc visit, void *arg) {
    Py_VISIT(self->check);
    Py_VISIT(self->writers);
    Py_VISIT(self->stream);
    Py_VISIT(self->line_counts);
    Py_VISIT(self->indexed_to);
    Py_VISIT(self->result_type);
    Py_VISIT(self->os_module);
    Py_VISIT(self->dumps);
    Py_VISIT(self->on_failure);
    return 0;
}

static int appender_clear(Appender *self) {
    Py_CLEAR(self->check);
    Py_CLEAR(self->writers);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->line_counts);
    Py_CLEAR(self->indexed_to);
    Py_CLEAR(self->result_type);
    Py_CLEAR(self->os_module);
    Py_CLEAR(self->dumps);
    Py_CLEAR(self->on_failure);
    return 0;
}

static void appender_dealloc(Appender *self) {
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int appender_init(Appender *self, PyObject *args, PyObject *kwds) {
    PyObject *check, *writers, *stream, *line_counts, *indexed_to, *result_type, *os_module, *dumps, *on_failure;
    Py_ssize_t tail_flush_ids;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "OO!UO!O!OOOOn", &check, &PyDict_Type, &writers, &stream, &PyDict_Type,
                          &line_counts, &PyDict_Type, &indexed_to, &result_type, &os_module, &dumps,
                          &on_failure, &tail_flush_ids))
        return -1;
    if (!PyType_Check(result_type)) {
        PyErr_SetString(PyExc_TypeError, "the result type must be a class");
        return -1;
    }
    appender_clear(self);
    self->check = Py_NewRef(check);
    self->writers = Py_NewRef(writers);
    self->stream = Py_NewRef(stream);
    self->line_counts = Py_NewRef(line_counts);
    self->indexed_to = Py_NewRef(indexed_to);
    self->result_type = Py_NewRef(result_type);
    self->os_module = Py_NewRef(os_module);
    self->dumps = Py_NewRef(dumps);
    self->on_failure = Py_NewRef(on_failure);
    self->tail_flush_ids = tail_flush_ids;
    return 0;
}

/* An int attribute of `obj` as a C value; -1 with an exception set on failure. */
static int long_attr(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* 1 if `item` is a tuple whose first two items are the ints (ino, end), 0 if not. */
static int counts_match(PyObject *item, unsigned long long ino, long long end) {
    if (item == NULL || !PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) return 0;
    unsigned long long i = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 0));
    long long e = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return i == ino && e == end;
}

/* The writer's bookkeeping after a one-step write, as `steady_append._append_compiled` does it. */
static int note_written(Appender *self, PyObject *tail, PyObject *segment, PyObject *eid, PyObject *ino_obj,
                        long long end, PyObject *lines_obj) {
    PyObject *end_obj = PyLong_FromLongLong(end);
    if (end_obj == NULL) return -1;
    int rc = -1;
    PyObject *counts = PyTuple_Pack(3, ino_obj, end_obj, lines_obj);
    PyObject *indexed = PyTuple_Pack(2, ino_obj, end_obj);
    PyObject *ids = NULL;
    if (counts != NULL && indexed != NULL && PyDict_SetItem(self->line_counts, segment, counts) == 0 &&
        PyObject_SetAttr(tail, S_end, end_obj) == 0 && PyDict_SetItem(self->indexed_to, segment, indexed) == 0 &&
        (ids = PyObject_GetAttr(tail, S_ids)) != NULL && PySet_Add(ids, eid) == 0)
        rc = 0;
    Py_XDECREF(ids);
    Py_XDECREF(counts);
    Py_XDECREF(indexed);
    Py_DECREF(end_obj);
    return rc;
}

/* AppendResult(eid, stream, segment, line): set as its generated __init__ sets a frozen
 * dataclass's fields (object.__setattr__), without the Python frame. */
static PyObject *new_result(Appender *self, PyObject *eid, PyObject *segment, PyObject *line) {
    PyTypeObject *type = (PyTypeObject *)self->result_type;
    PyObject *result = type->tp_alloc(type, 0);
    if (result == NULL) return NULL;
    if (PyObject_GenericSetAttr(result, S_event_id, eid) < 0 ||
        PyObject_GenericSetAttr(result, S_stream, self->stream) < 0 ||
        PyObject_GenericSetAttr(result, S_segment, segment) < 0 ||
        PyObject_GenericSetAttr(result, S_line, line) < 0 ||
        PyObject_GenericSetAttr(result, S_duplicate, Py_False) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* The locked part: answers the result, Py_None when the Python path must decide (nothing
 * done), or NULL with an exception. Both locks are held by the caller. */
static PyObject *append_locked(Appender *self, PyObject *w, PyObject *event) {
    PyObject *steady = PyObject_GetAttr(w, S_steady);
    if (steady == NULL) return NULL;
    PyObject *packed = steady == Py_None ? Py_NewRef(Py_None) : PyObject_GetAttr(steady, S_packed);
    if (packed == NULL) {
        Py_DECREF(steady);
        return NULL;
    }
    PyObject *answer = NULL, *tails_map = NULL, *ino_obj = NULL, *tail_ids = NULL, *first_line = NULL;
    PyObject *eid = NULL; /* held: the flush can run Python code, which could drop the event's last reference */
    if (!PyTuple_CheckExact(packed) || PyTuple_GET_SIZE(packed) != 12) {
        answer = Py_NewRef(Py_None);
        goto done;
    }
    /* (index, lag, raw, others, dir_fd, name, max_bytes, tail_sets, fd, tail, segment, day) */
    PyObject *index = PyTuple_GET_ITEM(packed, 0), *lag = PyTuple_GET_ITEM(packed, 1);
    PyObject *raw = PyTuple_GET_ITEM(packed, 2), *others = PyTuple_GET_ITEM(packed, 3);
    PyObject *name_obj = PyTuple_GET_ITEM(packed, 5), *tail_sets = PyTuple_GET_ITEM(packed, 7);
    PyObject *tail = PyTuple_GET_ITEM(packed, 9), *segment = PyTuple_GET_ITEM(packed, 10);
    PyObject *day = PyTuple_GET_ITEM(packed, 11);
    int dir_fd = (int)PyLong_AsLong(PyTuple_GET_ITEM(packed, 4));
    long long max_bytes = PyLong_AsLongLong(PyTuple_GET_ITEM(packed, 6));
    int fd = (int)PyLong_AsLong(PyTuple_GET_ITEM(packed, 8));
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (PyErr_Occurred()) goto done;
    if (name == NULL || !PyObject_TypeCheck(index, &IndexType) || !PyTuple_CheckExact(others) ||
        !PyTuple_CheckExact(tail_sets) || !PyBytes_CheckExact(raw)) {
        answer = Py_NewRef(Py_None);
        goto done;
    }

    /* What `_append_compiled` checks before its call. */
    long long end;
    if (long_attr(tail, S_end, &end) < 0) goto done;
    ino_obj = PyObject_GetAttr(tail, S_ino);
    if (ino_obj == NULL) goto done;
    /* Inode numbers are unsigned, and some file systems use the top bit: one that does not fit
     * is left to the Python path rather than refused. */
    unsigned long long ino = PyLong_AsUnsignedLongLong(ino_obj);
    if (ino == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        answer = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *counted = PyDict_GetItemWithError(self->line_counts, segment);
    if (counted == NULL && PyErr_Occurred()) goto done;
    tails_map = PyObject_GetAttr(w, S_tails);
    if (tails_map == NULL) goto done;
    PyObject *own_tail = PyDict_CheckExact(tails_map) ? PyDict_GetItemWithError(tails_map, segment) : NULL;
    if (own_tail == NULL && PyErr_Occurred()) goto done;
    tail_ids = PyObject_GetAttr(tail, S_ids);
    if (tail_ids == NULL) goto done;
    PyObject *ts = PyDict_GetItemWithError(event, S_ts);
    eid = ts == NULL ? NULL : PyDict_GetItemWithError(event, S_event_id);
    Py_XINCREF(eid);
    if (PyErr_Occurred()) goto done;
    if (!counts_match(counted, ino, end) || own_tail != tail || !PyAnySet_Check(tail_ids) ||
        PySet_GET_SIZE(tail_ids) + 1 >= self->tail_flush_ids || ts == NULL || !PyUnicode_CheckExact(ts) ||
        PyUnicode_Tailmatch(ts, day, 0, PY_SSIZE_T_MAX, -1) != 1 || eid == NULL || !PyUnicode_CheckExact(eid)) {
        if (!PyErr_Occurred()) answer = Py_NewRef(Py_None);
        goto done;
    }
    /* Held: the flush lets go of the interpreter lock, and `counted` is replaced below. */
    first_line = Py_NewRef(PyTuple_GET_ITEM(counted, 2));

    int err = 0;
    Py_ssize_t total = one_step((Index *)index, lag, raw, others, dir_fd, name, ino, end, max_bytes, eid, tail_sets,
                                self->dumps, event, fd, &err);
    if (total == STEP_RAISED) goto done;
    if (total == STEP_WRITE_FAILED) {
        /* Cut back to whole lines and raise, as the Python path does, the locks still held. */
        PyObject *r = PyObject_CallFunction(self->on_failure, "OOLii", w, steady, end, 1, err);
        Py_XDECREF(r);
        if (r != NULL) PyErr_SetString(PyExc_SystemError, "the write failed and nothing was raised");
        goto done;
    }
    if (total < 0) { /* moved, or longer: the Python path looks again (and takes other processes' lines) */
        answer = Py_NewRef(Py_None);
        goto done;
    }
    if (self->os_module != Py_None) {
        PyObject *flush = PyObject_GetAttr(self->os_module, S_fsync);
        PyObject *flushed = flush == NULL ? NULL : PyObject_CallFunction(flush, "i", fd);
        Py_XDECREF(flush);
        if (flushed == NULL) {
            if (PyErr_ExceptionMatches(PyExc_OSError)) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                if (tb != NULL) PyException_SetTraceback(value, tb);
                PyObject *r = PyObject_CallFunction(self->on_failure, "OOLiO", w, steady, end, 2, value);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                Py_XDECREF(r);
                if (r != NULL) PyErr_SetString(PyExc_SystemError, "the flush failed and nothing was raised");
            }
            goto done;
        }
        Py_DECREF(flushed);
    }
    long long lines = PyLong_AsLongLong(first_line);
    PyObject *next_line = lines == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(lines + 1);
    if (next_line == NULL) goto done;
    int noted = note_written(self, tail, segment, eid, ino_obj, end + total, next_line);
    Py_DECREF(next_line);
    if (noted == 0) answer = new_result(self, eid, segment, first_line);

done:
    Py_XDECREF(eid);
    Py_XDECREF(first_line);
    Py_XDECREF(tail_ids);
    Py_XDECREF(tails_map);
    Py_XDECREF(ino_obj);
    Py_DECREF(packed);
    Py_DECREF(steady);
    return answer;
}

/* appender.append(record) -> the AppendResult when appended in one call; else the checked event
 * (nothing written: the Python path goes on with it) or None (the check did not settle it). */
static PyObject *appender_append(Appender *self, PyObject *record) {
    if (self->check == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Appender used before a successful __init__");
        return NULL;
    }
    if (!PyDict_CheckExact(record)) Py_RETURN_NONE;
    PyObject *type = PyDict_GetItemWithError(record, S_type);
    if (type == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    int is_interaction = PyUnicode_CheckExact(type) && PyUnicode_Compare(type, S_interaction) == 0;
    if (!is_interaction) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *event = PyObject_CallOneArg(self->check, record);
    if (event == NULL || event == Py_None || !PyDict_CheckExact(event)) return event;

    PyObject *w = PyDict_GetItemWithError(self->writers, self->stream);
    if (w == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(event);
            return NULL;
        }
        return event;
    }
    Py_INCREF(w);
    PyObject *answer = NULL;
    PyObject *lock = PyObject_GetAttr(w, S_thread_lock);
    long long lock_fd = -1;
    if (lock == NULL || long_attr(w, S_lock_fd, &lock_fd) < 0) goto out;
    PyObject *got = PyObject_CallMethodOneArg(lock, S_acquire, Py_False);
    if (got == NULL) goto out;
    int have = got == Py_True;
    Py_DECREF(got);
    if (!have) { /* another thread of this process is appending: the Python path waits for it */
        answer = Py_NewRef(event);
        goto out;
    }
    if (flock((int)lock_fd, LOCK_EX | LOCK_NB) != 0) {
        answer = Py_NewRef(event); /* another process holds it (or it failed): the Python path waits or raises */
    } else {
        answer = append_locked(self, w, event);
        if (answer == Py_None) Py_SETREF(answer, Py_NewRef(event));
        flock((int)lock_fd, LOCK_UN);
    }
    /* Let go of the thread lock whatever happened, keeping any exception raised above. */
    PyObject *type_e, *value_e, *tb_e;
    PyErr_Fetch(&type_e, &value_e, &tb_e);
    PyObject *released = PyObject_CallMethodNoArgs(lock, S_release);
    if (released == NULL) {
        Py_XDECREF(type_e);
        Py_XDECREF(value_e);
        Py_XDECREF(tb_e);
        Py_CLEAR(answer);
    } else {
        Py_DECREF(released);
        PyErr_Restore(type_e, value_e, tb_e);
    }
out:
    Py_XDECREF(lock);
    Py_DECREF(w);
    Py_DECREF(event);
    return answer;
}

static PyMethodDef APPENDER_METHODS[] = {
    {"append", (PyCFunction)appender_append, METH_O,
     "append(record) -> AppendResult if appended in one call, else the checked event or None (nothing done)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tiermem._steady.Appender",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The usual append of one interaction in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)appender_init,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_methods = APPENDER_METHODS,
};

static int intern_names(void) {
#define NAME(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return -1;
    NAME(S_type, "type")
    NAME(S_interaction, "interaction")
    NAME(S_steady, "steady")
    NAME(S_packed, "packed")
    NAME(S_thread_lock, "thread_lock")
    NAME(S_lock_fd, "lock_fd")
    NAME(S_tails, "tails")
    NAME(S_end, "end")
    NAME(S_ino, "ino")
    NAME(S_ids, "ids")
    NAME(S_ts, "ts")
    NAME(S_event_id, "event_id")
    NAME(S_fsync, "fsync")
    NAME(S_acquire, "acquire")
    NAME(S_release, "release")
    NAME(S_stream, "stream")
    NAME(S_segment, "segment")
    NAME(S_line, "line")
    NAME(S_duplicate, "duplicate")
#undef NAME
    return 0;
}

static PyMethodDef METHODS[] = {
    {"append_one", append_one, METH_VARARGS, "the one-step append of one event, or -1 to fall back"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_steady", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__steady(void) {
    if (PyType_Ready(&IndexType) < 0 || PyType_Ready(&AppenderType) < 0 || intern_names() < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (m == NULL) return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&AppenderType);
    if (PyModule_AddObject(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(&AppenderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
