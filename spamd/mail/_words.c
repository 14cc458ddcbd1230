/* The body's words found in one pass of C: what spamd/mail/tokenize.py's word patterns find.

   Python's regular expressions spent 0.8 M instructions a message finding words, a
   quarter of the analysis (callgrind, trec07p-dev, messages 300-600), most of it trying
   and failing at each character. This scans each character once: 799 -> 242 k with the
   call around it; the whole analysis 3,394 -> 2,829 k (2,623 k with the shapes below). It finds exactly what
   findall of these patterns finds on the same text (tests/test_words_scan.py compares
   them on random text; tests/test_analysis_digest.py on every message of the corpora):

       ascii:   \$?[a-z0-9][a-z0-9]++(?:['\-.,][a-z0-9]++)*+[%!]?
       other:   [$€£]?[^\W_][^\W_]++(?:['’\-.,][^\W_]++)*+[%!]?

   [^\W_] is Py_UNICODE_ISALNUM, as for the regular expression engine. Words longer than
   max_chars are left out, as lowered_words leaves them out of what the patterns find. Where it is not
   built (no C compiler), or SPAMD_PURE_PYTHON=1, the patterns run instead. */

/* And the shape of an ASCII header value (tokenize.whole_shape): hex runs, digit runs and letter
   runs masked, in one pass instead of three substitutions and a translation: 238 -> 25 k
   instructions a message, callgrind, trec07p-dev, messages 300-600. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static inline int
is_word_char(Py_UCS4 c, int ascii)
{
    if (ascii) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    }
    return Py_UNICODE_ISALNUM(c);
}

static inline int
is_currency(Py_UCS4 c, int ascii)
{
    return c == '$' || (!ascii && (c == 0x00A3 || c == 0x20AC)); /* $, and £ € beyond ASCII */
}

static inline int
is_separator(Py_UCS4 c, int ascii)
{
    return c == '\'' || c == '-' || c == '.' || c == ',' || (!ascii && c == 0x2019); /* and ’ */
}

static PyObject *
words_in(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "words_in(text: str, ascii: bool, max_chars: int)");
        return NULL;
    }
    PyObject *text = args[0];
    int ascii = PyObject_IsTrue(args[1]);
    if (ascii < 0) {
        return NULL;
    }
    const Py_ssize_t max_chars = PyLong_AsSsize_t(args[2]);
    if (max_chars == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (PyUnicode_READY(text) < 0) {
        return NULL;
    }
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
#define AT(i) PyUnicode_READ(kind, data, (i))
    Py_ssize_t i = 0;
    while (i < n) {
        const Py_ssize_t start = i;
        Py_ssize_t j = is_currency(AT(i), ascii) ? i + 1 : i;
        if (j + 1 >= n || !is_word_char(AT(j), ascii) || !is_word_char(AT(j + 1), ascii)) {
            i++; /* no word starts here (a currency sign is no word character either) */
            continue;
        }
        j += 2;
        while (j < n && is_word_char(AT(j), ascii)) {
            j++;
        }
        while (j + 1 < n && is_separator(AT(j), ascii) && is_word_char(AT(j + 1), ascii)) {
            j += 2;
            while (j < n && is_word_char(AT(j), ascii)) {
                j++;
            }
        }
        if (j < n && (AT(j) == '%' || AT(j) == '!')) {
            j++;
        }
        if (j - start <= max_chars) {
            PyObject *word = PyUnicode_Substring(text, start, j);
            if (word == NULL || PyList_Append(found, word) < 0) {
                Py_XDECREF(word);
                Py_DECREF(found);
                return NULL;
            }
            Py_DECREF(word);
        }
        i = j;
    }
#undef AT
    return found;
}

#define SHAPE_CHARS 40

static inline int
is_ascii_word_char(Py_UCS1 c) /* \w of a bytes pattern */
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static inline int
is_hex_digit(Py_UCS1 c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Appends the masked character, a run of letters (a) or of digits (9) written once. */
static inline void
put_masked(char *out, Py_ssize_t *m, Py_UCS1 c)
{
    char masked = (c >= '0' && c <= '9') ? '9' : ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) ? 'a' : (char)c;
    if ((masked == 'a' || masked == '9') && *m > 0 && out[*m - 1] == masked) {
        return;
    }
    out[(*m)++] = masked;
}

/* What these find, in the order tokenize.whole_shape applies them to the value's bytes:
   \b[0-9A-Fa-f]{6,}\b -> "a" (a word of six or more hex digits), letters -> a, digits -> 9,
   aa+ -> a, 99+ -> 9; the first SHAPE_CHARS characters. A hex word is a whole word: \b on both
   sides of a greedy run of hex digits. */
static PyObject *
ascii_shape(PyObject *module, PyObject *value)
{
    if (!PyUnicode_Check(value) || PyUnicode_READY(value) < 0 || !PyUnicode_IS_ASCII(value)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "ascii_shape(value: str) takes ASCII text");
        }
        return NULL;
    }
    const Py_UCS1 *data = PyUnicode_1BYTE_DATA(value);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    char out[SHAPE_CHARS];
    Py_ssize_t m = 0, i = 0;
    while (i < n && m < SHAPE_CHARS) {
        if (!is_ascii_word_char(data[i])) {
            put_masked(out, &m, data[i++]);
            continue;
        }
        Py_ssize_t j = i;
        int all_hex = 1;
        while (j < n && is_ascii_word_char(data[j])) {
            all_hex &= is_hex_digit(data[j]);
            j++;
        }
        if (all_hex && j - i >= 6) {
            put_masked(out, &m, 'a');
        } else {
            for (Py_ssize_t k = i; k < j && m < SHAPE_CHARS; k++) {
                put_masked(out, &m, data[k]);
            }
        }
        i = j;
    }
    return PyUnicode_DecodeASCII(out, m, NULL);
}

static PyMethodDef methods[] = {
    {"words_in", (PyCFunction)(void (*)(void))words_in, METH_FASTCALL,
     "words_in(text, ascii, max_chars) -> list of str: the words tokenize's patterns find in text, in order,\n"
     "but those longer than max_chars."},
    {"ascii_shape", (PyCFunction)ascii_shape, METH_O,
     "ascii_shape(value) -> str: tokenize.whole_shape of an ASCII value, in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "spamd.mail._words", "The body's words and header shapes found in one pass of C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__words(void)
{
    return PyModule_Create(&module);
}
