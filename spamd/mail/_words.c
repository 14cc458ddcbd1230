/* The body's words found in one pass of C: what spamd/mail/tokenize.py's word patterns find
   (and, below, its header shapes, non-ASCII runs, relay hosts and URLs).

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

/* A str's characters as the scans below read them (words_in reads its own, beside its flags). */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Characters;

/* A new empty list for what a scan of text finds, with text's characters in *chars; NULL with a
   TypeError naming the call when text is no str. */
static PyObject *
start_scan(PyObject *text, const char *call, Characters *chars)
{
    if (!PyUnicode_Check(text) || PyUnicode_READY(text) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, call);
        }
        return NULL;
    }
    chars->kind = PyUnicode_KIND(text);
    chars->data = PyUnicode_DATA(text);
    chars->n = PyUnicode_GET_LENGTH(text);
    return PyList_New(0);
}

/* Appends item (a new reference, or NULL after an error) to list and drops that reference: -1 on error. */
static int
append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) {
        return -1;
    }
    const int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

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
            if (append_new(found, PyUnicode_Substring(text, start, j)) < 0) {
                Py_DECREF(found);
                return NULL;
            }
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

/* The runs of three or more characters beyond ASCII ([^\x00-\x7f]{3,}, tokenize.body_tokens'
   nonascii tokens), by their lengths: the pattern's findall cost 89 k instructions a message
   (callgrind, trec07p-dev, messages 64-364, as the analysis runs). */
static PyObject *
non_ascii_runs(PyObject *module, PyObject *text)
{
    Characters chars;
    PyObject *found = start_scan(text, "non_ascii_runs(text: str)", &chars);
    if (found == NULL || PyUnicode_IS_ASCII(text)) {
        return found;
    }
    const int kind = chars.kind;
    const void *data = chars.data;
    const Py_ssize_t n = chars.n;
    Py_ssize_t i = 0;
    while (i < n) {
        if (PyUnicode_READ(kind, data, i) < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && PyUnicode_READ(kind, data, j) >= 0x80) {
            j++;
        }
        if (j - i >= 3) {
            if (append_new(found, PyLong_FromSsize_t(j - i)) < 0) {
                Py_DECREF(found);
                return NULL;
            }
        }
        i = j;
    }
    return found;
}

/* The three scans below together, the whole of spamctl eval over trec07p-dev's first 2,000 messages
   (callgrind, workers traced): 8.86 -> 8.41 G instructions. */

static inline int
is_host_char(Py_UCS4 c) /* [a-z0-9\-] */
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* What tokenize._HOSTISH_RE's findall finds in " " + text (the relays a Received header names):
   [^a-z0-9\-]-*+([a-z0-9][a-z0-9\-]*+(?:\.[a-z0-9\-]++)+). A match starts at a character that
   is no host character (or the space before the text), and a failed one is tried again at the
   next: the pattern's findall cost 92 k instructions a message (as above). */
static PyObject *
hosts_in(PyObject *module, PyObject *text)
{
    Characters chars;
    PyObject *found = start_scan(text, "hosts_in(text: str)", &chars);
    if (found == NULL) {
        return NULL;
    }
    const int kind = chars.kind;
    const void *data = chars.data;
    const Py_ssize_t n = chars.n;
#define AT(i) PyUnicode_READ(kind, data, (i))
    Py_ssize_t i = -1; /* the space before the text */
    while (i < n) {
        if (i >= 0 && is_host_char(AT(i))) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && AT(j) == '-') {
            j++;
        }
        if (j >= n || AT(j) == '-' || !is_host_char(AT(j))) {
            i++;
            continue;
        }
        const Py_ssize_t start = j++;
        while (j < n && is_host_char(AT(j))) {
            j++;
        }
        Py_ssize_t end = -1;
        while (j + 1 < n && AT(j) == '.' && is_host_char(AT(j + 1))) {
            j += 2;
            while (j < n && is_host_char(AT(j))) {
                j++;
            }
            end = j;
        }
        if (end < 0) {
            i++;
            continue;
        }
        if (append_new(found, PyUnicode_Substring(text, start, end)) < 0) {
            Py_DECREF(found);
            return NULL;
        }
        i = end;
    }
    return found;
}

