/* The readers of step requests and results (MessagePack in the canonical layouts of
 * protocol/SPEC.md): pure functions over buffers. See _wire.h. */
#include "_wire.h"

#include <math.h>
#include <string.h>

WireLayout wire_result_layout, wire_step_layout;
#define RESULT_KEY(i) wire_result_layout.keys[i], wire_result_layout.key_lens[i]

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static int expect(Reader *r, const uint8_t *bytes, Py_ssize_t n) {
    if (r->end - r->p < n || memcmp(r->p, bytes, (size_t)n) != 0) {
        return 0;
    }
    r->p += n;
    return 1;
}

static int take(Reader *r, Py_ssize_t n, const uint8_t **at) {
    if (n < 0 || r->end - r->p < n) {
        return 0;
    }
    *at = r->p;
    r->p += n;
    return 1;
}

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

static int read_uint(Reader *r, int width, uint64_t *v) {
    const uint8_t *at;
    if (!take(r, width, &at)) {
        return 0;
    }
    *v = be(at, width);
    return 1;
}

static int read_bool(Reader *r, PyObject **out) {
    if (r->p >= r->end || (*r->p != 0xc2 && *r->p != 0xc3)) {
        return 0;
    }
    *out = *r->p++ == 0xc3 ? Py_True : Py_False;
    return 1;
}

/* A string (fixstr, str 8/16): a new str, or NULL (no error set) if not one or not UTF-8. */
static PyObject *read_str(Reader *r) {
    if (r->p >= r->end) {
        return NULL;
    }
    uint8_t b = *r->p++;
    uint64_t n;
    if ((b & 0xe0) == 0xa0) {
        n = b & 0x1f;
    } else if (b == 0xd9) {
        if (!read_uint(r, 1, &n)) return NULL;
    } else if (b == 0xda) {
        if (!read_uint(r, 2, &n)) return NULL;
    } else {
        return NULL;
    }
    const uint8_t *at;
    if (!take(r, (Py_ssize_t)n, &at)) {
        return NULL;
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)at, (Py_ssize_t)n, NULL);
    if (s == NULL) {
        PyErr_Clear();
    }
    return s;
}

/* A scalar info value: a new reference, or NULL (no error set) for anything else. */
static PyObject *read_scalar(Reader *r) {
    if (r->p >= r->end) {
        return NULL;
    }
    uint8_t b = *r->p;
    uint64_t u;
    if (b <= 0x7f) {
        r->p++;
        return PyLong_FromLong(b);
    }
    if (b >= 0xe0) {
        r->p++;
        return PyLong_FromLong((int8_t)b);
    }
    if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda) {
        return read_str(r);
    }
    r->p++;
    switch (b) {
    case 0xc0:
        Py_RETURN_NONE;
    case 0xc2:
        Py_RETURN_FALSE;
    case 0xc3:
        Py_RETURN_TRUE;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: {
        int width = 1 << (b - 0xcc);
        if (!read_uint(r, width, &u)) return NULL;
        return PyLong_FromUnsignedLongLong(u);
    }
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        int width = 1 << (b - 0xd0);
        if (!read_uint(r, width, &u)) return NULL;
        int shift = 64 - 8 * width;
        int64_t v = (int64_t)(u << shift) >> shift; /* sign-extend */
        return PyLong_FromLongLong(v);
    }
    case 0xca: {
        if (!read_uint(r, 4, &u)) return NULL;
        uint32_t bits = (uint32_t)u;
        float f;
        memcpy(&f, &bits, 4);
        return PyFloat_FromDouble((double)f);
    }
    case 0xcb: {
        if (!read_uint(r, 8, &u)) return NULL;
        double d;
        memcpy(&d, &u, 8);
        return PyFloat_FromDouble(d);
    }
    default:
        return NULL;
    }
}

/* Whether `b` starts an extension (fixext 1..16, ext 8/16/32). */
static int is_ext(uint8_t b) { return (b >= 0xd4 && b <= 0xd8) || (b >= 0xc7 && b <= 0xc9); }

