/* A quote search's passage arithmetic in one compiled pass per call. This file: the scores and the
 * choice of blocks; runtime/_blockcounts.c: the term counts (inside_counts, near_counts, block_sums),
 * in the same module.
 *
 * runtime.passage_blocks bounds blocks of consecutive passages and runtime.passage_parts scores
 * the passages of the blocks that can matter, each with a dozen numpy operations over arrays of
 * a few thousand entries: on a long conversation most of their time is spent making and walking
 * temporary arrays. The functions here do the same arithmetic in one loop per block or passage:
 *
 * - block_bounds: each block's upper bound of its passages' scores;
 * - exact_scores: the exact scores of chosen passages;
 * - first_pass: the best-bounded blocks the search scores first;
 * - spread: the passages of chosen blocks, those around them and their places.
 *
 * The exact scores must be those of the numpy path to the last bit (the search's ranking, ties
 * included, must not depend on whether this module was built): every sum and product is made in
 * the order numpy makes it, in double precision, and the file is compiled without contracting a
 * multiply and an add into one rounding (-ffp-contract=off in setup.py). The maxima follow
 * numpy's `maximum` (the first argument unless the second is larger, a NaN wins). The bounds
 * follow the same order too, though they only need to stay upper bounds.
 *
 * Every index read from an input is checked before it is used.
 */

#include "_blockscore.h"

/* numpy's maximum of two doubles. */
static inline double npmax(double a, double b) { return (a >= b || isnan(a)) ? a : b; }

/* numpy's minimum of two doubles. */
static inline double npmin(double a, double b) { return (a <= b || isnan(a)) ? a : b; }

/* runtime.episode_search.bm25_rows of one row: term by term, the same sums. */
static inline double bm25(const double *row, Py_ssize_t groups, const double *w, double length, double k1,
                          double b, double avg) {
    double norm = k1 * ((1 - b) + (b * length) / avg);
    double out = 0.0;
    for (Py_ssize_t g = 0; g < groups; g++) {
        double tf = row[g];
        out = out + (tf > 0 ? w[g] * tf * (k1 + 1) / (tf + norm) : 0.0);
    }
    return out;
}

/* The answer (bytes of `n_out` doubles) and a scratch array of `n_own` doubles: 0, or -1 with the
 * exception set and neither kept. */
static int answer_and_scratch(Py_ssize_t n_out, Py_ssize_t n_own, PyObject **result, double **own) {
    *result = PyBytes_FromStringAndSize(NULL, n_out * (Py_ssize_t)sizeof(double));
    *own = malloc((size_t)(n_own ? n_own : 1) * sizeof(double));
    if (*result && *own) return 0;
    Py_CLEAR(*result);
    free(*own);
    *own = NULL;
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
}

/* block_bounds(counts, lengths, start, first, last, forced, episode, head, head_seen, boost,
 *              importance, most, answers, weights, consts) -> bytes of the blocks' bounds (doubles).
 * consts: (head_share, floor, share when answering, share otherwise, total weight, k1, b, avg, slack). */
