"""Likes: taps merged in memory and flushed to the store (:mod:`.likes`),
and the like request (:mod:`.taps`)."""
