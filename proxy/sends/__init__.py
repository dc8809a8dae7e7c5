"""Sends: a message appended to its room's log (:mod:`.send`), and the
budget of rooms a send may create (:mod:`.new_rooms`)."""
