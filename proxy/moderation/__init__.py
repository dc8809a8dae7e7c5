"""Moderation: the node's copy of mutes, bans and slow mode (:mod:`.rules`),
recalling a message (:mod:`.recall`) and the moderators' API (:mod:`.routes`)."""
