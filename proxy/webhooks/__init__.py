"""The operators' API of the webhooks: the events given up, and their replay
(:mod:`.routes`). The delivery itself is the node's (:mod:`liveroom.webhooks`)."""
