/* One ordinary interaction record checked and normalised in C: the fast path of `validate`.
 *
 * `check_interaction(max_field_chars, min_year, max_year, version, record)` takes
 * the dict a caller passes to `EventLog.append` and returns the event the Python
 * fast path (`tiermem.events._fast_interaction`) returns for it: the same keys in
 * the same order (`event_id` first, then `type`, `schema_version`, the record's
 * own fields in their order, then the enrichment defaults), the same values. It
 * returns None for anything it does not settle, and the caller goes on with the
 * Python paths, which decide (and name the field of a refusal). It settles a
 * record only when:
 *
 * - every key is a plain `str` naming a known interaction field, with a value of
 *   exactly its kind (None for a field the path skips): texts without NUL,
 *   surrogates or more than `max_field_chars` characters; counts that fit in 64
 *   bits; `latency_ms` a finite float or such an int (stored as a float), not
 *   negative; `usage` a dict of known counters, each a non-negative count;
 *   `tools_used` a list of such texts; no `metadata` or `attachments` value;
 * - `event_id` is given, 1-128 characters of `[0-9A-Za-z_.:-]`; `ts` is given in
 *   the log's own form `YYYY-MM-DDTHH:MM:SS.mmmZ`, a real date and time within the
 *   accepted years; `schema_version`, if given, is the current version;
 * - `agent_id` has a character that is not white space, both texts are given and
 *   not both empty, `memory_level` (if given) is a known level, `response_length`
 *   (if given) is the answer's length in characters.
 *
 * Why: appends of one record at a time spend most of their own time in the
 * interpreter, and after each wait for the disk its caches are cold, which
 * multiplies the cost of every Python step; here the whole check is one call.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

enum Field {
    F_EVENT_ID = 1,
    F_TYPE,
    F_TS,
    F_SCHEMA_VERSION,
    F_AGENT_ID,
    F_MEMORY_LEVEL,
    F_USER_MESSAGE,
    F_AGENT_RESPONSE,
    F_TEXT, /* any other text field */
    F_USAGE,
    F_TOOLS_USED,
    F_LATENCY_MS,
    F_RESPONSE_LENGTH,
    F_JSON, /* metadata, attachments: left to the Python paths unless None */
};

static PyObject *FIELDS;          /* name -> enum Field */
static PyObject *S_EVENT_ID, *S_TYPE, *S_SCHEMA_VERSION, *S_INTERACTION;
static PyObject *S_MEMORY_LEVEL, *S_GLOBAL, *S_RESPONSE_LENGTH, *S_TOOLS_USED;
static const char *USAGE_FIELDS[] = {"input_tokens", "output_tokens", "cache_read_tokens", "tool_calls"};
static const char *MEMORY_LEVELS[] = {"global", "project", "task"};

/* A text value the Python path keeps as is: no NUL, no surrogate, at most `limit` characters. */
static int text_ok(PyObject *s, Py_ssize_t limit) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n > limit) return 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) return memchr(data, 0, (size_t)n) == NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch == 0 || (ch >= 0xD800 && ch <= 0xDFFF)) return 0;
    }
    return 1;
}

static int id_ok(PyObject *s) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n < 1 || n > 128 || !PyUnicode_IS_ASCII(s)) return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
              c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

