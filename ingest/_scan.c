/* Bulk ingest's compiled pass: one scan per line settles the ordinary interactions of a block.
 *
 * `scan_block` walks a block of JSONL lines once, byte by byte, and for each
 * line that is an ordinary interaction in the serialiser's own form it proves
 * the line valid, derives its id and builds the stored line, with no Python
 * object per field. It accepts what the Arrow pass (`native.py`) accepts, with
 * the same checks, plus lines of the original form in their plain shape, so the
 * stored bytes, ids and partitions are those of the per-record path; every other
 * line is returned by index, to go through the slower paths, which name the
 * field and the reason when a line is refused. A line is taken only when:
 *
 * - it is `{` field (`,` field)* `}` with no whitespace outside strings, each
 *   field a known one given once, with a value of its kind: strings with only
 *   the escapes the serialiser writes (`\" \\ \b \f \n \r \t`: no `\u`, no raw
 *   control character) and valid UTF-8; counts of at most 18 digits without a
 *   leading zero; `latency_ms` a plain decimal written as the serialiser writes
 *   that number; `usage` an object of its known counters (each once);
 *   `tools_used` a list of strings; `metadata` a flat object of strings,
 *   integers, booleans and nulls whose keys differ (byte-equal keys are equal
 *   keys, as only one spelling of each character is accepted);
 * - `type` is "interaction", `schema_version` absent or 1, `agent_id` has a
 *   visible ASCII character, the texts are given and not both empty,
 *   `memory_level` a known level, `response_length` the answer's length in
 *   characters, an own `event_id` of the id form (and then `ts` given), `ts`
 *   in the log's own form with a real date within the accepted years, the line
 *   within `max_field_chars` bytes;
 * - its front fields (`type`, and `event_id`, `schema_version` when given)
 *   come first, so the stored line is the input with the id put in front and
 *   the enrichment defaults at the end;
 * - or it is in the original form: `agentId` and `timestamp` instead of
 *   `agent_id` and `ts`, no `type`, `schema_version` or `event_id`; it is then
 *   stored as the upcast leaves it, those two renamed after the other fields.
 *
 * The replay-safe id is the per-record derivation: 48 bits of milliseconds
 * (computed with the same floating-point steps) and 80 bits of BLAKE2b over
 * "ingest\x1f" + the line, in Crockford base32.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ BLAKE2b (RFC 7693) */

static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

typedef struct {
    uint64_t h[8];
    uint64_t t;
    uint8_t buf[128];
    size_t fill;
} Blake2b;

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* little-endian host (x86-64, aarch64) */
    return v;
}

#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr64(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr64(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 63); \
    } while (0)