static inline int
ends_url_host(Py_UCS4 c) /* [\s/<>"'()\[\]{}:?#] */
{
    return Py_UNICODE_ISSPACE(c) || c == '/' || c == '<' || c == '>' || c == '"' || c == '\'' || c == '(' ||
           c == ')' || c == '[' || c == ']' || c == '{' || c == '}' || c == ':' || c == '?' || c == '#';
}

static inline int
ends_url_path(Py_UCS4 c) /* [\s<>"'] */
{
    return Py_UNICODE_ISSPACE(c) || c == '<' || c == '>' || c == '"' || c == '\'';
}

static inline int
starts_with(int kind, const void *data, Py_ssize_t n, Py_ssize_t i, const char *prefix)
{
    for (; *prefix; prefix++, i++) {
        if (i >= n || PyUnicode_READ(kind, data, i) != (Py_UCS4)(unsigned char)*prefix) {
            return 0;
        }
    }
    return 1;
}

/* What tokenize._URL_RE's findall finds: (host, path) for each
   (?:https?://|www\.)([^\s/<>"'()\[\]{}:?#]+)(/[^\s<>"']*)? in the text, \s as the pattern
   engine has it for str (Py_UNICODE_ISSPACE): the pattern's findall cost 72 k instructions a
   message (as above). */
static PyObject *
urls_in(PyObject *module, PyObject *text)
{
    Characters chars;
    PyObject *found = start_scan(text, "urls_in(text: str)", &chars);
    if (found == NULL) {
        return NULL;
    }
    const int kind = chars.kind;
    const void *data = chars.data;
    const Py_ssize_t n = chars.n;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t host_start;
        Py_UCS4 c = AT(i);
        if (c == 'h' && starts_with(kind, data, n, i, "http://")) {
            host_start = i + 7;
        } else if (c == 'h' && starts_with(kind, data, n, i, "https://")) {
            host_start = i + 8;
        } else if (c == 'w' && starts_with(kind, data, n, i, "www.")) {
            host_start = i + 4;
        } else {
            i++;
            continue;
        }
        Py_ssize_t j = host_start;
        while (j < n && !ends_url_host(AT(j))) {
            j++;
        }
        if (j == host_start) {
            i++; /* no host: no match here (and "www." cannot start where "http" does) */
            continue;
        }
        const Py_ssize_t host_end = j;
        if (j < n && AT(j) == '/') {
            j++;
            while (j < n && !ends_url_path(AT(j))) {
                j++;
            }
        }
        PyObject *host = PyUnicode_Substring(text, host_start, host_end);
        PyObject *path = host == NULL ? NULL : PyUnicode_Substring(text, host_end, j);
        PyObject *pair = path == NULL ? NULL : PyTuple_Pack(2, host, path);
        Py_XDECREF(host);
        Py_XDECREF(path);
        if (append_new(found, pair) < 0) {
            Py_DECREF(found);
            return NULL;
        }
        i = j;
    }
#undef AT
    return found;
}

static PyMethodDef methods[] = {
    {"words_in", (PyCFunction)(void (*)(void))words_in, METH_FASTCALL,
     "words_in(text, ascii, max_chars) -> list of str: the words tokenize's patterns find in text, in order,\n"
     "but those longer than max_chars."},
    {"ascii_shape", (PyCFunction)ascii_shape, METH_O,
     "ascii_shape(value) -> str: tokenize.whole_shape of an ASCII value, in one pass."},
    {"non_ascii_runs", (PyCFunction)non_ascii_runs, METH_O,
     "non_ascii_runs(text) -> list of int: the lengths of text's runs of 3+ characters beyond ASCII."},
    {"hosts_in", (PyCFunction)hosts_in, METH_O,
     "hosts_in(text) -> list of str: the host names and IPv4 addresses tokenize's relay pattern finds."},
    {"urls_in", (PyCFunction)urls_in, METH_O,
     "urls_in(text) -> list of (host, path): what tokenize's URL pattern finds."},
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