/* The extension of type 1, 2 or 3 at r->p: 1 with *type, its payload at *data and
 * *len bytes long, else 0 (another type, not an extension, cut short). */
static int read_ext(Reader *r, long *type, const uint8_t **data, uint64_t *len) {
    const uint8_t *at;
    if (r->p >= r->end || !is_ext(*r->p)) {
        return 0;
    }
    uint8_t b = *r->p++;
    if (b >= 0xd4) {
        *len = (uint64_t)1 << (b - 0xd4);
    } else if (!read_uint(r, 1 << (b - 0xc7), len)) {
        return 0;
    }
    if (!take(r, 1, &at) || at[0] < 1 || at[0] > 3) {
        return 0;
    }
    *type = at[0];
    return *len <= (uint64_t)(r->end - r->p) && take(r, (Py_ssize_t)*len, data);
}

/* Past one MessagePack value whose containers nest at most `depth` levels, whose map keys
 * are strings and whose extensions are of types 1..3: 1, or 0 for anything else (cut
 * short, 0xc1, deeper, another key or extension). Only its extent is read here: the
 * reference decoder reads the value itself (a structured field, SPEC section 22). */
static int skip_value(Reader *r, int depth) {
    const uint8_t *at;
    uint64_t n;
    long type;
    if (r->p >= r->end) {
        return 0;
    }
    if (is_ext(*r->p)) {
        return read_ext(r, &type, &at, &n);
    }
    uint8_t b = *r->p++;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        return 1;
    }
    if ((b & 0xe0) == 0xa0) {
        return take(r, b & 0x1f, &at);
    }
    int map = (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
    if ((b & 0xf0) == 0x80 || (b & 0xf0) == 0x90) {
        n = b & 0x0f;
    } else if (b == 0xdc || b == 0xde) {
        if (!read_uint(r, 2, &n)) return 0;
    } else if (b == 0xdd || b == 0xdf) {
        if (!read_uint(r, 4, &n)) return 0;
    } else if (b >= 0xca && b <= 0xd3) { /* float 32/64, uint 8..64, int 8..64 */
        static const int widths[] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};
        return take(r, widths[b - 0xca], &at);
    } else if ((b >= 0xc4 && b <= 0xc6) || (b >= 0xd9 && b <= 0xdb)) { /* bin, str */
        int width = b <= 0xc6 ? 1 << (b - 0xc4) : 1 << (b - 0xd9);
        return read_uint(r, width, &n) && n <= (uint64_t)(r->end - r->p) &&
               take(r, (Py_ssize_t)n, &at);
    } else {
        return 0; /* 0xc1 */
    }
    if (depth <= 0) {
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (map && (r->p >= r->end ||
                    !((*r->p & 0xe0) == 0xa0 || (*r->p >= 0xd9 && *r->p <= 0xdb)) ||
                    !skip_value(r, 0))) {
            return 0;
        }
        if (!skip_value(r, depth - 1)) {
            return 0;
        }
    }
    return 1;
}

