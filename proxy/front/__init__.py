"""The listener front: a bare-asyncio HTTP/1.1 server for the listener routes.

Its connections read requests (:mod:`.reader`), route them through the table
the role gives it (:mod:`.routing`) and answer them in order
(:mod:`.connection`); what they share is the :class:`~.server.Front`
(admission, deadlines, the sweep). It knows no feature: each route's handler is
built by the role (``proxy/role.py``). Any other request's connection goes to
aiohttp (:mod:`.handoff`, :mod:`.site`).
"""
