/* The quote search's term counts in one compiled pass per call (part of runtime._blockscore; the
 * scores are in runtime/_blockscore.c):
 *
 * - inside_counts: the counts of ranges of indexed texts (runtime.episode_text's `counts_in` when
 *   the ranges are a small part of the index);
 * - near_counts: the counts of a search's candidate passages with what captions and notes change
 *   (runtime.passage_counts), and those of the candidates' headers;
 * - block_sums: the forms' block maxima summed per group (runtime.passage_blocks's bounds).
 *
 * Each writes into an array of the caller's: every index read from an input is checked before the
 * first write, and an output sharing memory with an input is refused (`apart`). The sums are
 * integer counts (any order gives them) and then the changes, added in numpy's order.
 */

#include "_blockscore.h"

/* Whether `out` (the caller's array written into) shares a byte with any other buffer of `v`, or
 * with `other` (NULL: none): then 0 is returned with a ValueError set. An index read from an input
 * is checked once, before anything is written; an input in the same memory as `out` would change
 * under the writes and turn a checked index into one far outside the arrays. */
static int apart(const Views *v, const Py_buffer *out, const Py_buffer *other) {
    uintptr_t a = (uintptr_t)out->buf, z = a + (uintptr_t)out->len;
    for (int i = 0; i <= v->n; i++) {
        const Py_buffer *b = i < v->n ? &v->b[i] : other;
        if (!b || b == out || !b->len || !out->len) continue;
        uintptr_t c = (uintptr_t)b->buf, d = c + (uintptr_t)b->len;
        if (c < z && a < d) {
            PyErr_SetString(PyExc_ValueError, "out: shares memory with an input");
            return 0;
        }
    }
    return 1;
}

/* A word's postings and counts (`p`, `c`) as C-contiguous buffers of 8-byte items and one length,
 * neither sharing memory with `out`; on failure nothing stays held and the error is set. */
