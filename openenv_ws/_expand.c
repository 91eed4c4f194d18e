/*
 * Palette expansion of indexed frames (SPEC section 18), the client's hot loop.
 *
 * expand(indices, palette, out): for each byte i of `indices`, write the three
 * bytes palette[3*i .. 3*i+2] to `out`, in order. `palette` holds 256 RGB
 * triples (768 bytes); `out` is writable and three times as long as
 * `indices`. Any C-contiguous buffers will do (numpy arrays, shared memory).
 * The GIL is released during the loop.
 *
 * openenv_ws._palette falls back to numpy when this module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static void expand_rgb(const uint8_t *src, Py_ssize_t n, const uint8_t *palette, uint8_t *dst) {
    /* Each colour as a little-endian word R | G << 8 | B << 16 (the top byte is 0). */
    uint32_t words[256];
    for (int i = 0; i < 256; i++) {
        words[i] = (uint32_t)palette[3 * i] | (uint32_t)palette[3 * i + 1] << 8 |
                   (uint32_t)palette[3 * i + 2] << 16;
    }
    Py_ssize_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Four pixels make three whole words: RGBR GBRG BRGB. */
    for (; i + 4 <= n; i += 4, dst += 12) {
        uint32_t a = words[src[i]], b = words[src[i + 1]];
        uint32_t c = words[src[i + 2]], d = words[src[i + 3]];
        uint32_t w0 = a | b << 24;
        uint32_t w1 = b >> 8 | c << 16;
        uint32_t w2 = c >> 16 | d << 8;
        memcpy(dst, &w0, 4);
        memcpy(dst + 4, &w1, 4);
        memcpy(dst + 8, &w2, 4);
    }
#endif
    for (; i < n; i++, dst += 3) {
        const uint8_t *rgb = palette + 3 * src[i];
        dst[0] = rgb[0];
        dst[1] = rgb[1];
        dst[2] = rgb[2];
    }
}

static PyObject *expand(PyObject *module, PyObject *args) {
    Py_buffer src, pal, out;
    if (!PyArg_ParseTuple(args, "y*y*w*:expand", &src, &pal, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (!PyBuffer_IsContiguous(&src, 'C') || !PyBuffer_IsContiguous(&out, 'C')) {
        PyErr_SetString(PyExc_ValueError, "expand needs C-contiguous buffers");
    } else if (pal.len != 768) {
        PyErr_Format(PyExc_ValueError, "a palette holds 768 bytes (256 RGB triples), got %zd",
                     pal.len);
    } else if (out.len != 3 * src.len) {
        PyErr_Format(PyExc_ValueError,
                     "out holds %zd bytes; %zd indices expand to %zd bytes", out.len, src.len,
                     3 * src.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        expand_rgb((const uint8_t *)src.buf, src.len, (const uint8_t *)pal.buf,
                   (uint8_t *)out.buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&pal);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"expand", expand, METH_VARARGS,
     "expand(indices, palette, out): write palette[3*i:3*i+3] for each index byte i "
     "of indices into out (768-byte palette; out three times as long as indices)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "openenv_ws._expand",
    "Palette expansion of indexed frames (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__expand(void) { return PyModule_Create(&module_def); }
