# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The whole read (:func:`proxy.front.whole.read_whole`) at C level, in Cython.

The same function, the same answers: ``whole.py`` stays the reference, and
``tests/front/test_front_reader.py`` holds this one, the pure one and llhttp's
callbacks to the same reading of generated requests. What is done here in C
is what costs there: the scan of the head for bytes that are not printable
ASCII, the search for its lines, colons and values, and the lookup of the
usual header names, all over the read's own bytes (no decoded copy of the
head, no string per header the front does not read). Building the request,
routing its target and checking its head stay the Python code's
(:class:`~.request.Request`, :func:`~.routing.route_text`, and the body's
part, :func:`~.whole.with_body`).

Built by ``pip install .`` beside the modules mypyc compiles (``setup.py``),
never by an editable install; :mod:`.reader` takes it when it is there.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeLatin1
from libc.string cimport memcmp, memchr

from proxy.front.headers import (
    ACCEPT as _ACCEPT,
    AUTHORIZATION as _AUTHORIZATION,
    CONTENT_LENGTH as _CONTENT_LENGTH,
    CONTENT_TYPE as _CONTENT_TYPE,
    FORWARDED as _FORWARDED,
    KEEP_ALIVE as _KEEP_ALIVE,
    ONCE as _ONCE,
    OTHER as _OTHER,
    TEXT_LOWER,
    TEXT_NAMES,
)
from proxy.front.request import Request
from proxy.front.routing import METHODS, route_text
from proxy.front.whole import with_body

cdef int ACCEPT = _ACCEPT
cdef int AUTHORIZATION = _AUTHORIZATION
cdef int CONTENT_LENGTH = _CONTENT_LENGTH
cdef int CONTENT_TYPE = _CONTENT_TYPE
cdef int FORWARDED = _FORWARDED
cdef int KEEP_ALIVE = _KEEP_ALIVE
cdef int ONCE = _ONCE
cdef int OTHER = _OTHER

cdef bytes GET = b"GET"
cdef bytes POST = b"POST"

# The names TEXT_NAMES spells, as bytes, with their codes: matched by length
# and bytes, exactly as the dictionary matches them, with no string made.
cdef list _NAMES = [name.encode("latin-1") for name in TEXT_NAMES]
cdef list _CODES = [TEXT_NAMES[name] for name in TEXT_NAMES]
cdef Py_ssize_t _COUNT = len(_NAMES)


cdef inline bint _printable(unsigned char c) nogil:
    return 0x20 <= c < 0x7F


cdef Py_ssize_t _find(const char* p, Py_ssize_t start, Py_ssize_t end,
                      const char* what, Py_ssize_t size) nogil:
    """The first ``what`` in ``p[start:end]``, or -1."""
    cdef const char* at
    cdef Py_ssize_t i = start
    while end - i >= size:
        at = <const char*>memchr(p + i, what[0], end - i - size + 1)
        if at == NULL:
            return -1
        i = at - p
        if memcmp(at, what, size) == 0:
            return i
        i += 1
    return -1


cdef int _spelled(const char* p, Py_ssize_t size, bint* found):
    """The code TEXT_NAMES gives ``p[:size]``, when it spells it."""
    cdef Py_ssize_t k
    cdef bytes name
    for k in range(_COUNT):
        name = <bytes>_NAMES[k]
        if PyBytes_GET_SIZE(name) == size and memcmp(PyBytes_AS_STRING(name), p, size) == 0:
            found[0] = True
            return <int>_CODES[k]
    found[0] = False
    return 0


cdef bint _alnum_or_dash(const char* p, Py_ssize_t size) nogil:
    """``name.replace("-", "").isalnum()`` of printable ASCII."""
    cdef Py_ssize_t i
    cdef unsigned char c
    cdef bint any_alnum = False
    for i in range(size):
        c = <unsigned char>p[i]
        if c == b'-':
            continue
        if (b'0' <= c <= b'9') or (b'a' <= c <= b'z') or (b'A' <= c <= b'Z'):
            any_alnum = True
            continue
        return False
    return any_alnum