static PyObject *block_bounds(PyObject *self, PyObject *args) {
    PyObject *o[14];
    double head_share, floor_, share_hi, share_lo, total, k1, bb, avg, slack;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOO(ddddddddd)", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &head_share, &floor_, &share_hi,
                          &share_lo, &total, &k1, &bb, &avg, &slack))
        return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    double *own = NULL;
    Py_ssize_t G, n, P, E;
    const double *w = take(&v, o[13], 8, -1, "weights", &G);
    if (!w) goto done;
    const int64_t *start = take(&v, o[2], 8, -1, "start", &n);
    if (!start) goto done;
    const double *counts = take(&v, o[0], 8, n * G, "counts", NULL);
    const double *lengths = counts ? take(&v, o[1], 8, -1, "lengths", &P) : NULL;
    const uint8_t *first = lengths ? take(&v, o[3], 1, n, "first", NULL) : NULL;
    const uint8_t *last = first ? take(&v, o[4], 1, n, "last", NULL) : NULL;
    const uint8_t *forced = last ? take(&v, o[5], 1, n, "forced", NULL) : NULL;
    const int64_t *episode = forced ? take(&v, o[6], 8, n, "episode", NULL) : NULL;
    const double *head = episode ? take(&v, o[7], 8, -1, "head", &E) : NULL;
    const uint8_t *head_seen = head ? take(&v, o[8], 1, E * G, "head_seen", NULL) : NULL;
    const double *boost = head_seen ? take(&v, o[9], 8, E, "boost", NULL) : NULL;
    const double *importance = boost ? take(&v, o[10], 8, E, "importance", NULL) : NULL;
    const double *most = importance ? take(&v, o[11], 8, P, "most", NULL) : NULL;
    const uint8_t *answers = most ? take(&v, o[12], 1, P, "answers", NULL) : NULL;
    if (!answers) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i] < 0 || start[i] >= P || episode[i] < 0 || episode[i] >= E) {
            PyErr_SetString(PyExc_ValueError, "a block's start or episode is out of range");
            goto done;
        }
    }
    if (answer_and_scratch(n, n, &result, &own) < 0) goto done;
    double *high = (double *)PyBytes_AS_STRING(result);
    /* Per block: its passages are start[i] up to the next block's start (numpy's reduceat: one
     * passage when the next start is not past it), the last block's up to the end. */
#define BLOCK_END(i) ((i) + 1 < n ? (start[(i) + 1] > start[i] ? start[(i) + 1] : start[i] + 1) : P)
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t a = start[i], z = BLOCK_END(i);
        double shortest = lengths[a];
        for (Py_ssize_t j = a + 1; j < z; j++) shortest = npmin(shortest, lengths[j]);
        own[i] = forced[i] ? INFINITY : bm25(counts + i * G, G, w, shortest, k1, bb, avg);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t a = start[i], z = BLOCK_END(i);
        double before = (first[i] || i == 0) ? 0.0 : own[i - 1];
        double after = (last[i] || i == n - 1) ? 0.0 : own[i + 1];
        uint8_t answering = 0;
        double top = most[a];
        for (Py_ssize_t j = a; j < z; j++) {
            answering |= answers[j] != 0;
            if (j > a) top = npmax(top, most[j]);
        }
        double near = npmax(npmax(before, after), own[i]) * (answering ? share_hi : share_lo);
        int64_t at = episode[i];
        const double *row = counts + i * G;
        double coverage = 0.0;
        for (Py_ssize_t g = 0; g < G; g++) {
            int seen = row[g] > 0 || head_seen[at * G + g];
            if (i > 0 && !first[i] && row[g - G] > 0) seen = 1;
            if (i < n - 1 && !last[i] && row[g + G] > 0) seen = 1;
            coverage = coverage + (seen ? w[g] : 0.0);
        }
        coverage = coverage / total;
        double h = (own[i] + near + head_share * head[at]) * (floor_ + coverage) * boost[at];
        h = h * top + importance[at];
        if (forced[i]) h = INFINITY;
        high[i] = h + fabs(h) * slack;
    }
#undef BLOCK_END
done:
    free(own);
    release(&v);
    return result;
}

/* exact_scores(idx, near, counted, turn_words, first, last, asking, whole, episode, head_seen, heads,
 *              boost, gain, by_named, says_when, weights, consts) -> bytes of idx's scores (doubles).
 * `near` ascending holds every passage of `idx` (ascending) and those one and two places from each;
 * `counted` their term counts; by_named / says_when None when the question names no speaker / does not
 * ask when. consts: (head, floor, speaker, when, total weight, k1, b, avg, answer share, neighbour
 * share, far share). */
