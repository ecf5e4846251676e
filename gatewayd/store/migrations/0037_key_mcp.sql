-- MCP tool access per key (issue 37, gatewayd/mcp/access.py): a JSON list of servers and
-- server:tool patterns the key may use through /mcp; NULL: every configured MCP server.
-- (Numbered after the issue, apart from the migrations other work adds meanwhile: the store
-- applies each number once, in order, whenever it was merged.)
ALTER TABLE keys ADD COLUMN mcp TEXT;