static int take_word(const Views *v, const Py_buffer *out, PyObject *p, PyObject *c, Py_buffer *pb, Py_buffer *cb) {
    if (PyObject_GetBuffer(p, pb, PyBUF_C_CONTIGUOUS) < 0) return 0;
    if (PyObject_GetBuffer(c, cb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(pb);
        return 0;
    }
    if (!apart(v, out, pb) || !apart(v, out, cb)) goto fail;
    if (pb->itemsize != 8 || cb->itemsize != 8 || pb->len != cb->len) {
        PyErr_SetString(PyExc_ValueError, "a word's postings and counts differ");
        goto fail;
    }
    return 1;
fail:
    PyBuffer_Release(pb);
    PyBuffer_Release(cb);
    return 0;
}

/* First index in ascending pids[0..n) whose value is at least x. */
static inline Py_ssize_t lower_bound(const int64_t *pids, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (pids[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* inside_counts(postings, counts, words, starts, sizes, offsets, out) adds to `out` (a writable
 * C-contiguous (rows, groups) array of doubles, zeros) the counts: for each (word id, group) of `words` in order, each posting of the
 * word (`postings[w]`, ascending text ids; `counts[w]` its occurrences) inside a range of texts
 * starts[r] .. starts[r] + sizes[r] - 1 (sorted, disjoint) adds its count to row
 * offsets[r] + text - starts[r] of its group: runtime.episode_text's `_inside` and bincount, in the
 * same order. */
PyObject *inside_counts(PyObject *self, PyObject *args) {
    PyObject *postings, *counts, *words, *o_starts, *o_sizes, *o_offsets, *o_out;
    Py_ssize_t rows, groups;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOn", &PyList_Type, &postings, &PyList_Type, &counts, &PyList_Type, &words,
                          &o_starts, &o_sizes, &o_offsets, &o_out, &groups))
        return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t R, cells;
    /* Owned copies: reading a pair's ints can run Python code (`__index__`), which could change
     * or free the caller's lists under borrowed references. */
    PyObject *held_postings = PyList_AsTuple(postings), *held_counts = PyList_AsTuple(counts);
    PyObject *held_words = PyList_AsTuple(words);
    postings = held_postings;
    counts = held_counts;
    words = held_words;
    Py_buffer *ob = &v.b[v.n];
    if (!held_postings || !held_counts || !held_words) goto done;
    if (PyObject_GetBuffer(o_out, ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    v.n++;
    if (groups <= 0 || groups > PY_SSIZE_T_MAX / 8 || ob->itemsize != 8 || ob->len % (8 * groups) != 0) {
        PyErr_SetString(PyExc_ValueError, "out: not a (rows, groups) array of doubles");
        goto done;
    }
    cells = ob->len / 8;
    rows = cells / groups;
    double *out = ob->buf;
    const int64_t *starts = take(&v, o_starts, 8, -1, "starts", &R);
    const int64_t *sizes = starts ? take(&v, o_sizes, 8, R, "sizes", NULL) : NULL;
    const int64_t *offsets = sizes ? take(&v, o_offsets, 8, R, "offsets", NULL) : NULL;
    if (!offsets || !apart(&v, ob, NULL)) goto done;
    for (Py_ssize_t r = 0; r < R; r++) {
        /* Written without a sum that could overflow. */
        if (sizes[r] < 0 || offsets[r] < 0 || offsets[r] > rows || sizes[r] > rows - offsets[r] || starts[r] < 0 ||
            starts[r] > INT64_MAX - sizes[r]) {
            PyErr_SetString(PyExc_ValueError, "a range's rows are out of range");
            goto done;
        }
    }
    Py_ssize_t n_words = PyTuple_GET_SIZE(words);
    for (Py_ssize_t k = 0; k < n_words; k++) {
        PyObject *pair = PyTuple_GET_ITEM(words, k);
        Py_ssize_t w, g;
        if (!PyArg_ParseTuple(pair, "nn", &w, &g)) goto done;
        if (w < 0 || w >= PyTuple_GET_SIZE(postings) || w >= PyTuple_GET_SIZE(counts) || g < 0 || g >= groups) {
            PyErr_SetString(PyExc_ValueError, "a word id or group is out of range");
            goto done;
        }
        Py_buffer pb, cb;
        if (!take_word(&v, ob, PyTuple_GET_ITEM(postings, w), PyTuple_GET_ITEM(counts, w), &pb, &cb)) goto done;
        const int64_t *pids = pb.buf, *cnt = cb.buf;
        Py_ssize_t n = pb.len / 8;
        int ascending = 1;
        for (Py_ssize_t r = 0; r < R && ascending; r++) {
            Py_ssize_t lo = lower_bound(pids, n, starts[r]);
            Py_ssize_t hi = lower_bound(pids, n, starts[r] + sizes[r]);
            for (Py_ssize_t i = lo; i < hi; i++) {
                /* The binary search finds the range only in ascending postings: anything else
                 * could land outside the range, and is refused rather than written. */
                int64_t at = pids[i] - starts[r];
                if (pids[i] < starts[r] || at >= sizes[r]) {
                    ascending = 0;
                    break;
                }
                out[(offsets[r] + at) * groups + g] += (double)cnt[i];
            }
        }
        PyBuffer_Release(&pb);
        PyBuffer_Release(&cb);
        if (!ascending) {
            PyErr_SetString(PyExc_ValueError, "a word's postings are not ascending");
            goto done;
        }
    }
    result = Py_NewRef(Py_None);

done:
    release(&v);
    Py_XDECREF(held_postings);
    Py_XDECREF(held_counts);
    Py_XDECREF(held_words);
    return result;
}

/* A run of consecutive indexed passages among the rows of near_counts: rows row .. row + len - 1
 * are the passages start .. start + len - 1 of the index. */
typedef struct {
    int64_t start, len;
    Py_ssize_t row;
} Run;

static int by_start(const void *a, const void *b) {
    int64_t x = ((const Run *)a)->start, y = ((const Run *)b)->start;
    return (x > y) - (x < y);
}

/* First index in ascending pids[from..n) whose value is at least x: doubling steps from `from`,
 * then a binary search (the runs are visited by start, so each search begins where the last one
 * found its start: a long list is not searched from its beginning for every run). */
static inline Py_ssize_t gallop(const int64_t *pids, Py_ssize_t from, Py_ssize_t n, int64_t x) {
    if (from >= n || pids[from] >= x) return from;
    Py_ssize_t lo = from, step = 1;
    while (lo + step < n && pids[lo + step] < x) {
        lo += step;
        step *= 2;
    }
    Py_ssize_t hi = lo + step < n ? lo + step : n;
    return lo + 1 + lower_bound(pids + lo + 1, hi - lo - 1, x);
}

/* near_counts(lists, groups, starts, episode, local, near, extras, out): the term counts of the
 * candidate passages `near` (rows of `out`, a writable C-contiguous (rows, G) array of doubles,
 * zeros), then each of `extras` ((passages, G) doubles) added at the rows' passages, in order.
 * `lists`: per word the index's (postings, counts) (ascending text ids, occurrences), `groups`
 * its group; `starts` per candidate its first passage's id in the index (-1: not indexed: its rows
 * get only the extras), `episode` / `local` per candidate passage its candidate and place in it.
 * The same integer sums as runtime.passage_blocks.counts_at (any order gives them), and the same
 * additions as numpy's `counts + extra[near]`. */
PyObject *near_counts(PyObject *self, PyObject *args) {
    PyObject *lists, *o_groups, *o_starts, *o_episode, *o_local, *o_near, *extras, *o_out;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OOOOOO!O", &PyTuple_Type, &lists, &o_groups, &o_starts, &o_episode, &o_local,
                          &o_near, &PyTuple_Type, &extras, &o_out))
        return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    Run *runs = NULL;
    Py_ssize_t W, E, P, L, G, n_extras = PyTuple_GET_SIZE(extras);
    if (n_extras > 4) {
        PyErr_SetString(PyExc_ValueError, "extras: at most four arrays");
        return NULL;
    }
    Py_buffer *ob = &v.b[v.n];
    if (PyObject_GetBuffer(o_out, ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    v.n++;
    const int64_t *groups = take(&v, o_groups, 8, -1, "groups", &W);
    const int64_t *starts = groups ? take(&v, o_starts, 8, -1, "starts", &E) : NULL;
    const int64_t *episode = starts ? take(&v, o_episode, 8, -1, "episode", &P) : NULL;
    const int64_t *local = episode ? take(&v, o_local, 8, P, "local", NULL) : NULL;
    const int64_t *near = local ? take(&v, o_near, 8, -1, "near", &L) : NULL;
    if (!near) goto done;
    if (ob->itemsize == 8 && L == 0 && ob->len == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (ob->itemsize != 8 || L == 0 || ob->len == 0 || ob->len % (8 * L) != 0) {
        PyErr_SetString(PyExc_ValueError, "out: not a (rows, groups) array of doubles");
        goto done;
    }
    G = ob->len / (8 * L);
    double *out = ob->buf;
    if (W != PyTuple_GET_SIZE(lists)) {
        PyErr_SetString(PyExc_ValueError, "lists and groups differ in length");
        goto done;
    }
    const double *extra[4];
    for (Py_ssize_t k = 0; k < n_extras; k++) {
        extra[k] = take(&v, PyTuple_GET_ITEM(extras, k), 8, P * G, "extras", NULL);
        if (!extra[k]) goto done;
    }
    if (!apart(&v, ob, NULL)) goto done;
    for (Py_ssize_t w = 0; w < W; w++) {
        if (groups[w] < 0 || groups[w] >= G) {
            PyErr_SetString(PyExc_ValueError, "a word's group is out of range");
            goto done;
        }
    }
    /* Each row's passage id in the index, cut into runs of consecutive ids. */
    runs = malloc((size_t)L * sizeof(Run));
    if (!runs) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t R = 0;
    for (Py_ssize_t r = 0; r < L; r++) {
        int64_t p = near[r];
        if (p < 0 || p >= P || episode[p] < 0 || episode[p] >= E || local[p] < 0) {
            PyErr_SetString(PyExc_ValueError, "near: a passage out of range");
            goto done;
        }
        int64_t s = starts[episode[p]];
        if (s < 0) continue;
        /* Ids far below any overflow (an index holds millions of passages at most). */
        if (s >= ((int64_t)1 << 61) || local[p] >= ((int64_t)1 << 61)) {
            PyErr_SetString(PyExc_ValueError, "a passage id out of range");
            goto done;
        }
        int64_t pid = s + local[p];
        if (R > 0 && runs[R - 1].row + runs[R - 1].len == r && runs[R - 1].start + runs[R - 1].len == pid) {
            runs[R - 1].len++;
        } else {
            runs[R++] = (Run){.start = pid, .len = 1, .row = r};
        }
    }
    qsort(runs, (size_t)R, sizeof(Run), by_start);
    for (Py_ssize_t w = 0; w < W; w++) {
        PyObject *pair = PyTuple_GET_ITEM(lists, w);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "lists: not (postings, counts) pairs");
            goto done;
        }
        Py_buffer pb, cb;
        if (!take_word(&v, ob, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), &pb, &cb)) goto done;
        int ok = 1;
        const int64_t *pids = pb.buf, *cnt = cb.buf;
        Py_ssize_t n = pb.len / 8, at = 0;
        int64_t g = groups[w];
        for (Py_ssize_t k = 0; k < R && ok; k++) {
            at = gallop(pids, at, n, runs[k].start);
            int64_t end = runs[k].start + runs[k].len;
            for (Py_ssize_t i = at; i < n && pids[i] < end; i++) {
                /* Not ascending: the search could have passed postings of this run by. */
                if (pids[i] < runs[k].start || (i > at && pids[i] <= pids[i - 1])) {
                    ok = 0;
                    break;
                }
                out[(runs[k].row + (pids[i] - runs[k].start)) * G + g] += (double)cnt[i];
            }
        }
        PyBuffer_Release(&pb);
        PyBuffer_Release(&cb);
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "a word's postings are not ascending");
            goto done;
        }
    }
    for (Py_ssize_t k = 0; k < n_extras; k++) {
        for (Py_ssize_t r = 0; r < L; r++) {
            const double *add = extra[k] + near[r] * G;
            for (Py_ssize_t c = 0; c < G; c++) out[r * G + c] = out[r * G + c] + add[c];
        }
    }
    result = Py_NewRef(Py_None);
done:
    free(runs);
    release(&v);
    return result;
}

