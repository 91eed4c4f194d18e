/*
 * Palette expansion of indexed frames (SPEC section 18), the client's hot loop.
 *
 * expand(indices, palette, out): for each byte i of `indices`, write the three
 * bytes palette[3*i .. 3*i+2] to `out`, in order. `palette` holds 256 RGB
 * triples (768 bytes); `out` is writable and three times as long as
 * `indices`. Any C-contiguous buffers will do (numpy arrays, shared memory).
 * The GIL is released during the loop.
 *
 * Two kernels: a portable loop (four pixels as three 32-bit stores) and, on
 * x86-64 CPUs with AVX-512 VBMI (chosen at import; KERNEL names the one in
 * use), 64 pixels per round of byte permutes. expand(..., portable=True) runs
 * the portable one regardless (tests compare the two).
 *
 * openenv_ws.palette falls back to numpy when this module is not built.
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


#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_VBMI 1

/* 64 pixels per round with AVX-512 VBMI byte permutes: each colour channel is
 * looked up in its 256-byte table (two 128-entry permutes and a blend on the
 * index's top bit), then the three channels are interleaved into 192 bytes of
 * RGB (a two-source permute for red and green, a masked one adding blue). */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
expand_vbmi(const uint8_t *src, Py_ssize_t n, const uint8_t *palette, uint8_t *dst) {
    uint8_t planes[3][256];
    for (int i = 0; i < 256; i++) {
        for (int c = 0; c < 3; c++) {
            planes[c][i] = palette[3 * i + c];
        }
    }
    __m512i table[3][4];
    for (int c = 0; c < 3; c++) {
        for (int q = 0; q < 4; q++) {
            table[c][q] = _mm512_loadu_si512(planes[c] + 64 * q);
        }
    }
    /* Output byte j of 64-byte block k is channel m % 3 of pixel m / 3, m = 64k + j. */
    uint8_t red_green[3][64], blue[3][64];
    __mmask64 blue_bytes[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        for (int j = 0; j < 64; j++) {
            int m = 64 * k + j, pixel = m / 3, c = m % 3;
            red_green[k][j] = (uint8_t)(c == 1 ? 64 + pixel : pixel);
            blue[k][j] = (uint8_t)pixel;
            if (c == 2) {
                blue_bytes[k] |= (__mmask64)1 << j;
            }
        }
    }
    __m512i rg[3], b[3];
    for (int k = 0; k < 3; k++) {
        rg[k] = _mm512_loadu_si512(red_green[k]);
        b[k] = _mm512_loadu_si512(blue[k]);
    }
    Py_ssize_t i = 0;
    for (; i + 64 <= n; i += 64, dst += 192) {
        __m512i idx = _mm512_loadu_si512(src + i);
        __mmask64 high = _mm512_movepi8_mask(idx);
        __m512i ch[3];
        for (int c = 0; c < 3; c++) {
            __m512i low = _mm512_permutex2var_epi8(table[c][0], idx, table[c][1]);
            __m512i top = _mm512_permutex2var_epi8(table[c][2], idx, table[c][3]);
            ch[c] = _mm512_mask_blend_epi8(high, low, top);
        }
        for (int k = 0; k < 3; k++) {
            __m512i out = _mm512_permutex2var_epi8(ch[0], rg[k], ch[1]);
            out = _mm512_mask_permutexvar_epi8(out, blue_bytes[k], b[k], ch[2]);
            _mm512_storeu_si512(dst + 64 * k, out);
        }
    }
    expand_rgb(src + i, n - i, palette, dst);
}
#endif

typedef void (*Kernel)(const uint8_t *, Py_ssize_t, const uint8_t *, uint8_t *);
static Kernel fastest = expand_rgb;
static const char *fastest_name = "portable";

static PyObject *expand(PyObject *module, PyObject *args) {
    Py_buffer src, pal, out;
    int portable = 0;
    if (!PyArg_ParseTuple(args, "y*y*w*|p:expand", &src, &pal, &out, &portable)) {
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
        (portable ? expand_rgb : fastest)((const uint8_t *)src.buf, src.len,
                                          (const uint8_t *)pal.buf, (uint8_t *)out.buf);
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
     "expand(indices, palette, out, portable=False): write palette[3*i:3*i+3] for each "
     "index byte i of indices into out (768-byte palette; out three times as long as "
     "indices); portable: the plain C loop even where a vector one runs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "openenv_ws._expand",
    "Palette expansion of indexed frames (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__expand(void) {
#ifdef HAVE_VBMI
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vbmi")) {
        fastest = expand_vbmi;
        fastest_name = "avx512vbmi";
    }
#endif
    PyObject *m = PyModule_Create(&module_def);
    if (m != NULL && PyModule_AddStringConstant(m, "KERNEL", fastest_name) < 0) {
        Py_CLEAR(m);
    }
    return m;
}
