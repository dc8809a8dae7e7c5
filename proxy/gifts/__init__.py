"""Gifts: the gift request (:mod:`.gifts`) and the ranking of a room's top
givers that answers carry (:mod:`.ranking`)."""