/* A candidate's blocks in the block index: ids first .. first + count - 1, its rows row, row + 1, .. */
typedef struct {
    int64_t first, count, row;
} Range;

static int by_first(const void *a, const void *b) {
    int64_t x = ((const Range *)a)->first, y = ((const Range *)b)->first;
    return (x > y) - (x < y);
}

/* block_sums(maxima, firsts, counts, rows, out, groups): into `out` (a writable C-contiguous
 * (blocks, groups) array of doubles, zeros), for each (found, top, group) of `maxima` in order,
 * each block of `found` (ids in the block index) that is one of the search's adds its `top` to its
 * row's group. Candidate c's blocks are ids firsts[c] .. firsts[c] + counts[c] - 1 (firsts[c] < 0:
 * not indexed), at rows rows[c] ..: runtime.passage_blocks's bincounts of the forms' block maxima
 * (integer counts: the same sums in any order). */
PyObject *block_sums(PyObject *self, PyObject *args) {
    PyObject *maxima, *o_firsts, *o_counts, *o_rows, *o_out;
    Py_ssize_t G;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OOOOn", &PyTuple_Type, &maxima, &o_firsts, &o_counts, &o_rows, &o_out, &G))
        return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    Range *ranges = NULL;
    Py_ssize_t E, R = 0;
    Py_buffer *ob = &v.b[v.n];
    if (PyObject_GetBuffer(o_out, ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    v.n++;
    if (G <= 0 || G > PY_SSIZE_T_MAX / 8 || ob->itemsize != 8 || ob->len % (8 * G) != 0) {
        PyErr_SetString(PyExc_ValueError, "out: not a (blocks, groups) array of doubles");
        goto done;
    }
    Py_ssize_t n = ob->len / (8 * G);
    double *out = ob->buf;
    const int64_t *firsts = take(&v, o_firsts, 8, -1, "firsts", &E);
    const int64_t *counts = firsts ? take(&v, o_counts, 8, E, "counts", NULL) : NULL;
    const int64_t *rows = counts ? take(&v, o_rows, 8, E, "rows", NULL) : NULL;
    if (!rows || !apart(&v, ob, NULL)) goto done;
    ranges = malloc((size_t)(E ? E : 1) * sizeof(Range));
    if (!ranges) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < E; c++) {
        if (firsts[c] < 0) continue;
        /* Every row a candidate's blocks can reach lies in `out` (no sum here can overflow). */
        if (counts[c] < 0 || rows[c] < 0 || rows[c] > n || counts[c] > n - rows[c]) {
            PyErr_SetString(PyExc_ValueError, "a candidate's blocks are out of range");
            goto done;
        }
        ranges[R++] = (Range){.first = firsts[c], .count = counts[c], .row = rows[c]};
    }
    qsort(ranges, (size_t)R, sizeof(Range), by_first);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(maxima); k++) {
        PyObject *item = PyTuple_GET_ITEM(maxima, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_ValueError, "maxima: not (found, top, group) triples");
            goto done;
        }
        Py_ssize_t g = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
        if (g == -1 && PyErr_Occurred()) goto done;
        if (g < 0 || g >= G) {
            PyErr_SetString(PyExc_ValueError, "a form's group is out of range");
            goto done;
        }
        Views w = {.n = 0};
        Py_ssize_t m;
        const int64_t *found = take(&w, PyTuple_GET_ITEM(item, 0), 8, -1, "found", &m);
        const int64_t *top = found ? take(&w, PyTuple_GET_ITEM(item, 1), 8, m, "top", NULL) : NULL;
        if (!top || !apart(&w, ob, NULL)) {
            release(&w);
            goto done;
        }
        Py_ssize_t at = 0; /* ranges[at - 1]: the last candidate starting at or before the block */
        for (Py_ssize_t i = 0; i < m; i++) {
            if (at > 0 && found[i] < ranges[at - 1].first) {
                /* `found` is ascending as the index makes it; anything else is searched afresh. */
                Py_ssize_t lo = 0, hi = R;
                while (lo < hi) {
                    Py_ssize_t mid = lo + (hi - lo) / 2;
                    if (ranges[mid].first <= found[i]) lo = mid + 1;
                    else hi = mid;
                }
                at = lo;
            }
            while (at < R && ranges[at].first <= found[i]) at++;
            if (at == 0) continue;
            const Range *r = &ranges[at - 1];
            if (found[i] - r->first >= r->count) continue; /* both non-negative here: no overflow */
            out[(r->row + (found[i] - r->first)) * G + g] += (double)top[i];
        }
        release(&w);
    }
    result = Py_NewRef(Py_None);
done:
    free(ranges);
    release(&v);
    return result;
}
