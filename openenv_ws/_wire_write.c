/* The writer of results (MessagePack in the canonical layout of protocol/SPEC.md),
 * as msgpack's packer writes each value. See _wire.h. */
#include "_wire.h"

#include <math.h>
#include <string.h>

#define RESULT_KEY(i) wire_result_layout.keys[i], wire_result_layout.key_lens[i]

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Out;

static int put(Out *o, const void *bytes, size_t n) {
    if (o->len + n > o->cap) {
        size_t cap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n;
        uint8_t *grown = PyMem_Realloc(o->data, cap);
        if (grown == NULL) return 0;
        o->data = grown;
        o->cap = cap;
    }
    memcpy(o->data + o->len, bytes, n);
    o->len += n;
    return 1;
}

static int put_be(Out *o, uint8_t marker, uint64_t v, int width) {
    uint8_t buf[9];
    buf[0] = marker;
    for (int i = 0; i < width; i++) {
        buf[1 + i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    }
    return put(o, buf, (size_t)width + 1);
}

/* Integers as MessagePack's packer writes them: the smallest unsigned form for
 * positive values, the smallest signed one for negative values, fixint in -32..127. */
static int put_uint(Out *o, uint64_t v) {
    uint8_t b = (uint8_t)v;
    if (v < 0x80) return put(o, &b, 1);
    if (v < 0x100) return put_be(o, 0xcc, v, 1);
    if (v < 0x10000) return put_be(o, 0xcd, v, 2);
    if (v < 0x100000000ULL) return put_be(o, 0xce, v, 4);
    return put_be(o, 0xcf, v, 8);
}

static int put_int(Out *o, int64_t v) {
    if (v >= 0) return put_uint(o, (uint64_t)v);
    uint8_t b = (uint8_t)v;
    if (v >= -32) return put(o, &b, 1);
    if (v >= -128) return put_be(o, 0xd0, (uint64_t)v, 1);
    if (v >= -32768) return put_be(o, 0xd1, (uint64_t)v, 2);
    if (v >= -2147483648LL) return put_be(o, 0xd2, (uint64_t)v, 4);
    return put_be(o, 0xd3, (uint64_t)v, 8);
}

static int put_str(Out *o, PyObject *s) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = n < 32       ? put_be(o, (uint8_t)(0xa0 | n), 0, 0)
             : n < 0x100   ? put_be(o, 0xd9, (uint64_t)n, 1)
             : n < 0x10000 ? put_be(o, 0xda, (uint64_t)n, 2)
                           : put_be(o, 0xdb, (uint64_t)n, 4);
    return ok && put(o, utf8, (size_t)n);
}

static int put_double(Out *o, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    return put_be(o, 0xcb, bits, 8);
}

/* A scalar as MessagePack's packer writes it; 0 for anything else (or a failure). */
static int put_scalar(Out *o, PyObject *v) {
    uint8_t b;
    if (v == Py_None) {
        b = 0xc0;
        return put(o, &b, 1);
    }
    if (PyBool_Check(v)) {
        b = v == Py_True ? 0xc3 : 0xc2;
        return put(o, &b, 1);
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow == 0) return put_int(o, x);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            return put_uint(o, u);
        }
        return 0;
    }
    if (PyFloat_CheckExact(v)) return put_double(o, PyFloat_AS_DOUBLE(v));
    if (PyUnicode_CheckExact(v)) return put_str(o, v);
    return 0;
}

PyObject *wire_write_result(PyObject *rid_o, const uint8_t *obs_head, Py_ssize_t head_len,
                            const uint8_t *obs_data, Py_ssize_t data_len, PyObject *reward_o,
                            PyObject *const flags[3], PyObject *info) {
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    unsigned long long rid = 1ULL << 40; /* out of range unless an int in 0..2**32-1 */
    if (PyLong_CheckExact(rid_o)) {
        rid = PyLong_AsUnsignedLongLong(rid_o);
        if (rid == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear(); /* negative or too large: the Python encoder says so */
            rid = 1ULL << 40;
        }
    }
    double reward = PyFloat_CheckExact(reward_o) ? PyFloat_AS_DOUBLE(reward_o) : NAN;
    int usable = wire_result_layout.prefix_len > 0 && PyLong_CheckExact(rid_o) &&
                 rid <= 0xffffffffULL && !isnan(reward) && PyBool_Check(flags[0]) &&
                 PyBool_Check(flags[1]) && PyBool_Check(flags[2]) && PyDict_CheckExact(info);
    if (usable) {
        o.cap = (size_t)(wire_result_layout.prefix_len + head_len + data_len) + 160;
        o.data = PyMem_Malloc(o.cap);
        usable = o.data != NULL && put(&o, wire_result_layout.prefix, (size_t)wire_result_layout.prefix_len) &&
                 put_uint(&o, rid) && put(&o, RESULT_KEY(0)) && put(&o, obs_head, (size_t)head_len) &&
                 put(&o, obs_data, (size_t)data_len) && put(&o, RESULT_KEY(1)) &&
                 put_double(&o, reward);
        for (int i = 0; i < 3 && usable; i++) {
            uint8_t b = flags[i] == Py_True ? 0xc3 : 0xc2;
            usable = put(&o, RESULT_KEY(2 + i)) && put(&o, &b, 1);
        }
        Py_ssize_t n = usable ? PyDict_GET_SIZE(info) : 0;
        if (usable) {
            usable = put(&o, RESULT_KEY(5)) &&
                     (n < 16 ? put_be(&o, (uint8_t)(0x80 | n), 0, 0)
                      : n < 0x10000 ? put_be(&o, 0xde, (uint64_t)n, 2)
                                    : put_be(&o, 0xdf, (uint64_t)n, 4));
        }
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (usable && PyDict_Next(info, &pos, &key, &value)) {
            usable = PyUnicode_CheckExact(key) && put_str(&o, key) && put_scalar(&o, value);
        }
    }
    if (usable) {
        result = PyBytes_FromStringAndSize((const char *)o.data, (Py_ssize_t)o.len);
    } else if (!PyErr_Occurred()) {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(o.data);
    return result;
}