/*
 * The C speedups' module, openenv_ws._wire: the synchronous client's step round
 * trip and the wrappers of the pure functions of _wire_frame.c, _wire_read.c and
 * _wire_write.c (see _wire.h).
 *
 * exchange(buf, start, end, fd, request, spin, max_size) sends `request` (a
 * MessagePack payload, or None to send nothing) as one masked binary WebSocket
 * frame on the blocking socket `fd`, then reads into the bytearray `buf`, whose
 * unread bytes are buf[start:end], until one whole frame is there. It returns
 * (start, end, outcome) with the new offsets, so no byte read is ever lost. If
 * that frame is a final binary message holding a `result` in the canonical
 * layout of protocol/SPEC.md, it is consumed and the outcome is its fields:
 *
 *     (OK, id, obs_ext_type, obs_ext_payload, reward, terminated, truncated, done, info)
 *
 * with obs_ext_type 0 (nil: payload None), 1, 2 or 3 (an array inline, in the
 * shared region, compressed: the extension's payload as bytes) or STRUCTURED (any
 * other value, SPEC section 22: its MessagePack bytes, which the reference decoder
 * reads), and `info` a dict of scalars. Anything else (a ping, a close, an error frame, a fragment, an info
 * that holds a list, a buffer too small for the frame, a closed connection) is
 * (FALLBACK,) with the frame left unread in the buffer: the Python reader then
 * handles it as it handles every frame. The others are the caller's to report:
 * (TIMEOUT,) when the socket's receive timeout (SO_RCVTIMEO) expired,
 * (SEND_FAILED, errno) / (RECV_FAILED, errno), and (RAISED, exception) when a
 * signal handler raised or memory ran out after bytes were read (raise it).
 *
 * `spin` seconds of non-blocking reads precede each blocking one (busy
 * polling). The GIL is released around every system call.
 *
 * The server's side: parse_step(data) reads a plain step request and
 * pack_result(...) writes a plain result, byte for byte as the Python
 * functions of openenv_ws.protocol do (which fall back to themselves for
 * anything else). configure(which, prefix, keys) gives the layouts: for
 * "result" and "step", the bytes of the map header, "op", the op's name and
 * "id", then the packed keys of the fields in order. openenv_ws.protocol passes
 * its own, so both sides read and write the same layout.
 */
#include "_wire.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

enum { OK = 0, FALLBACK = 1, TIMEOUT = 2, SEND_FAILED = 3, RECV_FAILED = 4, RAISED = 5 };

#define MAX_REQUEST 4096

/* ------------------------------------------------------------------ the exchange */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* Read into base[end:cap] (spinning first for `spin` seconds): the count, 0 at the
 * end of the stream, or -1 with *err set (-1 and err 0: a signal handler raised). */
