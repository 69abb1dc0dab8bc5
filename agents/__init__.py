"""The agent tool surface: `bashgym mcp`, a Model Context Protocol server over stdio that coding agents (Claude Code,
Codex, Hermes) call as tools. Each tool is one daemon request made as the token's principal; the daemon decides
every call, so the server holds no state and no authority of its own."""