static PyObject *exact_scores(PyObject *self, PyObject *args) {
    PyObject *o[16];
    double head_w, floor_, speaker, when, total, k1, bb, avg, answer_w, neighbour_w, far_w;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOO(ddddddddddd)", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &head_w, &floor_,
                          &speaker, &when, &total, &k1, &bb, &avg, &answer_w, &neighbour_w, &far_w))
        return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    double *own = NULL;
    Py_ssize_t G, m, L, N, E;
    const double *w = take(&v, o[15], 8, -1, "weights", &G);
    const int64_t *idx = w ? take(&v, o[0], 8, -1, "idx", &m) : NULL;
    const int64_t *near = idx ? take(&v, o[1], 8, -1, "near", &L) : NULL;
    const double *counted = near ? take(&v, o[2], 8, L * G, "counted", NULL) : NULL;
    const double *turn_words = counted ? take(&v, o[3], 8, -1, "turn_words", &N) : NULL;
    const uint8_t *first = turn_words ? take(&v, o[4], 1, N, "first", NULL) : NULL;
    const uint8_t *last = first ? take(&v, o[5], 1, N, "last", NULL) : NULL;
    const uint8_t *asking = last ? take(&v, o[6], 1, N, "asking", NULL) : NULL;
    const uint8_t *whole = asking ? take(&v, o[7], 1, N, "whole", NULL) : NULL;
    const int64_t *episode = whole ? take(&v, o[8], 8, N, "episode", NULL) : NULL;
    const double *heads = episode ? take(&v, o[10], 8, -1, "heads", &E) : NULL;
    const uint8_t *head_seen = heads ? take(&v, o[9], 1, E * G, "head_seen", NULL) : NULL;
    const double *boost = head_seen ? take(&v, o[11], 8, E, "boost", NULL) : NULL;
    const double *gain = boost ? take(&v, o[12], 8, E, "gain", NULL) : NULL;
    if (!gain) goto done;
    const uint8_t *by_named = NULL, *says_when = NULL;
    if (o[13] != Py_None && !(by_named = take(&v, o[13], 1, N, "by_named", NULL))) goto done;
    if (o[14] != Py_None && !(says_when = take(&v, o[14], 1, N, "says_when", NULL))) goto done;
    for (Py_ssize_t p = 0; p < L; p++) {
        if (near[p] < 0 || near[p] >= N || (p > 0 && near[p] <= near[p - 1]) || episode[near[p]] < 0 ||
            episode[near[p]] >= E) {
            PyErr_SetString(PyExc_ValueError, "near: not ascending passages of the search");
            goto done;
        }
    }
    if (answer_and_scratch(m, L, &result, &own) < 0) goto done;
    for (Py_ssize_t p = 0; p < L; p++) own[p] = bm25(counted + p * G, G, w, turn_words[near[p]], k1, bb, avg);
    double *out = (double *)PyBytes_AS_STRING(result);
    Py_ssize_t p = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t x = idx[i];
        while (p < L && near[p] < x) p++;
        /* Every passage scored and its neighbours one and two places away must be in `near`. */
        int ok = p < L && near[p] == x;
        for (int d = 1; ok && d <= 2; d++) {
            if (x - d >= 0) ok = p - d >= 0 && near[p - d] == x - d;
            if (ok && x + d < N) ok = p + d < L && near[p + d] == x + d;
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "idx: a passage or a neighbour of it is not in near");
            Py_CLEAR(result);
            goto done;
        }
        /* The neighbours' share (quote_search._neighbours with turn_window.further_neighbours). */
        double before = first[x] ? 0.0 : own[p > 0 ? p - 1 : 0];
        double after = last[x] ? 0.0 : own[p < L - 1 ? p + 1 : L - 1];
        int answers = !first[x] && asking[near[p > 0 ? p - 1 : 0]] && whole[x];
        double close = npmax((answers ? answer_w : neighbour_w) * before, neighbour_w * after);
        int back = p >= 2 && !first[x] && !first[near[p > 0 ? p - 1 : 0]];
        int ahead = p <= L - 3 && !last[x] && !last[near[p < L - 1 ? p + 1 : L - 1]];
        double far = npmax(back ? own[p - 2] : 0.0, ahead ? own[p + 2] : 0.0);
        double beside = npmax(close, far_w * far);
        int64_t at = episode[x];
        const double *row = counted + p * G;
        double coverage = 0.0;
        for (Py_ssize_t g = 0; g < G; g++) {
            int seen = row[g] > 0 || head_seen[at * G + g];
            if (p > 0 && !first[x] && row[g - G] > 0) seen = 1;
            if (p == 0 && !first[x] && row[g] > 0) seen = 1;
            if (p < L - 1 && !last[x] && row[g + G] > 0) seen = 1;
            if (p == L - 1 && !last[x] && row[g] > 0) seen = 1;
            coverage = coverage + (seen ? w[g] : 0.0);
        }
        coverage = coverage / total;
        double s = (own[p] + beside + head_w * heads[at]) * (floor_ + coverage) * boost[at];
        if (by_named && by_named[x]) s = s * speaker;
        if (says_when && says_when[x]) s = s * when;
        out[i] = s + gain[at];
    }
