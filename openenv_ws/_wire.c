/*
 * The step loop's frames in C, the common case only: the synchronous client's
 * round trip, and the server's step requests and results.
 *
 * exchange(ws, fd, request, spin, max_size) sends `request` (a MessagePack
 * payload, or None to send nothing) as one masked binary WebSocket frame on
 * the blocking socket `fd`, then reads into the buffer of `ws` (a
 * BlockingWebSocket: its `_buf` bytearray and `_start`/`_end` offsets, which
 * are updated before returning, so no byte read is ever lost) until one whole
 * frame is there. If that frame is a final binary message holding a `result`
 * in the canonical layout of protocol/SPEC.md, it is consumed and returned
 * decoded:
 *
 *     (OK, id, obs_ext_type, obs_ext_payload, reward, terminated, truncated, done, info)
 *
 * with obs_ext_type 0 (nil: payload None), 1 or 2 (an array inline or in the
 * shared region: the extension's payload as bytes), and `info` a dict of
 * scalars. Anything else (a ping, a close, an error frame, a fragment, an info
 * that holds a list, a buffer too small for the frame, a closed connection)
 * returns (FALLBACK,) with the frame left unread in the buffer: the Python
 * reader then handles it as it handles every frame. Two outcomes are the
 * client's to report: (TIMEOUT,) when the socket's receive timeout
 * (SO_RCVTIMEO) expired, (SEND_FAILED, errno) / (RECV_FAILED, errno).
 *
 * `spin` seconds of non-blocking reads precede each blocking one (busy
 * polling). The GIL is released around every system call.
 *
 * Masking keys come from getrandom(2), 256 bytes at a time, and the pool is
 * dropped in a forked child so two processes never share keys. mask_frame(opcode,
 * data) makes any client frame with them (the Python senders use it).
 *
 * The server's side: parse_step(data) reads a plain step request and
 * pack_result(...) writes a plain result, byte for byte as the Python
 * functions of openenv_ws.protocol do (which fall back to themselves for
 * anything else).
 *
 * configure(which, prefix, keys) gives the layouts: for "result" and "step",
 * the bytes of the map header, "op", the op's name and "id", then the packed
 * keys of the fields in order. openenv_ws.protocol passes its own, so both
 * sides read and write the same layout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

enum { OK = 0, FALLBACK = 1, TIMEOUT = 2, SEND_FAILED = 3, RECV_FAILED = 4 };

#define MAX_REQUEST 4096
#define MAX_KEY 32

/* ------------------------------------------------------------------ layout */

typedef struct {
    uint8_t prefix[64]; /* map header, "op", the op's name, "id" */
    Py_ssize_t prefix_len;
    uint8_t keys[6][MAX_KEY]; /* the packed keys of the fields after the id */
    Py_ssize_t key_lens[6];
    Py_ssize_t nkeys;
} Layout;

static Layout result_layout, step_layout;
#define RESULT_KEY(i) result_layout.keys[i], result_layout.key_lens[i]

/* ------------------------------------------------------------------ masking keys */

static uint8_t pool[256];
static size_t pool_left = 0;

static void forget_pool(void) { pool_left = 0; }

/* A fresh masking key into out[0..3]; -1 with OSError set if none can be had. */
static int mask_key(uint8_t *out) {
    if (pool_left < 4) {
        ssize_t got = getrandom(pool, sizeof pool, 0);
        if (got != (ssize_t)sizeof pool) {
            if (got >= 0) errno = EIO;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        pool_left = sizeof pool;
    }
    memcpy(out, pool + sizeof pool - pool_left, 4);
    pool_left -= 4;
    return 0;
}

/* The header of a final client frame carrying n bytes, with a fresh masking key
 * after it, into out (at least 14 bytes): its length, or -1 with OSError set. */
static Py_ssize_t client_head(uint8_t *out, int opcode, uint64_t n) {
    Py_ssize_t head;
    out[0] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        out[1] = (uint8_t)(0x80 | n);
        head = 2;
    } else if (n < 0x10000) {
        out[1] = 0x80 | 126;
        out[2] = (uint8_t)(n >> 8);
        out[3] = (uint8_t)n;
        head = 4;
    } else {
        out[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++) {
            out[2 + i] = (uint8_t)(n >> (56 - 8 * i));
        }
        head = 10;
    }
    return mask_key(out + head) < 0 ? -1 : head + 4;
}