static void b2_compress(Blake2b *s, const uint8_t *block, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= s->t; /* inputs here are far below 2**64 bytes: the high counter word stays 0 */
    if (last) v[14] = ~v[14];
    /* The rounds written out with constant message indexes: the words stay in registers. */
#define B2_ROUND(r)                                                    \
    do {                                                               \
        B2_G(0, 4, 8, 12, m[B2_SIGMA[r][0]], m[B2_SIGMA[r][1]]);       \
        B2_G(1, 5, 9, 13, m[B2_SIGMA[r][2]], m[B2_SIGMA[r][3]]);       \
        B2_G(2, 6, 10, 14, m[B2_SIGMA[r][4]], m[B2_SIGMA[r][5]]);      \
        B2_G(3, 7, 11, 15, m[B2_SIGMA[r][6]], m[B2_SIGMA[r][7]]);      \
        B2_G(0, 5, 10, 15, m[B2_SIGMA[r][8]], m[B2_SIGMA[r][9]]);      \
        B2_G(1, 6, 11, 12, m[B2_SIGMA[r][10]], m[B2_SIGMA[r][11]]);    \
        B2_G(2, 7, 8, 13, m[B2_SIGMA[r][12]], m[B2_SIGMA[r][13]]);     \
        B2_G(3, 4, 9, 14, m[B2_SIGMA[r][14]], m[B2_SIGMA[r][15]]);     \
    } while (0)
    B2_ROUND(0);
    B2_ROUND(1);
    B2_ROUND(2);
    B2_ROUND(3);
    B2_ROUND(4);
    B2_ROUND(5);
    B2_ROUND(6);
    B2_ROUND(7);
    B2_ROUND(8);
    B2_ROUND(9);
    B2_ROUND(10);
    B2_ROUND(11);
#undef B2_ROUND
    for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2_init(Blake2b *s, size_t digest_size) {
    memcpy(s->h, B2_IV, sizeof s->h);
    s->h[0] ^= 0x01010000ULL ^ (uint64_t)digest_size; /* fanout 1, depth 1, no key */
    s->t = 0;
    s->fill = 0;
}

static void b2_update(Blake2b *s, const uint8_t *in, size_t n) {
    while (n > 0) {
        if (s->fill == 128) { /* a full buffer is compressed only once more input follows */
            s->t += 128;
            b2_compress(s, s->buf, 0);
            s->fill = 0;
        }
        size_t take = 128 - s->fill;
        if (take > n) take = n;
        memcpy(s->buf + s->fill, in, take);
        s->fill += take;
        in += take;
        n -= take;
    }
}

static void b2_final(Blake2b *s, uint8_t *out, size_t digest_size) {
    s->t += s->fill;
    memset(s->buf + s->fill, 0, 128 - s->fill);
    b2_compress(s, s->buf, 1);
    for (size_t i = 0; i < digest_size; i++) out[i] = (uint8_t)(s->h[i / 8] >> (8 * (i % 8)));
}

/* ------------------------------------------------------------------ field table */

enum Kind { K_TEXT, K_COUNT, K_LATENCY, K_USAGE, K_TOOLS, K_META };

/* Fields with a role beyond their kind; the other known fields are plain texts. */
enum {
    F_EVENT_ID, F_TYPE, F_TS, F_SCHEMA_VERSION, F_AGENT_ID, F_MEMORY_LEVEL, F_USER_MESSAGE,
    F_AGENT_RESPONSE, F_RESPONSE_LENGTH, F_LATENCY, F_USAGE, F_TOOLS, F_METADATA, F_OLD_AGENT_ID,
    F_OLD_TS, F_ROLES
};
static const char *ROLE_NAMES[F_ROLES] = {
    "event_id", "type", "ts", "schema_version", "agent_id", "memory_level", "user_message",
    "agent_response", "response_length", "latency_ms", "usage", "tools_used", "metadata", "agentId",
    "timestamp",
};
static const int ROLE_KINDS[F_ROLES] = {
    K_TEXT, K_TEXT, K_TEXT, K_COUNT, K_TEXT, K_TEXT, K_TEXT, K_TEXT, K_COUNT, K_LATENCY, K_USAGE,
    K_TOOLS, K_META, K_TEXT, K_TEXT,
};

#define MAX_FIELDS 64
#define MAX_META_KEYS 64

typedef struct {
    int n;
    const char *name[MAX_FIELDS];
    Py_ssize_t len[MAX_FIELDS];
    int kind[MAX_FIELDS];
    int role[MAX_FIELDS]; /* F_* or -1 */
} Fields;

typedef struct {
    int n;
    const char *name[16];
    Py_ssize_t len[16];
} Names;

typedef struct {
    Fields fields;
    Names usage;
    Names levels;
    Py_ssize_t max_line;
    int min_year, max_year;
} Spec;

static int lookup(const char *const name[], const Py_ssize_t len[], int n, const uint8_t *key, Py_ssize_t klen) {
    for (int i = 0; i < n; i++)
        if (len[i] == klen && memcmp(name[i], key, (size_t)klen) == 0) return i;
    return -1;
}

/* ------------------------------------------------------------------ values */

typedef struct {
    const uint8_t *start; /* first byte inside the quotes */
    Py_ssize_t len;       /* raw bytes inside the quotes */
    Py_ssize_t chars;     /* characters once unescaped */
    int visible;          /* holds a visible ASCII character once unescaped */
} Str;

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether some byte of x is zero (the classic bit trick: exact, no false positive). */
static inline uint64_t has_zero(uint64_t x) { return (x - ONES) & ~x & HIGHS; }

/* The high bit of each byte of x that is a quote, a backslash, below 0x20 or from 0x80 up. The
 * lowest bit set marks the first such byte exactly; bits above it may be false marks (a borrow
 * carried from it), which is why only the first is used. */
static inline uint64_t specials(uint64_t x) {
    uint64_t below = (x - 0x20 * ONES) & ~x & HIGHS;
    return (x & HIGHS) | below | has_zero(x ^ ('"' * ONES)) | has_zero(x ^ ('\\' * ONES));
}

/* Whether printable ASCII bytes hold nothing but spaces and DEL (no visible character). */
static inline int invisible(const uint8_t *p, int n) {
    for (int k = 0; k < n; k++)
        if (p[k] != ' ' && p[k] != 0x7f) return 0;
    return 1;
}

/* A string at p (its opening quote) in the serialiser's form; returns the byte after it, or NULL. */
static const uint8_t *scan_string(const uint8_t *p, const uint8_t *end, Str *out) {
    if (p >= end || *p != '"') return NULL;
    p++;
    out->start = p;
    Py_ssize_t chars = 0;
    int visible = 0;
    while (p < end) {
        /* Eight bytes at a time while none is a quote, a backslash, a control byte or non-ASCII. */
        while (end - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            uint64_t mark = specials(x);
            int plain = mark ? __builtin_ctzll(mark) >> 3 : 8; /* ordinary bytes before the first mark */
            if (!visible && plain && !invisible(p, plain)) visible = 1;
            p += plain;
            chars += plain;
            if (plain < 8) break;
        }
        if (p >= end) break;
        uint8_t c = *p;
        if (c == '"') {
            out->len = p - out->start;
            out->chars = chars;
            out->visible = visible;
            return p + 1;
        }
        if (c < 0x80) {
            if (c < 0x20) return NULL;
            if (c == '\\') {
                if (p + 1 >= end) return NULL;
                uint8_t e = p[1];
                if (e == '"' || e == '\\') visible = 1;
                else if (e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') return NULL;
                p += 2;
            } else {
                if (c != ' ' && c != 0x7f) visible = 1;
                p++;
            }
            chars++;
            continue;
        }
        /* Strict UTF-8: no overlong form, no surrogate, nothing above U+10FFFF. */
        int extra;
        uint32_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) extra = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return NULL;
        if (end - p <= extra) return NULL;
        if (p[1] < lo || p[1] > hi) return NULL;
        for (int k = 2; k <= extra; k++)
            if (p[k] < 0x80 || p[k] > 0xBF) return NULL;
        p += extra + 1;
        chars++;
    }
    return NULL;
}

/* `0` or [1-9][0-9]{0,17} (a negative one too when `sign`); returns the byte after it, or NULL. */
static const uint8_t *scan_integer(const uint8_t *p, const uint8_t *end, int sign, int64_t *value) {
    int negative = 0;
    if (sign && p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return NULL;
    if (*p == '0') {
        if (negative) return NULL; /* "-0" is stored back as 0 */
        *value = 0;
        return p + 1;
    }
    int64_t v = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > 18) return NULL;
        v = v * 10 + (*p - '0');
        p++;
    }
    *value = negative ? -v : v;
    return p;
}