static int digits(const unsigned char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* `YYYY-MM-DDTHH:MM:SS.mmmZ`, a real date within [min_year, max_year]. */
static int ts_ok(PyObject *s, int min_year, int max_year) {
    if (PyUnicode_GET_LENGTH(s) != 24 || !PyUnicode_IS_ASCII(s)) return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(s);
    int y, mo, d, h, mi, se, ms;
    if (p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':' || p[19] != '.' || p[23] != 'Z')
        return 0;
    if (!digits(p, 4, &y) || !digits(p + 5, 2, &mo) || !digits(p + 8, 2, &d) || !digits(p + 11, 2, &h) ||
        !digits(p + 14, 2, &mi) || !digits(p + 17, 2, &se) || !digits(p + 20, 3, &ms))
        return 0;
    if (y < 1 || y < min_year || y > max_year || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || se > 59)
        return 0;
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[mo - 1] + (mo == 2 && leap);
}

/* A count of 64 bits (exactly an int, not a bool); `min` 0 asks for a non-negative one. */
static int count_ok(PyObject *v, int non_negative, long long *out) {
    if (!PyLong_CheckExact(v)) return 0;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (non_negative && n < 0) return 0;
    *out = n;
    return 1;
}

static int usage_ok(PyObject *v) {
    if (!PyDict_CheckExact(v)) return 0;
    Py_ssize_t pos = 0;
    PyObject *k, *n;
    long long count;
    while (PyDict_Next(v, &pos, &k, &n)) {
        if (!PyUnicode_CheckExact(k)) return 0;
        int known = 0;
        for (size_t i = 0; i < sizeof USAGE_FIELDS / sizeof *USAGE_FIELDS; i++)
            if (PyUnicode_CompareWithASCIIString(k, USAGE_FIELDS[i]) == 0) known = 1;
        if (!known || !count_ok(n, 1, &count)) return 0;
    }
    return 1;
}

static int tools_ok(PyObject *v, Py_ssize_t limit) {
    if (!PyList_CheckExact(v)) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        if (!PyUnicode_CheckExact(item) || !text_ok(item, limit)) return 0;
    }
    return 1;
}

static int visible(PyObject *s) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) return 1;
    return 0;
}

static int field_of(PyObject *name) {
    PyObject *code = PyDict_GetItemWithError(FIELDS, name);
    return code == NULL ? 0 : (int)PyLong_AsLong(code);
}

/* The fields a settled record holds, at most one each of the known ones. */
#define MAX_KEPT 32

typedef struct {
    PyObject *key;   /* owned */
    PyObject *value; /* owned: the value itself, or the checked copy of a usage dict or tools list */
    int field;
} Kept;

static void release(Kept *kept, int n) {
    for (int i = 0; i < n; i++) {
        Py_DECREF(kept[i].key);
        Py_DECREF(kept[i].value);
    }
}

/* The record checked; 1 if it is settled here (0: the Python paths decide; an error may be set).
 * Every field the output needs is taken into `kept` with a reference of its own as it is checked,
 * and the output is built from `kept` alone: the record is read once, so nothing that runs during
 * an allocation (a collection, a finalizer) can change what was checked or free what is used.
 * Mutable values (usage, tools) are copied first and the copy is what is checked and stored. */