done:
    free(own);
    release(&v);
    return result;
}

/* spread(start, size, chosen, n) -> (idx, near, pos) as bytes of int64: the passages of blocks
 * `chosen` (ascending; block b is passages start[b] .. start[b] + size[b] - 1 of 0 .. n - 1), those
 * and the passages one and two places from each (within 0 .. n - 1, ascending), and each passage's
 * place in the latter: runtime.passage_blocks's `passages`, `around` and searchsorted, in one pass. */
static PyObject *spread(PyObject *self, PyObject *args) {
    PyObject *o_start, *o_size, *o_chosen;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOn", &o_start, &o_size, &o_chosen, &n)) return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL, *b_idx = NULL, *b_near = NULL, *b_pos = NULL;
    Py_ssize_t B, C, total = 0;
    const int64_t *start = take(&v, o_start, 8, -1, "start", &B);
    const int64_t *size = start ? take(&v, o_size, 8, B, "size", NULL) : NULL;
    const int64_t *chosen = size ? take(&v, o_chosen, 8, -1, "chosen", &C) : NULL;
    if (!chosen) goto done;
    int64_t end = -1; /* the last passage so far: the blocks' passages must ascend, within 0 .. n - 1 */
    for (Py_ssize_t i = 0; i < C; i++) {
        int64_t b = chosen[i];
        if (n < 0 || b < 0 || b >= B || start[b] <= end || size[b] < 0 || start[b] > n || size[b] > n - start[b]) {
            PyErr_SetString(PyExc_ValueError, "chosen: not ascending blocks of passages within 0 .. n - 1");
            goto done;
        }
        if (size[b] > 0) end = start[b] + size[b] - 1;
        total += size[b];
    }
    b_idx = PyBytes_FromStringAndSize(NULL, total * 8);
    b_pos = PyBytes_FromStringAndSize(NULL, total * 8);
    b_near = PyBytes_FromStringAndSize(NULL, 5 * total * 8);
    if (!b_idx || !b_pos || !b_near) goto done;
    int64_t *idx = (int64_t *)PyBytes_AS_STRING(b_idx), *pos = (int64_t *)PyBytes_AS_STRING(b_pos);
    int64_t *near = (int64_t *)PyBytes_AS_STRING(b_near);
    Py_ssize_t k = 0, m = 0;
    int64_t last = -1; /* the last passage put in `near`: its end is a run of consecutive ones up to it */
    for (Py_ssize_t i = 0; i < C; i++) {
        int64_t b = chosen[i];
        for (int64_t p = start[b]; p < start[b] + size[b]; p++) {
            int64_t top = p + 2 < n - 1 ? p + 2 : n - 1;
            for (int64_t q = p - 2 > last + 1 ? p - 2 : last + 1; q <= top; q++) {
                near[m++] = q;
                last = q;
            }
            /* p <= last now, and near ends with the consecutive passages up to `last`. */
            pos[k] = m - 1 - (last - p);
            idx[k++] = p;
        }
    }
    if (_PyBytes_Resize(&b_near, m * 8) < 0) goto done;
    result = PyTuple_Pack(3, b_idx, b_near, b_pos);
done:
    Py_XDECREF(b_idx);
    Py_XDECREF(b_near);
    Py_XDECREF(b_pos);
    release(&v);
    return result;
}

/* The k-th largest (k from 0) of v[0 .. n) (no NaN), reordering v: Hoare's selection. */
static double kth_largest(double *v, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return v[k];
    }
    return v[k];
}

typedef struct {
    double value;
    int64_t block;
} Held;

/* Highest value first, ties in block order: numpy's stable argsort of the negated values. */
static inline int held_before(const Held *a, const Held *b) {
    return a->value > b->value || (a->value == b->value && a->block < b->block);
}

