/*
 * The C speedups of openenv_ws: pure functions over buffers, shared by the files
 * of the openenv_ws._wire extension.
 *
 *   _wire_frame.c  RFC 6455 frame headers (parse, build), masking and masking keys
 *   _wire_read.c   the readers of step requests and results (MessagePack), layouts
 *   _wire_write.c  the writer of results
 *   _wire.c        the module: the sync client's blocking exchange and the wrappers
 *
 * Every reader takes a pointer and a length and never reads outside them.
 */
#ifndef OPENENV_WS_WIRE_H
#define OPENENV_WS_WIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define WIRE_MAX_KEY 32

/* ------------------------------------------------------------------ frames */

/* A frame header as read: the first byte (FIN, RSV, opcode), whether the mask
 * bit is set, the header's size (masking key included) and the payload length. */
typedef struct {
    uint8_t first;
    int masked;
    Py_ssize_t head;
    uint64_t length;
} WireHead;

/* The header at p[0:avail]: 1 with *h filled when it is complete (the masking key
 * included), 0 while more bytes are needed. Nothing is checked but the lengths. */
int wire_parse_head(const uint8_t *p, size_t avail, WireHead *h);

/* The header of a final client frame (FIN, `opcode`, masked) carrying n bytes, a
 * fresh masking key after it, into out (at least 14 bytes): its size (the key
 * included), or -1 with OSError set if no random key could be had. */
Py_ssize_t wire_client_head(uint8_t *out, int opcode, uint64_t n);

/* dst[0:n] = src[0:n] XOR the 4-byte key repeated; dst may be src. */
void wire_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t *key);

/* Drop the pool of random masking keys (a forked child must not reuse its parent's). */
void wire_forget_keys(void);

/* ------------------------------------------------------------------ codec */

/* The canonical layout of a frame: the bytes of the map header, "op", the op's
 * name and "id", then the packed keys of the fields in order. */
typedef struct {
    uint8_t prefix[64];
    Py_ssize_t prefix_len;
    uint8_t keys[6][WIRE_MAX_KEY];
    Py_ssize_t key_lens[6];
    Py_ssize_t nkeys;
} WireLayout;

extern WireLayout wire_result_layout, wire_step_layout;

/* Structured values (lists, maps, strings, numbers) nest at most this many levels in
 * the readers' hands (the reference's limits.MAX_DEPTH); deeper ones are declined. */
#define WIRE_MAX_NESTING 8

/* The obs_ext_type of an observation that is a structured value: its payload is the
 * value's MessagePack bytes, for the reference decoder to read. */
#define WIRE_STRUCTURED (-1)

/* A result in payload[0:n] as the tuple (status, id, obs_ext_type, obs_ext_payload,
 * reward, terminated, truncated, done, info), or NULL: with no error set when it is
 * not a result in the canonical layout, with MemoryError set when memory ran out. */
PyObject *wire_read_result(const uint8_t *payload, Py_ssize_t n, int status);

/* A step request in p[0:n] in the canonical layout: 1 with *rid and *obs set and
 * either *value NULL and *action the action in 0..127, or the action's MessagePack
 * bytes at *value (*value_len of them; any value the reference may take, see
 * WIRE_MAX_NESTING); else 0. */
int wire_read_step(const uint8_t *p, Py_ssize_t n, uint64_t *rid, long *action,
                   const uint8_t **value, Py_ssize_t *value_len, int *obs);

/* The MessagePack bytes of a result (see pack_result in _wire.c): new bytes, None
 * when the values are not for the plain layout, or NULL with an error set. */
PyObject *wire_write_result(PyObject *rid, const uint8_t *obs_head, Py_ssize_t head_len,
                            const uint8_t *obs_data, Py_ssize_t data_len, PyObject *reward,
                            PyObject *const flags[3], PyObject *info);

#endif
