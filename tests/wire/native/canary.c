/*
 * Two deliberate bugs, built with the C extensions by .ci/lib/sanitize.sh so that
 * tests/wire/native/test_sanitizers.py can check that the sanitizers are really on:
 * peek(buffer, i) reads byte i with no bounds check (AddressSanitizer stops a read
 * past the end), add(a, b) adds two C ints with no overflow check
 * (UndefinedBehaviorSanitizer stops a signed overflow).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *peek(PyObject *module, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "y*n:peek", &buffer, &i)) {
        return NULL;
    }
    int byte = ((const unsigned char *)buffer.buf)[i];
    PyBuffer_Release(&buffer);
    return PyLong_FromLong(byte);
}

static PyObject *add(PyObject *module, PyObject *args) {
    int a, b;
    if (!PyArg_ParseTuple(args, "ii:add", &a, &b)) {
        return NULL;
    }
    return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {
    {"peek", peek, METH_VARARGS, "peek(buffer, i): byte i of buffer, unchecked."},
    {"add", add, METH_VARARGS, "add(a, b): a + b as C ints, unchecked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "canary", "Deliberate bugs for the sanitizers to catch.", -1, methods,
};

PyMODINIT_FUNC PyInit_canary(void) { return PyModule_Create(&module_def); }
