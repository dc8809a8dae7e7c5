# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=False
"""A sender's rate tally (:class:`liveroom.ratelimit.ListTally`) at C level, in Cython.

The same counts by the same rules, in one array of C integers instead of a
list of Python ints: the layout of :data:`liveroom.ratelimit.Tally` without
its first item (here :attr:`CTally.expires_ms`)::

    seconds, total, n, bucket, count, ..., bucket, count,   # one window length
    seconds, total, n, ...                                   # the next

A check or a count reads and writes that array in place: no Python int is
made on the common path (a bucket appended grows the array when it is full,
doubling it). A refusal answers by the reference functions
(:func:`~liveroom.ratelimit.refused_until` over :meth:`CTally.counts`), as the
list tally does. Division is Python's (``cdivision=False``): a clock before
1970 floors as there.

The windows a call names are read into C arrays when they are not the tuple
the last call named (the node names one tuple per kind of limit, so this is
done when the windows change, not per send): a caller must not change a
sequence it passed in place (the rules' windows are tuples).

``tests/hostile/test_rate_limits.py`` holds this tally and the list one to
the reference functions over generated sends. Built by ``pip install .``
beside the modules mypyc compiles (``setup.py``), never by an editable
install; :func:`liveroom.ratelimit.sender_tally` takes it when it is there.
"""

from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memmove

from liveroom.ratelimit import refused_until

cdef enum:
    WINDOWS_MAX = 16

cdef object _windows = None
cdef Py_ssize_t _nw = 0
cdef long long _seconds[WINDOWS_MAX]
cdef long long _limit[WINDOWS_MAX]
cdef bint _first[WINDOWS_MAX]
"""Whether the window is the first of its length (two of one length count once)."""


cdef int _read_windows(windows) except -1:
    global _windows, _nw
    cdef Py_ssize_t w, v, n = len(windows)
    if n > WINDOWS_MAX:
        raise ValueError(f"a tally counts at most {WINDOWS_MAX} windows at once")
    for w in range(n):
        _seconds[w] = windows[w].seconds
        _limit[w] = windows[w].limit
        v = 0
        while v < w and _seconds[v] != _seconds[w]:
            v += 1
        _first[w] = v == w
    _nw = n
    _windows = windows
    return 0


cdef inline long long _bucket_ms(long long seconds):
    return seconds * 1000 // (10 if seconds < 60 else 60)  # Window.bucket_ms's rule


cdef class CTally:
    """One sender's (or one room's) accepted sends; see the module docstring."""

    cdef long long *d
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef public long long expires_ms

    def __cinit__(self):
        self.cap = 16
        self.d = <long long *> malloc(self.cap * sizeof(long long))
        if self.d == NULL:
            raise MemoryError()
        self.n = 0
        self.expires_ms = 0

    def __dealloc__(self):
        free(self.d)

    cdef int _room(self, Py_ssize_t more) except -1:
        cdef Py_ssize_t cap = self.cap
        cdef long long *grown
        if self.n + more <= cap:
            return 0
        while cap < self.n + more:
            cap *= 2
        grown = <long long *> realloc(self.d, cap * sizeof(long long))
        if grown == NULL:
            raise MemoryError()
        self.d = grown
        self.cap = cap
        return 0

    cdef Py_ssize_t _run_of(self, long long seconds):
        cdef Py_ssize_t i = 0
        while i < self.n:
            if self.d[i] == seconds:
                return i
            i += 3 + 2 * self.d[i + 2]
        return -1

    cdef long long _read(self, Py_ssize_t i, long long now_ms):
        # The run's sum, less its buckets after now_ms's (a clock gone back).
        cdef long long cur = now_ms // _bucket_ms(self.d[i])
        cdef long long total = self.d[i + 1]
        cdef Py_ssize_t k = i + 1 + 2 * self.d[i + 2]
        while k > i + 1 and self.d[k] > cur:
            total -= self.d[k + 1]
            k -= 2
        return total

    cdef void _drop_unread(self, long long now_ms):
        # Drop the buckets no window of their length reads at now_ms or later.
        cdef Py_ssize_t i = 0, first, k, end
        cdef long long seconds, n, last, dropped
        while i < self.n:
            seconds = self.d[i]
            n = self.d[i + 2]
            last = now_ms // _bucket_ms(seconds) - (10 if seconds < 60 else 60)
            first = k = i + 3
            end = first + 2 * n
            dropped = 0
            while k < end and self.d[k] <= last:
                dropped += self.d[k + 1]
                k += 2
            if k > first:
                memmove(&self.d[first], &self.d[k], (self.n - k) * sizeof(long long))
                self.n -= k - first
                self.d[i + 1] -= dropped
                n -= (k - first) // 2
                self.d[i + 2] = n
            i += 3 + 2 * n

    def refused(self, windows, long long now_ms, long long held=0):
        """After dropping the buckets no window reads any more, the first full
        window and when it frees (:func:`~liveroom.ratelimit.refused_until`),
        or None."""
        cdef Py_ssize_t w, i
        cdef long long total
        if windows is not _windows:
            _read_windows(windows)
        self._drop_unread(now_ms)
        for w in range(_nw):
            i = self._run_of(_seconds[w])
            total = 0 if i < 0 else self._read(i, now_ms)
            if total + held >= _limit[w]:
                return refused_until(self.counts(), windows, now_ms, held)
        return None

    def count(self, windows, long long now_ms):
        """One send at ``now_ms``, once per window length."""
        cdef Py_ssize_t w, i, k
        cdef long long seconds, cur
        if windows is not _windows:
            _read_windows(windows)
        for w in range(_nw):
            if not _first[w]:
                continue  # two windows of one length count in one run, once
            seconds = _seconds[w]
            cur = now_ms // _bucket_ms(seconds)
            i = self._run_of(seconds)
            if i < 0:
                self._room(5)
                self.d[self.n] = seconds
                self.d[self.n + 1] = 1
                self.d[self.n + 2] = 1
                self.d[self.n + 3] = cur
                self.d[self.n + 4] = 1
                self.n += 5
                continue
            self.d[i + 1] += 1
            k = i + 1 + 2 * self.d[i + 2]  # the run's last bucket
            if k > i + 1 and self.d[k] == cur:
                self.d[k + 1] += 1
                continue
            while k > i + 1 and self.d[k] > cur:  # a clock gone back: its place in order
                k -= 2
            if k > i + 1 and self.d[k] == cur:
                self.d[k + 1] += 1
            else:
                self._room(2)
                memmove(&self.d[k + 4], &self.d[k + 2],
                        (self.n - (k + 2)) * sizeof(long long))
                self.d[k + 2] = cur
                self.d[k + 3] = 1
                self.n += 2
                self.d[i + 2] += 1

    def counts(self):
        """Its counts as :data:`~liveroom.ratelimit.Counts` holds them."""
        cdef Py_ssize_t i = 0, k
        cdef long long seconds, n
        found = {}
        while i < self.n:
            seconds = self.d[i]
            n = self.d[i + 2]
            for k in range(i + 3, i + 3 + 2 * n, 2):
                found[seconds, self.d[k]] = self.d[k + 1]
            i += 3 + 2 * n
        return found