static void held_sort(Held *a, Held *scratch, Py_ssize_t n) {
    if (n < 2) return;
    Py_ssize_t mid = n / 2;
    held_sort(a, scratch, mid);
    held_sort(a + mid, scratch, n - mid);
    Py_ssize_t i = 0, j = mid, k = 0;
    while (i < mid && j < n) scratch[k++] = held_before(&a[j], &a[i]) ? a[j++] : a[i++];
    while (i < mid) scratch[k++] = a[i++];
    while (j < n) scratch[k++] = a[j++];
    memcpy(a, scratch, (size_t)n * sizeof(Held));
}

static int by_block(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* first_pass(high, size, want) -> bytes of int64, or None: the blocks (ascending) of the shortest
 * start of the blocks ordered by bound (highest first, ties in block order) whose sizes reach
 * `want` (all of them if they never do): runtime.passage_blocks's stable argsort, cumsum and
 * searchsorted. Only the blocks at or above the want-th highest bound are sorted (every block
 * holds a passage, so the start never reaches past them). None when a bound is NaN, or a size is
 * below one or above 2^40 (the sum of the sizes could then overflow): the numpy way decides then. */
static PyObject *first_pass(PyObject *self, PyObject *args) {
    PyObject *o_high, *o_size;
    Py_ssize_t want;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOn", &o_high, &o_size, &want)) return NULL;
    Views v = {.n = 0};
    PyObject *result = NULL;
    double *values = NULL;
    Held *held = NULL, *scratch = NULL;
    int64_t *out = NULL;
    Py_ssize_t n;
    const double *high = take(&v, o_high, 8, -1, "high", &n);
    const int64_t *size = high ? take(&v, o_size, 8, n, "size", NULL) : NULL;
    if (!size) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (isnan(high[i]) || size[i] < 1 || size[i] > ((int64_t)1 << 40)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    Py_ssize_t k = want < 1 ? 1 : (want < n ? want : n);
    values = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!values) goto nomem;
    double cut = -INFINITY;
    if (n) {
        memcpy(values, high, (size_t)n * sizeof(double));
        cut = kth_largest(values, n, k - 1);
    }
    Py_ssize_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) h += high[i] >= cut;
    held = malloc((size_t)(h ? h : 1) * sizeof(Held));
    scratch = malloc((size_t)(h ? h : 1) * sizeof(Held));
    out = malloc((size_t)(h ? h : 1) * sizeof(int64_t));
    if (!held || !scratch || !out) goto nomem;
    h = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (high[i] >= cut) held[h++] = (Held){.value = high[i], .block = i};
    held_sort(held, scratch, h);
    /* Block by block until one makes the sizes reach `want` (that one included: at least one). */
    Py_ssize_t reach = 0;
    int64_t total = 0;
    while (reach < h) {
        total += size[held[reach++].block];
        if (total >= want) break;
    }
    for (Py_ssize_t i = 0; i < reach && i < h; i++) out[i] = held[i].block;
    qsort(out, (size_t)reach, sizeof(int64_t), by_block);
    result = PyBytes_FromStringAndSize((const char *)out, reach * (Py_ssize_t)sizeof(int64_t));
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(values);
    free(held);
    free(scratch);
    free(out);
    release(&v);
    return result;
}

static PyMethodDef METHODS[] = {
    {"block_bounds", block_bounds, METH_VARARGS, "block_bounds(...) -> the blocks' bounds, as doubles"},
    {"exact_scores", exact_scores, METH_VARARGS, "exact_scores(...) -> the passages' exact scores, as doubles"},
    {"inside_counts", inside_counts, METH_VARARGS, "inside_counts(...) -> term counts of ranges of texts"},
    {"block_sums", block_sums, METH_VARARGS, "block_sums(...) -> the blocks' summed maxima per group"},
    {"first_pass", first_pass, METH_VARARGS, "first_pass(high, size, want) -> the first pass's blocks"},
    {"spread", spread, METH_VARARGS, "spread(...) -> chosen blocks' passages, those around them, places"},
    {"near_counts", near_counts, METH_VARARGS, "near_counts(...) -> term counts of candidate passages"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_blockscore", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__blockscore(void) { return PyModule_Create(&MODULE); }