static int settle(PyObject *rec, Py_ssize_t limit, int min_year, int max_year, long version, Kept *kept,
                  int *n_kept, PyObject **eid, PyObject **answer, int *has_level, int *has_length, int *has_tools) {
    Py_ssize_t pos = 0;
    PyObject *k, *v, *ts = NULL, *agent = NULL, *message = NULL, *length = NULL;
    long long n;
    while (PyDict_Next(rec, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) return 0;
        int f = field_of(k);
        if (f == 0) return 0; /* an unknown field goes to `extra`: the Python paths */
        if (v == Py_None) {
            if (f == F_TYPE || f == F_SCHEMA_VERSION) return 0; /* the full path refuses a null version */
            continue; /* a known field left null is skipped */
        }
        if (*n_kept >= MAX_KEPT) return 0;
        PyObject *value = v;
        if (f == F_USAGE) {
            if (!PyDict_CheckExact(v)) return 0;
            value = PyDict_Copy(v);
        } else if (f == F_TOOLS_USED) {
            if (!PyList_CheckExact(v)) return 0;
            value = PyList_GetSlice(v, 0, PyList_GET_SIZE(v));
        } else {
            Py_INCREF(value);
        }
        if (value == NULL) return 0;
        Py_INCREF(k);
        kept[*n_kept] = (Kept){k, value, f};
        (*n_kept)++;
        v = value;
        switch (f) {
        case F_TYPE:
            if (!PyUnicode_CheckExact(v) || PyUnicode_CompareWithASCIIString(v, "interaction") != 0) return 0;
            break;
        case F_EVENT_ID:
            if (!PyUnicode_CheckExact(v) || !text_ok(v, limit) || !id_ok(v)) return 0;
            *eid = v;
            break;
        case F_TS:
            if (!PyUnicode_CheckExact(v) || !ts_ok(v, min_year, max_year)) return 0;
            ts = v;
            break;
        case F_SCHEMA_VERSION:
            if (!count_ok(v, 0, &n) || n != version) return 0;
            break;
        case F_AGENT_ID:
        case F_MEMORY_LEVEL:
        case F_USER_MESSAGE:
        case F_AGENT_RESPONSE:
        case F_TEXT:
            if (!PyUnicode_CheckExact(v) || !text_ok(v, limit)) return 0;
            if (f == F_AGENT_ID) agent = v;
            if (f == F_USER_MESSAGE) message = v;
            if (f == F_AGENT_RESPONSE) *answer = v;
            if (f == F_MEMORY_LEVEL) {
                int known = 0;
                for (size_t i = 0; i < sizeof MEMORY_LEVELS / sizeof *MEMORY_LEVELS; i++)
                    if (PyUnicode_CompareWithASCIIString(v, MEMORY_LEVELS[i]) == 0) known = 1;
                if (!known) return 0;
                *has_level = 1;
            }
            break;
        case F_USAGE:
            if (!usage_ok(v)) return 0;
            break;
        case F_TOOLS_USED:
            if (!tools_ok(v, limit)) return 0;
            *has_tools = 1;
            break;
        case F_LATENCY_MS:
            if (PyFloat_CheckExact(v)) {
                double x = PyFloat_AS_DOUBLE(v);
                if (!isfinite(x) || x < 0) return 0;
            } else if (!count_ok(v, 1, &n)) {
                return 0;
            }
            break;
        case F_RESPONSE_LENGTH:
            if (!count_ok(v, 0, &n)) return 0;
            length = v;
            *has_length = 1;
            break;
        default: /* F_JSON with a value */
            return 0;
        }
    }
    if (*eid == NULL || ts == NULL || agent == NULL || message == NULL || *answer == NULL) return 0;
    if (!visible(agent)) return 0;
    Py_ssize_t answer_chars = PyUnicode_GET_LENGTH(*answer);
    if (PyUnicode_GET_LENGTH(message) == 0 && answer_chars == 0) return 0;
    if (length != NULL && PyLong_AsLongLong(length) != (long long)answer_chars) return 0;
    return 1;
}

