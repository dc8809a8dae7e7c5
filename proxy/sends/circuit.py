"""The send hook's circuit: stop calling a backend that keeps failing.

A pure state machine on the clock it is given (no I/O, no task): the send
hook (:mod:`.hook`) asks :meth:`Circuit.admits` before it queues a send for
a call, and reports each call's end with :meth:`Circuit.passed` or
:meth:`Circuit.failed`.

- **closed** (the usual): every send is admitted; ``trip`` failed calls in
  a row open it (a call that passes starts the count again).
- **open**: nothing is admitted (the sender gets ``--send-hook-failure`` at
  once, no call is made) for ``cooldown`` seconds.
- **trial**: the cooldown is over: the next send is admitted, alone, and
  its call is the trial; nothing else is admitted while it runs. It passes:
  closed. It fails: open again for ``cooldown``. A trial whose call never
  reported (its send gave up before the call left) counts as lost after
  ``trial_timeout`` seconds, and the next send is the trial.

Any call that passes closes the circuit, trial or not (the backend
answers); a failure while open changes nothing. The transitions that
matter to an operator, closed to open and back to closed, are returned by
the reporting methods so that the owner logs each once.
"""

from __future__ import annotations

from typing import Final

from liveroom.clock import Clock

CLOSED: Final = "closed"
OPEN: Final = "open"
TRIAL: Final = "trial"


class Circuit:
    """One backend's circuit (see the module's docstring)."""

    def __init__(self, clock: Clock, *, trip: int, cooldown: float,
                 trial_timeout: float) -> None:
        if trip < 1 or cooldown <= 0 or trial_timeout <= 0:
            raise ValueError("a circuit needs trip >= 1 and positive times")
        self._clock = clock
        self.trip = trip
        self.cooldown = cooldown
        self.trial_timeout = trial_timeout
        self.state = CLOSED
        """:data:`CLOSED`, :data:`OPEN` or :data:`TRIAL`."""
        self.failures = 0
        """Calls failed in a row while closed."""
        self.opened_at = 0.0
        """When it last opened (the clock's monotonic seconds)."""
        self._until = 0.0
        """Open: when the trial may start; trial: when an unreported trial is lost."""

    @property
    def is_open(self) -> bool:
        """Whether sends get the failure policy without a call (open, or a
        trial in progress)."""
        return self.state != CLOSED

    def admits(self) -> bool:
        """Whether a send may go to the backend now (the trial's send, once
        the cooldown is over)."""
        if self.state == CLOSED:
            return True
        now = self._clock.monotonic()
        if now < self._until:
            return False
        self.state, self._until = TRIAL, now + self.trial_timeout
        return True

    def passed(self) -> bool:
        """A call got its answer; True when that closed the circuit."""
        self.failures = 0
        if self.state == CLOSED:
            return False
        self.state = CLOSED
        return True

    def failed(self) -> bool:
        """A call failed; True when that opened a closed circuit."""
        now = self._clock.monotonic()
        if self.state == TRIAL:
            self.state, self._until = OPEN, now + self.cooldown
            return False
        if self.state == OPEN:
            return False
        self.failures += 1
        if self.failures < self.trip:
            return False
        self.state, self._until, self.opened_at = OPEN, now + self.cooldown, now
        self.failures = 0
        return True
