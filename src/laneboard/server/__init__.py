"""``lb serve``: HTTP API, event stream, dashboard, metrics and MCP over the board services.

Import ``laneboard.server.app.create_app``; this package needs the ``server`` extra.
"""