static ssize_t read_some(int fd, uint8_t *base, Py_ssize_t end, Py_ssize_t cap, double spin,
                         int *err) {
    ssize_t got = -1;
    *err = EAGAIN;
    if (spin > 0) {
        Py_BEGIN_ALLOW_THREADS
        double deadline = now() + spin;
        do {
            got = recv(fd, base + end, (size_t)(cap - end), MSG_DONTWAIT);
        } while (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && now() < deadline);
        *err = got < 0 ? errno : 0;
        Py_END_ALLOW_THREADS
    }
    if (got < 0 && (*err == EAGAIN || *err == EWOULDBLOCK)) {
        /* A signal that came while spinning (or sending) would not interrupt the
         * blocking read: run its handler first, as the interpreter would. */
        if (PyErr_CheckSignals() < 0) {
            *err = 0;
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
        got = recv(fd, base + end, (size_t)(cap - end), 0);
        *err = got < 0 ? errno : 0;
        Py_END_ALLOW_THREADS
    }
    return got;
}

/* Send `request` as one masked binary frame: NULL when sent, else the outcome (or
 * NULL with an error set, *raised then 1). */
static PyObject *send_request(int fd, const Py_buffer *req, int *raised) {
    *raised = 0;
    if (req->buf == NULL) return NULL;
    if (req->len > MAX_REQUEST) return status(FALLBACK);
    uint8_t frame[14 + MAX_REQUEST];
    Py_ssize_t head = wire_client_head(frame, 2, (uint64_t)req->len);
    if (head < 0) {
        *raised = 1;
        return NULL;
    }
    wire_mask(frame + head, req->buf, (size_t)req->len, frame + head - 4);
    int err = send_all(fd, frame, (size_t)(head + req->len));
    if (err < 0) {
        *raised = 1;
        return NULL;
    }
    return err > 0 ? failed(SEND_FAILED, err) : NULL;
}

static PyObject *exchange(PyObject *module, PyObject *args) {
    Py_buffer buf = {0}, req = {0};
    Py_ssize_t start, end, max_size;
    int fd, raised;
    double spin;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "w*nniz*dn:exchange", &buf, &start, &end, &fd, &req, &spin,
                          &max_size)) {
        return NULL;
    }
    if (start < 0 || end < start || end > buf.len) {
        PyErr_SetString(PyExc_ValueError, "exchange: buffer offsets out of range");
        goto done;
    }
    result = send_request(fd, &req, &raised);
    if (raised) goto done; /* nothing sent, nothing read */
    uint8_t *base = buf.buf;
    while (result == NULL) {
        Py_ssize_t avail = end - start, need = 2;
        WireHead h;
        if (avail >= 2 && base[start + 1] & 0x80) {
            result = status(FALLBACK); /* a masked server frame: the Python reader names it */
            break;
        }
        if (wire_parse_head(base + start, (size_t)avail, &h)) {
            if (h.length > (uint64_t)max_size) {
                result = status(FALLBACK);
                break;
            }
            need = h.head + (Py_ssize_t)h.length;
            if (avail >= need) {
                if (h.first != 0x82) {
                    result = status(FALLBACK);
                    break;
                }
                result = wire_read_result(base + start + h.head, (Py_ssize_t)h.length, OK);
                if (result != NULL) {
                    start += need;
                } else if (!PyErr_Occurred()) {
                    result = status(FALLBACK);
                }
                break; /* NULL: out of memory, the frame left unread */
            }
        } else if (avail >= 2) {
            need = avail + 1;
        }
        if (start + need > buf.len) { /* the Python reader makes room */
            result = status(FALLBACK);
            break;
        }
        int err;
        ssize_t got = read_some(fd, base, end, buf.len, spin, &err);
        if (got > 0) {
            end += got;
        } else if (got < 0 && err == 0) {
            break; /* a signal handler raised */
        } else if (got == 0 || err == EINTR) {
            result = status(FALLBACK); /* the Python reader reports the end or the signal */
        } else if (err == EAGAIN || err == EWOULDBLOCK) {
            result = status(TIMEOUT);
        } else {
            result = failed(RECV_FAILED, err);
        }
    }
    if (result == NULL) {
        /* An exception after bytes were read: hand it over with the offsets. */
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyErr_NormalizeException(&type, &value, &trace);
        if (value != NULL && trace != NULL) PyException_SetTraceback(value, trace);
        result = Py_BuildValue("(iO)", RAISED, value != NULL ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(trace);
        if (result == NULL) goto done;
    }
    result = Py_BuildValue("(nnN)", start, end, result);
done:
    PyBuffer_Release(&buf);
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
        Py_ssize_t n = wire_client_head(head, opcode, (uint64_t)data.len);
        if (n >= 0) {
            out = PyBytes_FromStringAndSize(NULL, n + data.len);
        }
        if (out != NULL) {
            uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
            memcpy(o, head, (size_t)n);
            wire_mask(o + n, data.buf, (size_t)data.len, head + n - 4);
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
    WireLayout *layout = strcmp(which, "result") == 0 ? &wire_result_layout
                     : strcmp(which, "step") == 0 ? &wire_step_layout
                                                  : NULL;
    PyObject *fast = PySequence_Fast(seq, "configure: keys must be a sequence of bytes");
    Py_ssize_t n = fast == NULL ? 0 : PySequence_Fast_GET_SIZE(fast);
    if (fast == NULL || layout == NULL || prefix.len > (Py_ssize_t)sizeof layout->prefix ||
        n > 6 || (layout == &wire_result_layout && n != 6) || (layout == &wire_step_layout && n != 2)) {
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
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) > WIRE_MAX_KEY) {
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

/* ------------------------------------------------------------------ the codec's wrappers */

/* parse_step(data): (id, action, obs) of a step request laid out as encode_step lays it
 * out, with the action an int in 0..127 or, for any other action, the bytes of its
 * MessagePack value; else None. protocol.parse_step decodes those bytes. */
static PyObject *parse_step(PyObject *module, PyObject *data) {
    uint64_t rid;
    long action;
    const uint8_t *value;
    Py_ssize_t value_len = 0;
    int obs;
    if (!PyBytes_CheckExact(data) ||
        !wire_read_step((const uint8_t *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), &rid,
                        &action, &value, &value_len, &obs)) {
        Py_RETURN_NONE;
    }
    PyObject *obs_flag = obs ? Py_True : Py_False;
    if (value != NULL) {
        return Py_BuildValue("(Ky#O)", (unsigned long long)rid, (const char *)value, value_len,
                             obs_flag);
    }
    return Py_BuildValue("(KlO)", (unsigned long long)rid, action, obs_flag);
}

/* pack_result(id, obs_head, obs_data, reward, terminated, truncated, done, info): the
 * MessagePack bytes of a result as protocol.encode_result writes them, for an obs already
 * packed (head and data), a float reward that is not NaN, three bools and an info of
 * string keys and scalars; None for anything else (the Python encoder then takes it). */
static PyObject *pack_result(PyObject *module, PyObject *args) {
    PyObject *rid, *reward, *flags[3], *info;
    Py_buffer head, data;
    if (!PyArg_ParseTuple(args, "Oy*y*OOOOO:pack_result", &rid, &head, &data, &reward,
                          &flags[0], &flags[1], &flags[2], &info)) {
        return NULL;
    }
    PyObject *result =
        wire_write_result(rid, head.buf, head.len, data.buf, data.len, reward, flags, info);
    PyBuffer_Release(&head);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *parse(PyObject *module, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*:parse_result", &data)) {
        return NULL;
    }
    PyObject *result = wire_read_result(data.buf, data.len, OK);
    PyBuffer_Release(&data);
    if (result == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"exchange", exchange, METH_VARARGS,
     "exchange(buf, start, end, fd, request, spin, max_size): send request, read one frame; "
     "(start, end, outcome), see the module comment."},
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
        pthread_atfork(NULL, NULL, wire_forget_keys);
        forked_hook = 1;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "OK", OK) < 0 ||
        PyModule_AddIntConstant(m, "FALLBACK", FALLBACK) < 0 ||
        PyModule_AddIntConstant(m, "TIMEOUT", TIMEOUT) < 0 ||
        PyModule_AddIntConstant(m, "SEND_FAILED", SEND_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RECV_FAILED", RECV_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "RAISED", RAISED) < 0 ||
        PyModule_AddIntConstant(m, "STRUCTURED", WIRE_STRUCTURED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}