"""Polls: reading a room (:mod:`.poll`), stepping a listener's cursor
(:mod:`.step`), holding long polls (:mod:`.hold`) paced by tiers
(:mod:`.tiers`), answers (:mod:`.answer`), listener contexts
(:mod:`.context`) and the heartbeats every poll reports (:mod:`.heartbeats`)."""
