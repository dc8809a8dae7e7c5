"""The word filter: a message's body screened against the operators' word
lists (:mod:`.screen`), the node's copy of those lists (:mod:`.lists`) and
the operators' API (:mod:`.routes`)."""