/* A map of string keys to scalars: a new dict, or NULL (no error set) for anything else. */
static PyObject *read_info(Reader *r) {
    if (r->p >= r->end) {
        return NULL;
    }
    uint8_t b = *r->p++;
    uint64_t n;
    if ((b & 0xf0) == 0x80) {
        n = b & 0x0f;
    } else if (b == 0xde) {
        if (!read_uint(r, 2, &n)) return NULL;
    } else {
        return NULL;
    }
    PyObject *info = PyDict_New();
    if (info == NULL) {
        PyErr_Clear();
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        PyObject *key = read_str(r);
        if (key == NULL) goto fail;
        PyObject *value = read_scalar(r);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        int bad = PyDict_SetItem(info, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (bad) {
            PyErr_Clear();
            goto fail;
        }
    }
    return info;
fail:
    Py_DECREF(info);
    return NULL;
}


PyObject *wire_read_result(const uint8_t *payload, Py_ssize_t n, int status) {
    Reader r = {payload, payload + n};
    uint64_t rid;
    PyObject *flags[3];
    const uint8_t *at = NULL;
    if (wire_result_layout.prefix_len == 0 ||
        !expect(&r, wire_result_layout.prefix, wire_result_layout.prefix_len) || r.p >= r.end) {
        return NULL;
    }
    uint8_t b = *r.p++;
    if (b <= 0x7f) {
        rid = b;
    } else if (b >= 0xcc && b <= 0xce) {
        if (!read_uint(&r, 1 << (b - 0xcc), &rid)) return NULL;
    } else {
        return NULL;
    }
    if (!expect(&r, RESULT_KEY(0)) || r.p >= r.end) {
        return NULL;
    }
    /* obs: nil, an extension (fixext 1..16, ext 8/16/32) of type 1, 2 or 3, or any other
     * value, whose bytes are handed over (obs_ext_type WIRE_STRUCTURED) */
    long ext_type = 0;
    uint64_t ext_len = 0;
    if (r.p >= r.end) {
        return NULL;
    }
    b = *r.p;
    if (b == 0xc0) {
        r.p++;
    } else if (is_ext(b)) {
        if (!read_ext(&r, &ext_type, &at, &ext_len)) {
            return NULL;
        }
    } else {
        at = r.p;
        if (!skip_value(&r, WIRE_MAX_NESTING)) {
            return NULL;
        }
        ext_type = WIRE_STRUCTURED;
        ext_len = (uint64_t)(r.p - at);
    }
    const uint8_t *ext_at = at;
    /* reward: float64, not NaN */
    uint64_t bits;
    if (!expect(&r, RESULT_KEY(1)) || r.p >= r.end || *r.p++ != 0xcb ||
        !read_uint(&r, 8, &bits)) {
        return NULL;
    }
    double reward;
    memcpy(&reward, &bits, 8);
    if (isnan(reward)) {
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (!expect(&r, RESULT_KEY(2 + i)) || !read_bool(&r, &flags[i])) {
            return NULL;
        }
    }
    if (!expect(&r, RESULT_KEY(5))) {
        return NULL;
    }
    PyObject *info = read_info(&r);
    if (info == NULL) {
        return NULL;
    }
    if (r.p != r.end) {
        Py_DECREF(info);
        return NULL;
    }
    PyObject *obs;
    if (ext_type == 0) {
        obs = Py_NewRef(Py_None);
    } else {
        obs = PyBytes_FromStringAndSize((const char *)ext_at, (Py_ssize_t)ext_len);
        if (obs == NULL) {
            Py_DECREF(info);
            return NULL; /* MemoryError stays set */
        }
    }
    return Py_BuildValue("(iKlNdOOON)", status, (unsigned long long)rid, ext_type, obs, reward,
                         flags[0], flags[1], flags[2], info);
}

int wire_read_step(const uint8_t *p, Py_ssize_t n, uint64_t *rid, long *action,
                   const uint8_t **value, Py_ssize_t *value_len, int *obs) {
    Reader r = {p, p + n};
    if (wire_step_layout.prefix_len == 0 ||
        !expect(&r, wire_step_layout.prefix, wire_step_layout.prefix_len) || r.p >= r.end) {
        return 0;
    }
    uint8_t b = *r.p++;
    if (b <= 0x7f) {
        *rid = b;
    } else if (b >= 0xcc && b <= 0xce) {
        if (!read_uint(&r, 1 << (b - 0xcc), rid)) return 0;
    } else {
        return 0;
    }
    if (!expect(&r, wire_step_layout.keys[0], wire_step_layout.key_lens[0]) || r.p >= r.end) {
        return 0;
    }
    *value = NULL;
    if (*r.p <= 0x7f) {
        *action = *r.p++;
    } else { /* any other value: its bytes */
        *value = r.p;
        if (!skip_value(&r, WIRE_MAX_NESTING)) {
            return 0;
        }
        *value_len = r.p - *value;
    }
    if (!expect(&r, wire_step_layout.keys[1], wire_step_layout.key_lens[1]) || r.end - r.p != 1 ||
        (*r.p != 0xc2 && *r.p != 0xc3)) {
        return 0;
    }
    *obs = *r.p == 0xc3;
    return 1;
}