/* dst = src masked with the 4-byte key, eight bytes at a time. */
static void mask_copy(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t *key) {
    uint32_t k32;
    memcpy(&k32, key, 4);
    uint64_t k64 = (uint64_t)k32 << 32 | k32; /* the key twice, in either byte order */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        w ^= k64;
        memcpy(dst + i, &w, 8);
    }
    for (; i < n; i++) {
        dst[i] = src[i] ^ key[i & 3];
    }
}

/* ------------------------------------------------------------------ reading MessagePack */

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

/* The result frame in payload[0:n] as the OK tuple, or NULL (no error set) if it is not one. */
static PyObject *parse_result(const uint8_t *payload, Py_ssize_t n) {
    Reader r = {payload, payload + n};
    uint64_t rid;
    PyObject *flags[3];
    const uint8_t *at = NULL;
    if (result_layout.prefix_len == 0 ||
        !expect(&r, result_layout.prefix, result_layout.prefix_len) || r.p >= r.end) {
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
    /* obs: nil or an extension (fixext 1..16, ext 8/16/32) of type 1 or 2 */
    long ext_type = 0;
    uint64_t ext_len = 0;
    b = *r.p++;
    if (b != 0xc0) {
        if (b >= 0xd4 && b <= 0xd8) {
            ext_len = (uint64_t)1 << (b - 0xd4);
        } else if (b >= 0xc7 && b <= 0xc9) {
            if (!read_uint(&r, 1 << (b - 0xc7), &ext_len)) return NULL;
        } else {
            return NULL;
        }
        if (!take(&r, 1, &at) || (at[0] != 1 && at[0] != 2)) {
            return NULL;
        }
        ext_type = at[0];
        if (!take(&r, (Py_ssize_t)ext_len, &at)) {
            return NULL;
        }
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
    return Py_BuildValue("(iKlNdOOON)", OK, (unsigned long long)rid, ext_type, obs, reward,
                         flags[0], flags[1], flags[2], info);
}

/* ------------------------------------------------------------------ the exchange */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int get_offset(PyObject *ws, const char *name, Py_ssize_t *out) {
    PyObject *v = PyObject_GetAttrString(ws, name);
    if (v == NULL) return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int set_offset(PyObject *ws, const char *name, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (v == NULL) return -1;
    int rc = PyObject_SetAttrString(ws, name, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *status(int code) { return Py_BuildValue("(i)", code); }

static PyObject *failed(int code, int err) { return Py_BuildValue("(ii)", code, err); }

/* Send `n` bytes; 0, or the errno. */
static int send_all(int fd, const uint8_t *data, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t k;
        Py_BEGIN_ALLOW_THREADS
        k = send(fd, data + off, n - off, MSG_NOSIGNAL);
        Py_END_ALLOW_THREADS
        if (k < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0) return -1;
                continue;
            }
            return errno;
        }
        off += (size_t)k;
    }
    return 0;
}

static PyObject *exchange(PyObject *module, PyObject *args) {
    PyObject *ws, *bufobj = NULL, *result = NULL;
    int fd;
    Py_buffer req = {0}, buf = {0};
    double spin;
    Py_ssize_t max_size, start, end;
    if (!PyArg_ParseTuple(args, "Oiz*dn:exchange", &ws, &fd, &req, &spin, &max_size)) {
        return NULL;
    }
    if (req.buf != NULL) {
        Py_ssize_t n = req.len;
        if (n > MAX_REQUEST) {
            result = status(FALLBACK);
            goto done;
        }
        uint8_t frame[14 + MAX_REQUEST];
        Py_ssize_t head = client_head(frame, 2, (uint64_t)n);
        if (head < 0) goto done; /* nothing sent */
        mask_copy(frame + head, req.buf, (size_t)n, frame + head - 4);
        int err = send_all(fd, frame, (size_t)(head + n));
        if (err < 0) goto done;
        if (err > 0) {
            result = failed(SEND_FAILED, err);
            goto done;
        }
    }
    bufobj = PyObject_GetAttrString(ws, "_buf");
    if (bufobj == NULL || PyObject_GetBuffer(bufobj, &buf, PyBUF_WRITABLE) < 0) goto done;
    if (get_offset(ws, "_start", &start) < 0 || get_offset(ws, "_end", &end) < 0) goto done;
    if (start < 0 || end < start || end > buf.len) {
        PyErr_SetString(PyExc_ValueError, "exchange: buffer offsets out of range");
        goto done;
    }
    uint8_t *base = buf.buf;
    for (;;) {
        Py_ssize_t avail = end - start, need = 2, head = 2, length = 0;
        if (avail >= 2) {
            uint8_t b1 = base[start + 1];
            length = b1 & 0x7f;
            if (b1 & 0x80) { /* a masked server frame: the Python reader names the violation */
                result = status(FALLBACK);
                break;
            }
            if (length == 126) {
                head = 4;
                if (avail >= 4) length = (Py_ssize_t)be(base + start + 2, 2);
            } else if (length == 127) {
                head = 10;
                if (avail >= 10) {
                    uint64_t big = be(base + start + 2, 8);
                    length = big > (uint64_t)max_size ? max_size + 1 : (Py_ssize_t)big;
                }
            }
            if (length > max_size) {
                result = status(FALLBACK);
                break;
            }
            need = avail >= head ? head + length : head;
            if (avail >= head && avail >= need) {
                uint8_t b0 = base[start];
                if (b0 != 0x82) {
                    result = status(FALLBACK);
                    break;
                }
                result = parse_result(base + start + head, length);
                if (result == NULL) {
                    if (!PyErr_Occurred()) result = status(FALLBACK);
                    break; /* out of memory: raised, the frame left unread */
                }
                start += head + length;
                break;
            }
        }
        if (start + need > buf.len) { /* the Python reader makes room */
            result = status(FALLBACK);
            break;
        }
        ssize_t got = -1;
        int err = EAGAIN;
        if (spin > 0) {
            Py_BEGIN_ALLOW_THREADS
            double deadline = now() + spin;
            do {
                got = recv(fd, base + end, (size_t)(buf.len - end), MSG_DONTWAIT);
            } while (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && now() < deadline);
            err = got < 0 ? errno : 0;
            Py_END_ALLOW_THREADS
        }
        if (got < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
            /* A signal that came while spinning (or sending) would not interrupt the
             * blocking read: run its handler first, as the interpreter would. */
            if (PyErr_CheckSignals() < 0) {
                break; /* the handler raised: the offsets are saved below */
            }
            Py_BEGIN_ALLOW_THREADS
            got = recv(fd, base + end, (size_t)(buf.len - end), 0);
            err = got < 0 ? errno : 0;
            Py_END_ALLOW_THREADS
        }
        if (got > 0) {
            end += got;
            continue;
        }
        if (got == 0 || err == EINTR) {
            result = status(FALLBACK); /* the Python reader reports the end or the signal */
        } else if (err == EAGAIN || err == EWOULDBLOCK) {
            result = status(TIMEOUT);
        } else {
            result = failed(RECV_FAILED, err);
        }
        break;
    }
    {
        /* Whatever happened, the bytes read stay: save the offsets. */
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        if (set_offset(ws, "_start", start) < 0 || set_offset(ws, "_end", end) < 0) {
            Py_CLEAR(result);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(trace);
        } else {
            PyErr_Restore(type, value, trace);
        }
    }
done:
    if (buf.obj != NULL) PyBuffer_Release(&buf);
    Py_XDECREF(bufobj);
    if (req.obj != NULL) PyBuffer_Release(&req);
    return result;
}

/* mask_frame(opcode, data): one final client frame carrying data, masked with a fresh key. */
static PyObject *mask_frame(PyObject *module, PyObject *args) {
    int opcode;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*:mask_frame", &opcode, &data)) {
        return NULL;
    }
    PyObject *out = NULL;
    if (opcode < 0 || opcode > 15) {
        PyErr_Format(PyExc_ValueError, "opcode must be in 0..15, got %d", opcode);
    } else {
        uint8_t head[14];
        Py_ssize_t n = client_head(head, opcode, (uint64_t)data.len);
        if (n >= 0) {
            out = PyBytes_FromStringAndSize(NULL, n + data.len);
        }
        if (out != NULL) {
            uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
            memcpy(o, head, (size_t)n);
            mask_copy(o + n, data.buf, (size_t)data.len, head + n - 4);
        }
    }
    PyBuffer_Release(&data);
    return out;
}

static PyObject *configure(PyObject *module, PyObject *args) {
    const char *which;
    Py_buffer prefix;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "sy*O:configure", &which, &prefix, &seq)) {
        return NULL;
    }
    Layout *layout = strcmp(which, "result") == 0 ? &result_layout
                     : strcmp(which, "step") == 0 ? &step_layout
                                                  : NULL;
    PyObject *fast = PySequence_Fast(seq, "configure: keys must be a sequence of bytes");
    Py_ssize_t n = fast == NULL ? 0 : PySequence_Fast_GET_SIZE(fast);
    if (fast == NULL || layout == NULL || prefix.len > (Py_ssize_t)sizeof layout->prefix ||
        n > 6 || (layout == &result_layout && n != 6) || (layout == &step_layout && n != 2)) {
        if (fast != NULL) {
            PyErr_SetString(PyExc_ValueError,
                            "configure: 'result' with 6 keys or 'step' with 2, a short prefix");
        }
        Py_XDECREF(fast);
        PyBuffer_Release(&prefix);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) > MAX_KEY) {
            PyErr_SetString(PyExc_ValueError, "configure: each key is bytes of at most 32");
            Py_DECREF(fast);
            PyBuffer_Release(&prefix);
            return NULL;
        }
        layout->key_lens[i] = PyBytes_GET_SIZE(key);
        memcpy(layout->keys[i], PyBytes_AS_STRING(key), (size_t)layout->key_lens[i]);
    }
    layout->nkeys = n;
    memcpy(layout->prefix, prefix.buf, (size_t)prefix.len);
    layout->prefix_len = prefix.len;
    Py_DECREF(fast);
    PyBuffer_Release(&prefix);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the server's side */

