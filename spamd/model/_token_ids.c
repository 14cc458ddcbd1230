/* Token strings -> bucket ids in one call: xxh3 (seed 0) of each token's UTF-8, masked.

   In Python each token cost about 1,050 instructions to hash, most of it the calls around
   the hash (str.encode's new bytes object, xxhash's argument parsing, the int it returns,
   numpy reading it back), for about 335 tokens a message. Here each costs the hash itself:
   the UTF-8 of a str is read in place (an ASCII str is its own UTF-8), and xxh3 is the
   library's own code (third_party/xxhash, xxHash 0.8, BSD-2-Clause: the same function the
   xxhash package binds, so every id is the one the Python path computes; tests/test_token_ids.py
   compares them). Where it is not built, or SPAMD_PURE_PYTHON=1, spamd/model/features.py
   hashes in Python instead. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

/* token_ids(tokens, mask, out): out[i] = xxh3_64(tokens[i] as UTF-8) & mask, for a list of str and
   a writable buffer of as many uint32. Raises UnicodeEncodeError for a str strict UTF-8 cannot encode
   (a lone surrogate), which the caller hashes with surrogatepass instead. */
static PyObject *
token_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "token_ids(tokens, mask, out) takes 3 arguments");
        return NULL;
    }
    PyObject *tokens = args[0];
    if (!PyList_Check(tokens)) {
        PyErr_SetString(PyExc_TypeError, "tokens must be a list of str");
        return NULL;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[1]);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(args[2], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(tokens);
    if (out.len != count * (Py_ssize_t)sizeof(uint32_t)) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out must hold one uint32 per token");
        return NULL;
    }
    uint32_t *ids = (uint32_t *)out.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *token = PyList_GET_ITEM(tokens, i);
        if (!PyUnicode_Check(token)) {
            PyBuffer_Release(&out);
            PyErr_SetString(PyExc_TypeError, "tokens must be a list of str");
            return NULL;
        }
        Py_ssize_t size;
        const char *utf8 = PyUnicode_AsUTF8AndSize(token, &size);
        if (utf8 == NULL) {
            PyBuffer_Release(&out);
            return NULL;
        }
        ids[i] = (uint32_t)(XXH3_64bits(utf8, (size_t)size) & mask);
    }
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"token_ids", (PyCFunction)(void (*)(void))token_ids, METH_FASTCALL,
     "token_ids(tokens, mask, out) -> None: out[i] = xxh3_64(tokens[i].encode()) & mask, out a uint32 buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "spamd.model._token_ids", "Token strings hashed to bucket ids in one call of C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__token_ids(void)
{
    return PyModule_Create(&module);
}