/* `latency_ms`: a plain decimal that is exactly the serialiser's text for its value. */
static const uint8_t *scan_latency(const uint8_t *p, const uint8_t *end) {
    const uint8_t *start = p, *q = p;
    int int_digits = 0, frac_digits = 0;
    if (q < end && *q == '0') {
        q++;
        int_digits = 1;
    } else {
        while (q < end && *q >= '0' && *q <= '9') {
            if (int_digits == 0 && *q == '0') return NULL;
            q++;
            int_digits++;
        }
        if (int_digits == 0 || int_digits > 16) return NULL;
    }
    if (q >= end || *q != '.') return NULL;
    q++;
    const uint8_t *frac = q;
    while (q < end && *q >= '0' && *q <= '9') {
        q++;
        frac_digits++;
    }
    if (frac_digits == 0 || frac_digits > 20) return NULL; /* 17 significant digits after 0.00 */
    /* Below 0.001 the serialisers' notations differ: left to the other paths. Read from the
     * text: a whole part of 0 and three zeros after the point (a decimal that rounds up to
     * 0.001 is left too, which is only slower). */
    int zero = int_digits == 1 && start[0] == '0';
    int all_zero = 1;
    for (int k = 0; k < frac_digits; k++) all_zero &= frac[k] == '0';
    if (zero && !all_zero && frac_digits >= 3 && frac[0] == '0' && frac[1] == '0' && frac[2] == '0')
        return NULL;
    /* With at most 15 significant digits and no needless trailing zero, the text is the only
     * shortest spelling of its value (DBL_DIG decimals never share a double): the serialiser's. */
    int trailing_ok = (frac_digits == 1 && frac[0] == '0') || frac[frac_digits - 1] != '0';
    int first = -1, last = -1, k = 0;
    for (const uint8_t *d = start; d < q; d++) {
        if (*d == '.') continue;
        if (*d != '0') {
            if (first < 0) first = k;
            last = k;
        }
        k++;
    }
    int significant = first < 0 ? 0 : last - first + 1;
    if (trailing_ok && significant <= 15) return q;
    /* Otherwise the one sure test: the shortest round-trip text of the value, compared. */
    Py_ssize_t n = q - start;
    char text[40];
    memcpy(text, start, (size_t)n);
    text[n] = '\0';
    double value = PyOS_string_to_double(text, NULL, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (!(value == 0.0 || value >= 0.001)) return NULL;
    char *shown = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (shown == NULL) {
        PyErr_Clear();
        return NULL;
    }
    int same = strlen(shown) == (size_t)n && memcmp(shown, text, (size_t)n) == 0;
    PyMem_Free(shown);
    return same ? q : NULL;
}

/* ------------------------------------------------------------------ one line */

typedef struct {
    int seen[F_ROLES];
    Str text[F_ROLES];
    int64_t count[F_ROLES];
    int order[3]; /* the roles of the first three fields (-1: a plain text field) */
    const uint8_t *field_start[MAX_FIELDS], *field_end[MAX_FIELDS];
    int field_role[MAX_FIELDS];
    int nfields;
    int old; /* the original line form (`agentId`, `timestamp`), upcast */
} Line;

static const uint8_t *scan_usage(const uint8_t *p, const uint8_t *end, const Spec *spec) {
    if (p >= end || *p != '{') return NULL;
    p++;
    if (p < end && *p == '}') return p + 1;
    uint32_t seen = 0;
    for (;;) {
        Str key;
        int64_t v;
        p = scan_string(p, end, &key);
        if (p == NULL || p >= end || *p != ':') return NULL;
        int k = lookup(spec->usage.name, spec->usage.len, spec->usage.n, key.start, key.len);
        if (k < 0 || (seen & (1u << k))) return NULL;
        seen |= 1u << k;
        p = scan_integer(p + 1, end, 0, &v);
        if (p == NULL || p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p++;
    }
}

static const uint8_t *scan_tools(const uint8_t *p, const uint8_t *end) {
    if (p >= end || *p != '[') return NULL;
    p++;
    if (p < end && *p == ']') return p + 1;
    for (;;) {
        Str item;
        p = scan_string(p, end, &item);
        if (p == NULL || p >= end) return NULL;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p++;
    }
}

static const uint8_t *scan_scalar(const uint8_t *p, const uint8_t *end) {
    if (p >= end) return NULL;
    Str s;
    int64_t v;
    switch (*p) {
    case '"': return scan_string(p, end, &s);
    case 't': return (end - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
    case 'f': return (end - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
    case 'n': return (end - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
    default: return scan_integer(p, end, 1, &v);
    }
}

static const uint8_t *scan_metadata(const uint8_t *p, const uint8_t *end) {
    if (p >= end || *p != '{') return NULL;
    p++;
    if (p < end && *p == '}') return p + 1;
    Str keys[MAX_META_KEYS];
    int n = 0;
    for (;;) {
        if (n == MAX_META_KEYS) return NULL; /* more keys than compared here: the other paths */
        Str *key = &keys[n];
        p = scan_string(p, end, key);
        if (p == NULL || p >= end || *p != ':') return NULL;
        for (int i = 0; i < n; i++)
            if (keys[i].len == key->len && memcmp(keys[i].start, key->start, (size_t)key->len) == 0)
                return NULL; /* a key given twice */
        n++;
        p = scan_scalar(p + 1, end);
        if (p == NULL || p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p++;
    }
}

/* The shape of the line, field by field; 0 when it is not an ordinary line of known fields. */
static int scan_fields(const uint8_t *p, const uint8_t *end, const Spec *spec, Line *ln, int *guess) {
    uint64_t seen = 0;
    memset(ln->seen, 0, sizeof ln->seen);
    ln->nfields = 0;
    if (p >= end || *p != '{') return 0;
    p++;
    for (;;) {
        const uint8_t *key_start = p;
        Str key;
        p = scan_string(p, end, &key);
        if (p == NULL || p >= end || *p != ':') return 0;
        p++;
        /* Lines of one writer list their fields in one order: the previous line's field at
         * this position is tried first. */
        int f = -1;
        if (ln->nfields < MAX_FIELDS) {
            int g = guess[ln->nfields];
            if (g >= 0 && spec->fields.len[g] == key.len && memcmp(spec->fields.name[g], key.start, (size_t)key.len) == 0)
                f = g;
        }
        if (f < 0) f = lookup(spec->fields.name, spec->fields.len, spec->fields.n, key.start, key.len);
        if (f >= 0 && ln->nfields < MAX_FIELDS) guess[ln->nfields] = f;
        if (f < 0 || (seen & (1ULL << f))) return 0;
        seen |= 1ULL << f;
        int role = spec->fields.role[f];
        if (ln->nfields < 3) ln->order[ln->nfields] = role;
        ln->field_start[ln->nfields] = key_start;
        ln->field_role[ln->nfields] = role;
        ln->nfields++;
        switch (spec->fields.kind[f]) {
        case K_TEXT: {
            Str value;
            p = scan_string(p, end, &value);
            if (p != NULL && role >= 0) ln->text[role] = value;
            break;
        }
        case K_COUNT: {
            int64_t value;
            p = scan_integer(p, end, 0, &value);
            if (p != NULL && role >= 0) ln->count[role] = value;
            break;
        }
        case K_LATENCY: p = scan_latency(p, end); break;
        case K_USAGE: p = scan_usage(p, end, spec); break;
        case K_TOOLS: p = scan_tools(p, end); break;
        default: p = scan_metadata(p, end); break;
        }
        if (p == NULL || p >= end) return 0;
        if (role >= 0) ln->seen[role] = 1;
        ln->field_end[ln->nfields - 1] = p;
        if (*p == '}') return p + 1 == end;
        if (*p != ',') return 0;
        p++;
    }
}

/* ------------------------------------------------------------------ time */

static const int DAYS_IN_MONTH[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

static int digits(const uint8_t *s, int a, int b, int64_t *out) {
    int64_t v = 0;
    for (int k = a; k < b; k++) {
        if (s[k] < '0' || s[k] > '9') return 0;
        v = v * 10 + (s[k] - '0');
    }
    *out = v;
    return 1;
}

/* Milliseconds of a `YYYY-MM-DDTHH:MM:SS.mmmZ` stamp as the per-record derivation computes
 * them (through float seconds), or -1 when it is not a real time within the accepted years. */
static int64_t stamp_ms(const uint8_t *s, Py_ssize_t n, const Spec *spec) {
    int64_t year, month, day, hour, minute, second, milli;
    if (n != 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' ||
        s[19] != '.' || s[23] != 'Z')
        return -1;
    if (!digits(s, 0, 4, &year) || !digits(s, 5, 7, &month) || !digits(s, 8, 10, &day) ||
        !digits(s, 11, 13, &hour) || !digits(s, 14, 16, &minute) || !digits(s, 17, 19, &second) ||
        !digits(s, 20, 23, &milli))
        return -1;
    int leap = (year % 4 == 0) && ((year % 100 != 0) || (year % 400 == 0));
    if (month < 1 || month > 12) return -1;
    int64_t last = DAYS_IN_MONTH[month] + (leap && month == 2);
    int min_year = spec->min_year > 1970 ? spec->min_year : 1970;
    if (day < 1 || day > last || hour >= 24 || minute >= 60 || second >= 60 || year < min_year ||
        year > spec->max_year)
        return -1;
    int64_t y = year - (month <= 2);
    int64_t era = y / 400, yoe = y - era * 400;
    int64_t doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    int64_t days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    int64_t micros = (((days * 86400 + hour * 3600 + minute * 60 + second) * 1000) + milli) * 1000;
    int64_t ms = (int64_t)(((double)micros / 1e6) * 1000.0);
    if (ms < 0 || ms >= (1LL << 48)) return -1;
    return ms;
}

/* ------------------------------------------------------------------ checks and output */

static int visible_id(const Str *s) {
    if (s->len < 1 || s->len > 128) return 0;
    for (Py_ssize_t i = 0; i < s->len; i++) {
        uint8_t c = s->start[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
              c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

/* A line of the original form (camelCase `agentId`, `timestamp`, no `type`) read as the
 * current one, as the per-record path upcasts it: those two become `agent_id` and `ts`, moved
 * after the other fields. Taken only in its plain form: both given, and none of the fields
 * the upcast would have to reconcile them with (`agent_id`, `ts`, `type`, `schema_version`,
 * `event_id`); 0 for any other mix. */
static int upcast_old(Line *ln) {
    static const uint8_t INTERACTION[] = "interaction";
    int agent = ln->seen[F_OLD_AGENT_ID], stamp = ln->seen[F_OLD_TS];
    ln->old = 0;
    if (!agent && !stamp) return 1;
    if (!agent || !stamp || ln->seen[F_AGENT_ID] || ln->seen[F_TS] || ln->seen[F_TYPE] ||
        ln->seen[F_SCHEMA_VERSION] || ln->seen[F_EVENT_ID])
        return 0;
    ln->old = 1;
    ln->text[F_AGENT_ID] = ln->text[F_OLD_AGENT_ID];
    ln->text[F_TS] = ln->text[F_OLD_TS];
    ln->text[F_TYPE] = (Str){INTERACTION, 11, 11, 1};
    ln->seen[F_AGENT_ID] = ln->seen[F_TS] = ln->seen[F_TYPE] = 1;
    return 1;
}

/* Whether the parsed line passes every column check of the Arrow pass. */
static int line_passes(const Line *ln, const Spec *spec) {
    const Str *t = ln->text;
    if (!ln->seen[F_TYPE] || t[F_TYPE].len != 11 || memcmp(t[F_TYPE].start, "interaction", 11) != 0)
        return 0;
    if (ln->seen[F_SCHEMA_VERSION] && ln->count[F_SCHEMA_VERSION] != 1) return 0;
    if (!ln->seen[F_AGENT_ID] || !t[F_AGENT_ID].visible) return 0;
    if (!ln->seen[F_USER_MESSAGE] || !ln->seen[F_AGENT_RESPONSE]) return 0;
    if (t[F_USER_MESSAGE].len == 0 && t[F_AGENT_RESPONSE].len == 0) return 0;
    if (ln->seen[F_MEMORY_LEVEL] &&
        lookup(spec->levels.name, spec->levels.len, spec->levels.n, t[F_MEMORY_LEVEL].start,
               t[F_MEMORY_LEVEL].len) < 0)
        return 0;
    if (ln->seen[F_RESPONSE_LENGTH] && ln->count[F_RESPONSE_LENGTH] != t[F_AGENT_RESPONSE].chars) return 0;
    if (ln->seen[F_EVENT_ID] && (!visible_id(&t[F_EVENT_ID]) || !ln->seen[F_TS])) return 0;
    return 1;
}

/* Where the caller's own fields start: after the front fields, which must come first. */
static const uint8_t *body_start(const Line *ln) {
    if (ln->old) return ln->field_start[0]; /* no front fields: the body is rebuilt in `emit` */
    int front = 1 + ln->seen[F_EVENT_ID] + ln->seen[F_SCHEMA_VERSION];
    if (ln->nfields <= front) return NULL;
    for (int k = 0; k < front; k++) {
        int r = ln->order[k];
        if (r != F_TYPE && r != F_EVENT_ID && r != F_SCHEMA_VERSION) return NULL;
    }
    return ln->field_start[front];
}

static const char CROCKFORD[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static void derived_id(int64_t ms, const uint8_t *line, Py_ssize_t n, char out[26]) {
    Blake2b s;
    uint8_t digest[10];
    b2_init(&s, 10);
    b2_update(&s, (const uint8_t *)"ingest\x1f", 7);
    b2_update(&s, line, (size_t)n);
    b2_final(&s, digest, 10);
    unsigned __int128 value = (unsigned __int128)(uint64_t)ms << 80;
    for (int i = 0; i < 10; i++) value |= (unsigned __int128)digest[i] << (8 * (9 - i));
    for (int i = 25; i >= 0; i--) {
        out[i] = CROCKFORD[(int)(value & 31)];
        value >>= 5;
    }
}

/* The decimal digits of a non-negative count; returns their number. */
static int decimal(Py_ssize_t v, char *out) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (int k = 0; k < n; k++) out[k] = tmp[n - 1 - k];
    return n;
}

static const char OPEN[] = "{\"event_id\":\"";
static const char HEAD[] = "\",\"type\":\"interaction\",\"schema_version\":1,";

typedef struct {
    PyObject *ids, *partitions, *stored, *rest, *left;
    PyObject *last_partition;
    char last_day[10];
} Out;

/* One line settled: its id, partition and stored bytes appended; 0 on a Python error. */
static int emit(Out *out, const Line *ln, const uint8_t *line, Py_ssize_t n, const uint8_t *body,
                const uint8_t *stamp, int64_t ms, const uint8_t *default_ts) {
    char id_buf[26];
    const char *id;
    Py_ssize_t id_len;
    if (ln->seen[F_EVENT_ID]) {
        id = (const char *)ln->text[F_EVENT_ID].start;
        id_len = ln->text[F_EVENT_ID].len;
    } else {
        derived_id(ms, line, n, id_buf);
        id = id_buf;
        id_len = 26;
    }
    char length[24];
    int length_len = 0;
    if (!ln->seen[F_RESPONSE_LENGTH])
        length_len = decimal(ln->text[F_AGENT_RESPONSE].chars, length);
    Py_ssize_t body_len = (line + n - 1) - body; /* up to the closing brace */
    static const char OLD_AGENT[] = ",\"agent_id\":\"", OLD_TS[] = "\",\"ts\":\"";
    if (ln->old) { /* the fields but the two old ones, then those two under their new names */
        body_len = 0;
        for (int k = 0; k < ln->nfields; k++)
            if (ln->field_role[k] != F_OLD_AGENT_ID && ln->field_role[k] != F_OLD_TS)
                body_len += (ln->field_end[k] - ln->field_start[k]) + 1;
        body_len += (Py_ssize_t)(sizeof OLD_AGENT - 1) + ln->text[F_AGENT_ID].len +
                    (Py_ssize_t)(sizeof OLD_TS - 1) + ln->text[F_TS].len + 1 - 1;
    }
    static const char TS[] = ",\"ts\":\"", LEVEL[] = ",\"memory_level\":\"global\"";
    static const char RLEN[] = ",\"response_length\":", TOOLS[] = ",\"tools_used\":[]";
    Py_ssize_t size = (Py_ssize_t)(sizeof OPEN - 1) + id_len + (Py_ssize_t)(sizeof HEAD - 1) + body_len;
    if (!ln->seen[F_TS]) size += (Py_ssize_t)(sizeof TS - 1) + 24 + 1;
    if (!ln->seen[F_MEMORY_LEVEL]) size += (Py_ssize_t)(sizeof LEVEL - 1);
    if (!ln->seen[F_RESPONSE_LENGTH]) size += (Py_ssize_t)(sizeof RLEN - 1) + length_len;
    if (!ln->seen[F_TOOLS]) size += (Py_ssize_t)(sizeof TOOLS - 1);
    size += 2; /* "}\n" */
    PyObject *stored = PyBytes_FromStringAndSize(NULL, size);
    if (stored == NULL) return 0;
    char *w = PyBytes_AS_STRING(stored);
#define PUT(src, len)                     \
    do {                                  \
        memcpy(w, (src), (size_t)(len));  \
        w += (len);                       \
    } while (0)
    PUT(OPEN, sizeof OPEN - 1);
    PUT(id, id_len);
    PUT(HEAD, sizeof HEAD - 1);
    if (ln->old) {
        int first = 1;
        for (int k = 0; k < ln->nfields; k++) {
            if (ln->field_role[k] == F_OLD_AGENT_ID || ln->field_role[k] == F_OLD_TS) continue;
            if (!first) *w++ = ',';
            first = 0;
            PUT(ln->field_start[k], ln->field_end[k] - ln->field_start[k]);
        }
        PUT(OLD_AGENT, sizeof OLD_AGENT - 1);
        PUT(ln->text[F_AGENT_ID].start, ln->text[F_AGENT_ID].len);
        PUT(OLD_TS, sizeof OLD_TS - 1);
        PUT(ln->text[F_TS].start, ln->text[F_TS].len);
        *w++ = '"';
    } else
        PUT(body, body_len);
    if (!ln->seen[F_TS]) {
        PUT(TS, sizeof TS - 1);
        PUT(default_ts, 24);
        *w++ = '"';
    }
    if (!ln->seen[F_MEMORY_LEVEL]) PUT(LEVEL, sizeof LEVEL - 1);
    if (!ln->seen[F_RESPONSE_LENGTH]) {
        PUT(RLEN, sizeof RLEN - 1);
        PUT(length, length_len);
    }
    if (!ln->seen[F_TOOLS]) PUT(TOOLS, sizeof TOOLS - 1);
    *w++ = '}';
    *w++ = '\n';
#undef PUT
    if (w != PyBytes_AS_STRING(stored) + size) { /* a sizing slip would be a bug here, not bad input */
        Py_DECREF(stored);
        PyErr_SetString(PyExc_SystemError, "ingest scanner: stored line size mismatch");
        return 0;
    }
    PyObject *id_obj = PyUnicode_FromStringAndSize(id, id_len);
    if (id_obj == NULL || PyList_Append(out->ids, id_obj) < 0 || PyList_Append(out->stored, stored) < 0) {
        Py_XDECREF(id_obj);
        Py_DECREF(stored);
        return 0;
    }
    Py_DECREF(id_obj);
    Py_DECREF(stored);
    /* Lines of one day follow each other: one partition object per run of them. */
    if (out->last_partition == NULL || memcmp(out->last_day, stamp, 10) != 0) {
        char name[15];
        memcpy(name, "date=", 5);
        memcpy(name + 5, stamp, 10);
        PyObject *partition = PyUnicode_FromStringAndSize(name, 15);
        if (partition == NULL) return 0;
        PyUnicode_InternInPlace(&partition);
        Py_XDECREF(out->last_partition);
        out->last_partition = partition;
        memcpy(out->last_day, stamp, 10);
    }
    return PyList_Append(out->partitions, out->last_partition) == 0;
}

/* ------------------------------------------------------------------ the module */

static int names_from(PyObject *seq, Names *names, int limit) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > limit) {
        PyErr_SetString(PyExc_ValueError, "too many names");
        return 0;
    }
    names->n = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        names->name[i] = PyUnicode_AsUTF8AndSize(item, &names->len[i]);
        if (names->name[i] == NULL) return 0;
    }
    return 1;
}

static int spec_from(PyObject *fields, PyObject *usage, PyObject *levels, Spec *spec) {
    PyObject *f = PySequence_Fast(fields, "fields: a sequence of (name, kind)");
    if (f == NULL) return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
    if (n > MAX_FIELDS) {
        Py_DECREF(f);
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return 0;
    }
    spec->fields.n = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name;
        int kind;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(f, i), "si", &name, &kind)) {
            Py_DECREF(f);
            return 0;
        }
        spec->fields.name[i] = name;
        spec->fields.len[i] = (Py_ssize_t)strlen(name);
        spec->fields.kind[i] = kind;
        spec->fields.role[i] = -1;
        for (int r = 0; r < F_ROLES; r++)
            if (strcmp(ROLE_NAMES[r], name) == 0) {
                if (ROLE_KINDS[r] != kind) {
                    Py_DECREF(f);
                    PyErr_Format(PyExc_ValueError, "field %s: unexpected kind", name);
                    return 0;
                }
                spec->fields.role[i] = r;
            }
    }
    Py_DECREF(f); /* the names stay alive in the caller's tuple */
    PyObject *u = PySequence_Fast(usage, "usage: a sequence of names");
    if (u == NULL) return 0;
    PyObject *l = PySequence_Fast(levels, "levels: a sequence of names");
    int ok = u != NULL && l != NULL && names_from(u, &spec->usage, 16) && names_from(l, &spec->levels, 16);
    Py_XDECREF(u);
    Py_XDECREF(l);
    return ok;
}

static PyObject *scan_block(PyObject *self, PyObject *args) {
    Py_buffer block;
    const char *default_ts;
    Py_ssize_t default_len, max_line;
    PyObject *fields, *usage, *levels;
    Spec spec;
    if (!PyArg_ParseTuple(args, "y*s#OOOnii", &block, &default_ts, &default_len, &fields, &usage, &levels,
                          &max_line, &spec.min_year, &spec.max_year))
        return NULL;
    spec.max_line = max_line;
    /* The field, usage and level names are borrowed for the whole scan: only tuples (which
       hold their items for as long as the call holds them) may lend them. */
    if (!PyTuple_Check(fields) || !PyTuple_Check(usage) || !PyTuple_Check(levels)) {
        PyBuffer_Release(&block);
        PyErr_SetString(PyExc_TypeError, "fields, usage and levels must be tuples");
        return NULL;
    }
    Out out = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0), NULL, {0}};
    PyObject *result = NULL;
    if (out.ids == NULL || out.partitions == NULL || out.stored == NULL || out.rest == NULL || out.left == NULL)
        goto done;
    if (!spec_from(fields, usage, levels, &spec)) goto done;
    const uint8_t *dts = (const uint8_t *)default_ts;
    int64_t default_ms = stamp_ms(dts, default_len, &spec);
    const uint8_t *data = block.buf, *stop = data + block.len;
    Py_ssize_t index = 0;
    int guess[MAX_FIELDS];
    for (int k = 0; k < MAX_FIELDS; k++) guess[k] = -1;
    for (const uint8_t *p = data;; index++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(stop - p));
        const uint8_t *line = p, *end = nl ? nl : stop;
        while (end > line && end[-1] == '\r') end--;
        Py_ssize_t n = end - line;
        Line ln;
        const uint8_t *body = NULL, *stamp = NULL;
        int64_t ms = -1;
        if (n <= spec.max_line && scan_fields(line, end, &spec, &ln, guess) && upcast_old(&ln) &&
            line_passes(&ln, &spec)) {
            if (ln.seen[F_TS]) {
                stamp = ln.text[F_TS].start;
                ms = stamp_ms(stamp, ln.text[F_TS].len, &spec);
            } else {
                stamp = dts;
                ms = default_ms;
            }
            if (ms >= 0) body = body_start(&ln);
        }
        if (body != NULL) {
            if (!emit(&out, &ln, line, n, body, stamp, ms, dts)) goto done;
        } else {
            PyObject *i = PyLong_FromSsize_t(index);
            PyObject *text = PyBytes_FromStringAndSize((const char *)line, n);
            int failed = i == NULL || text == NULL || PyList_Append(out.rest, i) < 0 ||
                         PyList_Append(out.left, text) < 0;
            Py_XDECREF(i);
            Py_XDECREF(text);
            if (failed) goto done;
        }
        if (nl == NULL) break;
        p = nl + 1;
    }
    result = Py_BuildValue("nOOOOO", index + 1, out.ids, out.partitions, out.stored, out.rest, out.left);
done:
    PyBuffer_Release(&block);
    Py_XDECREF(out.ids);
    Py_XDECREF(out.partitions);
    Py_XDECREF(out.stored);
    Py_XDECREF(out.rest);
    Py_XDECREF(out.left);
    Py_XDECREF(out.last_partition);
    return result;
}

static PyObject *blake2b_10(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    Blake2b s;
    uint8_t digest[10];
    b2_init(&s, 10);
    b2_update(&s, data.buf, (size_t)data.len);
    b2_final(&s, digest, 10);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, 10);
}

static PyMethodDef METHODS[] = {
    {"scan_block", scan_block, METH_VARARGS,
     "scan_block(block, default_ts, fields, usage_keys, levels, max_line, min_year, max_year)"
     " -> (lines, ids, partitions, stored, rest, left)"},
    {"blake2b_10", blake2b_10, METH_VARARGS, "BLAKE2b with a 10-byte digest (for the tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&MODULE); }