/* parse_step(data): (id, action, obs) of a step request laid out as encode_step lays it
 * out with an action in 0..127, else None; the same as protocol.parse_step in Python. */
static PyObject *parse_step(PyObject *module, PyObject *data) {
    if (!PyBytes_CheckExact(data) || step_layout.prefix_len == 0) {
        Py_RETURN_NONE;
    }
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(data);
    Reader r = {p, p + PyBytes_GET_SIZE(data)};
    uint64_t rid;
    if (!expect(&r, step_layout.prefix, step_layout.prefix_len) || r.p >= r.end) {
        Py_RETURN_NONE;
    }
    uint8_t b = *r.p++;
    if (b <= 0x7f) {
        rid = b;
    } else if (b >= 0xcc && b <= 0xce) {
        if (!read_uint(&r, 1 << (b - 0xcc), &rid)) Py_RETURN_NONE;
    } else {
        Py_RETURN_NONE;
    }
    if (!expect(&r, step_layout.keys[0], step_layout.key_lens[0]) || r.p >= r.end || *r.p > 0x7f) {
        Py_RETURN_NONE;
    }
    long action = *r.p++;
    if (!expect(&r, step_layout.keys[1], step_layout.key_lens[1]) || r.end - r.p != 1 ||
        (*r.p != 0xc2 && *r.p != 0xc3)) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(KlO)", (unsigned long long)rid, action, *r.p == 0xc3 ? Py_True : Py_False);
}

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