static int put(PyObject *out, PyObject *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItem(out, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *build(Kept *kept, int n_kept, long version, PyObject *eid, PyObject *answer, int has_level,
                       int has_length, int has_tools) {
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    if (PyDict_SetItem(out, S_EVENT_ID, eid) < 0 || PyDict_SetItem(out, S_TYPE, S_INTERACTION) < 0 ||
        put(out, S_SCHEMA_VERSION, PyLong_FromLong(version)) < 0)
        goto fail;
    for (int i = 0; i < n_kept; i++) {
        int f = kept[i].field, rc;
        PyObject *v = kept[i].value;
        if (f == F_TYPE || f == F_EVENT_ID || f == F_SCHEMA_VERSION) continue;
        if (f == F_LATENCY_MS && PyLong_CheckExact(v)) {
            double x = PyLong_AsDouble(v); /* float(value), as the Python path stores it */
            if (x == -1.0 && PyErr_Occurred()) goto fail;
            rc = put(out, kept[i].key, PyFloat_FromDouble(x));
        } else {
            rc = PyDict_SetItem(out, kept[i].key, v);
        }
        if (rc < 0) goto fail;
    }
    if (!has_level && PyDict_SetItem(out, S_MEMORY_LEVEL, S_GLOBAL) < 0) goto fail;
    if (!has_length && put(out, S_RESPONSE_LENGTH, PyLong_FromSsize_t(PyUnicode_GET_LENGTH(answer))) < 0) goto fail;
    if (!has_tools && put(out, S_TOOLS_USED, PyList_New(0)) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *check_interaction(PyObject *self, PyObject *args) {
    PyObject *rec;
    Py_ssize_t limit;
    int min_year, max_year;
    long version;
    /* The record last, so that a caller can bind the limits once (functools.partial). */
    if (!PyArg_ParseTuple(args, "niilO!", &limit, &min_year, &max_year, &version, &PyDict_Type, &rec)) return NULL;
    Kept kept[MAX_KEPT];
    int n_kept = 0;
    PyObject *eid = NULL, *answer = NULL, *out = NULL;
    int has_level = 0, has_length = 0, has_tools = 0;
    if (settle(rec, limit, min_year, max_year, version, kept, &n_kept, &eid, &answer, &has_level, &has_length,
               &has_tools)) {
        out = build(kept, n_kept, version, eid, answer, has_level, has_length, has_tools);
    } else if (!PyErr_Occurred()) {
        out = Py_NewRef(Py_None);
    }
    release(kept, n_kept);
    return out;
}

static PyMethodDef METHODS[] = {
    {"check_interaction", check_interaction, METH_VARARGS,
     "check_interaction(max_field_chars, min_year, max_year, version, record) -> event or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

static int add_field(const char *name, int code) {
    PyObject *v = PyLong_FromLong(code);
    if (v == NULL) return -1;
    int rc = PyDict_SetItemString(FIELDS, name, v);
    Py_DECREF(v);
    return rc;
}

PyMODINIT_FUNC PyInit__records(void) {
    static const char *texts[] = {"agent_type", "project_id",      "task_id",        "session_id", "channel",
                                  "user",       "model",           "selection_reason", "approval_status"};
    FIELDS = PyDict_New();
    if (FIELDS == NULL) return NULL;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        if (add_field(texts[i], F_TEXT) < 0) return NULL;
    if (add_field("event_id", F_EVENT_ID) < 0 || add_field("type", F_TYPE) < 0 || add_field("ts", F_TS) < 0 ||
        add_field("schema_version", F_SCHEMA_VERSION) < 0 || add_field("agent_id", F_AGENT_ID) < 0 ||
        add_field("memory_level", F_MEMORY_LEVEL) < 0 || add_field("user_message", F_USER_MESSAGE) < 0 ||
        add_field("agent_response", F_AGENT_RESPONSE) < 0 || add_field("usage", F_USAGE) < 0 ||
        add_field("tools_used", F_TOOLS_USED) < 0 || add_field("latency_ms", F_LATENCY_MS) < 0 ||
        add_field("response_length", F_RESPONSE_LENGTH) < 0 || add_field("metadata", F_JSON) < 0 ||
        add_field("attachments", F_JSON) < 0)
        return NULL;
    S_EVENT_ID = PyUnicode_InternFromString("event_id");
    S_TYPE = PyUnicode_InternFromString("type");
    S_SCHEMA_VERSION = PyUnicode_InternFromString("schema_version");
    S_INTERACTION = PyUnicode_InternFromString("interaction");
    S_MEMORY_LEVEL = PyUnicode_InternFromString("memory_level");
    S_GLOBAL = PyUnicode_InternFromString("global");
    S_RESPONSE_LENGTH = PyUnicode_InternFromString("response_length");
    S_TOOLS_USED = PyUnicode_InternFromString("tools_used");
    if (!S_EVENT_ID || !S_TYPE || !S_SCHEMA_VERSION || !S_INTERACTION || !S_MEMORY_LEVEL || !S_GLOBAL ||
        !S_RESPONSE_LENGTH || !S_TOOLS_USED)
        return NULL;
    return PyModule_Create(&MODULE);
}