cdef bint _keep_alive(const char* p, Py_ssize_t size) nogil:
    """``value.lower() == "keep-alive"``."""
    cdef const char* want = b"keep-alive"
    cdef Py_ssize_t i
    cdef unsigned char c
    if size != 10:
        return False
    for i in range(10):
        c = <unsigned char>p[i]
        if b'A' <= c <= b'Z':
            c += 32
        if c != <unsigned char>want[i]:
            return False
    return True


def read_whole(bytes data, limits, heads, bint proxied):
    """:func:`proxy.front.whole.read_whole`, at C level (its docstring holds)."""
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t head_end = _find(p, 0, n, b"\r\n\r\n", 4)
    cdef Py_ssize_t i, line_end, at, version, pos, end, colon, start, count, size
    cdef unsigned char c
    cdef int code, seen
    cdef bint found_name
    cdef bytes method
    if head_end < 0:
        return None
    # Printable ASCII and CRLFs only (whole.py counts what translate leaves).
    i = 0
    while i < head_end:
        c = <unsigned char>p[i]
        if not _printable(c):
            if c == b'\r' and i + 1 < head_end and p[i + 1] == b'\n':
                i += 2
                continue
            return None
        i += 1
    line_end = _find(p, 0, head_end, b"\r\n", 2)
    if line_end < 0:
        line_end = head_end
    if head_end >= 5 and memcmp(p, b"POST ", 5) == 0:
        at, method = 5, POST
    elif head_end >= 4 and memcmp(p, b"GET ", 4) == 0:
        at, method = 4, GET
    else:
        return None
    version = line_end - 9
    if version < 0 or memcmp(p + version, b" HTTP/1.1", 9) != 0:
        return None
    if version > at and memchr(p + at, b' ', version - at) != NULL:
        return None
    if not (at < version <= at + <Py_ssize_t>limits.max_url):
        return None
    found = route_text(PyUnicode_DecodeLatin1(p + at, version - at, NULL))
    if found is None:
        return None
    kind = found[0]
    if METHODS[kind] != method:
        return None  # a method the route does not take: refused the usual way
    req = Request()
    count = size = seen = 0
    pos = line_end + 2
    while pos < head_end:
        end = _find(p, pos, head_end, b"\r\n", 2)
        if end < 0:
            end = head_end
        colon = -1
        i = pos
        while i < end:
            if p[i] == b':':
                colon = i
                break
            i += 1
        if colon <= pos:
            return None
        code = _spelled(p + pos, colon - pos, &found_name)
        if not found_name or code < 0:
            if not _alnum_or_dash(p + pos, colon - pos):
                return None  # other token characters, or none: llhttp decides
            code = TEXT_LOWER.get(PyUnicode_DecodeLatin1(p + pos, colon - pos, NULL).lower(),
                                  OTHER)
        start = colon + 1
        while start < end and p[start] == b' ':
            start += 1
        count += 1
        size += colon - pos + end - start
        pos = end + 2
        if code == OTHER:
            continue
        if code < 0:
            if code != KEEP_ALIVE or not _keep_alive(p + start, end - start):
                return None
            continue
        if code & ONCE:
            if seen & code:
                return None
            seen |= code
        if code == CONTENT_TYPE:
            req.content_type = PyUnicode_DecodeLatin1(p + start, end - start, NULL)
        elif code == CONTENT_LENGTH:
            if not 0 < end - start <= 9:
                return None
            for i in range(start, end):
                if not (b'0' <= p[i] <= b'9'):
                    return None
            req.content_length = int(p[start:end])
        elif code == AUTHORIZATION:
            req.authorization = p[start:end]
        elif code == ACCEPT:
            req.accept = PyUnicode_DecodeLatin1(p + start, end - start, NULL)
        elif code == FORWARDED:
            if proxied:
                forwarded = req.forwarded
                value = p[start:end]
                req.forwarded = value if forwarded is None else forwarded + b"," + value
        else:
            return None  # Content-Encoding, Transfer-Encoding, Expect: llhttp's way
    if count > limits.max_headers or size > limits.max_header_bytes:
        return None
    return with_body(req, data, head_end + 4, heads[kind], found, method)