/* pack_result(id, obs_head, obs_data, reward, terminated, truncated, done, info): the
 * MessagePack bytes of a result as protocol.encode_result writes them, for an obs already
 * packed (head and data), a float reward that is not NaN, three bools and an info of
 * string keys and scalars; None for anything else (the Python encoder then takes it). */
static PyObject *pack_result(PyObject *module, PyObject *args) {
    PyObject *rid_o, *reward_o, *flags[3], *info;
    Py_buffer head, data;
    if (!PyArg_ParseTuple(args, "Oy*y*OOOOO:pack_result", &rid_o, &head, &data, &reward_o,
                          &flags[0], &flags[1], &flags[2], &info)) {
        return NULL;
    }
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
    int usable = result_layout.prefix_len > 0 && PyLong_CheckExact(rid_o) &&
                 rid <= 0xffffffffULL && !isnan(reward) && PyBool_Check(flags[0]) &&
                 PyBool_Check(flags[1]) && PyBool_Check(flags[2]) && PyDict_CheckExact(info);
    if (usable) {
        o.cap = (size_t)(result_layout.prefix_len + head.len + data.len) + 160;
        o.data = PyMem_Malloc(o.cap);
        usable = o.data != NULL && put(&o, result_layout.prefix, (size_t)result_layout.prefix_len) &&
                 put_uint(&o, rid) && put(&o, RESULT_KEY(0)) && put(&o, head.buf, (size_t)head.len) &&
                 put(&o, data.buf, (size_t)data.len) && put(&o, RESULT_KEY(1)) &&
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
    PyBuffer_Release(&head);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *parse(PyObject *module, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*:parse_result", &data)) {
        return NULL;
    }
    PyObject *result = parse_result(data.buf, data.len);
    PyBuffer_Release(&data);
    if (result == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"exchange", exchange, METH_VARARGS,
     "exchange(ws, fd, request, spin, max_size): send request, read one frame; see the module "
     "comment."},
    {"mask_frame", mask_frame, METH_VARARGS,
     "mask_frame(opcode, data): a final client frame carrying data, masked with a fresh key."},
    {"configure", configure, METH_VARARGS,
     "configure(which, prefix, keys): the layout of 'result' or 'step' frames."},
    {"parse_step", parse_step, METH_O,
     "parse_step(data): (id, action, obs) of a plain step request, or None."},
    {"pack_result", pack_result, METH_VARARGS,
     "pack_result(id, obs_head, obs_data, reward, terminated, truncated, done, info): the "
     "bytes of a plain result, or None."},
    {"parse_result", parse, METH_VARARGS,
     "parse_result(payload): the OK tuple of exchange for a result payload, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "openenv_ws._wire",
    "The step loop's frames in C: the sync client's round trip, the server's step "
    "request and result.", -1, methods,
};

PyMODINIT_FUNC PyInit__wire(void) {
    static int forked_hook = 0;
    if (!forked_hook) {
        pthread_atfork(NULL, NULL, forget_pool);
        forked_hook = 1;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "OK", OK) < 0 ||
        PyModule_AddIntConstant(m, "FALLBACK", FALLBACK) < 0 ||
        PyModule_AddIntConstant(m, "TIMEOUT", TIMEOUT) < 0 ||
        PyModule_AddIntConstant(m, "SEND_FAILED", SEND_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RECV_FAILED", RECV_FAILED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
