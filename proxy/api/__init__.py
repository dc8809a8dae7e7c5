"""The aiohttp side of the proxy: the routes the front does not serve
(:mod:`.routes`), the operators' API (:mod:`.operators`) and the pages
(:mod:`.pages`)."""
