"""spamd over HTTP: `server` serves an aiohttp Application on the daemon's loop, bounded against hostile clients."""
